"""A server in the jail for `--job-port`: answers each connection's first bytes with
`echo:` and them."""
import socket
import sys
import threading

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)


def serve(c):
    with c:
        c.sendall(b"echo:" + c.recv(100))


while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
