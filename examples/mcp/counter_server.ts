/**
 * A counter as an MCP tool server over stdio, in TypeScript with Node's standard library
 * only (node:sqlite, node:readline): the same tool as counter_server.py.
 *
 * The tool `add` adds `amount` to a counter kept in SQLite (the file named by the
 * environment variable RETRYSIM_DB) and answers the new total. With KEYED=1 it records each
 * `request_id` in the same transaction and answers a retry with the saved total instead of
 * adding again; without it a retry adds again. KEYED=split records the key too, but in a
 * transaction of its own after the addition's: a crash between the two (the crash point
 * `between-commits`, asked through helpers/retrysim_points.ts) loses the record, and the
 * retry adds again.
 *
 * Calls are served one at a time, in the order they come.
 */

import * as readline from "node:readline";
import { DatabaseSync } from "node:sqlite";
import { point } from "../../helpers/retrysim_points.ts";

const PROTOCOL_VERSION = "2025-06-18";
const KEYED = process.env.KEYED ?? "0";

const db = new DatabaseSync(process.env.RETRYSIM_DB as string);
db.exec(`
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
INSERT OR IGNORE INTO counter VALUES (1, 0);
CREATE TABLE IF NOT EXISTS records (request_id TEXT PRIMARY KEY, total INTEGER NOT NULL);
`);

const ADD = {
  name: "add",
  description: "Adds an amount to the counter; answers the new total.",
  inputSchema: {
    type: "object",
    properties: { amount: { type: "integer" }, request_id: { type: "string" } },
    required: ["amount"],
  },
};

interface Added {
  total: number;
  replayed: boolean;
}

/** The saved total of request `key`, or undefined. */
function lookup(key: string): number | undefined {
  const row = db.prepare("SELECT total FROM records WHERE request_id = ?").get(key) as
    | { total: number }
    | undefined;
  return row?.total;
}

async function add(args: Record<string, unknown>): Promise<Added> {
  const amount = Number(args.amount);
  const key = typeof args.request_id === "string" ? args.request_id : null;
  const keyed = (KEYED === "1" || KEYED === "split") && key !== null;
  db.exec("BEGIN IMMEDIATE");
  if (keyed) {
    const saved = lookup(key);
    if (saved !== undefined) {
      db.exec("COMMIT");
      return { total: saved, replayed: true };
    }
  }
  db.prepare("UPDATE counter SET total = total + ? WHERE id = 1").run(amount);
  const { total } = db.prepare("SELECT total FROM counter WHERE id = 1").get() as {
    total: number;
  };
  if (keyed && KEYED === "split") {
    db.exec("COMMIT");
    await point("between-commits");
    db.exec("BEGIN IMMEDIATE");
  }
  if (keyed) {
    db.prepare("INSERT INTO records VALUES (?, ?)").run(key, total);
  }
  db.exec("COMMIT");
  return { total, replayed: false };
}

type Request = { id?: number | string; method?: string; params?: Record<string, unknown> };

/** The result of one request; throws for a method or tool it does not know. */
async function answer(request: Request): Promise<unknown> {
  switch (request.method) {
    case "initialize":
      return {
        protocolVersion: PROTOCOL_VERSION,
        capabilities: { tools: {} },
        serverInfo: { name: "counter-ts", version: "1" },
      };
    case "tools/list":
      return { tools: [ADD] };
    case "tools/call": {
      const params = request.params ?? {};
      if (params.name !== "add") {
        throw new Error("unknown tool " + JSON.stringify(params.name));
      }
      const result = await add((params.arguments ?? {}) as Record<string, unknown>);
      return { content: [{ type: "text", text: JSON.stringify(result) }], structuredContent: result };
    }
    default:
      throw new Error("unknown method " + JSON.stringify(request.method));
  }
}

function send(message: unknown): void {
  process.stdout.write(JSON.stringify(message) + "\n");
}

/** Answers one request line; notifications are read and left unanswered. */
async function serve(line: string): Promise<void> {
  const request = JSON.parse(line) as Request;
  if (request.id === undefined) {
    return;
  }
  try {
    send({ jsonrpc: "2.0", id: request.id, result: await answer(request) });
  } catch (error) {
    send({ jsonrpc: "2.0", id: request.id, error: { code: -32601, message: String(error) } });
  }
}

let served: Promise<void> = Promise.resolve();
const lines = readline.createInterface({ input: process.stdin });
lines.on("line", (line: string) => {
  served = served.then(() => serve(line));
});
lines.on("close", () => {
  served.then(() => process.exit(0));
});
