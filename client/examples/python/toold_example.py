#!/usr/bin/env python3
"""toold from Python with nothing but the standard library: newline-delimited JSON on the Unix socket.

    python3 toold_example.py [SOCKET]

The socket: the argument, else $TOOLD_SOCKET, else $XDG_RUNTIME_DIR/toold/toold.sock, else
/tmp/toold-$UID/toold.sock. It initializes, creates a session whose rule allows `echo`
commands, runs a batch of two calls (a `read_file` inside the session's root and an allowed
`run_command`) and checks the results. Exits 0 when every check passes, 1 with the reason
otherwise.
"""

import json
import os
import socket
import sys
import tempfile

COMMAND = "echo hello-from-python"
EXPECTED_OUTPUT = "hello-from-python\n"
NOTE = "written by the Python example\n"
TIMEOUT_S = 30


class CheckFailed(Exception):
    pass


def check(condition, message, detail=None):
    if not condition:
        shown = "" if detail is None else "\n  got: " + json.dumps(detail)
        raise CheckFailed(message + shown)


def socket_path():
    if len(sys.argv) > 1:
        return sys.argv[1]
    if os.environ.get("TOOLD_SOCKET"):
        return os.environ["TOOLD_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "toold", "toold.sock")
    return "/tmp/toold-%d/toold.sock" % os.getuid()


class Connection:
    """One JSON-RPC 2.0 message per line, both ways."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT_S)
        try:
            self.sock.connect(path)
        except OSError as err:
            raise CheckFailed("cannot connect to %s: %s (is `toold serve` running?)" % (path, err))
        self.lines = self.sock.makefile("rb")
        self.next_id = 1
        self.notifications = []

    def send(self, message):
        self.sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def request(self, method, params):
        request_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            line = self.lines.readline()
            if not line:
                raise CheckFailed("the daemon closed the connection while %s was pending" % method)
            if not line.strip():
                continue
            message = json.loads(line)
            if "method" in message and "id" in message:
                # A request from the daemon (approval/request, hook/…, tool/invoke): this client
                # declared none of those capabilities, so it should never see one; refuse it.
                self.send({
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": -32601, "message": "this client answers no requests"},
                })
            elif "method" in message:
                self.notifications.append(message)  # an event, or tools/list_changed
            elif message.get("id") == request_id:
                if "error" in message:
                    error = message["error"]
                    raise CheckFailed("%s: JSON-RPC error %s: %s %s" % (
                        method, error.get("code"), error.get("message"), json.dumps(error.get("data"))))
                return message["result"]
            else:
                raise CheckFailed("an answer to a request never sent", message)

    def close(self):
        self.lines.close()
        self.sock.close()


def main():
    conn = Connection(socket_path())
    try:
        init = conn.request("initialize", {
            "protocol_version": 1,
            "client_info": {"name": "toold-example-python", "version": "0.1.0"},
        })
        check(init.get("protocol_version") == 1, "initialize: protocol_version 1", init)

        with tempfile.TemporaryDirectory(prefix="toold-python-") as tmp:
            cwd = os.path.realpath(tmp)
            with open(os.path.join(cwd, "note.txt"), "w") as f:
                f.write(NOTE)

            session = conn.request("session/create", {
                "cwd": cwd,
                "title": "toold-example-python",
                "rules": {"allow": ["run_command(echo *)"]},
            })
            session_id = session["session_id"]
            check(session.get("rules", {}).get("allow") == ["run_command(echo *)"],
                  "session/create: the allow rule is in the snapshot", session)

            # No approver is attached: without the rule run_command would be permission_denied.
            # read_file needs no rule: a read-only tool inside the session's roots is allowed.
            response = conn.request("tools/execute", {
                "session_id": session_id,
                "iteration": 1,
                "calls": [
                    {"id": "read", "name": "read_file", "arguments": {"path": "note.txt"}},
                    # arguments may also be a string holding JSON, as model providers send them
                    {"id": "echo", "name": "run_command", "arguments": json.dumps({"command": COMMAND})},
                ],
            })
            results = response["results"]
            check([r["call_id"] for r in results] == ["read", "echo"],
                  "one result per call, in the order of the calls", results)
            read, echo = results[0]["result"], results[1]["result"]
            check(read["ok"] is True and read["content"] == NOTE, "read_file returned the note", read)
            check(echo["ok"] is True, "run_command succeeded", echo)
            check(echo["content"] == EXPECTED_OUTPUT,
                  "run_command printed %s" % json.dumps(EXPECTED_OUTPUT), echo["content"])
            check(echo["metadata"].get("exit_code") == 0, "exit_code 0", echo["metadata"])

            methods = [n["method"] for n in conn.notifications
                       if n.get("params", {}).get("batch_id") == response["batch_id"]]
            check(methods and methods[0] == "batch/start" and methods[-1] == "batch/done",
                  "the batch's events arrived, batch/start first and batch/done last", methods)

            conn.request("session/close", {"session_id": session_id})

        print("python: ok: read_file note.txt -> %s, run_command %s -> %s" % (
            json.dumps(read["content"]), json.dumps(COMMAND), json.dumps(echo["content"])))
        print("python: result: %s" % json.dumps(echo, separators=(",", ":")))
        print("python: %d events for the batch (%s)" % (len(methods), " ".join(methods)))
    finally:
        conn.close()


if __name__ == "__main__":
    try:
        main()
    except (CheckFailed, OSError, ValueError, KeyError, TypeError) as err:
        print("python: FAIL: %s" % err, file=sys.stderr)
        sys.exit(1)
