"""What a job's supervisor does at a job port (`net::cluster::jobs::prove_job`), by a process of the
user's that holds the session's secret (read from stdin, hex): answers the listener's
challenge with the proof, then checks the listener's. Prints `admitted reply=` and what the
jail's server answered to `ping`, or `refused` when the listener closed instead of proving
itself.

usage: job_prover.py HOST:PORT < secret
"""
import hashlib
import hmac
import os
import socket
import sys

secret = bytes.fromhex(sys.stdin.read().strip())
listener = sys.argv[1]
host, port = listener.rsplit(":", 1)


def exactly(c, n):
    got = b""
    while len(got) < n:
        more = c.recv(n - len(got))
        if not more:
            return None
        got += more
    return got


def tag(label, challenge, nonce):
    return hmac.new(secret, label + challenge + nonce + listener.encode(), hashlib.sha256).digest()


with socket.create_connection((host, int(port)), timeout=15) as c:
    challenge = exactly(c, 16)
    nonce = os.urandom(16)
    if challenge is not None:
        c.sendall(nonce + tag(b"agent-sandbox job port: job", challenge, nonce))
    answer = exactly(c, 32) if challenge is not None else None
    if answer is None or answer != tag(b"agent-sandbox job port: listener", challenge, nonce):
        print("refused", flush=True)
        sys.exit(0)
    c.sendall(b"ping")
    print("admitted reply=" + c.recv(100).decode(errors="replace"), flush=True)
