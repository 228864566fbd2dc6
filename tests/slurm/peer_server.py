"""A server in a job's jail for the session network: listens on every address at PORT,
writes where it can be reached (its jail's address, as Dask's `get_ip` finds it) to FILE,
and answers each connection's first bytes with `echo:`, them and ` from=` the caller's
address. Ends when the file `stop` appears, or after five minutes."""
import os
import socket
import sys
import time

port, where = int(sys.argv[1]), sys.argv[2]
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe.connect(("192.0.2.1", 9))  # sends nothing: finds the address routed outward
me = probe.getsockname()[0]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen(16)
s.settimeout(0.2)
with open(where + ".tmp", "w") as f:
    f.write(f"{me}:{port}\n")
os.rename(where + ".tmp", where)
deadline = time.time() + 300
while not os.path.exists("stop") and time.time() < deadline:
    try:
        c, peer = s.accept()
    except socket.timeout:
        continue
    with c:
        c.settimeout(5)
        try:
            c.sendall(b"echo:" + c.recv(100) + f" from={peer[0]}".encode())
        except OSError:
            pass
