"""What a researcher writes to run a Python function on the cluster with submitit: one
function call (`one`) or a job array of three (`array`). Prints each result on its own line."""

import os
import socket
import sys

import submitit


def where(tag):
    """Runs on the node: says where it ran and what it could see."""
    return "{}:host={}:ssh={}:job={}".format(
        tag,
        socket.gethostname(),
        os.path.exists(os.path.expanduser("~/.ssh")),
        os.environ.get("SLURM_JOB_ID", "none"),
    )


def main():
    mode = sys.argv[1]
    executor = submitit.AutoExecutor(folder="submitit-logs/%j")
    print("executor=" + executor.cluster, flush=True)
    # A whole number of GB is written `--mem=1GB`, a fraction in MB: `--mem=102MB`.
    mem_gb = 1 if mode == "one" else 0.1
    executor.update_parameters(slurm_partition="debug", timeout_min=5, mem_gb=mem_gb, name="asb-" + mode)
    if mode == "one":
        job = executor.submit(where, "one")
        print("submitted=" + str(job.job_id), flush=True)
        print("result=" + job.result(), flush=True)
    else:
        jobs = executor.map_array(where, ["a0", "a1", "a2"])
        print("submitted=" + ",".join(str(j.job_id) for j in jobs), flush=True)
        for job in jobs:
            print("result=" + job.result(), flush=True)
    print("all-done", flush=True)


if __name__ == "__main__":
    main()
