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

A scenario with `spare = true` has retrysim keep a warm spare of the server: a process that
imports this module and waits here (RETRYSIM_SPARE names it), and forks a new server process
for each start the check needs (after a crash, or for a fresh run), which goes on from here
on pipes and a port of its own, with the database as the crash left it. Everything before the
import is done once, ahead; so import this module after the server's heavy imports and before
it opens its database or starts a thread.
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


SPARE_ENV = "RETRYSIM_SPARE"


def _serve_forks():
    """The spare: says it is at the gate, then forks a server for each `fork` line retrysim
    sends (with the new process's standard input, output and error, and its variables), and
    answers `forked PID`; as each ends, it says `ended PID CODE`. Returns in the new process
    only."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None)
    spare = os.getpid()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(os.environ[SIDE_CHANNEL_ENV])

    def send(line):
        # One line at a time: a child's end is not told in the middle of another line.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
        try:
            connection.sendall((line + "\n").encode())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def reap(*_):
        try:
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    return
                send("ended %d %d" % (pid, os.waitstatus_to_exitcode(status)))
        except (ChildProcessError, OSError):
            pass

    send("spare " + os.environ[SPARE_ENV])
    signal.signal(signal.SIGCHLD, reap)
    pending, fds = b"", []
    while True:
        data, received, _, _ = socket.recv_fds(connection, 65536, 3)
        if not data:
            os._exit(0)
        pending += data
        fds += received
        if b"\n" not in pending:
            continue
        line, pending = pending.split(b"\n", 1)
        words = line.decode().split("\t")
        if words[0] != "fork" or len(fds) != 3:
            os._exit(1)
        # No child's end is told until its `forked` line is sent: retrysim then reads the
        # two in that order, and an id the kernel gives again is never taken for ended.
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
        pid = os.fork()
        if pid == 0:
            # Killed with the spare (PR_SET_PDEATHSIG): a server forked in the moment the
            # harness ended is not left running.
            libc.prctl(1, signal.SIGKILL)
            if os.getppid() != spare:
                os._exit(1)
            connection.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
            os.setpgid(0, 0)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            for word in words[1:]:
                name, value = word.split("=", 1)
                os.environ[name] = value
            del os.environ[SPARE_ENV]
            return
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child has set it, or is gone already
        for fd in fds:
            os.close(fd)
        fds = []
        send("forked %d" % pid)
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


if under_retrysim() and os.environ.get(SPARE_ENV):
    _serve_forks()
