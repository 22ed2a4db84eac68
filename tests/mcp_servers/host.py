"""An MCP host for the tests of `toold mcp serve`, on the Python `mcp` client library (as
tests/mcp_servers/install.sh installs it). It starts the server command given as JSON in
TOOLD_MCP_SERVER over stdio, plays one scenario, and prints what it saw as one JSON object
per line; the Rust tests assert on those lines.

Scenarios (argv[1]), on the library's newest handshake version unless HOST_PROTOCOL_VERSION
names another:
  basics VERSION       initialize offering VERSION; list tools; read_file of argv[3];
                       read_file of a missing file
  progress [TOOL ARGUMENTS]
                       a call with a progress token: by default run_command whose output
                       comes in three lines
  cancel COMMAND       run_command COMMAND, cancelled after 1 s; then another call
  ask ANSWER COMMAND   run_command COMMAND, which asks; the host's elicitation answers
                       ANSWER (allow_once, allow_session, deny) or, with ANSWER `none`, the
                       host offers no elicitation; with allow_session, the same call again
  round-trip ANSWER COMMAND
                       on 2026-07-28 (no server-to-client requests): run_command COMMAND,
                       which asks by the input-required round trip; retried with ANSWER
  restart FILE         read FILE, say `read`, wait (30 s at most) for a file `go` in the
                       working directory, read FILE again
  call TOOL ARGUMENTS   one call, its result
  relist               list tools, say `listed`, wait (20 s at most) for
                       notifications/tools/list_changed, list them again
"""

import json
import os
import sys

import anyio
import mcp.client.session as client_session
from mcp import ClientSession, StdioServerParameters
from mcp.client._probe import negotiate_auto
from mcp.client.stdio import stdio_client
from mcp_types import ElicitResult, InputRequiredResult, ToolListChangedNotification


def emit(**fields):
    print(json.dumps(fields), flush=True)


def result_fields(result):
    return {
        "is_error": bool(result.is_error),
        "text": "".join(part.text for part in result.content if part.type == "text"),
        "parts": [
            {"type": part.type, "mime_type": getattr(part, "mime_type", None)}
            for part in result.content
        ],
        "structured": result.structured_content,
    }


async def play(scenario, args):
    command = json.loads(os.environ["TOOLD_MCP_SERVER"])
    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    elicitation = None
    if scenario in ("ask", "round-trip") and args[0] != "none":
        answer = args[0]

        async def elicitation(context, params):
            decision = params.requested_schema["properties"]["decision"]
            choices = [choice["title"] for choice in decision.get("oneOf", [])] or decision.get(
                "enumNames", []
            )
            emit(event="elicitation", message=params.message, choices=choices)
            return ElicitResult(action="accept", content={"decision": answer})

    if scenario == "basics":
        client_session.LATEST_HANDSHAKE_VERSION = args[0]
    elif "HOST_PROTOCOL_VERSION" in os.environ:
        client_session.LATEST_HANDSHAKE_VERSION = os.environ["HOST_PROTOCOL_VERSION"]
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, ToolListChangedNotification):
            changed.set()

    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicitation,
                                 message_handler=on_message) as session:
            if scenario == "round-trip":
                await negotiate_auto(session)
                emit(event="initialized", version=session.protocol_version,
                     server=session.server_info.name)
            else:
                initialized = await session.initialize()
                emit(event="initialized", version=initialized.protocol_version,
                     server=initialized.server_info.name)
            if scenario == "basics":
                listed = await session.list_tools()
                emit(event="tools", tools={
                    tool.name: tool.annotations.model_dump(by_alias=True, exclude_none=True)
                    for tool in listed.tools
                })
                read_ok = await session.call_tool("read_file", {"path": args[1]})
                emit(event="read_file", **result_fields(read_ok))
                missing = await session.call_tool("read_file", {"path": "no/such/file"})
                emit(event="missing", **result_fields(missing))
            elif scenario == "progress":
                async def progress(value, total, message):
                    emit(event="progress", progress=value, message=message)

                if args:
                    tool, arguments = args[0], json.loads(args[1])
                else:
                    line = "for i in 1 2 3; do echo line$i; sleep 0.3; done"
                    tool, arguments = "run_command", {"command": line}
                result = await session.call_tool(tool, arguments, progress_callback=progress)
                emit(event="result", **result_fields(result))
            elif scenario == "cancel":
                with anyio.move_on_after(1):
                    result = await session.call_tool("run_command", {"command": args[0]})
                    emit(event="result", **result_fields(result))
                emit(event="cancelled")
                # The server must still answer, and never the cancelled request.
                await anyio.sleep(1)
                again = await session.call_tool("run_command", {"command": "echo still here"})
                emit(event="after", **result_fields(again))
            elif scenario == "call":
                result = await session.call_tool(args[0], json.loads(args[1]))
                emit(event="result", **result_fields(result))
            elif scenario == "restart":
                first = await session.call_tool("read_file", {"path": args[0]})
                emit(event="read", **result_fields(first))
                with anyio.fail_after(30):
                    while not os.path.exists("go"):
                        await anyio.sleep(0.05)
                again = await session.call_tool("read_file", {"path": args[0]})
                emit(event="again", **result_fields(again))
            elif scenario == "relist":
                before = await session.list_tools()
                emit(event="listed", tools=[tool.name for tool in before.tools])
                with anyio.fail_after(20):
                    await changed.wait()
                after = await session.list_tools()
                emit(event="relisted", tools=[tool.name for tool in after.tools])
            elif scenario == "round-trip":
                arguments = {"command": args[1]}
                asked = await session.call_tool("run_command", arguments,
                                                allow_input_required=True)
                if isinstance(asked, InputRequiredResult):
                    question = asked.input_requests["approval"].params
                    emit(event="input_required", message=question.message,
                         keys=list(asked.input_requests))
                    answer = {"action": "accept", "content": {"decision": args[0]}}
                    result = await session.call_tool(
                        "run_command", arguments, allow_input_required=True,
                        input_responses={"approval": answer},
                        request_state=asked.request_state)
                    emit(event="result", **result_fields(result))
                    stale = await session.call_tool(
                        "run_command", arguments, allow_input_required=True,
                        input_responses={"approval": answer},
                        request_state=asked.request_state)
                    emit(event="stale", **result_fields(stale))
                else:
                    emit(event="result", **result_fields(asked))
            elif scenario == "ask":
                result = await session.call_tool("run_command", {"command": args[1]})
                emit(event="result", **result_fields(result))
                if args[0] == "allow_session":
                    again = await session.call_tool("run_command", {"command": args[1]})
                    emit(event="again", **result_fields(again))


if __name__ == "__main__":
    anyio.run(play, sys.argv[1], sys.argv[2:])
