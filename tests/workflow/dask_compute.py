"""Dask on Slurm as a researcher runs it (dask-jobqueue), computing: the scheduler in the jail
on the login node, two worker jobs in the jail on the nodes, tasks whose results the scheduler
gathers from the workers, and a result one worker fetches from the other. Every connection
(worker to scheduler, scheduler to worker, worker to worker) goes over the session network.
Prints the scheduler's address, the sum, where the tasks ran, the workers' addresses, the
bytes moved between workers, and `all-done`."""

import os
import socket
import sys

from dask.distributed import Client
from dask_jobqueue import SLURMCluster


def where(x):
    return (x * x, socket.gethostname(), os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURMD_NODENAME", ""))


def main():
    cluster = SLURMCluster(
        cores=1,
        memory="1GB",
        processes=1,
        queue="debug",
        walltime="00:05:00",
        scheduler_options={"dashboard_address": None},
    )
    print("scheduler=" + cluster.scheduler_address, flush=True)
    cluster.scale(jobs=2)
    client = Client(cluster)
    client.wait_for_workers(2, timeout=120)
    results = client.gather(client.map(where, range(20)))
    print("sum=%d" % sum(r[0] for r in results), flush=True)
    print("hosts=" + ",".join(sorted({r[1] for r in results})), flush=True)
    print("jobs=%d" % len({r[2] for r in results if r[2]}), flush=True)
    print("nodes=" + ",".join(sorted({r[3] for r in results})), flush=True)
    workers = sorted(client.scheduler_info()["workers"])
    print("workers=" + ",".join(workers), flush=True)
    a = client.submit(lambda: bytes(1 << 20), workers=[workers[0]], pure=False)
    b = client.submit(len, a, workers=[workers[1]])
    print("moved=%d" % b.result(timeout=60), flush=True)
    client.close()
    cluster.close()
    print("all-done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
