/**
 * Crash points and simulated time for an MCP server that retrysim checks, in TypeScript.
 *
 * One file, Node's standard library only (Node 22.18 or later runs it as it is, stripping
 * the types): copy it next to your server. Under retrysim (the environment names the side
 * channel in RETRYSIM_POINTS) each call asks the harness:
 *
 *     import { point, nowMs } from "./retrysim_points.ts";
 *
 *     db.exec("COMMIT");
 *     await point("after-commit"); // the harness answers go on, or kills the process here
 *     const deadline = (await nowMs()) + 30_000; // the simulated clock, in milliseconds
 *
 * Outside retrysim, point() does nothing and nowMs() reads the wall clock, so the server
 * runs unchanged in production.
 *
 * Each question waiting for its answer has a connection of its own (connections are kept
 * for later questions once answered), so a server that serves calls concurrently can have
 * several calls waiting at crash points at once, each for its own answer.
 */

import * as net from "node:net";

/** The environment variable that names the side channel's socket. */
export const SIDE_CHANNEL_ENV = "RETRYSIM_POINTS";

/** A connection to the side channel, and the question on it waiting for its answer. */
interface Channel {
  socket: net.Socket;
  buffered: string;
  waiting: ((answer: string) => void) | null;
}

/** Connections with no question waiting on them. */
const idle: Channel[] = [];

/** Opens a connection to the side channel at `path`. */
function open(path: string): Promise<Channel> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection(path);
    const channel: Channel = { socket, buffered: "", waiting: null };
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      channel.buffered += chunk;
      const end = channel.buffered.indexOf("\n");
      if (end < 0 || channel.waiting === null) {
        return;
      }
      const answer = channel.buffered.slice(0, end);
      channel.buffered = channel.buffered.slice(end + 1);
      const waiting = channel.waiting;
      channel.waiting = null;
      waiting(answer);
    });
    // The harness is gone: nothing more can be checked, so stop at once.
    socket.on("close", () => process.exit(1));
    socket.once("connect", () => resolve(channel));
    socket.once("error", reject);
  });
}

/** Sends one question line on the side channel and returns the answer line. */
async function ask(question: string): Promise<string> {
  const channel = idle.pop() ?? (await open(process.env[SIDE_CHANNEL_ENV] as string));
  const answer = await new Promise<string>((resolve) => {
    channel.waiting = resolve;
    channel.socket.write(question + "\n");
  });
  idle.push(channel);
  return answer.trim();
}

/** Whether the harness is listening (the server runs under retrysim). */
export function underRetrysim(): boolean {
  return SIDE_CHANNEL_ENV in process.env;
}

/** A crash point: under retrysim the process may be killed here, as a crash would. */
export async function point(name: string): Promise<void> {
  if (!underRetrysim()) {
    return;
  }
  await ask("point " + name);
}

/** Milliseconds: the simulated clock under retrysim, else the wall clock. */
export async function nowMs(): Promise<number> {
  if (!underRetrysim()) {
    return Date.now();
  }
  const answer = await ask("now");
  return Number(answer.split(" ", 2)[1]);
}
