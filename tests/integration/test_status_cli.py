"""``disthook status`` as a user reads it: the table (columns as wide as their content,
memory and open graphs filled in), ``--json`` (one document: the coordinator and each
worker's own status), ``--watch`` (refreshed until Ctrl-C), and ``launch``'s startup table."""
import json
import signal
import subprocess
import sys

import pytest
from clusters import free_port

import disthook as torch
from disthook import nn
from disthook.cli import main

pytestmark = pytest.mark.timeout(120)

CLUSTER_WORKERS = 2
CLI = [sys.executable, "-m", "disthook.cli"]


def status_here(capsys, *options: str) -> str:
    """What ``disthook status OPTIONS`` prints, run through the CLI's main in this process
    (the command's start-up as a process: the tests with --watch and a closed pipe below)."""
    code = main(["status", *options])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.fixture
def deployed(cluster):
    """A 2-stage model with a forward graph open on both stages."""
    remote = cluster.deploy(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)),
                            stages=2)
    out = remote(torch.randn(2, 8))
    yield remote
    out.sum().backward()
    remote.close()


def columns_line_up(lines: list[str]) -> None:
    """Two spaces before every column's start in every row: no cell spills into the next
    column (as 'stage 0 of Sequential-19d129a5 0,1' did)."""
    header = lines[0]
    starts = [header.index(name) for name in header.split()]
    for row in lines[1:]:
        for start in [s for s in starts[1:] if s < len(row)]:
            assert row[start - 2:start] == "  ", (header, row)  # a gap before every column


def test_status_table_fills_memory_and_graphs_and_sizes_columns(cluster, deployed, capsys):
    out = status_here(capsys, "--coordinator", cluster.address)
    lines = out.splitlines()
    assert lines[1].split() == ["worker", "address", "alive", "beat", "memory", "graphs",
                                "kept", "peer-out", "stage", "neighbours", "modules",
                                "params"]
    assert len(lines) == 4 and "?" not in "".join(lines[2:]), out
    columns_line_up(lines[1:])
    stage_at = lines[1].index("stage")
    for stage, worker, _ in deployed.workers():
        (row,) = [r for r in lines[2:] if r.startswith(worker)]
        assert row[stage_at:].startswith(f"stage {stage} of "), row
        assert row.split()[4:7] == [row.split()[4], "MiB", "1"], row  # memory, one graph


def test_status_json_is_the_coordinator_and_each_workers_own_status(cluster, deployed,
                                                                    capsys):
    status = json.loads(status_here(capsys, "--json", "--coordinator", cluster.address))
    assert status["coordinator"]["address"] == cluster.address
    # every worker of the deployment, in the coordinator's order (registration, not stage)
    assert sorted(w["id"] for w in status["workers"]) == sorted(
        w for _, w, _ in deployed.workers())
    for w in status["workers"]:
        assert w["alive"] and w["error"] is None
        own = w["own"]
        assert own["id"] == w["id"] and own["memory"] > 0 and own["contexts"] == 1
        assert own["waits"] == 0 and own["queued"] == 0
        (stats,) = own["stage_stats"].values()
        assert stats["parameters"] > 0


def test_status_watch_refreshes_until_ctrl_c(cluster, deployed):
    watch = subprocess.Popen([*CLI, "status", "--watch", "--every", "0.2", "--coordinator",
                              cluster.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        lines = []
        while sum(line.startswith("coordinator ") for line in lines) < 4:  # 3 whole blocks
            line = watch.stdout.readline()
            assert line, watch.stderr.read()
            lines.append(line.rstrip("\n"))
        watch.send_signal(signal.SIGINT)
        assert watch.wait(30) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    blocks = [lines[i:i + 4] for i, line in enumerate(lines)
              if line.startswith("coordinator ")][:3]
    assert all(block[0].endswith("(every 0.2 s; Ctrl-C stops)") for block in blocks)
    assert blocks[0][1].split() == ["worker", "alive", "beat", "memory", "graphs", "waits",
                                    "queued", "calls/s", "kept", "peer-out", "stage",
                                    "neighbours", "modules", "params"]
    assert "\x1b" not in "".join(lines)  # not a terminal: blocks one after another
    for block in blocks:
        columns_line_up(block[1:])
    # graphs, waits, queued, calls/s (after "yes 0.3s 48 MiB"): a rate from the second on
    assert [row.split()[5:9] for row in blocks[0][2:]] == [["1", "0", "0", "?"]] * 2
    for row in blocks[2][2:]:
        graphs, waits, queued, rate = row.split()[5:9]
        assert (graphs, waits, queued) == ("1", "0", "0") and float(rate) >= 0, row


def test_status_watch_json_prints_a_document_per_line(cluster, deployed):
    watch = subprocess.Popen([*CLI, "status", "--watch", "--json", "--every", "0.2",
                              "--coordinator", cluster.address], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        documents = [json.loads(watch.stdout.readline()) for _ in range(2)]
        watch.send_signal(signal.SIGINT)
        assert watch.wait(30) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert all(w["calls_per_s"] is None for w in documents[0]["workers"])
    assert all(w["calls_per_s"] >= 0 for w in documents[1]["workers"])


def test_launch_startup_table_shows_memory_and_graphs():
    address = f"tcp://127.0.0.1:{free_port()}"
    launch = subprocess.Popen([*CLI, "launch", "--workers", "2", "--bind", address,
                               "--log-level", "WARNING"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        lines = [launch.stdout.readline().rstrip("\n") for _ in range(5)]
        launch.send_signal(signal.SIGINT)
        assert launch.wait(30) == 0
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    assert lines[0].startswith(f"disthook cluster up: coordinator {address}, 2 worker(s)")
    assert lines[1].startswith(f"coordinator {address}")
    columns_line_up(lines[2:])
    for row in lines[3:5]:
        cells = row.split()
        assert cells[2] == "yes" and cells[5] == "MiB" and cells[6] == "0", row
        assert "?" not in row, row


@pytest.mark.parametrize("options", [["--json"], []])
def test_status_into_a_reader_that_went_away_ends_quietly(cluster, options):
    """`disthook status --json | head -1`: no BrokenPipeError traceback, exit status 0."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        run = subprocess.run([*CLI, "status", "--coordinator", cluster.address, *options],
                             stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
                             check=False)
    finally:
        os.close(write_end)
    assert (run.returncode, run.stderr) == (0, "")
