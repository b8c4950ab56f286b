"""The orders service of orders_fastapi.py written async: FastAPI's `async def` endpoints on
uvicorn's event loop, asyncpg's pool, raw SQL. No crash point, no import of retrysim's: under
retrysim its points are the transactions PostgreSQL sees (the relay), and while one request
waits at one the event loop serves the others.

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
from contextlib import asynccontextmanager

import asyncpg
import uvicorn
from fastapi import FastAPI, Header
from fastapi.responses import JSONResponse

VARIANT = os.environ.get("VARIANT", "lookup-first")
KEY_COLUMN = "key TEXT PRIMARY KEY" if VARIANT == "claim" else "id UUID PRIMARY KEY, key TEXT"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS orders (
    id UUID PRIMARY KEY, item TEXT NOT NULL, quantity INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS idempotency_keys (
    {KEY_COLUMN}, request_hash TEXT NOT NULL, status INTEGER, response JSONB);
"""

POOL = {}


@asynccontextmanager
async def lifespan(_app):
    POOL["pool"] = await asyncpg.create_pool(os.environ["DATABASE_URL"], min_size=1, max_size=4)
    async with POOL["pool"].acquire() as connection:
        await connection.execute(SCHEMA)
    yield
    await POOL["pool"].close()


app = FastAPI(lifespan=lifespan)


def replay(saved, request_hash):
    if saved["request_hash"] != request_hash:
        return 422, {"error": "the Idempotency-Key was used with another request"}
    return saved["status"], json.loads(saved["response"])


async def place(connection, item, quantity):
    order_id = uuid.uuid4()
    await connection.execute(
        "INSERT INTO orders (id, item, quantity) VALUES ($1, $2, $3)", order_id, item, quantity
    )
    return {"id": str(order_id), "item": item, "quantity": quantity}


async def lookup_first(pool, key, request_hash, item, quantity):
    async with pool.acquire() as connection:
        saved = await connection.fetchrow(
            "SELECT request_hash, status, response FROM idempotency_keys WHERE key = $1", key
        )
    if saved is not None:
        return replay(saved, request_hash)
    async with pool.acquire() as connection, connection.transaction():
        body = await place(connection, item, quantity)
    async with pool.acquire() as connection, connection.transaction():
        await connection.execute(
            "INSERT INTO idempotency_keys (id, key, request_hash, status, response) "
            "VALUES ($1, $2, $3, 201, $4)",
            uuid.uuid4(), key, request_hash, json.dumps(body),
        )
    return 201, body


async def claim(pool, key, request_hash, item, quantity):
    async with pool.acquire() as connection, connection.transaction():
        claimed = await connection.fetchval(
            "INSERT INTO idempotency_keys (key, request_hash) VALUES ($1, $2) "
            "ON CONFLICT DO NOTHING RETURNING key",
            key, request_hash,
        )
        if claimed is None:
            saved = await connection.fetchrow(
                "SELECT request_hash, status, response FROM idempotency_keys WHERE key = $1", key
            )
            return replay(saved, request_hash)
        body = await place(connection, item, quantity)
        await connection.execute(
            "UPDATE idempotency_keys SET status = 201, response = $2 WHERE key = $1",
            key, json.dumps(body),
        )
    return 201, body


@app.post("/orders")
async def place_order(request_body: dict, idempotency_key: str | None = Header(default=None)):
    if not idempotency_key:
        return JSONResponse({"error": "the Idempotency-Key header is required"}, 400)
    try:
        item, quantity = str(request_body["item"]), int(request_body["quantity"])
    except (KeyError, TypeError, ValueError):
        return JSONResponse({"error": 'the body must be {"item": "...", "quantity": N}'}, 400)
    request_hash = hashlib.sha256(json.dumps(request_body, sort_keys=True).encode()).hexdigest()
    handler = claim if VARIANT == "claim" else lookup_first
    status, body = await handler(POOL["pool"], idempotency_key, request_hash, item, quantity)
    return JSONResponse(body, status)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
