"""A tool server over MCP's stdio transport, with the standard library only.

Messages are newline-delimited JSON-RPC 2.0: `initialize`, `tools/list` and `tools/call` are
answered; notifications are read and left unanswered. A tool is a function of its arguments
that returns a dict (the call's structured content) or raises ToolError (a tool error,
`isError: true`, which the client sees as a refusal).

RETRYSIM_MISBEHAVE makes the server misbehave on `tools/call`, for the harness's own tests:
`garbage` writes a line that is not JSON, `exit` exits, `hang` never answers, `error`
answers a JSON-RPC error, `corrupt` overwrites the start of its database file (RETRYSIM_DB)
and answers a JSON-RPC error, `wrong-id` answers under another id, `not-utf8` writes a line that
is not UTF-8, `long-line` writes 20 MiB with no newline and then hangs. These answer the call
after misbehaving: `log-latin1` writes a log line that is not UTF-8 to stderr, `blank` writes
a blank line first, `spawn` starts a child process (`sleep 300`) that outlives a kill of the
server alone.
"""

import json
import os
import subprocess
import sys
import threading
import time

PROTOCOL_VERSION = "2025-06-18"


class ToolError(Exception):
    """A tool's refusal: answered as a result with isError, its message as the text."""


_SENDING = threading.Lock()


def send(message):
    """Writes one message line; calls served on threads take turns."""
    with _SENDING:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def misbehave(request):
    """Misbehaves as RETRYSIM_MISBEHAVE says; whether the request was answered so."""
    how = os.environ.get("RETRYSIM_MISBEHAVE", "")
    if not how or request.get("method") != "tools/call":
        return False
    print("misbehaving: " + how, file=sys.stderr, flush=True)
    if how == "garbage":
        sys.stdout.write("this is not JSON\n")
        sys.stdout.flush()
    elif how == "exit":
        sys.exit(3)
    elif how == "hang":
        time.sleep(3600)
    elif how == "error":
        send({"jsonrpc": "2.0", "id": request["id"],
              "error": {"code": -32000, "message": "the tool failed"}})
    elif how == "corrupt":
        with open(os.environ["RETRYSIM_DB"], "r+b") as database:
            database.write(b"this is no database" * 10)
        send({"jsonrpc": "2.0", "id": request["id"],
              "error": {"code": -32000, "message": "the tool failed"}})
    elif how == "wrong-id":
        send({"jsonrpc": "2.0", "id": request["id"] + 1000, "result": {"content": []}})
    elif how == "not-utf8":
        sys.stdout.buffer.write(b'{"caf\xe9": 1}\n')
        sys.stdout.flush()
    elif how == "long-line":
        chunk = "x" * (1 << 20)
        for _ in range(20):
            sys.stdout.write(chunk)
        sys.stdout.flush()
        time.sleep(3600)
    else:
        if how == "log-latin1":
            sys.stderr.buffer.write(b"caf\xe9 served\n")
            sys.stderr.flush()
        elif how == "blank":
            sys.stdout.write("\n")
            sys.stdout.flush()
        elif how == "spawn":
            subprocess.Popen(["sleep", "300"])
        return False
    return True


def answer(name, tools, request, capabilities):
    method = request.get("method")
    if method == "initialize":
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": dict({"tools": {}}, **capabilities),
            "serverInfo": {"name": name, "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [dict(description, name=tool) for tool, (description, _) in tools.items()]}
    if method == "tools/call":
        params = request.get("params", {})
        if params.get("name") not in tools:
            raise LookupError("unknown tool " + repr(params.get("name")))
        _, function = tools[params["name"]]
        try:
            result = function(params.get("arguments", {}), params)
        except ToolError as error:
            return {"content": [{"type": "text", "text": str(error)}], "isError": True}
        return {"content": [{"type": "text", "text": json.dumps(result)}],
                "structuredContent": result}
    raise LookupError("unknown method " + repr(method))


def respond(name, tools, request, capabilities):
    """Answers one request with its result, or a JSON-RPC error."""
    try:
        send({"jsonrpc": "2.0", "id": request["id"],
              "result": answer(name, tools, request, capabilities)})
    except LookupError as error:
        send({"jsonrpc": "2.0", "id": request["id"],
              "error": {"code": -32601, "message": str(error)}})


def serve(name, tools, capabilities=None, concurrent=False):
    """Serves `tools` ({name: (description with inputSchema, function)}) on stdin/stdout.

    With `concurrent`, each `tools/call` is served on a thread of its own, so that a call
    arriving while another is in progress (say, waiting at a crash point) is served at once.
    """
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request or misbehave(request):
            continue
        if concurrent and request.get("method") == "tools/call":
            threading.Thread(target=respond, daemon=True,
                             args=(name, tools, request, capabilities or {})).start()
            continue
        respond(name, tools, request, capabilities or {})
