"""A counter as an HTTP endpoint on asyncio's own streams (standard library only), as an
asyncio framework serves it: every request a task of one event loop, so requests overlap.

`POST /add` with the JSON body {"amount": N} and an Idempotency-Key header adds N to a
counter kept in SQLite (the file named by RETRYSIM_DB) and answers {"total": T}; a retry is
answered with the saved total, the same key with another amount is 422. It listens on
127.0.0.1 at the port in PORT.

Its crash points are awaited (helpers/retrysim_points_asyncio.py), so the event loop serves
other requests while one waits at a point. VARIANT says how the key is kept:
* `keyed` (correct): the crash point `before-begin`, then the lookup, the addition and the
  key in one transaction;
* `split` (faulty): the addition in one transaction, the crash point `between-commits`, the
  key in a second: a retry that runs while the first waits there adds again.
BLOCKING=1 asks at its points with the plain helper's point(), which blocks the event loop.
"""

import asyncio
import json
import os
import sqlite3
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
import retrysim_points  # noqa: E402
from retrysim_points_asyncio import point  # noqa: E402

VARIANT = os.environ.get("VARIANT", "keyed")
DATABASE = os.environ["RETRYSIM_DB"]

if os.environ.get("BLOCKING") == "1":

    async def point(name):  # noqa: F811
        retrysim_points.point(name)


def connect():
    return sqlite3.connect(DATABASE, timeout=5, isolation_level=None)


def make_schema():
    connection = connect()
    connection.executescript(
        "CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);"
        "INSERT OR IGNORE INTO counter VALUES (1, 0);"
        "CREATE TABLE IF NOT EXISTS requests (key TEXT PRIMARY KEY, amount INTEGER, total INTEGER);"
    )
    connection.close()


def look_up(connection, key, amount):
    saved = connection.execute(
        "SELECT amount, total FROM requests WHERE key = ?", (key,)
    ).fetchone()
    if saved is None:
        return None
    if saved[0] != amount:
        return 422, {"error": "the key was used with another amount"}
    return 200, {"total": saved[1]}


def add(connection, amount):
    connection.execute("UPDATE counter SET total = total + ? WHERE id = 1", (amount,))
    return connection.execute("SELECT total FROM counter WHERE id = 1").fetchone()[0]


async def handle_add(key, amount):
    connection = connect()
    try:
        if VARIANT == "keyed":
            await point("before-begin")
            connection.execute("BEGIN IMMEDIATE")
            answered = look_up(connection, key, amount)
            if answered is None:
                total = add(connection, amount)
                connection.execute("INSERT INTO requests VALUES (?, ?, ?)", (key, amount, total))
                answered = 200, {"total": total}
            connection.execute("COMMIT")
            return answered
        connection.execute("BEGIN IMMEDIATE")
        answered = look_up(connection, key, amount)
        if answered is not None:
            connection.execute("COMMIT")
            return answered
        total = add(connection, amount)
        connection.execute("COMMIT")
        await point("between-commits")
        connection.execute("INSERT INTO requests VALUES (?, ?, ?)", (key, amount, total))
        return 200, {"total": total}
    finally:
        connection.close()


async def serve(reader, writer):
    try:
        request_line = await reader.readline()
        headers = {}
        while True:
            line = (await reader.readline()).decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        if not request_line.startswith(b"POST /add "):
            status, answer = 404, {"error": "no such endpoint"}
        else:
            amount = int(json.loads(body or b"{}")["amount"])
            status, answer = await handle_add(headers.get("idempotency-key"), amount)
        data = json.dumps(answer).encode()
        writer.write(
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (status, len(data)) + data
        )
        await writer.drain()
    finally:
        writer.close()


async def main():
    make_schema()
    server = await asyncio.start_server(serve, "127.0.0.1", int(os.environ["PORT"]))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
