"""A counter as an HTTP endpoint on PostgreSQL, with psycopg 3 and the standard library.

`POST /add` with the JSON body {"amount": N} and an Idempotency-Key header adds N to a
counter and answers {"total": T}; a retry with the same key is answered with the saved total
(200), the same key with another amount is 422, a missing key is 400. It connects to the
database named by DATABASE_URL (retrysim runs its own PostgreSQL and gives it one), makes
its schema, and listens on 127.0.0.1 at the port in PORT, one thread per request, each on a
connection of a small pool, in READ COMMITTED, PostgreSQL's default.

VARIANT says how the key is kept, the three ways people write it:

* `lookup` (faulty): look the key up, then add and save the key in one transaction, with no
  unique constraint on the key. Under READ COMMITTED a retry in flight beside its original
  looks before the original has committed: both miss the key, both add.
* `on-conflict` (correct): claim the key first, `INSERT ... ON CONFLICT DO NOTHING` on its
  primary key, in the same transaction as the addition. A retry beside its original waits on
  the original's uncommitted key (PostgreSQL's own lock), then finds it and replays.
* `second-transaction` (faulty): add in one transaction, save the key in a second. A crash
  between the two (the crash point `between-transactions`) loses the key, and the retry adds
  again.

* `lock` (correct): take a lock first, then look the key up, add and save it, all in one
  transaction. LOCK says which: `advisory` (`pg_advisory_xact_lock(hashtext(key))`),
  `for-update` (`SELECT ... FOR UPDATE` on the counter's row) or `lock-table` (`LOCK TABLE` on
  the keys' table). A retry beside its original waits on the lock until the original has
  committed, then finds the key. LOCK_AT=after-lookup (faulty) takes the lock only after the
  lookup: both miss the key, and each adds once it has the lock.

HOLD_LOCK=1 has the server open a transaction at start that locks the counter's row and
never ends (a background job that forgot to commit): every addition waits on it forever.

ISOLATION=serializable runs every transaction SERIALIZABLE: a transaction that raced another
fails with a serialization failure (40001), answered 503, and the client sends again.

MIGRATE=rebuild runs a start-up migration at every start that rebuilds the counter's table
(a new table, its rows copied, the old one dropped, the new one renamed); REPLICA=1 has every
connection of the pool `SET session_replication_role = replica` (as a replication tool
does); COUNTER_TABLE and KEYS_TABLE name the tables otherwise (`counter`,
`idempotency_keys`).

COUNTER_KEY=none makes the counter's table without a primary key (the harness's triggers
and its template need none).

The crash points (`after-lookup`, `after-claim`, `after-lock`, `between-transactions`) are asked through
helpers/retrysim_points.py; outside retrysim they do nothing.
"""

import json
import os
import queue
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from retrysim_points import point  # noqa: E402

VARIANT = os.environ.get("VARIANT", "on-conflict")
ISOLATION = os.environ.get("ISOLATION", "read-committed")
COUNTER = os.environ.get("COUNTER_TABLE", "counter")
KEYS = os.environ.get("KEYS_TABLE", "idempotency_keys")
POOL_SIZE = 4
POOL = queue.Queue()


def make_schema(connection):
    unique = "PRIMARY KEY" if VARIANT == "on-conflict" else ""
    counter_key = "" if os.environ.get("COUNTER_KEY") == "none" else "PRIMARY KEY"
    with connection.transaction():
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {COUNTER} (id integer {counter_key}, total integer NOT NULL)"
        )
        connection.execute(
            f"INSERT INTO {COUNTER} SELECT 1, 0 WHERE NOT EXISTS (SELECT 1 FROM {COUNTER} WHERE id = 1)"
        )
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {KEYS} (key text {unique}, amount integer, "
            "total integer)"
        )
    if os.environ.get("MIGRATE") == "rebuild":
        with connection.transaction():
            connection.execute(
                f"CREATE TABLE {COUNTER}_new (id integer {counter_key}, total integer NOT NULL)"
            )
            connection.execute(f"INSERT INTO {COUNTER}_new SELECT id, total FROM {COUNTER}")
            connection.execute(f"DROP TABLE {COUNTER}")
            connection.execute(f"ALTER TABLE {COUNTER}_new RENAME TO {COUNTER}")


def add(connection, amount):
    return connection.execute(
        f"UPDATE {COUNTER} SET total = total + %s WHERE id = 1 RETURNING total", (amount,)
    ).fetchone()[0]


def saved(connection, key):
    return connection.execute(
        f"SELECT amount, total FROM {KEYS} WHERE key = %s", (key,)
    ).fetchone()


def replay(record, amount):
    if record[0] != amount:
        return 422, {"error": "the key was used with another amount"}
    return 200, {"total": record[1]}


def handle_lookup(connection, key, amount):
    with connection.transaction():
        record = saved(connection, key)
        if record is not None:
            return replay(record, amount)
        point("after-lookup")
        total = add(connection, amount)
        connection.execute(
            f"INSERT INTO {KEYS} VALUES (%s, %s, %s)", (key, amount, total)
        )
    return 200, {"total": total}


def handle_on_conflict(connection, key, amount):
    with connection.transaction():
        claimed = connection.execute(
            f"INSERT INTO {KEYS} (key, amount) VALUES (%s, %s) "
            "ON CONFLICT (key) DO NOTHING RETURNING key",
            (key, amount),
        ).fetchone()
        if claimed is None:
            return replay(saved(connection, key), amount)
        point("after-claim")
        total = add(connection, amount)
        connection.execute(
            f"UPDATE {KEYS} SET total = %s WHERE key = %s", (total, key)
        )
    return 200, {"total": total}


LOCKS = {
    "advisory": "SELECT pg_advisory_xact_lock(hashtext(%s))",
    "for-update": f"SELECT total FROM {COUNTER} WHERE id = 1 FOR UPDATE",
    "lock-table": f"LOCK TABLE {KEYS} IN SHARE ROW EXCLUSIVE MODE",
}


def take_lock(connection, key):
    statement = LOCKS[os.environ.get("LOCK", "advisory")]
    connection.execute(statement, (key,) if "%s" in statement else ())


def handle_lock(connection, key, amount):
    late = os.environ.get("LOCK_AT") == "after-lookup"
    with connection.transaction():
        if not late:
            take_lock(connection, key)
            point("after-lock")
        record = saved(connection, key)
        if record is not None:
            return replay(record, amount)
        if late:
            point("after-lookup")
            take_lock(connection, key)
        total = add(connection, amount)
        connection.execute(
            f"INSERT INTO {KEYS} VALUES (%s, %s, %s)", (key, amount, total)
        )
    return 200, {"total": total}


def hold_lock_forever(url):
    """A transaction that locks the counter's row and is never ended."""
    connection = psycopg.connect(url)
    connection.execute(f"SELECT total FROM {COUNTER} WHERE id = 1 FOR UPDATE")
    return connection


def handle_second_transaction(connection, key, amount):
    with connection.transaction():
        record = saved(connection, key)
        if record is not None:
            return replay(record, amount)
        total = add(connection, amount)
    point("between-transactions")
    with connection.transaction():
        connection.execute(
            f"INSERT INTO {KEYS} VALUES (%s, %s, %s)", (key, amount, total)
        )
    return 200, {"total": total}


HANDLERS = {
    "lookup": handle_lookup,
    "on-conflict": handle_on_conflict,
    "second-transaction": handle_second_transaction,
    "lock": handle_lock,
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16

    def do_POST(self):
        if self.path != "/add":
            self.answer(404, {"error": "no such endpoint"})
            return
        length = int(self.headers.get("Content-Length", "0"))
        try:
            amount = int(json.loads(self.rfile.read(length) or b"{}")["amount"])
        except (ValueError, KeyError, TypeError):
            self.answer(400, {"error": 'the body must be {"amount": N}'})
            return
        key = self.headers.get("Idempotency-Key")
        if not key:
            self.answer(400, {"error": "the Idempotency-Key header is required"})
            return
        connection = POOL.get()
        try:
            try:
                status, body = HANDLERS[VARIANT](connection, key, amount)
            except psycopg.errors.SerializationFailure as error:
                # SERIALIZABLE's answer to a transaction that raced another: nothing of it
                # committed, and the client may send again.
                status, body = 503, {"error": "serialization failure: " + str(error).strip()}
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
        connection = psycopg.connect(url, autocommit=True)
        if ISOLATION == "serializable":
            connection.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
        if os.environ.get("REPLICA") == "1":
            connection.execute("SET session_replication_role = replica")
        POOL.put(connection)
    make_schema(POOL.queue[0])
    if os.environ.get("HOLD_LOCK") == "1":
        held = hold_lock_forever(url)  # noqa: F841 (kept open while the server runs)
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
