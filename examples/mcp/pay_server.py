"""A payment tool as an MCP server over stdio that calls an outside payment provider.

The tool `pay` charges `amount` through the provider at the URL in PROVIDER_URL (under
retrysim, the harness's provider on loopback: POST /charges, {"amount": N}) and records the
payment in SQLite (the file named by RETRYSIM_DB), keyed by `request_id`. A retry of a
recorded payment answers the record. Between the charge and its record is the crash point
`after-charge` (helpers/retrysim_points.py).

PROVIDER_KEY=1 sends the request_id as the provider's Idempotency-Key, so a retry after a
crash between the charge and its record gets the same charge back. PROVIDER_KEY=0 sends no
key: that retry charges the customer again. PROVIDER_KEY=random sends a fresh uuid4 as the key
of every attempt, the classic mistake: a key no retry repeats, so the retry charges again.
PROVIDER_KEY=random-short makes the same mistake with a random number of at most three digits
(too short to be told apart as a fresh value: its replays differ).
"""

import json
import os
import random
import sqlite3
import sys
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from stdio_mcp import serve  # noqa: E402
from retrysim_points import point  # noqa: E402

PROVIDER_KEY = os.environ.get("PROVIDER_KEY", "0")

SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    request_id TEXT PRIMARY KEY, order_id TEXT NOT NULL, amount INTEGER NOT NULL,
    charge_id TEXT NOT NULL);
"""

DESCRIPTION = {
    "description": "Charges an order's amount once per request_id; answers the charge.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "order": {"type": "string"},
            "amount": {"type": "integer"},
            "request_id": {"type": "string"},
        },
        "required": ["order", "amount", "request_id"],
    },
}


def charge(amount, key):
    """Charges through the provider; its answer."""
    headers = {"Content-Type": "application/json"}
    if PROVIDER_KEY == "1":
        headers["Idempotency-Key"] = key
    elif PROVIDER_KEY == "random":
        headers["Idempotency-Key"] = str(uuid.uuid4())
    elif PROVIDER_KEY == "random-short":
        headers["Idempotency-Key"] = str(random.randrange(1_000))
    request = urllib.request.Request(os.environ["PROVIDER_URL"] + "/charges",
                                     data=json.dumps({"amount": amount}).encode(),
                                     headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def pay(db, arguments):
    key = arguments["request_id"]
    row = db.execute("SELECT charge_id, amount FROM payments WHERE request_id = ?",
                     (key,)).fetchone()
    if row is not None:
        return {"charge": row[0], "amount": row[1], "replayed": True}
    charged = charge(int(arguments["amount"]), key)
    point("after-charge")
    db.execute("INSERT INTO payments VALUES (?, ?, ?, ?)",
               (key, arguments["order"], int(arguments["amount"]), charged["id"]))
    return {"charge": charged["id"], "amount": charged["amount"], "replayed": False}


def main():
    db = sqlite3.connect(os.environ["RETRYSIM_DB"], isolation_level=None)
    db.executescript(SCHEMA)
    serve("pay", {"pay": (DESCRIPTION, lambda arguments, _params: pay(db, arguments))})


if __name__ == "__main__":
    main()
