"""Another user's flood on a one-host cluster: keeps two connections open to each HOST:PORT
from each SOURCE address, sending nothing, and opens each again (ten times a second at most)
once the listener closes it, until the file STOP exists. Prints `opened=` (connections made)
and `challenged=` (how many received anything, a listener's challenge, before they closed).

usage: local_flood.py STOP SOURCE[,SOURCE...] HOST:PORT...
"""
import os
import select
import socket
import sys
import time

stop, sources, targets = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
slots = [(src, t) for t in targets for src in sources for _ in range(2)]
held = {}
opened = challenged = 0
deadline = time.time() + 120
while not os.path.exists(stop) and time.time() < deadline:
    for i, (src, target) in enumerate(slots):
        if i in held:
            continue
        host, port = target.rsplit(":", 1)
        c = socket.socket()
        try:
            c.bind((src, 0))
            c.settimeout(1)
            c.connect((host, int(port)))
        except OSError:
            c.close()
            continue
        c.setblocking(False)
        held[i] = c
        opened += 1
    time.sleep(0.1)
    ready, _, _ = select.select(list(held.values()), [], [], 0)
    for i, c in list(held.items()):
        if c not in ready:
            continue
        try:
            got = c.recv(64)
        except OSError:
            got = b""
        if got:
            challenged += 1
        c.close()
        del held[i]
for c in held.values():
    c.close()
print(f"opened={opened} challenged={challenged}", flush=True)
