"""A counter as an MCP tool server over stdio, with the standard library only.

The tool `add` adds `amount` to a counter kept in SQLite (the file named by the environment
variable RETRYSIM_DB) and answers the new total. With KEYED=1 it records each `request_id`
in the same transaction and answers a retry with the saved total instead of adding again;
without it a retry adds again.

Messages are newline-delimited JSON-RPC 2.0, as MCP's stdio transport has them.
RETRYSIM_MISBEHAVE makes it misbehave on `tools/call`, for the harness's tests:
`garbage` writes a line that is not JSON, `exit` exits, `hang` never answers, `error`
answers a JSON-RPC error.
"""

import json
import os
import sqlite3
import sys
import time

KEYED = os.environ.get("KEYED") == "1"
MISBEHAVE = os.environ.get("RETRYSIM_MISBEHAVE", "")

SCHEMA = """
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
INSERT OR IGNORE INTO counter VALUES (1, 0);
CREATE TABLE IF NOT EXISTS records (request_id TEXT PRIMARY KEY, total INTEGER NOT NULL);
"""

TOOL = {
    "name": "add",
    "description": "Adds an amount to the counter; answers the new total.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "amount": {"type": "integer"},
            "request_id": {"type": "string"},
        },
        "required": ["amount"],
    },
}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def add(db, arguments):
    amount = int(arguments["amount"])
    key = arguments.get("request_id")
    db.execute("BEGIN IMMEDIATE")
    if KEYED and key is not None:
        row = db.execute("SELECT total FROM records WHERE request_id = ?", (key,)).fetchone()
        if row is not None:
            db.execute("COMMIT")
            return {"total": row[0], "replayed": True}
    db.execute("UPDATE counter SET total = total + ? WHERE id = 1", (amount,))
    total = db.execute("SELECT total FROM counter WHERE id = 1").fetchone()[0]
    if KEYED and key is not None:
        db.execute("INSERT INTO records VALUES (?, ?)", (key, total))
    db.execute("COMMIT")
    return {"total": total, "replayed": False}


def answer(db, request):
    method = request.get("method")
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "counter", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        params = request.get("params", {})
        if params.get("name") != "add":
            raise LookupError("unknown tool " + repr(params.get("name")))
        result = add(db, params.get("arguments", {}))
        return {
            "content": [{"type": "text", "text": json.dumps(result)}],
            "structuredContent": result,
        }
    raise LookupError("unknown method " + repr(method))


def main():
    db = sqlite3.connect(os.environ["RETRYSIM_DB"], isolation_level=None)
    db.executescript(SCHEMA)
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification: nothing to answer
        if request.get("method") == "tools/call" and MISBEHAVE:
            print("misbehaving: " + MISBEHAVE, file=sys.stderr, flush=True)
            if MISBEHAVE == "garbage":
                sys.stdout.write("this is not JSON\n")
                sys.stdout.flush()
                continue
            if MISBEHAVE == "exit":
                sys.exit(3)
            if MISBEHAVE == "hang":
                time.sleep(3600)
            if MISBEHAVE == "error":
                send({"jsonrpc": "2.0", "id": request["id"],
                      "error": {"code": -32000, "message": "the tool failed"}})
                continue
        try:
            send({"jsonrpc": "2.0", "id": request["id"], "result": answer(db, request)})
        except LookupError as error:
            send({"jsonrpc": "2.0", "id": request["id"],
                  "error": {"code": -32601, "message": str(error)}})


if __name__ == "__main__":
    main()
