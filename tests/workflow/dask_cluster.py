"""What a researcher writes to get Dask workers from Slurm with dask-jobqueue: a SLURMCluster,
two worker jobs, then the cluster closed. The submission side only (dask_compute.py computes). Prints the job script, the job ids
(`submitted=`), the ids squeue showed (`queued=`) and what was left after close (`left=`)."""

import subprocess
import sys
import time

from dask_jobqueue import SLURMCluster


def queue():
    """The job ids squeue shows (inside the jail: the project's jobs)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print("squeue failed: " + out.stderr.strip(), flush=True)
    return set(out.stdout.split())


def wait_for(what, test, secs=60):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if test():
            return True
        time.sleep(1)
    print("timed out waiting for " + what, flush=True)
    return False


def main():
    cluster = SLURMCluster(
        cores=1,
        memory="1GB",
        processes=1,
        queue="debug",
        walltime="00:05:00",
        # If a worker job starts before it is cancelled, its output says where it ran.
        job_script_prologue=['echo "worker-on=$(hostname):ssh=$(test -e ~/.ssh && echo yes || echo no)"'],
        scheduler_options={"dashboard_address": None},
    )
    print("--- job script\n" + cluster.job_script() + "---", flush=True)
    cluster.scale(jobs=2)

    def ids():
        return [w.job_id for w in cluster.workers.values() if getattr(w, "job_id", None)]

    wait_for("two job ids", lambda: len(ids()) == 2)
    submitted = ids()
    print("submitted=" + ",".join(submitted), flush=True)
    if len(submitted) == 2:
        wait_for("both jobs in squeue", lambda: set(submitted) <= queue())
    print("queued=" + ",".join(sorted(set(submitted) & queue())), flush=True)

    cluster.close()
    wait_for("the jobs to leave the queue", lambda: not set(submitted) & queue(), secs=30)
    print("left=" + ",".join(sorted(set(submitted) & queue())), flush=True)
    print("all-done", flush=True)
    return 0 if len(submitted) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
