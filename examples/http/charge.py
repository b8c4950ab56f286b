"""A charge endpoint as teams write it, on SQLite, in the standard library only.

POST /charges with {"amount": N} and an Idempotency-Key header makes a charge: a row with a
fresh `uuid4()` id and a wall-clock `created_at`, and the key's saved response (its request's
hash, status and body) in one transaction. A retry with the key is answered from the saved
response; the key reused with another body is refused (422). Three crash points: after the
lookup, before the commit, after the commit. One thread a request.

VARIANT chooses the handler:
- `correct` (the default): the lookup, the charge and the key in one `BEGIN IMMEDIATE`
  transaction.
- `split`: the key is saved in a transaction of its own after the charge's commit (a crash
  between them, and the retry charges again).
- `racy`: the lookup in a transaction of its own, the charge and the key in a second one, and
  no unique constraint on the key (two attempts in flight both miss the key and both charge;
  with the constraint the second's insert would fail and roll its charge back).

FRESH=0 makes the id and `created_at` deterministic (a hash of the key, the epoch): the
service's deterministic twin, for comparing the cost of fresh values.
"""

import hashlib
import json
import os
import sqlite3
import sys
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from retrysim_points import point  # noqa: E402

DATABASE = os.environ["RETRYSIM_DB"]
VARIANT = os.environ.get("VARIANT", "correct")
FRESH = os.environ.get("FRESH", "1") != "0"


def connect():
    return sqlite3.connect(DATABASE, timeout=5, isolation_level=None)


def migrate():
    unique = "NOT NULL" if VARIANT == "racy" else "PRIMARY KEY"
    connection = connect()
    connection.executescript(
        "CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, amount INTEGER NOT NULL, "
        "created_at TEXT NOT NULL);"
        f"CREATE TABLE IF NOT EXISTS idempotency_keys (key TEXT {unique}, "
        "request_hash TEXT NOT NULL, status INTEGER NOT NULL, response TEXT NOT NULL, "
        "created_at TEXT NOT NULL);"
    )
    connection.close()


def new_charge(key):
    if FRESH:
        return str(uuid.uuid4()), datetime.now(timezone.utc).isoformat()
    return hashlib.sha256(key.encode()).hexdigest()[:32], "1970-01-01T00:00:00+00:00"


def saved_answer(connection, key, request_hash):
    row = connection.execute(
        "SELECT request_hash, status, response FROM idempotency_keys WHERE key = ?", (key,)
    ).fetchone()
    if row is None:
        return None
    if row[0] != request_hash:
        return 422, {"error": "the Idempotency-Key was used with another request"}
    return row[1], json.loads(row[2])


def charge(connection, key, request_hash, amount):
    """Inserts the charge (and, but for `split`, the key); the answer."""
    charge_id, created_at = new_charge(key)
    connection.execute(
        "INSERT INTO charges (id, amount, created_at) VALUES (?, ?, ?)",
        (charge_id, amount, created_at),
    )
    body = {"id": charge_id, "amount": amount}
    if VARIANT == "split":
        connection.execute("COMMIT")
        point("between-commits")
        connection.execute("BEGIN IMMEDIATE")
    connection.execute(
        "INSERT INTO idempotency_keys (key, request_hash, status, response, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        (key, request_hash, 201, json.dumps(body), created_at),
    )
    return 201, body


def handle(key, raw_body):
    request_hash = hashlib.sha256(raw_body).hexdigest()
    amount = int(json.loads(raw_body)["amount"])
    connection = connect()
    try:
        connection.execute("BEGIN" if VARIANT == "racy" else "BEGIN IMMEDIATE")
        saved = saved_answer(connection, key, request_hash)
        if VARIANT == "racy":
            connection.execute("COMMIT")
        point("after-lookup")
        if saved is not None:
            if VARIANT != "racy":
                connection.execute("COMMIT")
            return saved
        if VARIANT == "racy":
            connection.execute("BEGIN IMMEDIATE")
        answer = charge(connection, key, request_hash, amount)
        point("before-commit")
        connection.execute("COMMIT")
        point("after-commit")
        return answer
    finally:
        connection.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16

    def do_POST(self):
        if self.path != "/charges":
            return self.answer(404, {"error": "no such endpoint"})
        key = self.headers.get("Idempotency-Key")
        if not key:
            return self.answer(400, {"error": "the Idempotency-Key header is required"})
        raw_body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            status, body = handle(key, raw_body)
        except (ValueError, KeyError, TypeError):
            status, body = 400, {"error": 'the body must be {"amount": N}'}
        self.answer(status, body)

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    migrate()
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    server.daemon_threads = True
    server.serve_forever()
