"""A counter as an MCP tool server over stdio (or Streamable HTTP when PORT is set: see
stdio_mcp.py), with the standard library only.

The tool `add` adds `amount` to a counter kept in SQLite (the file named by the environment
variable RETRYSIM_DB) and answers the new total. With KEYED=1 it records each `request_id`
in the same transaction and answers a retry with the saved total instead of adding again;
without it a retry adds again. KEYED=split records the key too, but in a transaction of its
own after the addition's: a crash between the two (the crash point `between-commits`, asked
through helpers/retrysim_points.py) loses the record, and the retry adds again.
KEYED=memory remembers the keys in the process's memory instead: a crash forgets them, and
a process reused from one run to the next remembers keys of runs that never happened to it.

KEYED=racy looks the key up before it takes the write lock, then adds and saves the record:
one call at a time it is correct, but two calls with one key in flight at once (a retry
racing its original) can both miss the record and both add.

KEYED=claim claims the key in a transaction of its own (a row in `claims`), then adds and
saves the record in a second: a retry that finds the claim without a record answers the tool
error "in progress, try later". A crash between the two (the crash point `after-claim`)
leaves the claim for ever, and every retry is told to try later.

KEYED=deferred reads the key in a deferred transaction (a read lock only), pauses at
`after-lookup`, then adds and saves the record: on SQLite's rollback journal a call that must
write while another call holds a read lock waits (0.2 s here), then fails with "database is
locked", answered as a tool error although the other call may still commit. A retry racing
its original can so be told *failed* while the original adds.

CONCURRENT=1 serves each call on a thread of its own, with a connection of its own, and
pauses at the crash point `after-lookup` after looking the key up, so that calls can
interleave there (scenarios with `concurrent = true` and invocations_max = 2).

KEY_FROM says where the key is read: `argument` (request_id, the default), `meta` (the
request's _meta.requestId) or `parameter` (tools/call's idempotencyKey, with the
`idempotency` capability declared).

A request_id is saved with its amount: a call that reuses it with another amount is refused
(a tool error), never answered with the other call's total. REUSE=ignore answers it with the
saved total all the same, as a server that looks up the key alone does.

The tool `status` answers what became of a request_id: {"status": "completed", "total": ...}
from its record, or {"status": "not-found"}. STATUS=optimistic makes it answer a request it
has no record of as completed (total 0), as a status endpoint that assumes success would.
"""

import os
import sqlite3
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from stdio_mcp import ToolError, serve  # noqa: E402
from retrysim_points import point  # noqa: E402

KEYED = os.environ.get("KEYED", "0")
KEY_FROM = os.environ.get("KEY_FROM", "argument")
STATUS = os.environ.get("STATUS", "")
REUSE = os.environ.get("REUSE", "")
CONCURRENT = os.environ.get("CONCURRENT") == "1"
REMEMBERED = {}
_LOCAL = threading.local()

SCHEMA = """
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
INSERT OR IGNORE INTO counter VALUES (1, 0);
CREATE TABLE IF NOT EXISTS records (request_id TEXT PRIMARY KEY, total INTEGER NOT NULL,
                                    amount INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS claims (request_id TEXT PRIMARY KEY);
"""

STATUS_DESCRIPTION = {
    "description": "What became of a request: completed with its total, or not found.",
    "inputSchema": {
        "type": "object",
        "properties": {"request_id": {"type": "string"}},
        "required": ["request_id"],
    },
}

DESCRIPTION = {
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


def key_of(arguments, params):
    """The client's key, from where KEY_FROM says it is."""
    if KEY_FROM == "meta":
        return params.get("_meta", {}).get("requestId")
    if KEY_FROM == "parameter":
        return params.get("idempotencyKey")
    return arguments.get("request_id")


def lookup(db, key, amount=None):
    """The saved total of request `key`, or None; a tool error when `key` was used for
    another amount (a key reused with other arguments is refused, never replayed)."""
    row = db.execute("SELECT total, amount FROM records WHERE request_id = ?",
                     (key,)).fetchone()
    if row is None:
        return None
    if amount is not None and row[1] != amount and REUSE != "ignore":
        if db.in_transaction:
            db.execute("COMMIT")
        raise ToolError("request_id already used with another amount")
    return row[0]


def claim(db, key, amount):
    """KEYED=claim: claims `key`; the saved answer instead, if there is one."""
    db.execute("BEGIN IMMEDIATE")
    saved = lookup(db, key, amount)
    if saved is not None:
        db.execute("COMMIT")
        return {"total": saved, "replayed": True}
    if db.execute("SELECT 1 FROM claims WHERE request_id = ?", (key,)).fetchone():
        db.execute("COMMIT")
        raise ToolError("in progress, try later")
    db.execute("INSERT INTO claims VALUES (?)", (key,))
    db.execute("COMMIT")
    point("after-claim")
    return None


def add_deferred(db, key, amount):
    """KEYED=deferred: reads the key in a deferred transaction, then writes."""
    try:
        db.execute("BEGIN")
        saved = lookup(db, key, amount)
        if saved is not None:
            db.execute("COMMIT")
            return {"total": saved, "replayed": True}
        point("after-lookup")
        db.execute("UPDATE counter SET total = total + ? WHERE id = 1", (amount,))
        total = db.execute("SELECT total FROM counter WHERE id = 1").fetchone()[0]
        db.execute("INSERT INTO records VALUES (?, ?, ?)", (key, total, amount))
        db.execute("COMMIT")
        return {"total": total, "replayed": False}
    except sqlite3.OperationalError as error:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise ToolError(str(error))


def add(db, arguments, params):
    amount = int(arguments["amount"])
    key = key_of(arguments, params)
    if KEYED == "deferred" and key is not None:
        return add_deferred(db, key, amount)
    if KEYED == "claim" and key is not None:
        saved = claim(db, key, amount)
        if saved is not None:
            return saved
    if KEYED == "memory" and key in REMEMBERED:
        return {"total": REMEMBERED[key], "replayed": True}
    keyed = KEYED in ("1", "split", "racy", "claim") and key is not None
    if keyed and KEYED == "racy":
        saved = lookup(db, key, amount)
        if saved is not None:
            return {"total": saved, "replayed": True}
        point("after-lookup")
        db.execute("BEGIN IMMEDIATE")
    else:
        db.execute("BEGIN IMMEDIATE")
        if keyed:
            saved = lookup(db, key, amount)
            if saved is not None:
                db.execute("COMMIT")
                return {"total": saved, "replayed": True}
            if CONCURRENT:
                point("after-lookup")
    db.execute("UPDATE counter SET total = total + ? WHERE id = 1", (amount,))
    total = db.execute("SELECT total FROM counter WHERE id = 1").fetchone()[0]
    if keyed and KEYED == "split":
        db.execute("COMMIT")
        point("between-commits")
        db.execute("BEGIN IMMEDIATE")
    if keyed:
        db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?)", (key, total, amount))
    db.execute("COMMIT")
    if KEYED == "memory" and key is not None:
        REMEMBERED[key] = total
    return {"total": total, "replayed": False}


def status(db, arguments):
    row = db.execute("SELECT total FROM records WHERE request_id = ?",
                     (arguments.get("request_id"),)).fetchone()
    if row is not None:
        return {"status": "completed", "total": row[0]}
    if STATUS == "optimistic":
        return {"status": "completed", "total": 0}
    return {"status": "not-found"}


def database():
    """This thread's connection to the database (each thread has its own)."""
    db = getattr(_LOCAL, "db", None)
    if db is None:
        # KEYED=deferred waits 0.2 s for a lock before "database is locked" (the default
        # is 5 s): the harness holds the other call where it paused, so the wait always ends so.
        wait_s = 0.2 if KEYED == "deferred" else 5.0
        db = sqlite3.connect(os.environ["RETRYSIM_DB"], isolation_level=None, timeout=wait_s)
        _LOCAL.db = db
    return db


def main():
    database().executescript(SCHEMA)
    capabilities = {"idempotency": {}} if KEY_FROM == "parameter" else {}
    tools = {
        "add": (DESCRIPTION, lambda arguments, params: add(database(), arguments, params)),
        "status": (STATUS_DESCRIPTION, lambda arguments, _params: status(database(), arguments)),
    }
    serve("counter", tools, capabilities, concurrent=CONCURRENT)


if __name__ == "__main__":
    main()
