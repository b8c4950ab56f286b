"""A counter as a plain HTTP endpoint, with the standard library only.

`POST /add` with the JSON body {"amount": N} adds N to a counter kept in SQLite (the file
named by the environment variable RETRYSIM_DB) and answers {"total": T}; it listens on
127.0.0.1 at the port in the environment variable PORT, one thread per request.

With KEYED=1 the request's Idempotency-Key header is recorded with its amount in the
addition's own transaction: a retry is answered with the saved total (200, the header
Idempotent-Replayed: true), the same key with another amount is 422, a missing key is 400.
Without KEYED a retry adds again. KEYED=split records the key in a transaction of its own
after the addition's: a crash between the two (the crash point `between-commits`, asked
through helpers/retrysim_points.py) loses the record, and the retry adds again.
KEYED=claim claims the key in a transaction of its own, then adds and saves the record in a
second: a retry that finds the claim without a record is answered 409 with `Retry-After: 1`
(RETRY_AFTER=none leaves the header out). A crash between the two (the crash point
`after-claim`) leaves the claim for ever, and every retry is told to come back later.

BEGIN_POINT=1 asks at the crash point `before-begin` before the keyed transaction begins:
another request may run there.

MIGRATE=rebuild runs a start-up migration at every start that rebuilds the counter's table
(a new table, its rows copied, the old one dropped, the new one renamed). COUNTER_TABLE and
KEYS_TABLE name the two tables otherwise (`counter` and `requests`).

INTERIM=100,102,103 (any of them, in that order) sends those interim responses before the
final one, as a server that says `100 Continue`, `102 Processing` or `103 Early Hints` does:
each is correct HTTP, and the client reads past it.

EXIT_AFTER_REQUESTS=N makes the server exit by itself (status 4) once it has answered N
requests, saying why on its standard error, as a server that recycles itself does.

DAEMON=1 starts a helper in a session of its own at each start (`setsid sleep 86399`, as a
server that daemonizes a worker does), after it has made sure that no helper an earlier start
made is alive (it exits, status 5, if one is): the harness ends what a server leaves behind.

MISBEHAVE makes each answer one the harness must cope with: `close` (the head cut short,
then the connection closed), `chunked` (a valid chunked body), `chunked-garbage` (a chunk
size that is no number; `chunked-huge` one near 2^64; `chunked-latin1` one not UTF-8),
`huge` (a 30 MB body), `no-length` (no Content-Length: the body runs
to the connection's end), `http09` (a body without a status line), `redirect` (302).
"""

import json
import os
import sqlite3
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from retrysim_points import point  # noqa: E402

if os.environ.get("NO_POINTS"):
    # NO_POINTS=1: a server with no crash point in its code, as most are before their
    # first check.
    def point(name):  # noqa: F811
        return None

KEYED = os.environ.get("KEYED", "")
MISBEHAVE = os.environ.get("MISBEHAVE", "")
BEGIN_POINT = os.environ.get("BEGIN_POINT") == "1"
EXIT_AFTER_REQUESTS = int(os.environ.get("EXIT_AFTER_REQUESTS", "0"))
ANSWERED = []
# With BEARER set, a request without `Authorization: Bearer <BEARER>` is answered 401.
BEARER = os.environ.get("BEARER", "")
INTERIM = [int(code) for code in os.environ.get("INTERIM", "").split(",") if code]
INTERIM_REASONS = {100: "Continue", 102: "Processing", 103: "Early Hints"}
DATABASE = os.environ["RETRYSIM_DB"]
# The tables' names: COUNTER_TABLE and KEYS_TABLE name them otherwise.
COUNTER = os.environ.get("COUNTER_TABLE", "counter")
KEYS = os.environ.get("KEYS_TABLE", "requests")


def connect():
    connection = sqlite3.connect(DATABASE, timeout=5, isolation_level=None)
    return connection


def make_schema():
    connection = connect()
    connection.executescript(
        f"CREATE TABLE IF NOT EXISTS {COUNTER} (id INTEGER PRIMARY KEY CHECK (id = 1), total INTEGER NOT NULL);"
        f"INSERT OR IGNORE INTO {COUNTER} VALUES (1, 0);"
        f"CREATE TABLE IF NOT EXISTS {KEYS} (key TEXT PRIMARY KEY, amount INTEGER NOT NULL, total INTEGER NOT NULL);"
        "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY);"
    )
    if os.environ.get("MIGRATE") == "rebuild":
        # A start-up migration as teams write them: the table made anew with its rows copied,
        # the old one dropped and the new one renamed, at every start.
        connection.executescript(
            "BEGIN;"
            f"CREATE TABLE {COUNTER}_new (id INTEGER PRIMARY KEY CHECK (id = 1), total INTEGER NOT NULL);"
            f"INSERT INTO {COUNTER}_new SELECT id, total FROM {COUNTER};"
            f"DROP TABLE {COUNTER};"
            f"ALTER TABLE {COUNTER}_new RENAME TO {COUNTER};"
            "COMMIT;"
        )
    connection.close()


def add(connection, amount):
    connection.execute(f"UPDATE {COUNTER} SET total = total + ? WHERE id = 1", (amount,))
    return connection.execute(f"SELECT total FROM {COUNTER} WHERE id = 1").fetchone()[0]


def handle_add(key, amount):
    """The status, headers and body of one addition."""
    connection = connect()
    try:
        if not KEYED:
            connection.execute("BEGIN IMMEDIATE")
            total = add(connection, amount)
            connection.execute("COMMIT")
            return 200, {}, {"total": total}
        if not key:
            return 400, {}, {"error": "the Idempotency-Key header is required"}
        if BEGIN_POINT:
            point("before-begin")
        connection.execute("BEGIN IMMEDIATE")
        saved = connection.execute(
            f"SELECT amount, total FROM {KEYS} WHERE key = ?", (key,)
        ).fetchone()
        if saved is not None:
            connection.execute("COMMIT")
            if saved[0] != amount:
                return 422, {}, {"error": "the key was used with another amount"}
            return 200, {"Idempotent-Replayed": "true"}, {"total": saved[1]}
        if KEYED == "claim":
            if connection.execute("SELECT 1 FROM claims WHERE key = ?", (key,)).fetchone():
                connection.execute("COMMIT")
                wait = os.environ.get("RETRY_AFTER", "1")
                headers = {} if wait == "none" else {"Retry-After": wait}
                return 409, headers, {"error": "in progress, try later"}
            connection.execute("INSERT INTO claims (key) VALUES (?)", (key,))
            connection.execute("COMMIT")
            point("after-claim")
            connection.execute("BEGIN IMMEDIATE")
        total = add(connection, amount)
        if KEYED == "split":
            connection.execute("COMMIT")
            point("between-commits")
            connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            f"INSERT INTO {KEYS} (key, amount, total) VALUES (?, ?, ?)", (key, amount, total)
        )
        connection.execute("COMMIT")
        return 200, {}, {"total": total}
    finally:
        connection.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The response leaves in one write: head and body written apart would wait on the
    # client's delayed acknowledgement (Nagle), tens of milliseconds a response.
    wbufsize = 1 << 16

    def do_GET(self):
        if self.path != "/healthz":
            self.answer(404, {}, {"error": "no such endpoint"})
            return
        self.answer(200, {}, {"ready": True})

    def do_POST(self):
        if self.path != "/add":
            self.answer(404, {}, {"error": "no such endpoint"})
            return
        length = int(self.headers.get("Content-Length", "0"))
        if BEARER and self.headers.get("Authorization") != f"Bearer {BEARER}":
            self.rfile.read(length)
            self.answer(401, {"WWW-Authenticate": "Bearer"}, {"error": "unauthorized"})
            return
        try:
            amount = int(json.loads(self.rfile.read(length) or b"{}")["amount"])
        except (ValueError, KeyError, TypeError):
            self.answer(400, {}, {"error": "the body must be {\"amount\": N}"})
            return
        self.interim()
        status, headers, body = handle_add(self.headers.get("Idempotency-Key"), amount)
        self.answer(status, headers, body)

    def answer(self, status, headers, body):
        data = json.dumps(body).encode()
        if MISBEHAVE:
            self.misbehave(data)
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        if EXIT_AFTER_REQUESTS:
            ANSWERED.append(1)
            if len(ANSWERED) >= EXIT_AFTER_REQUESTS:
                self.wfile.flush()
                sys.stderr.write("answered enough requests: shutting down\n")
                sys.stderr.flush()
                os._exit(4)

    def interim(self):
        """Sends the interim responses INTERIM names, each flushed on its own."""
        for code in INTERIM:
            hints = "Link: </style.css>; rel=preload\r\n" if code == 103 else ""
            line = f"HTTP/1.1 {code} {INTERIM_REASONS.get(code, 'Interim')}\r\n{hints}\r\n"
            self.wfile.write(line.encode())
            self.wfile.flush()

    def misbehave(self, data):
        """Writes the answer as MISBEHAVE says, then closes the connection."""
        self.close_connection = True
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        raw = {
            "close": b"HTTP/1.1 200 OK\r\nContent-Le",
            "chunked": (head + "Transfer-Encoding: chunked\r\n\r\n").encode()
            + b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n",
            "chunked-garbage": (head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n").encode(),
            "chunked-huge": (head + "Transfer-Encoding: chunked\r\n\r\n").encode()
            + b"1\r\n{\r\nffffffffffffffff\r\n",
            "chunked-latin1": (head + "Transfer-Encoding: chunked\r\n\r\n\xe9\r\n").encode("latin-1"),
            "huge": (head + "Content-Length: 31457280\r\n\r\n").encode() + b" " * 31457280,
            "no-length": (head + "Connection: close\r\n\r\n").encode() + data,
            "http09": data,
            "redirect": b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n",
        }[MISBEHAVE]
        try:
            self.wfile.write(raw)
        except OSError:
            pass

    def log_message(self, *args):
        pass


DAEMON_ARGV = [b"sleep", b"86399"]


def daemons_alive():
    """The helpers `DAEMON=1` made that are alive, by their command line."""
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")[:-1]
            with open(f"/proc/{pid}/stat", "rb") as stat:
                zombie = stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if argv == DAEMON_ARGV and not zombie:
            alive.append(pid)
    return alive


def start_daemon():
    alive = daemons_alive()
    if alive:
        print(f"an earlier start's helper is alive: {alive}", file=sys.stderr, flush=True)
        sys.exit(5)
    subprocess.Popen(["setsid"] + [arg.decode() for arg in DAEMON_ARGV])


def main():
    if os.environ.get("DAEMON") == "1":
        start_daemon()
    make_schema()
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    server.daemon_threads = True

    server.serve_forever()


if __name__ == "__main__":
    main()
