"""A launcher that binds the server's port before it imports the application, as `uvicorn
app:app --port $PORT` under a process manager, or gunicorn's master, does: the socket is
listening before the helper's import (the spare's gate), so every process forked from the
spare inherits it, and serves on the spare's port.

`python3 bind_first.py` serves counter_http.py's endpoint (its variables as there).
"""

import os
import socket
import sys
from http.server import ThreadingHTTPServer

listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listening.bind(("127.0.0.1", int(os.environ["PORT"])))
listening.listen(64)

# The application, and with it the helper: a spare waits here, its port already bound.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import counter_http  # noqa: E402

counter_http.make_schema()
server = ThreadingHTTPServer(("127.0.0.1", 0), counter_http.Handler, bind_and_activate=False)
server.socket.close()
server.socket = listening
server.daemon_threads = True
server.serve_forever()
