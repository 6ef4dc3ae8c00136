"""Interleaved 1F1B as pure code: ``v`` chunks of the model per worker (Narayanan et al.,
"Efficient Large-Scale Language Model Training on GPU Clusters", 2021).

The model is cut into ``p * v`` virtual stages placed round-robin: virtual stage
``k = c * p + w`` is chunk ``c`` of worker ``w``, so a micro-batch crosses every worker
``v`` times, the last worker passing it back to the first between chunks. Each worker runs
one list of actions ``(kind, micro_batch, virtual_stage)``, with the kinds of
``disthook.distributed.schedule`` (``recv_act``, ``forward``, ``send_act``, ``recv_grad``,
``backward``, ``send_grad``) on the virtual stage named.

A worker takes micro-batches in groups of ``p``: the group's forwards on chunk 0, then on
chunk 1, ..., and its backwards from the last chunk down. Worker ``w`` first runs
``2 (p - 1 - w) + (v - 1) p`` forwards (all of them when that is more; ``p - 1 - w`` when
``v = 1``, which is 1F1B), then one forward
and one backward in turn, then the backwards left. With equal stages the fill and drain
take (p - 1)(F + B) / v, where F and B are a worker's whole share of a micro-batch's
forward and backward: 1F1B's bubble divided by ``v``, for ``v`` times as many messages.
``m`` must be a multiple of ``p``.
"""
from __future__ import annotations

from disthook.distributed.schedule import ScheduleError

__all__ = ["interleaved_1f1b", "simulate_interleaved", "virtual_stages"]

Action = tuple[str, int, int]  # (kind, micro-batch, virtual stage)


def _check(p: int, m: int, v: int) -> None:
    for name, n in (("stages", p), ("micro-batches", m), ("chunks per worker", v)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"an interleaved schedule needs a positive int of {name}, "
                             f"got {n!r}")
    if m % p:
        raise ValueError(f"interleaved 1F1B takes micro-batches in groups of the {p} "
                         f"workers: {m} micro-batches is not a multiple of {p} (use "
                         f"{m + p - m % p} or {m - m % p or p})")


def virtual_stages(p: int, v: int) -> list[list[int]]:
    """The virtual stages each of ``p`` workers holds: worker ``w`` holds ``w``, ``w + p``,
    ``w + 2p``, ..."""
    return [[c * p + w for c in range(v)] for w in range(p)]


def _unit(u: int, w: int, p: int, v: int, backward: bool) -> list[Action]:
    """The actions of the ``u``-th (chunk, micro-batch) worker ``w`` forwards (or
    backwards): groups of ``p`` micro-batches, chunk by chunk (backwards: last chunk
    first)."""
    group, within = divmod(u, p * v)
    chunk, mb = within // p, group * p + within % p
    if backward:
        k = (v - 1 - chunk) * p + w
        return ([("recv_grad", mb, k)] if k < p * v - 1 else []) + [("backward", mb, k)] + (
            [("send_grad", mb, k)] if k > 0 else [])
    k = chunk * p + w
    return ([("recv_act", mb, k)] if k > 0 else []) + [("forward", mb, k)] + (
        [("send_act", mb, k)] if k < p * v - 1 else [])


def interleaved_1f1b(p: int, m: int, v: int) -> list[list[Action]]:
    """Each worker's list of actions for ``p`` workers, ``m`` micro-batches and ``v``
    chunks per worker (v = 1 is 1F1B)."""
    _check(p, m, v)
    total, devices = m * v, []
    for w in range(p):
        # (v = 1 is 1F1B itself: p - 1 - w forwards first)
        warmup = min(2 * (p - 1 - w) + (v - 1) * p if v > 1 else p - 1 - w, total)
        actions = [a for u in range(warmup) for a in _unit(u, w, p, v, False)]
        for i in range(total - warmup):
            actions += _unit(warmup + i, w, p, v, False) + _unit(i, w, p, v, True)
        for u in range(total - warmup, total):
            actions += _unit(u, w, p, v, True)
        devices.append(actions)
    return devices


def simulate_interleaved(devices: list[list[Action]], v: int, m: int) -> list[tuple]:
    """Run the workers' lists against each other (a send never blocks, a receive waits for
    its send); the global order of ``(worker, action)``. ``ScheduleError`` on a deadlock, an
    action out of dependency order, on a virtual stage another worker holds, repeated or
    missing."""
    p = len(devices)
    stages = p * v
    sent: set[tuple[str, int, int]] = set()  # ("act"/"grad", to virtual stage, mb)
    done: set[Action] = set()
    pos, order = [0] * p, []
    needs = {"forward": lambda k, mb: [("recv_act", mb, k)] if k > 0 else [],
             "send_act": lambda k, mb: [("forward", mb, k)],
             "backward": lambda k, mb: [("forward", mb, k)] + (
                 [("recv_grad", mb, k)] if k < stages - 1 else []),
             "send_grad": lambda k, mb: [("backward", mb, k)],
             "recv_act": lambda k, mb: [], "recv_grad": lambda k, mb: []}
    while any(pos[w] < len(devices[w]) for w in range(p)):
        progressed = False
        for w in range(p):
            while pos[w] < len(devices[w]):
                action = kind, mb, k = devices[w][pos[w]]
                if k % p != w or not 0 <= k < stages or not 0 <= mb < m or kind not in needs:
                    raise ScheduleError(f"worker {w}: {action} is not an action of its own "
                                     f"virtual stages {virtual_stages(p, v)[w]}")
                if action in done:
                    raise ScheduleError(f"worker {w}: {action} appears twice")
                if kind.startswith("recv_") and (kind[5:], k, mb) not in sent:
                    break
                for need in needs[kind](k, mb):
                    if need not in done:
                        raise ScheduleError(f"worker {w}: {action} before {need}")
                if kind == "send_act":
                    sent.add(("act", k + 1, mb))
                elif kind == "send_grad":
                    sent.add(("grad", k - 1, mb))
                done.add(action)
                order.append((w, action))
                pos[w] += 1
                progressed = True
        if not progressed:
            waiting = {w: devices[w][pos[w]] for w in range(p) if pos[w] < len(devices[w])}
            raise ScheduleError(f"deadlock: every unfinished worker waits ({waiting})")
    for k in range(stages):
        for mb in range(m):
            for kind in ("forward", "backward"):
                if (kind, mb, k) not in done:
                    raise ScheduleError(f"virtual stage {k} never runs {kind} of micro-batch "
                                     f"{mb}")
    return order
