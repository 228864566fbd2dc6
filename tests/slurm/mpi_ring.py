"""An MPI program (mpi4py): each rank sends 4 MiB to the next and receives from the one
before, then all sum their ranks; each prints what it got and the node it ran on."""
import os

from mpi4py import MPI

c = MPI.COMM_WORLD
r, n = c.Get_rank(), c.Get_size()
got = c.sendrecv(bytes([r]) * (4 << 20), dest=(r + 1) % n, source=(r - 1) % n)
total = c.allreduce(r, op=MPI.SUM)
print(f"rank={r}/{n} node={os.environ.get('SLURMD_NODENAME')} from={got[0]} len={len(got)} sum={total}", flush=True)
