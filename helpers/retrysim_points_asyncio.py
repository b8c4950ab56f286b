"""Crash points and simulated time for an asyncio server (uvicorn, FastAPI, aiohttp, asyncio's
own streams) that retrysim checks: the helper of retrysim_points.py, awaited.

One file, standard library only: copy it next to your server with retrysim_points.py (which
it imports, for the warm spare's gate). Under retrysim each call asks the harness without
blocking the event loop, so other requests go on while one waits at a point:

    from retrysim_points_asyncio import point, now_ms

    await conn.execute("COMMIT")
    await point("after-commit")   # the harness answers go on, or kills the process here
    deadline = await now_ms() + 30_000

The plain point() of retrysim_points.py inside `async def` would block the whole event loop
while the harness decides: no other request is served meanwhile, and a server that says
`concurrent = true` then answers nothing.

Each asyncio task (each request, under uvicorn or aiohttp) asks on a side-channel connection
of its own, opened at its first question, so several requests can wait at crash points at
once, each for its own answer. Outside retrysim, point() does nothing and now_ms() reads the
wall clock.
"""

import asyncio
import contextvars
import os
import time

from retrysim_points import SIDE_CHANNEL_ENV, under_retrysim  # noqa: F401 (the spare's gate)

_channel = contextvars.ContextVar("retrysim_points_channel", default=None)


async def _ask(question):
    """Sends one question line on this task's side channel; returns the answer line."""
    channel = _channel.get()
    if channel is None:
        channel = await asyncio.open_unix_connection(os.environ[SIDE_CHANNEL_ENV])
        _channel.set(channel)
        task = asyncio.current_task()
        if task is not None:
            # The connection ends with the task (the request) that opened it.
            task.add_done_callback(lambda _: channel[1].close())
    reader, writer = channel
    writer.write((question + "\n").encode())
    await writer.drain()
    answer = await reader.readline()
    if not answer:
        # The harness is gone: nothing more can be checked, so stop at once.
        os._exit(1)
    return answer.decode().strip()


async def point(name):
    """A crash point: under retrysim the process may be killed here, as a crash would."""
    if not under_retrysim():
        return
    await _ask("point " + name)


async def now_ms():
    """Milliseconds: the simulated clock under retrysim, else the wall clock."""
    if not under_retrysim():
        return int(time.time() * 1000)
    answer = await _ask("now")
    return int(answer.split(" ", 1)[1])
