#!/usr/bin/env python3
"""A small MCP server over stdio, written for toold's tests, that lists three tools of which one
is malformed: `no_schema` has no object inputSchema (toold must quarantine it), a tool whose name
is over 64 characters once prefixed (toold must shorten it), and `echo`, which works (with
`times`, its answer holds the text that many times: over toold's 16 MiB limit if asked; with
`nest`, its structuredContent holds a list nested that many levels deep). `fail`
reports an error (isError); `slow` never answers, and says on stderr when its request is
cancelled; `crash` says its last words on stderr and exits (with `hang_up`, it closes its
stdout and lives on instead). With MALFORMED_NEVER_LISTS set, `tools/list` is never answered.
Standard library only; one JSON-RPC message per line, or with `--http PORT` the same tools over
streamable HTTP on 127.0.0.1 (each request answered in its POST's body as JSON; no event
stream)."""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LONG_NAME = "a_tool_with_a_name_long_enough_that_its_qualified_name_passes_sixty_four"

TOOLS = [
    {
        "name": "echo",
        "description": "Echoes its text",
        "inputSchema": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "times": {"type": "integer"},
                "nest": {"type": "integer"},
            },
            "required": ["text"],
        },
    },
    {"name": "no_schema", "description": "Lacks an object schema", "inputSchema": {"type": "array"}},
    {"name": LONG_NAME, "inputSchema": {"type": "object"}},
    {"name": "fail", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "slow", "inputSchema": {"type": "object"}},
    {"name": "crash", "inputSchema": {"type": "object", "properties": {"words": {"type": "string"}}}},
]

# Requests of `slow`, never answered: a cancel names one of them.
PENDING = set()


class NoAnswer(Exception):
    """The request is not answered (now)."""


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "malformed", "version": "1.0.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        if os.environ.get("MALFORMED_NEVER_LISTS"):
            raise NoAnswer()
        return {"tools": TOOLS}
    if method == "tools/call":
        name = params.get("name")
        arguments = params.get("arguments") or {}
        if name == "echo":
            text = arguments.get("text", "") * arguments.get("times", 1)
            result = {"content": [{"type": "text", "text": "echo: " + text}]}
            if "nest" in arguments:
                nested = []
                for _ in range(arguments["nest"] - 1):
                    nested = [nested]
                result["structuredContent"] = {"nested": nested}
            return result
        if name == LONG_NAME:
            return {"content": [{"type": "text", "text": "the long one answered"}]}
        if name == "fail":
            return {"content": [{"type": "text", "text": "it failed on purpose"}], "isError": True}
        if name == "slow":
            PENDING.add(json.dumps(request["id"]))
            raise NoAnswer()
        if name == "crash" and arguments.get("hang_up"):
            # Closes its output and lives on: a server that answers nothing more.
            print("hanging up: " + arguments.get("words", ""), file=sys.stderr, flush=True)
            os.close(1)
            while True:
                time.sleep(60)
        if name == "crash":
            print("dying now: " + arguments.get("words", ""), file=sys.stderr, flush=True)
            os._exit(3)
        raise LookupError("no tool named " + str(name))
    raise NotImplementedError(method)


def response(message):
    """The response to a request: its result, or its failure as a JSON-RPC error. Raises
    NoAnswer for a request never answered."""
    try:
        return {"jsonrpc": "2.0", "id": message["id"], "result": answer(message)}
    except NotImplementedError as unknown:
        return {"jsonrpc": "2.0", "id": message["id"],
                "error": {"code": -32601, "message": "method not found: " + str(unknown)}}
    except LookupError as missing:
        return {"jsonrpc": "2.0", "id": message["id"],
                "error": {"code": -32602, "message": str(missing)}}


def main():
    print("malformed test server started", file=sys.stderr, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        if message.get("method") == "notifications/cancelled":
            request = json.dumps((message.get("params") or {}).get("requestId"))
            if request in PENDING:
                PENDING.discard(request)
                print("cancelled request " + request, file=sys.stderr, flush=True)
            continue
        if "id" not in message or "method" not in message:
            continue  # a notification or a response: nothing to answer
        try:
            send(response(message))
        except NoAnswer:
            pass


class HttpHandler(BaseHTTPRequestHandler):
    """Streamable HTTP without an event stream: a request's answer is its POST's JSON body; a
    notification or a response gets 202."""

    def do_POST(self):
        message = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if "id" not in message or "method" not in message:
            self.reply(202, None)
            return
        self.reply(200, response(message))

    def do_GET(self):
        self.reply(405, None)  # no stream of the server's own messages

    def do_DELETE(self):
        self.reply(200, None)

    def reply(self, status, body):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Mcp-Session-Id", "malformed")
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_):
        pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), HttpHandler).serve_forever()
    else:
        main()
