"""One version of the weights for every placed call of one forward, on a model whose forward
runs here and calls its placed parts one by one (a tree placement), when other clients may
write it meanwhile (the model is published, or this client attached to it).

The writer numbers its writes of the model (``seq``): each write request carries its
number, and once every worker it went to has answered, the writer tells every worker of the
model that its writes up to that number are whole (``commit``), and only then returns. A
forward (the span of one call of the model, ``spanned``) waits for the answer of its first
placed call, which says which writes that call's worker had committed when it ran (its
``pin``); every later placed call of the forward, on any worker, carries that pin
(``as_of``), and each worker computes it with the weights as of those writes, kept for it
(workers/versions.py). Its backward computes with the weights its forward used. A client's
own writes always count for its own calls, as in one process.
"""
from __future__ import annotations

import contextlib
import functools
import itertools

__all__ = ["TreeVersions", "one_write", "share", "spanned"]


class TreeVersions:
    """A tree-placed model's numbered writes and the forward under way (``_Hub.versions``)."""

    def __init__(self) -> None:
        self.seqs = itertools.count(1)
        self.as_of: dict | None = None  # the forward under way's pin, once known
        self.in_forward = False
        self.holding = 0  # > 0: inside a write of several requests (one_write)
        self.held: int | None = None  # the last write made meanwhile, not committed yet

    def write(self, hub, calls: list[tuple], *, what: str, carries: bool = False) -> None:
        """Send the writes ``calls`` (address, message type, fields) as one numbered write,
        wait for every worker's answer, then commit it on every worker of the model
        (``carries``: see ``_Hub.request_all``'s ``carries_optimizer_calls``)."""
        msg_type = calls[0][1]
        real = msg_type != "step" or any(
            (f.get("optimizer") or {}).get("action") in ("step", "load") for _, _, f in calls)
        if not real:  # a zero_grad changes no weights
            hub.request_all([(a, f) for a, _, f in calls], msg_type, what=what,
                            carries_optimizer_calls=carries)
            return
        seq = next(self.seqs)
        hub.request_all([(a, {**f, "seq": seq}) for a, _, f in calls], msg_type, what=what,
                        carries_optimizer_calls=carries)
        if self.holding:  # committed with the others, at the end (one_write)
            self.held = seq
            return
        self.commit(hub, seq, what)

    def commit(self, hub, seq: int, what: str) -> None:
        """Tell every worker of the model that the writes up to ``seq`` are whole."""
        hub.request_all([(a, {"seq": seq}) for a in hub.socks], "commit",
                        what=f"{what} (made visible to the model's other clients)",
                        carries_optimizer_calls=True)

    @staticmethod
    def writes_pending(hub) -> bool:
        """Whether optimizer calls not sent yet change weights (a step or a load): they go
        out numbered, each on its own, before the next request (a zero_grad may ride)."""
        return any(spec.get("action") in ("step", "load")
                   for calls in hub.pending_optimizer for spec in calls.values())

    def before_call(self, fields: dict) -> bool:
        """A placed call of the forward under way (if any): whether it waits for its answer
        (the forward's first, whose pin the later ones carry)."""
        if not self.in_forward:
            return False
        if self.as_of is None:
            return True
        fields["as_of"] = self.as_of
        return False

    def answered(self, result: dict) -> None:
        """A placed call answered: the first of a forward gives the forward its pin."""
        if self.in_forward and self.as_of is None and isinstance(result.get("pin"), dict):
            self.as_of = result["pin"]


def share(dep) -> None:
    """``dep`` may have other clients from now on (published, or attached to): on a model
    placed over its tree, its writes are numbered and its forwards pinned."""
    if dep._glue and dep._hub.versions is None:
        dep._hub.versions = TreeVersions()


@contextlib.contextmanager
def one_write(dep):
    """The writes made inside (a ``load_state_dict``, one request per placed part) are
    one for the model's other clients: committed together at the end (even when the load
    fails half way: what was written stays written, as in one process)."""
    versions = dep._hub.versions
    if versions is None:
        yield
        return
    versions.holding += 1
    try:
        yield
    finally:
        versions.holding -= 1
        if not versions.holding and versions.held is not None:
            seq, versions.held = versions.held, None
            versions.commit(dep._hub, seq, "load_state_dict")


def spanned(dep, forward):
    """``forward`` (the model's own, run here) as one forward for the weights: every placed
    call in it computes as of the writes its first one counted."""
    versions = dep._hub.versions
    if versions is None:
        return forward

    @functools.wraps(forward)
    def one_version(*args, **kwargs):
        if versions.in_forward:  # a forward inside the forward: the same one
            return forward(*args, **kwargs)
        versions.in_forward, versions.as_of = True, None
        try:
            return forward(*args, **kwargs)
        finally:
            versions.in_forward, versions.as_of = False, None
    return one_version
