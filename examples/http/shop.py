"""An order and its payment, on SQLite, in the standard library only: the second call is
built on the first's answer.

POST /orders {"item": ..., "quantity": N} places an order (an INTEGER PRIMARY KEY id) and
answers 201 {"order_id": id, ...} with a Location header. POST /orders/{id}/pay
{"amount": N} records the order's payment and answers 200 {"order_id": id, "paid": N}.
GET /orders/{id} answers the order and its payments. GET /requests/{key} answers what the
request sent under that Idempotency-Key answered (its saved status and body), 404 when none
was: the status lookup a reconnecting client makes.

Both POSTs take an Idempotency-Key header: the key's saved response is written in the same
transaction as the row, and a retry is answered from it. Every request needs
`Authorization: Bearer <BEARER>` (401 otherwise). Crash points after each commit. One thread
a request.

VARIANT chooses the payment handler:
- `correct` (the default): the key looked up and saved in the payment's transaction.
- `pay-ignores-key`: the payment is recorded on every attempt (a retry after a lost answer
  pays twice).
- `status-optimistic`: GET /requests/{key} answers 200 for a key it has no record of, as
  if its request had been done: a reconnecting client that looks its payment up concludes
  it paid when nothing was.
- `read-counts-views`: GET /orders/{id} counts the order's views in its row: a read that
  writes to an effect table.
"""

import json
import os
import re
import sqlite3
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from retrysim_points import point  # noqa: E402

DATABASE = os.environ["RETRYSIM_DB"]
VARIANT = os.environ.get("VARIANT", "correct")
BEARER = os.environ.get("BEARER", "secret")
# ACCEPTED=1: a payment is answered 202 Accepted when it is made, its 200 saved for the
# retry (a client polls until it hears it).
ACCEPTED = os.environ.get("ACCEPTED", "0") == "1"
PAY_PATH = re.compile(r"^/orders/(\d+)/pay$")
ORDER_PATH = re.compile(r"^/orders/(\d+)$")
REQUEST_PATH = re.compile(r"^/requests/([^/]+)$")


def connect():
    return sqlite3.connect(DATABASE, timeout=5, isolation_level=None)


def migrate():
    connection = connect()
    connection.executescript(
        "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL, "
        "quantity INTEGER NOT NULL, views INTEGER NOT NULL DEFAULT 0);"
        "CREATE TABLE IF NOT EXISTS payments (id INTEGER PRIMARY KEY, "
        "order_id INTEGER NOT NULL REFERENCES orders(id), amount INTEGER NOT NULL);"
        "CREATE TABLE IF NOT EXISTS idempotency_keys (key TEXT PRIMARY KEY, "
        "request TEXT NOT NULL, status INTEGER NOT NULL, response TEXT NOT NULL);"
    )
    connection.close()


def keyed(key, request, act):
    """Runs `act(connection)` once per key: a retry gets the saved answer; the key reused for
    another request, 422."""
    connection = connect()
    try:
        connection.execute("BEGIN IMMEDIATE")
        row = connection.execute(
            "SELECT request, status, response FROM idempotency_keys WHERE key = ?", (key,)
        ).fetchone()
        if row is not None:
            connection.execute("COMMIT")
            if row[0] != request:
                return 422, {"error": "the Idempotency-Key was used with another request"}
            return row[1], json.loads(row[2])
        status, body = act(connection)
        if status < 300:
            connection.execute(
                "INSERT INTO idempotency_keys (key, request, status, response) "
                "VALUES (?, ?, ?, ?)",
                (key, request, status, json.dumps(body)),
            )
        connection.execute("COMMIT")
        point("after-commit")
        if ACCEPTED and status == 200:
            return 202, {"order_id": body["order_id"], "state": "accepted"}
        return status, body
    finally:
        connection.close()


def place(item, quantity):
    def act(connection):
        cursor = connection.execute(
            "INSERT INTO orders (item, quantity) VALUES (?, ?)", (item, quantity)
        )
        order_id = cursor.lastrowid
        return 201, {"order_id": order_id, "item": item, "quantity": quantity}

    return act


def pay(order_id, amount):
    def act(connection):
        if connection.execute("SELECT 1 FROM orders WHERE id = ?", (order_id,)).fetchone() is None:
            return 404, {"error": f"no order {order_id}"}
        connection.execute(
            "INSERT INTO payments (order_id, amount) VALUES (?, ?)", (order_id, amount)
        )
        return 200, {"order_id": order_id, "paid": amount}

    return act


def pay_ignoring_key(order_id, amount):
    connection = connect()
    try:
        connection.execute("BEGIN IMMEDIATE")
        status, body = pay(order_id, amount)(connection)
        connection.execute("COMMIT")
        point("after-commit")
        return status, body
    finally:
        connection.close()


def saved(key):
    connection = connect()
    try:
        row = connection.execute(
            "SELECT status, response FROM idempotency_keys WHERE key = ?", (key,)
        ).fetchone()
        if row is None and VARIANT == "status-optimistic":
            return 200, {"order_id": 0, "note": "assumed done"}
        if row is None:
            return 404, {"error": "no request under that key"}
        return row[0], json.loads(row[1])
    finally:
        connection.close()


def order(order_id):
    connection = connect()
    try:
        if VARIANT == "read-counts-views":
            connection.execute("UPDATE orders SET views = views + 1 WHERE id = ?", (order_id,))
        row = connection.execute(
            "SELECT item, quantity FROM orders WHERE id = ?", (order_id,)
        ).fetchone()
        if row is None:
            return 404, {"error": f"no order {order_id}"}
        paid = connection.execute(
            "SELECT COALESCE(SUM(amount), 0) FROM payments WHERE order_id = ?", (order_id,)
        ).fetchone()[0]
        return 200, {"order_id": order_id, "item": row[0], "quantity": row[1], "paid": paid}
    finally:
        connection.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16

    def authorized(self):
        if self.headers.get("Authorization") == f"Bearer {BEARER}":
            return True
        self.answer(401, {"error": "unauthorized"}, {"WWW-Authenticate": "Bearer"})
        return False

    def do_GET(self):
        if not self.authorized():
            return
        if match := ORDER_PATH.match(self.path):
            return self.answer(*order(int(match[1])))
        if match := REQUEST_PATH.match(self.path):
            return self.answer(*saved(match[1]))
        self.answer(404, {"error": "no such endpoint"})

    def do_POST(self):
        raw_body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not self.authorized():
            return
        key = self.headers.get("Idempotency-Key")
        if not key:
            return self.answer(400, {"error": "the Idempotency-Key header is required"})
        try:
            body = json.loads(raw_body)
            request = f"{self.path} {json.dumps(body, sort_keys=True)}"
            if self.path == "/orders":
                act = place(str(body["item"]), int(body["quantity"]))
            elif match := PAY_PATH.match(self.path):
                if VARIANT == "pay-ignores-key":
                    return self.answer(*pay_ignoring_key(int(match[1]), int(body["amount"])))
                act = pay(int(match[1]), int(body["amount"]))
            else:
                return self.answer(404, {"error": "no such endpoint"})
        except (ValueError, KeyError, TypeError):
            return self.answer(400, {"error": "a malformed body"})
        status, answer = keyed(key, request, act)
        extra = {"Location": f"/orders/{answer['order_id']}"} if status == 201 else {}
        self.answer(status, answer, extra)

    def answer(self, status, body, extra=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    migrate()
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    server.daemon_threads = True
    server.serve_forever()
