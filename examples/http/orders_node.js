// The orders service of orders_fastapi.py written in Node: the standard `http` module,
// node-postgres's pool (`pg`), raw SQL, the schema made at start-up, a randomUUID() id and a
// created_at in each row. No crash point, no import of retrysim's: under retrysim its points
// are the transactions PostgreSQL sees (the relay), and while one request waits at one the
// event loop serves the others.
//
// VARIANT chooses the handler, as in orders_fastapi.py:
// - `lookup-first`: the key looked up, then the order committed, then the key, with no unique
//   constraint on it: two attempts in flight both place the order.
// - `claim`: the key claimed (`INSERT ... ON CONFLICT DO NOTHING`, the key the primary key) in
//   the order's own transaction, the response saved in it.
"use strict";

const crypto = require("node:crypto");
const http = require("node:http");
const { Pool } = require("pg");

const VARIANT = process.env.VARIANT || "lookup-first";
const KEY_COLUMN = VARIANT === "claim" ? "key TEXT PRIMARY KEY" : "id UUID PRIMARY KEY, key TEXT";
const SCHEMA = `
CREATE TABLE IF NOT EXISTS orders (
    id UUID PRIMARY KEY, item TEXT NOT NULL, quantity INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS idempotency_keys (
    ${KEY_COLUMN}, request_hash TEXT NOT NULL, status INTEGER, response JSONB);
`;

const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 4 });

/** Runs `work` with a client of the pool inside BEGIN ... COMMIT (ROLLBACK if it throws). */
async function inTransaction(work) {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    const result = await work(client);
    await client.query("COMMIT");
    return result;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

function replay(saved, requestHash) {
  if (saved.request_hash !== requestHash) {
    return [422, { error: "the Idempotency-Key was used with another request" }];
  }
  return [saved.status, saved.response];
}

async function place(client, item, quantity) {
  const id = crypto.randomUUID();
  await client.query("INSERT INTO orders (id, item, quantity) VALUES ($1, $2, $3)", [
    id,
    item,
    quantity,
  ]);
  return { id, item, quantity };
}

async function savedResponse(client, key) {
  const { rows } = await client.query(
    "SELECT request_hash, status, response FROM idempotency_keys WHERE key = $1",
    [key],
  );
  return rows[0];
}

async function lookupFirst(key, requestHash, item, quantity) {
  const saved = await savedResponse(pool, key);
  if (saved !== undefined) {
    return replay(saved, requestHash);
  }
  const body = await inTransaction((client) => place(client, item, quantity));
  await inTransaction((client) =>
    client.query(
      "INSERT INTO idempotency_keys (id, key, request_hash, status, response) " +
        "VALUES ($1, $2, $3, 201, $4)",
      [crypto.randomUUID(), key, requestHash, JSON.stringify(body)],
    ),
  );
  return [201, body];
}

async function claim(key, requestHash, item, quantity) {
  return inTransaction(async (client) => {
    const claimed = await client.query(
      "INSERT INTO idempotency_keys (key, request_hash) VALUES ($1, $2) " +
        "ON CONFLICT DO NOTHING RETURNING key",
      [key, requestHash],
    );
    if (claimed.rowCount === 0) {
      return replay(await savedResponse(client, key), requestHash);
    }
    const body = await place(client, item, quantity);
    await client.query("UPDATE idempotency_keys SET status = 201, response = $2 WHERE key = $1", [
      key,
      JSON.stringify(body),
    ]);
    return [201, body];
  });
}

/** The JSON body of `request`, or undefined when it is not one. */
async function bodyOf(request) {
  const chunks = [];
  for await (const chunk of request) {
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    return undefined;
  }
}

async function placeOrder(request) {
  if (request.method !== "POST" || request.url !== "/orders") {
    return [404, { error: "no such path" }];
  }
  const key = request.headers["idempotency-key"];
  const requestBody = await bodyOf(request);
  if (!key) {
    return [400, { error: "the Idempotency-Key header is required" }];
  }
  const quantity = Number.parseInt(requestBody?.quantity, 10);
  if (typeof requestBody?.item !== "string" || Number.isNaN(quantity)) {
    return [400, { error: 'the body must be {"item": "...", "quantity": N}' }];
  }
  const sorted = JSON.stringify(requestBody, Object.keys(requestBody).sort());
  const requestHash = crypto.createHash("sha256").update(sorted).digest("hex");
  const handler = VARIANT === "claim" ? claim : lookupFirst;
  return handler(key, requestHash, requestBody.item, quantity);
}

async function main() {
  await pool.query(SCHEMA);
  const server = http.createServer(async (request, response) => {
    const [status, body] = await placeOrder(request).catch((error) => [
      500,
      { error: String(error) },
    ]);
    const data = JSON.stringify(body);
    response.writeHead(status, {
      "Content-Type": "application/json",
      "Content-Length": Buffer.byteLength(data),
    });
    response.end(data);
  });
  server.listen(Number(process.env.PORT), "127.0.0.1");
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
