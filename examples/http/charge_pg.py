"""The charge endpoint of charge.py on PostgreSQL, with psycopg 3 and a small pool.

POST /charges with {"amount": N} and an Idempotency-Key header makes a charge: a row with a
fresh `uuid4()` id and a `created_at` PostgreSQL fills in (`DEFAULT now()`), and the key's
saved response (its request's hash, status and body). A retry with the key is answered from
the saved response; the key reused with another body is refused (422). The schema is made by
a start-up migration (`CREATE TABLE IF NOT EXISTS`), as services do. Three crash points:
after the claim or lookup, before the commit, after the commit. One thread a request, each on
a connection of a pool of four, in READ COMMITTED.

VARIANT chooses the handler:
- `correct` (the default): the key claimed first (`INSERT ... ON CONFLICT DO NOTHING` on its
  primary key), the charge and the saved response in the same transaction. A retry beside
  its original waits on the original's uncommitted key, then replays its response.
- `split`: the charge committed, then the key saved in a transaction of its own (a crash
  between them, and the retry charges again).
- `racy`: the key looked up, then the charge and the key inserted in one transaction, with
  no unique constraint on the key: under READ COMMITTED two attempts in flight both miss the
  key and both charge.
"""

import hashlib
import json
import os
import queue
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from retrysim_points import point  # noqa: E402

VARIANT = os.environ.get("VARIANT", "correct")
POOL_SIZE = 4
POOL = queue.Queue()

MIGRATIONS = [
    "CREATE TABLE IF NOT EXISTS charges (id uuid PRIMARY KEY, amount integer NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE IF NOT EXISTS idempotency_keys (key text {unique}, request_hash text NOT NULL, "
    "status integer, response jsonb, created_at timestamptz NOT NULL DEFAULT now())",
]


def migrate(connection):
    unique = "NOT NULL" if VARIANT == "racy" else "PRIMARY KEY"
    with connection.transaction():
        for statement in MIGRATIONS:
            connection.execute(statement.format(unique=unique))


def saved_answer(connection, key, request_hash):
    row = connection.execute(
        "SELECT request_hash, status, response FROM idempotency_keys WHERE key = %s", (key,)
    ).fetchone()
    if row is None:
        return None
    if row[0] != request_hash:
        return 422, {"error": "the Idempotency-Key was used with another request"}
    return row[1], row[2]


def insert_charge(connection, amount):
    charge_id = uuid.uuid4()
    connection.execute("INSERT INTO charges (id, amount) VALUES (%s, %s)", (charge_id, amount))
    return 201, {"id": str(charge_id), "amount": amount}


def save_answer(connection, key, answer):
    status, body = answer
    connection.execute(
        "UPDATE idempotency_keys SET status = %s, response = %s WHERE key = %s",
        (status, json.dumps(body), key),
    )


def handle_correct(connection, key, request_hash, amount):
    with connection.transaction():
        claimed = connection.execute(
            "INSERT INTO idempotency_keys (key, request_hash) VALUES (%s, %s) "
            "ON CONFLICT (key) DO NOTHING RETURNING key",
            (key, request_hash),
        ).fetchone()
        point("after-lookup")
        if claimed is None:
            return saved_answer(connection, key, request_hash)
        answer = insert_charge(connection, amount)
        save_answer(connection, key, answer)
        point("before-commit")
    point("after-commit")
    return answer


def handle_split(connection, key, request_hash, amount):
    with connection.transaction():
        saved = saved_answer(connection, key, request_hash)
        point("after-lookup")
        if saved is not None:
            return saved
        answer = insert_charge(connection, amount)
        point("before-commit")
    point("after-commit")
    with connection.transaction():
        connection.execute(
            "INSERT INTO idempotency_keys (key, request_hash) VALUES (%s, %s)",
            (key, request_hash),
        )
        save_answer(connection, key, answer)
    return answer


def handle_racy(connection, key, request_hash, amount):
    with connection.transaction():
        saved = saved_answer(connection, key, request_hash)
        point("after-lookup")
        if saved is not None:
            return saved
        answer = insert_charge(connection, amount)
        connection.execute(
            "INSERT INTO idempotency_keys (key, request_hash) VALUES (%s, %s)",
            (key, request_hash),
        )
        save_answer(connection, key, answer)
        point("before-commit")
    point("after-commit")
    return answer


HANDLERS = {"correct": handle_correct, "split": handle_split, "racy": handle_racy}


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
            amount = int(json.loads(raw_body)["amount"])
        except (ValueError, KeyError, TypeError):
            return self.answer(400, {"error": 'the body must be {"amount": N}'})
        request_hash = hashlib.sha256(raw_body).hexdigest()
        connection = POOL.get()
        try:
            status, body = HANDLERS[VARIANT](connection, key, request_hash, amount)
        finally:
            POOL.put(connection)
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


def main():
    url = os.environ["DATABASE_URL"]
    for _ in range(POOL_SIZE):
        POOL.put(psycopg.connect(url, autocommit=True))
    migrate(POOL.queue[0])
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
