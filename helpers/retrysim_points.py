"""Crash points and simulated time for an MCP server that retrysim checks.

One file, standard library only: copy it next to your server. Under retrysim (the
environment names the side channel in RETRYSIM_POINTS) each call asks the harness:

    from retrysim_points import point, now_ms

    db.execute("COMMIT")
    point("after-commit")   # the harness answers go on, or kills the process right here
    deadline = now_ms() + 30_000   # the simulated clock, in milliseconds

Outside retrysim, point() does nothing and now_ms() reads the wall clock, so the server
runs unchanged in production.

Each thread asks on a connection of its own, so a server that serves calls on threads can
have several calls waiting at crash points at once, each for its own answer.
"""

import os
import socket
import threading
import time

SIDE_CHANNEL_ENV = "RETRYSIM_POINTS"

_local = threading.local()


def _ask(question):
    """Sends one question line on this thread's side channel; returns the answer line."""
    channel = getattr(_local, "channel", None)
    if channel is None:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(os.environ[SIDE_CHANNEL_ENV])
        channel = connection.makefile("rw", encoding="utf-8", newline="\n")
        _local.channel = channel
    channel.write(question + "\n")
    channel.flush()
    answer = channel.readline()
    if not answer:
        # The harness is gone: nothing more can be checked, so stop at once.
        os._exit(1)
    return answer.strip()


def under_retrysim():
    """Whether the harness is listening (the server runs under retrysim)."""
    return SIDE_CHANNEL_ENV in os.environ


def point(name):
    """A crash point: under retrysim the process may be killed here, as a crash would."""
    if not under_retrysim():
        return
    _ask("point " + name)


def now_ms():
    """Milliseconds: the simulated clock under retrysim, else the wall clock."""
    if not under_retrysim():
        return int(time.time() * 1000)
    answer = _ask("now")
    return int(answer.split(" ", 1)[1])
