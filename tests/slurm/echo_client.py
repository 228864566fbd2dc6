"""Connects to HOST:PORT, sends `ping`, prints `reply=` and what came back, or `error=`."""
import socket
import sys

host, port = sys.argv[1].rsplit(":", 1)
try:
    with socket.create_connection((host, int(port)), timeout=10) as c:
        c.sendall(b"ping")
        print("reply=" + c.recv(100).decode(errors="replace"), flush=True)
except OSError as e:
    print("error=" + type(e).__name__, flush=True)
