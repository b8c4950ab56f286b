"""An automation editor's set_interval tool as an MCP server over stdio, with the standard library only.

`set_interval` changes an automation's interval under an expected version, as the seed
document's handler does. The caller is trusted context, not an argument: the principal
(alice of team-a, with automation:write) comes from the server's configuration.

VARIANT=receipt (the correct handler): in one BEGIN IMMEDIATE transaction it checks current
access first, then the receipt saved under (workspace, principal, tool, request_id), then
the version condition; the row change and the receipt commit together. A retry whose answer
was lost recovers the saved result.

VARIANT=version-only (the control): the version condition alone. A retry after a lost
answer is refused as a stale version although its first attempt committed: the client is
told "conflict" for an operation that succeeded.
"""

import json
import os
import re
import sqlite3
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from stdio_mcp import ToolError, serve  # noqa: E402
from retrysim_points import point  # noqa: E402

TOOL = "set_interval.v1"
VARIANT = os.environ.get("VARIANT", "receipt")
PRINCIPAL = {"user_id": "alice", "workspace_id": "team-a", "scopes": {"automation:write"}}

SCHEMA = """
CREATE TABLE IF NOT EXISTS automations (
    id INTEGER PRIMARY KEY, workspace_id TEXT NOT NULL,
    interval_minutes INTEGER NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS receipts (
    workspace_id TEXT NOT NULL, user_id TEXT NOT NULL, tool TEXT NOT NULL,
    request_id TEXT NOT NULL, payload TEXT NOT NULL, response TEXT NOT NULL,
    PRIMARY KEY (workspace_id, user_id, tool, request_id));
INSERT OR IGNORE INTO automations VALUES (1, 'team-a', 15, 1), (2, 'team-a', 15, 1),
    (20, 'team-b', 15, 1);
"""

DESCRIPTION = {
    "description": "Sets an automation's interval if its version is the one expected.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "automation_id": {"type": "integer"},
            "expected_version": {"type": "integer"},
            "interval_minutes": {"type": "integer"},
            "request_id": {"type": "string"},
        },
        "required": ["automation_id", "expected_version", "interval_minutes", "request_id"],
    },
}


def one(db, sql, params=()):
    return db.execute(sql, params).fetchone()


def validated(arguments):
    """The arguments, checked as the seed checks them."""
    request_id = arguments.get("request_id")
    if not isinstance(request_id, str) or not re.fullmatch(r"[A-Za-z0-9-]{1,64}", request_id):
        raise ToolError("request_id must be 1-64 letters, digits, or -")
    numbers = [arguments.get(name) for name in ("automation_id", "expected_version")]
    if any(type(value) is not int or value < 1 for value in numbers):
        raise ToolError("id and version must be positive integers")
    minutes = arguments.get("interval_minutes")
    if type(minutes) is not int or not 5 <= minutes <= 1440:
        raise ToolError("illustrative interval range is 5-1440 minutes")
    return request_id, numbers[0], numbers[1], minutes


def set_interval(db, arguments):
    if "automation:write" not in PRINCIPAL["scopes"]:
        raise ToolError("write not permitted")
    request_id, automation_id, expected_version, minutes = validated(arguments)
    payload = json.dumps({"id": automation_id, "version": expected_version,
                          "interval": minutes}, sort_keys=True, separators=(",", ":"))
    key = (PRINCIPAL["workspace_id"], PRINCIPAL["user_id"], TOOL, request_id)
    db.execute("BEGIN IMMEDIATE")
    try:
        # Current access first: an old receipt grants no access to a resource.
        if one(db, "SELECT 1 FROM automations WHERE id=? AND workspace_id=?",
               (automation_id, PRINCIPAL["workspace_id"])) is None:
            raise ToolError("resource unavailable")
        if VARIANT == "receipt":
            # The receipt before the version: a committed first attempt advanced it.
            old = one(db, "SELECT payload, response FROM receipts WHERE workspace_id=? "
                          "AND user_id=? AND tool=? AND request_id=?", key)
            if old is not None:
                if old[0] != payload:
                    raise ToolError("request id reused with different intent")
                db.execute("COMMIT")
                return {"result": json.loads(old[1]), "replayed": True}
        row = one(db, "UPDATE automations SET interval_minutes=?, version=version+1 "
                      "WHERE id=? AND workspace_id=? AND version=? "
                      "RETURNING id, interval_minutes, version",
                  (minutes, automation_id, PRINCIPAL["workspace_id"], expected_version))
        if row is None:
            raise ToolError("version conflict; reload before a new intent")
        result = {"id": row[0], "interval_minutes": row[1], "version": row[2]}
        point("after-update")
        if VARIANT == "receipt":
            db.execute("INSERT INTO receipts VALUES (?,?,?,?,?,?)",
                       key + (payload, json.dumps(result, sort_keys=True)))
        db.execute("COMMIT")
        return {"result": result, "replayed": False}
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def main():
    db = sqlite3.connect(os.environ["RETRYSIM_DB"], isolation_level=None)
    db.executescript(SCHEMA)
    serve("interval", {"set_interval": (DESCRIPTION,
                                        lambda arguments, _params: set_interval(db, arguments))})


if __name__ == "__main__":
    main()
