"""Pipeline schedules as pure code: what each stage does, in order, for one training step.

A schedule for ``p`` stages and ``m`` micro-batches is one list of actions per stage. An
action is a pair ``(kind, micro_batch)`` with kind one of:

- ``recv_act``  wait for the activation of the micro-batch from the previous stage
- ``forward``   run the stage on it (the last stage also computes the micro-batch's loss)
- ``send_act``  pass the stage's output to the next stage
- ``recv_grad`` wait for the gradient of the stage's output from the next stage
- ``backward``  run the stage's backward for the micro-batch (from the loss on the last stage)
- ``send_grad`` pass the gradient of the stage's input to the previous stage

The first stage takes its inputs from the client and the last one computes the loss, so
they have no ``recv_act`` / ``send_act`` and ``recv_grad`` respectively.

- ``weight``    (``zb-h1`` only) the weights' gradients of the micro-batch, whose
  ``backward`` computed only the gradients that flow on (disthook.autograd.split)
- ``weight_batch`` (``zb-batched`` only) the same, taken together with the ``weight_batch``
  actions next to it: each weight gets their micro-batches' gradients summed, as one product
  over their rows where nothing watches them one by one (``split.run_together``)

``gpipe``: every forward, then every backward. ``one_f_one_b``: stage ``s`` runs
``min(p - 1 - s, m)`` forwards to fill the pipeline, then alternates one forward and one
backward, then drains the remaining backwards; a stage never holds more than ``p - s``
micro-batches' activations (GPipe holds ``m``). Both have the bubble (p-1)/(m+p-1).

``zero_bubble_h1`` (ZB-H1) splits each backward into B (the input's gradient, what the
previous stage waits for) and W (the weights' gradients): 1F1B's order of forwards and
B's, with stage ``s`` running the W of micro-batch ``i - s`` after the B of ``i``, and its
last ``s + 1`` W's after its last B. The B's travel back without waiting behind W's and the
W's fill what was 1F1B's drain: the bubble is (p-1)(F+B-W) against 1F1B's (p-1)(F+B+W), a
third of it when the three cost alike. A stage holds at most ``p`` micro-batches whose W has
not run (1F1B's first stage holds ``p`` activations).

``zero_bubble_batched`` (zb-batched) splits each backward more finely: only the products
that give the weights' gradients wait (``backward_split(shallow=True)``), and they all wait
for the end of the step, where each weight's gradient over the micro-batches is one product
over their rows stacked. At micro-batch sizes that product is the slow one (a 1024 x 1024
gradient from 32 rows), and one over 512 rows costs about half as much per row. The price:
a stage holds each micro-batch's saved inputs of those products until the end of the step
(GPipe's memory for them; the rest of each backward's memory goes when its B is done), and
the bubble is 1F1B's for the B's plus the last stage's batched W.

``simulate`` runs the lists against each other (sends never block, a receive waits for its
send) and raises ``ScheduleError`` on a deadlock, a missing or repeated action, or a
dependency out of order; ``in_flight`` gives the largest number of micro-batches a stage
holds at once.
"""
from __future__ import annotations

__all__ = ["SCHEDULES", "ScheduleError", "WEIGHT_KINDS", "bubble_fraction", "gpipe",
           "in_flight", "one_f_one_b", "schedule", "simulate", "zero_bubble_batched",
           "zero_bubble_h1"]

Action = tuple[str, int]
WEIGHT_KINDS = ("weight", "weight_batch")  # a split backward's deferred part


class ScheduleError(ValueError):
    """A schedule that cannot run: deadlock, missing or repeated work, broken dependency."""


def _check(p: int, m: int) -> None:
    for name, v in (("stages", p), ("micro-batches", m)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"a schedule needs a positive int of {name}, got {v!r}")


def _forward(s: int, p: int, mb: int) -> list[Action]:
    return ([("recv_act", mb)] if s > 0 else []) + [("forward", mb)] + (
        [("send_act", mb)] if s < p - 1 else [])


def _backward(s: int, p: int, mb: int) -> list[Action]:
    return ([("recv_grad", mb)] if s < p - 1 else []) + [("backward", mb)] + (
        [("send_grad", mb)] if s > 0 else [])


def gpipe(p: int, m: int) -> list[list[Action]]:
    """All forwards, then all backwards (in micro-batch order), on every stage."""
    _check(p, m)
    return [[a for mb in range(m) for a in _forward(s, p, mb)]
            + [a for mb in range(m) for a in _backward(s, p, mb)] for s in range(p)]


def one_f_one_b(p: int, m: int) -> list[list[Action]]:
    """Warm-up forwards, then one forward / one backward in turn, then the last backwards."""
    _check(p, m)
    stages = []
    for s in range(p):
        warmup = min(p - 1 - s, m)
        actions = [a for mb in range(warmup) for a in _forward(s, p, mb)]
        for i in range(m - warmup):
            actions += _forward(s, p, warmup + i) + _backward(s, p, i)
        for mb in range(m - warmup, m):
            actions += _backward(s, p, mb)
        stages.append(actions)
    return stages


def zero_bubble_h1(p: int, m: int) -> list[list[Action]]:
    """1F1B's forwards and input-gradient backwards, each W ``s`` micro-batches behind its
    B on stage ``s``, the last ``s + 1`` W's at the end."""
    _check(p, m)
    stages = []
    for s in range(p):
        warmup = min(p - 1 - s, m)
        actions = [a for mb in range(warmup) for a in _forward(s, p, mb)]
        weights = 0  # W's run so far, in micro-batch order
        for i in range(m):
            if warmup + i < m:
                actions += _forward(s, p, warmup + i)
            actions += _backward(s, p, i)
            if i - s >= weights and i < m - 1:
                actions.append(("weight", weights))
                weights += 1
        actions += [("weight", mb) for mb in range(weights, m)]
        stages.append(actions)
    return stages


def zero_bubble_batched(p: int, m: int) -> list[list[Action]]:
    """1F1B's forwards and input-gradient backwards, then every micro-batch's W at the end,
    taken together."""
    return [[a for a in actions if a[0] != "weight"] + [("weight_batch", mb) for mb in range(m)]
            for actions in zero_bubble_h1(p, m)]


SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b, "zb-h1": zero_bubble_h1,
             "zb-batched": zero_bubble_batched}


def schedule(name: str, p: int, m: int) -> list[list[Action]]:
    """The schedule ``name`` ("gpipe", "1f1b", "zb-h1" or "zb-batched") for ``p`` stages and
    ``m`` micro-batches."""
    if name not in SCHEDULES:
        raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {name!r}")
    return SCHEDULES[name](p, m)


def simulate(stages: list[list[Action]], m: int) -> list[tuple[int, Action]]:
    """Run the stages' lists against each other; the global order of the actions run."""
    p = len(stages)
    sent: set[tuple[str, int, int]] = set()  # ("act"/"grad", to stage, micro-batch)
    done: list[set[Action]] = [set() for _ in range(p)]
    pos, order = [0] * p, []
    while any(pos[s] < len(stages[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while pos[s] < len(stages[s]):
                kind, mb = action = stages[s][pos[s]]
                if not (isinstance(mb, int) and 0 <= mb < m):
                    raise ScheduleError(f"stage {s}: {action} names no micro-batch of {m}")
                if action in done[s]:
                    raise ScheduleError(f"stage {s}: {action} appears twice")
                if kind == "recv_act" and ("act", s, mb) not in sent:
                    break
                if kind == "recv_grad" and ("grad", s, mb) not in sent:
                    break
                _requires(s, action, done[s], p)
                if kind == "send_act":
                    sent.add(("act", s + 1, mb))
                elif kind == "send_grad":
                    sent.add(("grad", s - 1, mb))
                done[s].add(action)
                order.append((s, action))
                pos[s] += 1
                progressed = True
        if not progressed:
            waiting = {s: stages[s][pos[s]] for s in range(p) if pos[s] < len(stages[s])}
            raise ScheduleError(f"deadlock: every unfinished stage waits ({waiting})")
    split = [k for k in WEIGHT_KINDS if any(kind == k for actions in stages
                                            for kind, _ in actions)]
    if len(split) > 1:
        raise ScheduleError(f"a schedule splits its backwards one way, not {split}")
    for s in range(p):
        missing = [a for mb in range(m) for a in _forward(s, p, mb) + _backward(s, p, mb)
                   + [(kind, mb) for kind in split] if a not in done[s]]
        if missing:
            raise ScheduleError(f"stage {s} never runs {missing}")
    return order


def _requires(s: int, action: Action, done: set[Action], p: int) -> None:
    """The actions a stage must have run before ``action``."""
    kind, mb = action
    needs = {
        "forward": [("recv_act", mb)] if s > 0 else [],
        "send_act": [("forward", mb)],
        "recv_grad": [],
        "backward": [("forward", mb)] + ([("recv_grad", mb)] if s < p - 1 else []),
        "send_grad": [("backward", mb)],
        "weight": [("backward", mb)],
        "weight_batch": [("backward", mb)],
        "recv_act": [],
    }.get(kind)
    if needs is None:
        raise ScheduleError(f"stage {s}: unknown action {action}")
    for need in needs:
        if need not in done:
            raise ScheduleError(f"stage {s}: {action} before {need}")


def in_flight(actions: list[Action]) -> int:
    """The most micro-batches a stage holds at once (forwarded, not yet backwarded; under a
    split backward, not yet through their W)."""
    split = any(kind in WEIGHT_KINDS for kind, _ in actions)
    held = peak = 0
    for kind, _ in actions:
        if kind == "forward":
            held += 1
            peak = max(peak, held)
        elif (kind in WEIGHT_KINDS) if split else kind == "backward":
            held -= 1
    return peak


def bubble_fraction(p: int, m: int) -> float:
    """The idle fraction of GPipe and 1F1B with equal stages: (p-1)/(m+p-1)."""
    _check(p, m)
    return (p - 1) / (m + p - 1)
