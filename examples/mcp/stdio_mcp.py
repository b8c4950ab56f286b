"""A tool server over MCP's stdio transport, or its Streamable HTTP, with the standard library only.

Messages are newline-delimited JSON-RPC 2.0: `initialize`, `tools/list` and `tools/call` are
answered; notifications are read and left unanswered. When the environment variable PORT
names a port, the same server speaks Streamable HTTP instead, on 127.0.0.1 at that port: each
message is POSTed to /mcp, a request answered as `application/json` (or, with
ANSWER_AS=event-stream, as a `text/event-stream` of one event), a notification with 202; the
handshake's answer names the session (Mcp-Session-Id), which every later request must carry
until a DELETE ends it.
Over HTTP the one misbehaviour is `exit`, in the middle of a call. A tool is a function of its arguments
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
    """Serves `tools` ({name: (description with inputSchema, function)}) on stdin/stdout, or
    over Streamable HTTP when PORT is set.

    With `concurrent`, each `tools/call` is served on a thread of its own, so that a call
    arriving while another is in progress (say, waiting at a crash point) is served at once.
    """
    if "PORT" in os.environ:
        serve_http(name, tools, capabilities or {}, concurrent)
        return
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request or misbehave(request):
            continue
        if concurrent and request.get("method") == "tools/call":
            threading.Thread(target=respond, daemon=True,
                             args=(name, tools, request, capabilities or {})).start()
            continue
        respond(name, tools, request, capabilities or {})


def serve_http(name, tools, capabilities, concurrent):
    """Serves `tools` over MCP's Streamable HTTP at http://127.0.0.1:$PORT/mcp."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    one_at_a_time = threading.Lock()
    sessions = []
    opened = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):
            pass

        def do_POST(self):
            if self.path != "/mcp":
                return self.reply(404, None)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = json.loads(body)
            session = self.headers.get("Mcp-Session-Id")
            if request.get("method") != "initialize" and session not in sessions:
                return self.reply(404 if session else 400, {"error": "no such session"})
            if "id" not in request:
                return self.reply(202, None)
            if request.get("method") == "tools/call" and os.environ.get("RETRYSIM_MISBEHAVE") == "exit":
                os._exit(3)
            if request.get("method") == "tools/call" and not concurrent:
                with one_at_a_time:
                    return self.answer(request)
            return self.answer(request)

        def do_DELETE(self):
            session = self.headers.get("Mcp-Session-Id")
            if self.path != "/mcp" or session not in sessions:
                return self.reply(404, None)
            sessions.remove(session)
            self.reply(200, None)

        def answer(self, request):
            try:
                message = {"jsonrpc": "2.0", "id": request["id"],
                           "result": answer(name, tools, request, capabilities)}
            except LookupError as error:
                message = {"jsonrpc": "2.0", "id": request["id"],
                           "error": {"code": -32601, "message": str(error)}}
            headers = {}
            if request.get("method") == "initialize":
                opened[0] += 1
                sessions.append("session-%d" % opened[0])
                headers["Mcp-Session-Id"] = sessions[-1]
            self.reply(200, message, headers)

        def reply(self, status, message, headers=None):
            answer_as = os.environ.get("ANSWER_AS", "")
            # event-stream-cr ends each line of the stream with a lone CR, as the event
            # stream's grammar allows.
            end = "\r" if answer_as == "event-stream-cr" else "\n"
            if message is None:
                body, kind = b"", "application/json"
            elif answer_as.startswith("event-stream"):
                event = "event: message%sdata: %s%s%s" % (end, json.dumps(message), end, end)
                body, kind = event.encode(), "text/event-stream"
            else:
                body, kind = json.dumps(message).encode(), "application/json"
            # INTERIM=100,102,103: interim responses before the final one (RFC 9110 15.2).
            for code in [int(c) for c in os.environ.get("INTERIM", "").split(",") if c]:
                self.wfile.write(b"HTTP/1.1 %d Interim\r\n\r\n" % code)
                self.wfile.flush()
            self.send_response(status)
            for header, value in (headers or {}).items():
                self.send_header(header, value)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
