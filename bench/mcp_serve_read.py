"""toold-bench's `mcp` section, the host side of one figure: `read_file` of a 1 KB file through
`toold mcp serve` against `read_text_file` of the reference `@modelcontextprotocol/server-
filesystem`, by the same Python `mcp` client (tests/mcp_servers/install.sh installs both), same
file, interleaved rounds (the order rotating). Prints one JSON object: each contender's p50 of
each round, in seconds.

usage: python mcp_serve_read.py FILE ROUNDS PER_ROUND  (servers: TOOLD_MCP_SERVER, FS_MCP_SERVER,
each a JSON list: the command and its arguments)
"""

import json
import os
import statistics
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

# Calls each contender answers before the first round (as `WARM_UP_CALLS` in bench/src/mcp.rs).
WARM_UP_CALLS = 4000


def server(variable, cwd):
    command = json.loads(os.environ[variable])
    return StdioServerParameters(command=command[0], args=command[1:], cwd=cwd)


async def main(path, rounds, per_round):
    cwd = os.path.dirname(path)
    with open(os.devnull, "w") as quiet:
        async with (
            stdio_client(server("TOOLD_MCP_SERVER", cwd), errlog=quiet) as (toold_in, toold_out),
            stdio_client(server("FS_MCP_SERVER", cwd), errlog=quiet) as (fs_in, fs_out),
            ClientSession(toold_in, toold_out) as toold,
            ClientSession(fs_in, fs_out) as fs,
        ):
            contenders = [(toold, "read_file"), (fs, "read_text_file")]
            expected = open(path).read()
            for session, _ in contenders:
                await session.initialize()
                await session.list_tools()

            async def one(session, tool):
                started = time.perf_counter()
                result = await session.call_tool(tool, {"path": path})
                elapsed = time.perf_counter() - started
                text = "".join(part.text for part in result.content if part.type == "text")
                if result.is_error or text != expected:
                    raise SystemExit(f"{tool} answered wrongly: {result}")
                return elapsed

            # Each contender answers as many calls first: server-filesystem runs on node, whose
            # JIT is still warming through a fresh copy's first thousands of calls.
            for _ in range(WARM_UP_CALLS):
                for session, tool in contenders:
                    await one(session, tool)
            p50s = [[], []]
            for round_number in range(rounds):
                for offset in range(2):
                    index = (round_number + offset) % 2
                    session, tool = contenders[index]
                    times = [await one(session, tool) for _ in range(per_round)]
                    p50s[index].append(statistics.median(times))
            print(json.dumps({"toold": p50s[0], "filesystem": p50s[1]}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
