"""An automation editor's set_interval tool served with the official MCP Python SDK (`pip install "mcp>=2,<3"`).

The tool is the one of interval_server.py (the same VARIANT, the same SQLite file named by
RETRYSIM_DB); only the server around it differs: MCPServer (FastMCP before mcp 2) instead of the
standard library's loop. A refusal raises, and the SDK answers it as a tool error (isError).

It speaks MCP over stdio, or over Streamable HTTP on 127.0.0.1 when PORT names a port (the
SDK's default: answers as an event stream, one session per client).
"""

import os
import sqlite3
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interval_server import SCHEMA, set_interval  # noqa: E402

server = MCPServer("interval")
db = sqlite3.connect(os.environ["RETRYSIM_DB"], isolation_level=None, check_same_thread=False)
db.executescript(SCHEMA)


@server.tool(name="set_interval", structured_output=True)
def set_interval_tool(automation_id: int, expected_version: int, interval_minutes: int,
                      request_id: str) -> dict[str, Any]:
    """Sets an automation's interval if its version is the one expected."""
    return set_interval(db, {
        "automation_id": automation_id,
        "expected_version": expected_version,
        "interval_minutes": interval_minutes,
        "request_id": request_id,
    })


if __name__ == "__main__":
    if "PORT" in os.environ:
        server.run("streamable-http", port=int(os.environ["PORT"]))
    else:
        server.run()
