"""``disthook bench tenancy``: one published model, many clients at once.

A 2-stage MLP (512-1024-1024-10, batch 64) is deployed once and published; 1, 2, 4 and 8
client processes attach to it and each runs forward and backward calls as fast as it can,
all starting together. The figure is the aggregate throughput (calls per second, all clients
together) against one client's, in the same run: with 2 stages the stages can serve two
clients' calls at once (stage 0 one client's forward while stage 1 another's), so with the
cores for it the aim is 1.6x one client's throughput at 4 clients. On a 2-core machine the
client processes and the workers share the cores: the ratio then says how much the
interleaving costs, not how far it scales.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

CLIENTS = (1, 2, 4, 8)
SIZES, BATCH = (512, 1024, 1024, 10), 64

CLIENT = textwrap.dedent("""
    import os, sys, time
    import disthook as torch
    from disthook.distributed import connect

    address, name, calls, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    cluster = connect(address)
    model = cluster.attach(name)
    x = torch.randn(%d, %d)
    for _ in range(2):  # warm-up
        model(x).sum().backward()
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    for _ in range(calls):
        model(x).sum().backward()
    print("done", time.time(), flush=True)
    model.close()
    cluster.close()
""" % (BATCH, SIZES[0]))


def run(quick: bool = False) -> list[dict]:
    import disthook as torch
    from disthook import nn
    from disthook.distributed import local_cluster

    calls = 10 if quick else 40
    torch.manual_seed(0)
    layers = []
    for a, b in zip(SIZES, SIZES[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    rows = []
    with tempfile.TemporaryDirectory() as scratch, local_cluster(workers=2) as cluster:
        script = os.path.join(scratch, "client.py")
        with open(script, "w") as f:
            f.write(CLIENT)
        remote = cluster.deploy(nn.Sequential(*layers[:-1]), stages=2, name="bench-tenancy")
        env = dict(os.environ)
        for n in CLIENTS:
            go = os.path.join(scratch, f"go-{n}")
            procs = [subprocess.Popen([sys.executable, script, cluster.address,
                                       "bench-tenancy", str(calls), go],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env) for _ in range(n)]
            try:
                for p in procs:
                    line = p.stdout.readline().strip()
                    if line != "ready":
                        raise RuntimeError(f"a tenancy client did not start: {line!r} "
                                           f"{p.stderr.read()[-2000:]}")
                started = time.time()
                open(go, "w").close()
                ends = []
                for p in procs:
                    out, err = p.communicate(timeout=600)
                    if p.returncode != 0:
                        raise RuntimeError(f"a tenancy client failed: {err[-2000:]}")
                    ends.append(float(out.split()[-1]))
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            wall = max(ends) - started
            rows.append({"suite": "tenancy", "clients": n, "calls": n * calls, "wall_s": wall,
                         "calls_per_s": n * calls / wall})
        remote.close()
    base = rows[0]["calls_per_s"]
    for r in rows:
        r["vs_one_client"] = r["calls_per_s"] / base
        r["cores"] = os.cpu_count()
    return rows


def print_rows(rows: list[dict]) -> None:
    if not rows:
        return
    sizes = "-".join(str(s) for s in SIZES)
    print(f"tenancy: one 2-stage MLP {sizes} (batch {BATCH}) published, N client processes "
          f"attached, forward+backward calls; {rows[0]['cores']} cores here")
    print(f"{'clients':>7} {'calls':>6} {'calls/s':>9} {'vs 1 client':>12}")
    for r in rows:
        print(f"{r['clients']:>7} {r['calls']:>6} {r['calls_per_s']:>9.1f} "
              f"{r['vs_one_client']:>11.2f}x")
    four = next((r for r in rows if r["clients"] == 4), None)
    if four is not None:
        print(f"4 clients: {four['vs_one_client']:.2f}x one client's throughput (aim, with "
              "the cores: >= 1.6x)")
