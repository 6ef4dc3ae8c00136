"""Each worker's requests in its own stage's order of a pipeline schedule (``StageOutbox``).

``train_step`` of a model whose forward runs on the client issues each micro-batch's forward
and backward in one order, and a worker runs one client's requests in the order they come.
Sent as issued, every worker would run the same order, where 1F1B wants one per stage (a
stage ``s`` of ``p`` fills the pipeline with ``p - 1 - s`` forwards, then alternates). While
a step is issued, the calls that go without waiting (a placed part's call, an op on kept
values, a call's backward, a push of a value to a peer) are held here, each tagged with the
micro-batch forward ("F", i) or backward ("B", i) being issued, and released to their worker
in that worker's stage's order: a tag's requests go once the program has issued all of it
and every earlier tag of that stage's order has gone.

Whatever the program does, a request is released only after the requests it depends on:
the call that made a value (or a context, or kept gradients) it names, and, for a value a
peer pushes to it, the push. Anything else sent to a worker (a waited request, a fetch, a
drop of values, a release, an optimizer step) and anything that waits first sends all that
is held (``drain``): held requests never hang a wait, and a value is never dropped before a
request that uses it has gone. When the stages' orders cannot all be kept (a forward that
returns to a worker it left, as with tied embeddings), held requests wait on one another
in a cycle; as soon as no later issue can break it, the oldest of them whose dependencies
all went is sent, and the stages' orders go on after it. At the latest, the drain that ends
the step sends the oldest held request, whose dependencies are older and went, and so on.

Which stage a worker is: the order in which the step's forward requests first reach the
workers (the first worker the forward reaches is stage 0).
"""
from __future__ import annotations

import contextlib
import itertools

from disthook.distributed.schedule import schedule as make_schedule

__all__ = ["StageOutbox", "stage_order"]

Tag = tuple[str, int]  # ("F" or "B", micro-batch)
STAGED = frozenset({"forward", "backward", "send_value"})


def stage_order(schedule: str, stage: int, stages: int, m: int) -> list[Tag]:
    """The order of micro-batch forwards ("F") and backwards ("B") of stage ``stage`` of
    ``stages`` under ``schedule`` (``disthook.distributed.schedule``; a split backward's
    weight part is the worker's own, so zb-h1 gives 1F1B's order)."""
    lists = make_schedule(schedule, stages, m)
    return [("F" if kind == "forward" else "B", mb) for kind, mb in lists[stage]
            if kind in ("forward", "backward")]


class _Held:
    __slots__ = ("address", "ctx", "deps", "fields", "msg_type", "req", "sent", "seq", "tag")

    def __init__(self, seq, tag, address, msg_type, fields, req, ctx, deps):
        self.seq, self.tag, self.address = seq, tag, address
        self.msg_type, self.fields, self.req, self.ctx = msg_type, fields, req, ctx
        self.deps, self.sent = deps, False


class StageOutbox:
    """The requests of one training step held for their workers (see the module's doc).
    ``send(address, msg_type, fields, req, ctx)`` sends one for real; ``stages`` is the
    number of workers of the pipeline."""

    def __init__(self, send, schedule: str, stages: int, m: int, together=None):
        self._send, self.schedule, self.stages, self.m = send, schedule, stages, m
        # while it releases, the sends a worker gets go as one message (send_together.py)
        self._together = contextlib.nullcontext() if together is None else together
        self.tag: Tag | None = None  # the micro-batch forward or backward being issued
        self.issued: set[Tag] = set()  # tags the program has issued all of
        self.stage_of: dict[str, int] = {}  # worker address -> its stage (first reach)
        self.held: dict[str, list[_Held]] = {}  # per worker, in issue order
        self._orders: dict[str, tuple] = {}  # per worker: its tags, each one's place
        self._at: dict[str, int] = {}  # per worker: the place of the tag it releases now
        self._made: dict[str, _Held] = {}  # a context, value-id prefix -> its maker
        self._pushes: dict[tuple[str, str], _Held] = {}  # (value id, to) -> its push
        self._seq = itertools.count()
        self._sending = False
        self.sent: list[tuple[str, str, Tag | None]] = []  # (address, type, tag), as sent

    # ---- the client's side -------------------------------------------------------------
    def begin(self, tag: Tag) -> None:
        """The program issues the micro-batch forward or backward ``tag`` now."""
        self.tag = tag

    def end(self) -> None:
        """The program has issued all of the current tag: release what may go."""
        if self.tag is not None:
            self.issued.add(self.tag)
            self.tag = None
        with self._together:
            self._advance()
            self._unstick()

    def hold(self, address: str, msg_type: str, fields: dict, req: int, ctx: str | None,
             may_hold: bool) -> bool:
        """Whether the request is held here (False: the caller sends it now, after all
        that was held, which went first). Only a request nothing waits for ``may_hold``."""
        if self._sending:
            return False
        if msg_type == "forward" and address not in self.stage_of:
            self.stage_of[address] = len(self.stage_of)
        if not may_hold or self.tag is None or msg_type not in STAGED:
            self.drain()
            return False
        held = _Held(next(self._seq), self.tag, address, msg_type, fields, req, ctx,
                     self._dependencies(address, msg_type, fields, ctx))
        self.held.setdefault(address, []).append(held)
        if msg_type == "forward" and ctx is not None:
            self._made[ctx] = held
        if isinstance(fields.get("keep_grads"), str):
            self._made[fields["keep_grads"]] = held
        if msg_type == "send_value":
            for vid in fields.get("values") or ():
                self._pushes[(vid, fields.get("to"))] = held
        return True

    def drain(self) -> bool:
        """Send everything held: in the stages' orders as far as they go, then the oldest
        held request (its dependencies are older, so they went), and so on. False, sending
        nothing, when called while a request is being sent (by a finalizer that runs then:
        what it would send must wait for the rest to go)."""
        if self._sending:
            return False
        with self._together:
            self._advance()
            while any(self.held.values()):
                oldest = min((h[0] for h in self.held.values() if h), key=lambda h: h.seq)
                self._release(oldest)
                self._advance()
        return True

    def order_sent(self, address: str) -> list[Tag]:
        """The micro-batch forwards and backwards sent to the worker at ``address`` in this
        step, in the order they went (a tag once, where its first request went)."""
        out: list[Tag] = []
        for to, _, tag in self.sent:
            if to == address and tag is not None and tag not in out:
                out.append(tag)
        return out

    # ---- what may go ----------------------------------------------------------------------
    def _dependencies(self, address: str, msg_type: str, fields: dict,
                      ctx: str | None) -> list[_Held]:
        """The held requests this one must follow: the makers of the context and values it
        names, and the pushes of the values a peer sends it."""
        deps = []
        if msg_type != "forward" and ctx is not None and ctx in self._made:
            deps.append(self._made[ctx])
        # (a call names kept values in its "call", a backward in its "grads": wire.py)
        refs = [(vid, False) for vid in fields.get("values") or ()] \
            if msg_type == "send_value" else list(_refs((fields.get("call"),
                                                          fields.get("grads"))))
        for vid, from_peer in refs:
            maker = self._made.get(vid.rpartition(".")[0])
            if maker is not None:
                deps.append(maker)
            push = self._pushes.get((vid, address)) if from_peer else None
            if push is not None:
                deps.append(push)
        return [d for d in deps if not d.sent]

    def _order(self, address: str) -> tuple[list[Tag], dict[Tag, int]]:
        """The worker's stage's order of tags, and each tag's place in it."""
        order = self._orders.get(address)
        if order is None:
            stage = min(self.stage_of.get(address, self.stages - 1), self.stages - 1)
            tags = stage_order(self.schedule, stage, self.stages, self.m)
            order = self._orders[address] = (tags, {t: i for i, t in enumerate(tags)})
        return order

    def _advance(self) -> None:
        """Release, worker by worker, the held requests of the tags its order has reached
        (in issue order, each once its dependencies went; a tag outside the order at once),
        moving on to the next tag once the program issued the current one and none of it
        is held."""
        progressed = True
        while progressed:
            progressed = False
            for address, held in self.held.items():
                if not held:
                    continue
                tags, places = self._order(address)
                while True:
                    at = self._at.get(address, 0)
                    for h in [h for h in held if places.get(h.tag, -1) <= at]:
                        if any(not d.sent for d in h.deps):
                            break
                        self._release(h)
                        progressed = True
                    if at >= len(tags) or tags[at] not in self.issued \
                            or any(places.get(h.tag, -1) <= at for h in held):
                        break
                    self._at[address] = at + 1

    def _unstick(self) -> None:
        """Held requests that wait on one another in a cycle no later issue can break (a
        forward that comes back to a worker it left: that worker's next forward waits for a
        peer whose order puts it after a backward that waits for this worker): send the
        oldest of them whose dependencies went, and go on in the stages' orders."""
        while True:
            live = self._live()
            stuck = [h for address, held in self.held.items() if address not in live
                     for h in held if all(d.sent for d in h.deps)]
            if not stuck:
                return
            self._release(min(stuck, key=lambda h: h.seq))
            self._advance()

    def _live(self) -> set[str]:
        """The workers with held requests that the program's next issues may move on: those
        whose order waits for a tag not issued yet, and those whose next request waits for
        a request held on such a worker."""
        live: set[str] = set()
        waits_on: dict[str, set[str]] = {}
        for address, held in self.held.items():
            if not held:
                continue
            _, places = self._order(address)
            at = self._at.get(address, 0)
            ready = [h for h in held if places.get(h.tag, -1) <= at]
            if ready:
                waits_on[address] = {d.address for d in ready[0].deps if not d.sent}
            else:  # (else _advance would have moved on) its next tag is not issued yet
                live.add(address)
        grew = True
        while grew:
            grew = False
            for address, on in waits_on.items():
                if address not in live and on & live:
                    live.add(address)
                    grew = True
        return live

    def _release(self, held: _Held) -> None:
        self.held[held.address].remove(held)
        held.sent = True
        self.sent.append((held.address, held.msg_type, held.tag))
        self._sending = True
        try:
            self._send(held.address, held.msg_type, held.fields, req=held.req, ctx=held.ctx)
        finally:
            self._sending = False


def _refs(value):
    """(value id, whether a peer pushes it) for each kept value packed in ``value``."""
    if isinstance(value, dict):
        if isinstance(value.get("ref"), str):
            yield value["ref"], bool(value.get("from_peer"))
            return
        for v in value.values():
            yield from _refs(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _refs(v)
