"""The orders service of orders_fastapi.py written with the standard library alone and
psycopg 3: `http.server`'s ThreadingHTTPServer (a thread a request), a connection of its own
opened for each transaction (no pool), raw SQL, the schema made at start-up, a uuid4() id and a
created_at in each row. No crash point, no import of retrysim's: under retrysim its points are
the transactions PostgreSQL sees (the relay).

VARIANT chooses the handler, as in orders_fastapi.py:
- `lookup-first`: the key looked up, then the order committed, then the key, with no unique
  constraint on it: two attempts in flight both place the order.
- `claim`: the key claimed (`INSERT ... ON CONFLICT DO NOTHING`, the key the primary key) in
  the order's own transaction, the response saved in it.
"""

import hashlib
import json
import os
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
from psycopg.types.json import Jsonb

VARIANT = os.environ.get("VARIANT", "lookup-first")
KEY_COLUMN = "key TEXT PRIMARY KEY" if VARIANT == "claim" else "id UUID PRIMARY KEY, key TEXT"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS orders (
    id UUID PRIMARY KEY, item TEXT NOT NULL, quantity INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS idempotency_keys (
    {KEY_COLUMN}, request_hash TEXT NOT NULL, status INTEGER, response JSONB);
"""


def connect():
    return psycopg.connect(os.environ["DATABASE_URL"])


def replay(saved, request_hash):
    saved_hash, status, response = saved
    if saved_hash != request_hash:
        return 422, {"error": "the Idempotency-Key was used with another request"}
    return status, response


def place(connection, item, quantity):
    order_id = uuid.uuid4()
    connection.execute(
        "INSERT INTO orders (id, item, quantity) VALUES (%s, %s, %s)", (order_id, item, quantity)
    )
    return {"id": str(order_id), "item": item, "quantity": quantity}


def saved_response(connection, key):
    return connection.execute(
        "SELECT request_hash, status, response FROM idempotency_keys WHERE key = %s", (key,)
    ).fetchone()


def lookup_first(key, request_hash, item, quantity):
    with connect() as connection:
        saved = saved_response(connection, key)
    if saved is not None:
        return replay(saved, request_hash)
    with connect() as connection:
        body = place(connection, item, quantity)
    with connect() as connection:
        connection.execute(
            "INSERT INTO idempotency_keys (id, key, request_hash, status, response) "
            "VALUES (%s, %s, %s, 201, %s)",
            (uuid.uuid4(), key, request_hash, Jsonb(body)),
        )
    return 201, body


def claim(key, request_hash, item, quantity):
    with connect() as connection:
        claimed = connection.execute(
            "INSERT INTO idempotency_keys (key, request_hash) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING RETURNING key",
            (key, request_hash),
        ).fetchone()
        if claimed is None:
            return replay(saved_response(connection, key), request_hash)
        body = place(connection, item, quantity)
        connection.execute(
            "UPDATE idempotency_keys SET status = 201, response = %s WHERE key = %s",
            (Jsonb(body), key),
        )
    return 201, body


class Orders(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        if self.path != "/orders":
            return self.answer(404, {"error": "no such path"})
        key = self.headers.get("Idempotency-Key")
        if not key:
            return self.answer(400, {"error": "the Idempotency-Key header is required"})
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request_body = json.loads(self.rfile.read(length))
            item, quantity = str(request_body["item"]), int(request_body["quantity"])
        except (KeyError, TypeError, ValueError):
            return self.answer(400, {"error": 'the body must be {"item": "...", "quantity": N}'})
        request_hash = hashlib.sha256(json.dumps(request_body, sort_keys=True).encode()).hexdigest()
        handler = claim if VARIANT == "claim" else lookup_first
        self.answer(*handler(key, request_hash, item, quantity))

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args):
        pass


if __name__ == "__main__":
    with connect() as start_up:
        start_up.execute(SCHEMA)
    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Orders).serve_forever()
