"""The Slurm script, run for real with stand-ins for ``srun`` and ``scontrol`` that start
the tasks on this machine: coordinator, two workers and the client script all come up, and
the client trains on the cluster the script made."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from clusters import free_port

pytestmark = pytest.mark.timeout(180)

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "disthook.sbatch"

SRUN = """#!/usr/bin/env bash
# stand-in for srun: start --ntasks copies of the command here, SLURM_PROCID set
n=1
while [[ "$1" == --* ]]; do
    case "$1" in --ntasks=*) n="${1#--ntasks=}" ;; esac
    shift
done
pids=()
for ((i = 0; i < n; i++)); do SLURM_PROCID=$i "$@" & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' TERM INT
wait
"""

CLIENT = textwrap.dedent("""
    import copy
    import os
    import disthook as torch
    from disthook import nn
    from disthook.distributed import connect

    with connect(os.environ["DISTHOOK_COORDINATOR"], timeout=10) as cluster:
        cluster.wait_for_workers(2, timeout=60)
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        remote = cluster.deploy(copy.deepcopy(net), stages=2)
        x = torch.randn(3, 4)
        with torch.no_grad():
            print("difference", float((remote(x) - net(x)).abs().max()))
        print("workers", sorted(w.id for w in cluster.workers()))
        remote.close()
""")


def test_the_sbatch_script_starts_a_cluster_and_runs_the_client(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "scontrol").write_text("#!/usr/bin/env bash\necho 127.0.0.1\n")
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "client.py").write_text(CLIENT)
    port = free_port()
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               SLURM_JOB_NODELIST="node1", SLURM_NTASKS="2", DISTHOOK_PORT=str(port),
               DISTHOOK_PYTHON=sys.executable, DISTHOOK_ADVERTISE="127.0.0.1")
    job = subprocess.Popen(["bash", str(SCRIPT), str(tmp_path / "client.py")], env=env,
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        out, err = job.communicate(timeout=120)
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)  # whatever the job left behind
        except ProcessLookupError:
            pass
        job.wait()
    assert job.returncode == 0, out + err
    # two roles' announcements may interleave on the shared pipe: keep the client's lines
    lines = [line for line in out.splitlines() if line and "disthook " not in line]
    assert lines[0] == "difference 0.0", out + err  # the roles announce themselves too
    host = socket.gethostname()
    assert lines[1] == f"workers ['{host}-0', '{host}-1']", out + err
