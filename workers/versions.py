"""Versions of a stage's weights: a call computes with one version from its start to its end.

A write (``load_state_dict``, an in-place parameter method, an optimizer step or load,
alone or riding on a forward) never waits for other clients' calls of the model. When
another client has a call running on the stage, or keeps a forward graph there for its
backward, the write goes to fresh copies of the stage's arrays (copy on write): that
client's call and graph keep the arrays as they were (the old version, pinned to its job or
context), everyone else goes on with the new one. Jobs take turns (``workers/runners.py``),
so the version a job computes with is installed whenever it takes the turn (``enter``). An
old version is freed with its last job or graph (nothing else refers to its arrays).

A client's own calls always see its own writes, as in one process: a deployer's edit made
inside its own forward pre-hook is what that forward computes with.

Across stages: a write that rides on a forward (an optimizer step) travels the pipeline as
the calls do, stage to stage over the same connections, so a call that reached a stage
before the write keeps the version before it there and on every later stage. The write's
forward carries the calls it found on its way (``pins``: client, context, micro-batch);
the stage after keeps the version before its own part of the write for each of them
(``pending``) until that call arrives. A write of its own (``load_state_dict``, an
in-place parameter method, an optimizer step or load outside a forward) does the same on a
chain: the client sends it, all its stages' parts in one ``write`` message, to the first
stage, and each stage runs its parts and passes it on over the connection its calls go on
(``on_write`` in workers/params.py). So a call that left a stage before the write reaches
the next stage before it too (and is kept the old version there, as a call here is), one
still on an earlier stage is among the write's pins, and one that starts after the write
finds it applied everywhere it goes. A call that waits on an earlier stage (for its
client's hook) is also announced to the later stages (``pin``) before it waits, and a
write there keeps the version before it for that call (``announced``). A model whose
forward runs on the client (parts placed over its tree) has no pipeline: its writes go to
each worker by themselves, and its parts' calls are not kept apart from them.
"""
from __future__ import annotations

import time

from disthook import wire
from disthook.service.loop import NO_REPLY

__all__ = ["VersionHandlers", "Versions", "before_write", "carries_write", "note_pins", "upstream_pins"]

PENDING_KEPT = 64  # calls a later stage keeps a version for (announced, not arrived yet)
PENDING_TTL_S = 300.0  # ... dropped after this long (the call failed on its way)


class Versions:
    """The tensors of one stage (parameters and buffers) and which version is installed. A
    version is a tuple of (tensor, array, in-place count): what each tensor holds in it,
    and how often it had been changed in place (autograd's check of saved tensors)."""

    def __init__(self, module) -> None:
        self.module = module
        self.latest: tuple | None = None  # the newest arrays, kept while an old one is in
        self.forks = 0  # writes that went to fresh arrays (for status)
        # (client hex, context, micro-batch) -> (version, when): kept for a call that
        # passed an earlier stage before a write there, until it arrives here
        self.pending: dict[tuple, tuple] = {}
        # (client hex, context, micro-batch) -> when: calls waiting on an earlier stage
        self.announced: dict[tuple, float] = {}
        self.reset()

    def reset(self) -> None:
        """The stage's tensors changed in kind (a buffer registered): take them again."""
        self.enter(None)
        seen: dict[int, object] = {}
        for _, t in [*self.module.named_parameters(), *self.module.named_buffers()]:
            if t is not None:
                seen.setdefault(id(t), t)
        self.tensors = list(seen.values())

    def current(self) -> tuple:
        return tuple((t, t._data, t._vc[0]) for t in self.tensors)

    def enter(self, version: tuple | None) -> None:
        """Install ``version`` (None: the newest) for the job that takes the turn now."""
        if version is None:
            if self.latest is not None:
                _install(self.latest)
                self.latest = None
            return
        if self.latest is None:
            self.latest = self.current()  # what newer jobs left, in place or reassigned
        _install(version)

    def fork(self) -> tuple:
        """Before a write that others' calls must not see: the version they keep (the
        arrays as they are); the write then goes to copies. The newest must be installed."""
        assert self.latest is None, "a write goes to the newest version"
        old = self.current()
        for t in self.tensors:
            t._data = t._data.copy()
        self.forks += 1
        return old


    def keep_for(self, pins, version: tuple, now: float) -> None:
        """Keep ``version`` for the calls ``pins`` names until each arrives (bounded)."""
        for key in [k for k, (_, t) in self.pending.items() if now - t > PENDING_TTL_S]:
            del self.pending[key]
        for pin in pins:
            self.pending.setdefault(tuple(pin), (version, now))
        while len(self.pending) > PENDING_KEPT:
            del self.pending[next(iter(self.pending))]

    def announce(self, pins, now: float) -> None:
        """Calls that wait on an earlier stage: a write here keeps its version for them."""
        for key in [k for k, t in self.announced.items() if now - t > PENDING_TTL_S]:
            del self.announced[key]
        for pin in pins:
            self.announced[tuple(pin)] = now
        while len(self.announced) > PENDING_KEPT:
            del self.announced[next(iter(self.announced))]

    def take(self, client: bytes, ctx, mb) -> tuple | None:
        """The version kept for this call (None: the newest)."""
        if not (self.announced or self.pending):
            return None
        key = (client.hex(), ctx, mb)
        if self.announced:
            self.announced.pop(key, None)
        found = self.pending.pop(key, None) if self.pending else None
        return None if found is None else found[0]


def _install(version: tuple) -> None:
    for t, arr, count in version:
        if t._data is not arr:
            t._data = arr
            t._vc[0] = count


def upstream_pins(job) -> list[tuple]:
    """The calls an earlier stage's write passed, as its forward tells (from a neighbour
    stage only: what a client writes there is ignored); malformed entries are dropped."""
    pins = job.msg.get("pins") if job.msg.type in ("forward", "write") else None
    if not pins or job.sender == job.client:
        return []
    return _pins(pins)


def _pins(pins) -> list[tuple]:
    """Well-formed (client hex, context, micro-batch) entries of ``pins``, at most a few."""
    return [tuple(p) for p in (pins or ())[:PENDING_KEPT]
            if isinstance(p, (list, tuple)) and len(p) == 3 and isinstance(p[0], str)
            and (p[1] is None or isinstance(p[1], str))
            and (p[2] is None or isinstance(p[2], int))]


class VersionHandlers:
    """The ``pin`` notice between stages and its sending, for ``Worker`` (a mixin)."""

    def announce_wait(self, job) -> None:
        """``job``, a forward of a client's call, is about to wait for its client's hook:
        the later stages hear of it (once), so a write there keeps its weights for it."""
        st, msg = job.stage, job.msg
        if msg.type != "forward" or st is None or job.announced or msg.get("path"):
            return  # not a call through the stages (one submodule's goes no further)
        nxt, stop = st.neighbours.get("next"), msg.get("stop")
        if nxt is None or (stop and stop.split(".", 1)[0] in st.module._modules):
            return
        job.announced = True
        nxt.send_multipart(wire.encode("pin", {"model": st.model, "calls": [
            [job.client.hex(), job.msg.ctx, job.msg.get("mb")]]}), copy=False)

    def on_pin(self, job):
        """A call waits on an earlier stage (only a neighbour stage sends this): noted, and
        passed on to the next stage."""
        st = self.stages.get(job.msg["model"])
        if st is None:
            return NO_REPLY
        calls = _pins(job.msg["calls"])
        st.versions.announce(calls, time.monotonic())
        nxt = st.neighbours.get("next")
        if nxt is not None and calls:
            nxt.send_multipart(wire.encode("pin", {"model": st.model, "calls": [
                list(c) for c in calls]}), copy=False)
        return NO_REPLY


def _others_here(st, state, client: bytes) -> list:
    """The other clients' requests of the model on this worker: running, queued, held."""
    model = st.model
    queued = [j for lane, jobs in state.lanes.items() if lane[0] == model for j in jobs]
    return [j for j in (*state.jobs, *queued, *state.held_writes)
            if j.model == model and j.client != client]


def carries_write(calls) -> bool:
    """Whether a forward's optimizer calls (one list per stage) step or load anywhere."""
    return any(isinstance(c, dict) and c.get("action") in ("step", "load")
               for stage in calls or () for c in stage)


def note_pins(st, state, job) -> None:
    """A forward carrying a write passes this stage: the calls of others here (and those
    it was told of) go on with it as its ``pins``."""
    calls = [(j.client.hex(), j.msg.ctx, j.msg.get("mb"))
             for j in _others_here(st, state, job.client)
             if j.msg.type == "forward"]
    job.pins = sorted({*upstream_pins(job), *job.pins, *calls}, key=repr)


def before_write(st, state, job) -> None:
    """Make ``job``'s write (by its client, to stage ``st``) one others do not see: the
    other clients' calls of the model that are here (running or queued) and their kept
    graphs keep the version they came to, and so do the calls the write's forward found on
    earlier stages (its ``pins``). The writer's own calls see the write."""
    versions = st.versions
    versions.enter(None)
    job.version = None
    # a backward not started yet takes its graph's version when it starts
    others = [j for j in _others_here(st, state, job.client) if j.version is None and (
        j in state.jobs or j.msg.type != "backward")]
    graphs = [c for (m, who, _), c in state.contexts.items()
              if m == st.model and who != job.client and c.version is None]
    upstream = [*upstream_pins(job), *versions.announced]
    if not (others or graphs or upstream):
        return  # nobody else computes with these arrays: written in place
    old = versions.fork()
    for pinned in (*others, *graphs):
        pinned.version = old
    if upstream:
        versions.keep_for(upstream, old, time.monotonic())
        versions.announced.clear()  # what they wait for is kept now
