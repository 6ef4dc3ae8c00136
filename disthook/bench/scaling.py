"""``disthook bench scaling``: how our overhead grows with the number of workers.

A model of 16 small layers (Linear(64, 64) + ReLU, batch 32) is trained with ``train_step``
on 1, 2, 4 and 8 workers, one stage each, m = 4 micro-batches under 1F1B. On 2 cores the
processes oversubscribe the machine, so the step time says little about speed; what is
measured is the growth of what we add: the step time, the coordinator's CPU time per step
(it only keeps the registry: it should not grow with the steps), and the messages every
process decodes per step, against the model of them:

    per step, p stages and m micro-batches:  p train_step requests (which carry the
    optimizer's zero_grad) + 2m(p - 1) pipeline messages (activations forward, gradients
    back) + p optimizer step requests decoded by the workers, and 2p replies decoded by the
    client.
"""
from __future__ import annotations

import copy
import statistics
import time

from disthook.bench.timing import cpu_seconds

WORKERS = (1, 2, 4, 8)
LAYERS, WIDTH, BATCH, MICRO = 16, 64, 32, 4


def expected_messages(p: int, m: int) -> dict[str, int]:
    """The model above: messages decoded per step by the workers and by the client."""
    return {"workers": p + 2 * m * (p - 1) + p, "client": 2 * p}


def run(quick: bool = False) -> list[dict]:
    import disthook as torch
    from disthook import nn, wire
    from disthook.distributed import DistributedOptimizer, local_cluster
    from disthook.service.rpc import Peer

    steps = 10 if quick else 40
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    net = nn.Sequential(*layers)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    rows = []
    for n in WORKERS:
        with local_cluster(workers=n) as cluster:
            remote = cluster.deploy(copy.deepcopy(net), stages=n, chunks=MICRO, schedule="1f1b")
            opt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.01)

            def step(remote=remote, opt=opt):
                opt.zero_grad()
                remote.train_step(x, y, nn.functional.mse_loss)
                opt.step()

            def counts():
                total = 0
                for w in cluster.workers():
                    with Peer(w.address) as peer:
                        total += peer.request("status", timeout=30)["result"]["messages"]
                return total

            for _ in range(3):
                step()  # warm-up
            coordinator = cluster._processes[0].pid
            cpu0, seen0, mine0 = cpu_seconds(coordinator), counts(), wire.decoded_count()
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            mine = wire.decoded_count() - mine0  # before the status replies of the count below
            seen = counts() - seen0 - n  # less the n status requests of the first count
            cpu = cpu_seconds(coordinator) - cpu0
            expected = expected_messages(n, MICRO)
            rows.append({
                "suite": "scaling", "workers": n, "step_s": statistics.median(times),
                "coordinator_cpu_per_step_s": cpu / steps,
                "worker_messages_per_step": seen / steps,
                "client_messages_per_step": mine / steps,
                "model_worker_messages": expected["workers"],
                "model_client_messages": expected["client"],
            })
            remote.close()
    return rows


def print_rows(rows: list[dict]) -> None:
    if not rows:
        return
    print(f"scaling: {LAYERS} x Linear({WIDTH}, {WIDTH}) + ReLU, batch {BATCH}, m={MICRO} 1F1B, "
          "one stage per worker (2 cores: the processes oversubscribe the machine)")
    print(f"{'workers':>7} {'step':>10} {'coordinator CPU/step':>21} "
          f"{'worker msgs/step (model)':>25} {'client msgs/step (model)':>25}")
    for r in rows:
        print(f"{r['workers']:>7} {r['step_s'] * 1e3:>8.2f}ms "
              f"{r['coordinator_cpu_per_step_s'] * 1e6:>18.0f} us "
              f"{r['worker_messages_per_step']:>17.1f} ({r['model_worker_messages']:>3}) "
              f"{r['client_messages_per_step']:>17.1f} ({r['model_client_messages']:>3})")
    base = rows[0]
    growth = [r["coordinator_cpu_per_step_s"] / max(base["coordinator_cpu_per_step_s"], 1e-9)
              for r in rows]
    linear = all(g <= r["workers"] / base["workers"] * 1.5 + 0.5
                 for g, r in zip(growth, rows))
    verdict = "at most linearly" if linear else "FASTER than linearly"
    print(f"coordinator CPU per step grows {verdict} with workers "
          f"(x{', x'.join(f'{g:.1f}' for g in growth)})")
