#!/usr/bin/env python3
"""An MCP server over stdio, written for toold's tests, that does what a careless or hostile
server does: `spew` writes to stderr what it is asked (bytes that are not UTF-8, megabytes
without a newline); `reveal` answers with the value of one of its environment variables (in its
text, its structuredContent and a progress message); `confess` writes that value to stderr and
exits; `edit` takes any arguments and answers. With HOSTILE_TOOLS=N it lists N more tools
`t0`..., each with a description of HOSTILE_DESCRIPTION_BYTES bytes, HOSTILE_PAGE_SIZE of them a
page. Standard library only; one JSON-RPC message per line."""

import json
import os
import sys

ANY_OBJECT = {"type": "object"}

TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "spew", "inputSchema": ANY_OBJECT},
    {"name": "reveal", "inputSchema": ANY_OBJECT},
    {"name": "confess", "inputSchema": ANY_OBJECT},
    {"name": "edit", "inputSchema": ANY_OBJECT},
]


def more_tools():
    count = int(os.environ.get("HOSTILE_TOOLS", "0"))
    description = "d" * int(os.environ.get("HOSTILE_DESCRIPTION_BYTES", "10"))
    return [{"name": "t%d" % i, "description": description, "inputSchema": ANY_OBJECT}
            for i in range(count)]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def call(request):
    params = request.get("params") or {}
    name = params.get("name")
    arguments = params.get("arguments") or {}
    if name == "echo":
        return {"content": [{"type": "text", "text": "echo: " + str(arguments.get("text"))}]}
    if name == "spew":
        err = sys.stderr.buffer
        if arguments.get("binary"):
            err.write(b"bad bytes \xff\xfe\xc3 here\n")
        size = int(arguments.get("bytes", 0))
        chunk = b"x" * (1 << 20)
        while size > 0:
            err.write(chunk[: min(size, len(chunk))])
            size -= len(chunk)
        if arguments.get("newline"):
            err.write(b"\n")
        err.write(str(arguments.get("then", "")).encode() + b"\n")
        err.flush()
        return {"content": [{"type": "text", "text": "spewed"}]}
    if name == "reveal":
        value = os.environ.get(arguments.get("name", ""), "")
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None:
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": 1, "message": "found " + value}})
        return {"content": [{"type": "text", "text": "the value is " + value}],
                "structuredContent": {"value": value, "escaped": value}}
    if name == "confess":
        value = os.environ.get(arguments.get("name", ""), "")
        print("my secret is " + value, file=sys.stderr, flush=True)
        os._exit(3)
    if name == "edit" or (name or "").startswith("t"):
        return {"content": [{"type": "text", "text": "done: " + json.dumps(arguments, sort_keys=True)}]}
    raise LookupError("no tool named " + str(name))


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1.0.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        tools = TOOLS + more_tools()
        page_size = int(os.environ.get("HOSTILE_PAGE_SIZE", "0")) or len(tools)
        start = int(params.get("cursor") or 0)
        page = {"tools": tools[start:start + page_size]}
        if start + page_size < len(tools):
            page["nextCursor"] = str(start + page_size)
        return page
    if method == "tools/call":
        return call(request)
    raise NotImplementedError(method)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        try:
            send({"jsonrpc": "2.0", "id": message["id"], "result": answer(message)})
        except NotImplementedError as unknown:
            send({"jsonrpc": "2.0", "id": message["id"],
                  "error": {"code": -32601, "message": "method not found: " + str(unknown)}})
        except LookupError as missing:
            send({"jsonrpc": "2.0", "id": message["id"],
                  "error": {"code": -32602, "message": str(missing)}})


if __name__ == "__main__":
    main()
