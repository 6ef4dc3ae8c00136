"""A parameter's gradient held for a later call's backward, so that it arrives once, summed.

In one process a parameter that several calls of one forward use (a module called twice, an
embedding tied to the output head) gets one gradient per backward: the sum of every use's.
Its tensor hooks see that sum once, its ``.grad`` grows once, its post-accumulate hooks fire
once. On a deployed model each call is a context of its own on the worker holding the
parameter, and the client's backward runs their backwards one after another. So the client
tells each worker, with the first call's backward that reaches it, which calls of the same
backward are still to run there (``hold``: its backward's id and their contexts); the next
requests name only the backward, and the stage counts the calls off as they come. While a
call's backward runs:

- a parameter that a call still to come reaches too keeps this call's gradient here (added
  to what earlier calls kept): no hook sees it and ``.grad`` stays as it is;
- a parameter that no call still to come reaches gets what was kept added to this call's
  gradient before its hooks run: the last use gives the sum, in the order one process adds
  it;
- what was kept for a parameter that neither this call nor any still to come reaches (no
  gradient flowed there after all) is given to the parameter once this call's backward is
  done, as one process gives it when its last use is done.

Changes are made to a copy for each run of the pass and kept once the pass is final (a pass
may run again when a client hook's answer asks for it: workers/speculation.py). What a
backward that never finished left is dropped once none of its calls still to come is alive:
the parameter's ``.grad`` then stays as one process leaves it when a backward fails halfway.
"""
from __future__ import annotations

import weakref

import disthook
from disthook.autograd.graph import AccumulateGrad, gradient_edge, walk

__all__ = ["Held", "plan"]

# a context's graph -> ids of the stage's parameters it reaches (graphs do not change)
_REACH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def reaches(context, params: dict) -> frozenset:
    """Ids of the parameters among ``params`` (id -> parameter) whose accumulator the
    graph of ``context`` leads to."""
    found = _REACH.get(context)
    if found is not None:
        return found
    outputs = context.output if isinstance(context.output, list) else [context.output]
    starts = [gradient_edge(o)[0] for o in outputs
              if isinstance(o, disthook.Tensor) and o.requires_grad]
    found = _REACH[context] = frozenset(
        id(node.variable) for node in walk(starts)
        if type(node) is AccumulateGrad and id(node.variable) in params)
    return found


class Held:
    """What one backward of one client left on a stage: parameter id -> (parameter, summed
    gradient) kept for calls still to come, those calls' contexts with the parameters each
    reaches, and per parameter how many of them reach it."""

    def __init__(self, grads: dict, pending: dict, counts: dict):
        self.grads, self.pending, self.counts = grads, pending, counts


class Pass:
    """One run of a call's backward: given to ``engine.holding_leaves``."""

    def __init__(self, kept: dict, later: frozenset):
        self.kept = dict(kept)  # a copy: kept only when the pass is final
        self.later = later
        self.leaves = later | set(kept)

    def take(self, leaf, grads: list) -> list | None:
        pid = id(leaf)
        g = grads[0]
        before = self.kept.get(pid)
        if pid in self.later:  # a later call brings more: keep this call's part
            if g is not None:
                self.kept[pid] = (leaf, g if before is None else before[1] + g)
            return None
        if before is None:
            return grads
        del self.kept[pid]
        return [before[1] if g is None else before[1] + g]

    def flush(self) -> None:
        """Give each parameter that no later call reaches what was kept for it."""
        for pid in [pid for pid in self.kept if pid not in self.later]:
            leaf, g = self.kept.pop(pid)
            disthook.autograd.backward([leaf], [g])


class Plan:
    """The holding of one call's backward on stage ``st``: ``begin()`` before each run of
    the pass, ``commit()`` once the pass is final."""

    def __init__(self, st, key: tuple, kept: dict, pending: dict, counts: dict):
        self.st, self.key, self.kept = st, key, kept
        self.pending, self.counts = pending, counts
        self.later = frozenset(pid for pid, n in counts.items() if n > 0)
        self.current: Pass | None = None

    def begin(self) -> Pass:
        self.current = Pass(self.kept, self.later)
        return self.current

    def commit(self) -> None:
        if self.current is None:
            return
        if self.current.kept or self.pending:
            self.st.held[self.key] = Held(self.current.kept, self.pending, self.counts)
        else:
            self.st.held.pop(self.key, None)


def plan(state, st, client: bytes, msg) -> Plan | None:
    """The holding a backward request asks for on stage ``st`` (None: none). Drops what this
    client's backwards that ended without their later calls left."""
    hold = msg.get("hold")
    if st.held:
        for key in [k for k, held in st.held.items() if k[0] == client and (
                hold is None or k[1] != hold["task"]) and not any(
                state.context(st.model, client, c) is not None for c in held.pending)]:
            del st.held[key]
    if hold is None or not msg.get("accumulate", True):
        return None
    key = (client, hold["task"])
    held = st.held.get(key)
    if hold.get("later") is not None:  # the calls still to come here, listed
        params = {id(p): p for p in st.params if p.requires_grad}
        pending, counts = {}, {}
        for ctx in hold["later"]:
            context = state.context(st.model, client, ctx)
            if context is not None:
                pending[ctx] = reach = reaches(context, params)
                for pid in reach:
                    counts[pid] = counts.get(pid, 0) + 1
    elif held is None:
        return None  # nothing listed here for this backward: the call runs as it is
    else:  # one of the calls listed: it is no longer to come (whether its pass ends well
        # or not: one that fails fails the client's backward)
        pending, counts = held.pending, held.counts
        for pid in pending.pop(msg.ctx, ()):
            counts[pid] -= 1
    kept = held.grads if held is not None else {}
    if not kept and not pending:
        st.held.pop(key, None)
        return None
    return Plan(st, key, kept, pending, counts)
