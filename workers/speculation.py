"""A forward or backward that runs ahead of its client hooks' answers.

A client hook that only looks at what it is given, returning None and changing nothing in
place, need not hold the stage up for a round trip: the worker sends its event and computes
on, and takes the answers when the pass has run, before its result leaves the worker (a
forward's output, a backward's input gradients). A pass through many such hooks (a cache of
every layer's output, a trace of every gradient) then costs about one round trip instead of
one per hook.

Which firings run ahead:

- those of a hook that answered before without a change: a hook's first firing waits for
  its answer, and so does every firing of a hook that ever changed something (activation
  patching keeps its one round trip per firing, and never costs a second pass); a
  vector-Jacobian product asked of the client always waits (it is a computation);
- only on a stage whose pass of that kind (forward, backward) left its parameters and
  buffers as they were in an earlier one of the same training mode (batch norm in training
  mode updates its running statistics: such a stage never runs ahead).

The client answers each firing in order. Once an answer of a round (the firings sent since
the pass started, or since a waited answer changed something) changes something or fails,
the client answers the round's later events "stale" without running their hooks: they were
given values the change would have altered. The worker then runs the pass again from its
start, as it was (the random stream, the graph's taps, the capture buffers, the gradients
the backward added to): the answers before that firing and its own are used as given
(their hooks do not run again), and the firings after it go to the client afresh. A
backward that may run again keeps its graph until its answers are in. Worker hooks and
hooks the model holds itself do run again in that second run; it happens only when a hook
that had only looked so far starts to change something. An answer that is an error (the
hook raised) makes the pass run again up to that firing, where its error is raised, so that
what fires as the error unwinds (always_call forward hooks) fires as in one process.

A pass whose result goes to the client itself (the last stage's forward, a part called from
the client's code, the first stage's backward) need not wait for those answers either: the
result leaves as soon as the pass has run, behind the events on the same connection, naming
the round (``EarlyAnswer``). The client has answered every event of the round by the time
it reads the result, so it knows whether the result stands: it uses it when none of the
round's answers changed anything or failed, and otherwise waits for the answer of the run
again, or for the error. The worker takes the answers afterwards, before it starts the
client's next request on the stage (requests of a client run one at a time per model).

``Speculation`` is one pass's record; ``run_ahead`` drives it. The sending, the waits and
what an answer does to the stage's tensors are the worker's (``workers/client_hooks.py``).
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import disthook
from disthook.service.hook_kinds import steers
from disthook.service.values import pack

__all__ = ["BACKWARD_KINDS", "EarlyAnswer", "HookRecord", "Speculation", "Stale", "run_ahead"]

_rounds = itertools.count(1)
# the kinds of client hook that fire in a backward pass
BACKWARD_KINDS = frozenset({"full_backward", "full_backward_pre", "backward", "tensor",
                            "post_accumulate", "leaf_hook"})


class Stale(BaseException):
    """A waited answer came back stale: an earlier answer of the round changed something,
    and the pass runs again (never leaves ``run_ahead``; a BaseException, so that model
    code catching ``Exception`` does not swallow it)."""


@dataclasses.dataclass(slots=True)
class HookRecord:
    """What a worker learnt of one client hook from its answers."""

    quiet: bool = False  # it answered without a change: its firings may run ahead
    steers: bool = False  # it changed something once: its firings always wait


@dataclasses.dataclass(slots=True)
class _Pending:
    index: int  # among the pass's firings
    wait: Any  # the worker state's Wait for the answer
    record: HookRecord
    originals: list  # the tensors the hook was given
    hooked: list  # how many tensor hooks each of them had when the event left
    use: Callable  # does what an answer that changed nothing asks


class Speculation:
    """One pass (forward or backward) of a stage (one job) with client hooks on it: the
    answers its firings got, in firing order, and what it sent ahead and has not taken the
    answer of yet."""

    def __init__(self, worker, job, stage, phase: str = "forward", grads: tuple = ()):
        self.worker, self.job, self.stage = worker, job, stage
        self.key = (phase, bool(stage.module.training))  # what Stage.pure is learnt by
        self.grads = grads  # tensors whose .grad the pass adds to (a backward's)
        self.replay: list = []  # (hook id, answer) to use in place of sending, in order
        self.fired: list = []  # (hook id, answer or None while pending) of this run
        self.pending: list[_Pending] = []
        self.round = ""
        self.wrote = False
        self._state: tuple = ()

    @property
    def ahead(self) -> bool:
        """Whether firings may run ahead: this pass left the stage's parameters and buffers
        as they were before, in the stage's present training mode, and no hook of this run
        wrote to the model yet (a weight stepped, a ``.grad`` set: a run again from a later
        firing could not undo that write)."""
        return not self.wrote and self.stage.pure.get(self.key, False)

    def begin(self) -> None:
        """Mark the state a run starts from (see ``restore``)."""
        self.fired, self.pending = [], []
        self.wrote = False  # a waited answer of this run wrote to the model
        self.pristine: dict[int, tuple] = {}  # id -> (input, its version, its frame)
        self.new_round()
        worker, job = self.worker, self.job
        worker.captures.added.pop(id(job), None)  # records from here on are this run's
        self._state = (self._versions(), disthook.random._stream_state(), dict(job.taps),
                       list(job.retained),
                       [(t, t._grad, None if t._grad is None else t._grad._data.copy())
                        for t in self.grads])

    def keep_pristine(self, t, frame) -> None:
        """``t`` (an input of this run) is a copy of ``frame``, which nothing writes to: while
        ``t`` is unchanged an event sends ``frame`` instead of another copy of ``t``."""
        self.pristine[id(t)] = (t, t._vc[0], frame)

    def new_round(self) -> None:
        self.round = f"{self.worker.id}.{next(_rounds)}"
        # id -> (tensor, its version, its number): the tensors this round's events sent
        self.sent: dict[int, tuple] = {}
        self.numbered = 0  # how many tensors they sent by value

    def pack(self, args, ahead: bool) -> list:
        """The wire data of a firing's ``args`` in this round. A tensor an earlier event of
        the round sent, unchanged since, travels as ``{"again": its number}`` (a layer's
        input is the output the layer before it was given: it crosses once); the others by
        value, numbered in the order they are sent, as the client numbers them — their
        arrays copied when the firing runs ahead (the pass may change them in place before
        the message is out), but for an input still as it came: its frame goes, which
        nothing changes (``keep_pristine``)."""
        sent, pristine = self.sent, self.pristine

        def tensor(t):
            seen = sent.get(id(t))
            if seen is not None and seen[0] is t and seen[1] == t._vc[0]:
                return {"again": seen[2]}
            sent[id(t)] = (t, t._vc[0], self.numbered)
            self.numbered += 1
            data = pack(t)
            if ahead:
                kept = pristine.get(id(t))
                data["tensor"] = (kept[2] if kept is not None and kept[0] is t
                                  and kept[1] == t._vc[0] else data["tensor"].copy())
            return data

        return [pack(a, tensor) for a in args]

    def _versions(self) -> list[int]:
        module = self.stage.module
        return [t._vc[0] for t in itertools.chain(module.parameters(), module.buffers())]

    def fire(self, record: HookRecord, hook_id: int, originals: list, send: Callable,
             wait: Callable, use: Callable):
        """The answer to a firing of hook ``hook_id`` given tensors ``originals``: the one
        recorded for it (a run again), or the client's. ``send(ahead)`` sends the event
        (with this round) and returns the worker state's wait for its answer; ``wait(w)``
        sleeps until it comes. None: the firing ran ahead, and ``settle`` takes its answer
        and calls ``use(answer)`` when it changed nothing (tensor hooks, taps, retained
        gradients are still to do)."""
        index = len(self.fired)
        if index < len(self.replay):
            recorded, answer = self.replay[index]
            if recorded != hook_id:
                raise RuntimeError(
                    f"{self.stage.name} ran its {self.key[0]} again after a client hook's "
                    f"answer changed something, and its hooks fired in another order the "
                    f"second time (hook {hook_id} where hook {recorded} fired first): the "
                    f"{self.key[0]} depends on something besides its inputs, parameters and "
                    "buffers")
            self.fired.append((hook_id, answer))
            if answer.type == "error":  # it raised where it fired (see settle): what fires
                self.new_round()  # as the error unwinds is not stale
                raise _hook_error(self.stage.name, answer)
            self.wrote = self.wrote or bool(answer.get("wrote"))
            return answer
        if self.ahead and record.quiet and not record.steers:
            self.stage.ran_ahead += 1
            self.pending.append(_Pending(index, send(True), record, originals,
                                         [_hook_count(t) for t in originals], use))
            self.fired.append((hook_id, None))
            return None
        try:
            answer = wait(send(False))
        except RuntimeError:  # the hook raised, which broke the round: what fires as the
            self.new_round()  # error unwinds (always_call forward hooks) is not stale
            raise
        if answer.get("stale"):
            raise Stale
        self.fired.append((hook_id, answer))
        self.wrote = self.wrote or bool(answer.get("wrote"))
        if steers(answer):
            record.steers = True
            self.new_round()  # used at once: the round's later events are not stale
        else:
            record.quiet = True
        return answer

    def settle(self) -> int | None:
        """Take every answer not taken yet, in order, and do what those that changed
        nothing ask. The firing from which the pass must run again, or None; an answer
        that is an error is such a firing too: the run again raises its error there, so
        that what fires as it unwinds (always_call forward hooks) fires as in one process."""
        rerun, failure = None, None
        for p in self.pending:
            answer = self.worker.sleep_on(p.wait)  # timeouts and a client gone raise here
            self.fired[p.index] = (self.fired[p.index][0], answer)
            if rerun is not None or failure is not None:
                continue  # stale, or behind the failure: the client did not run it
            if answer.type == "error":  # run again up to it, to raise its error where it
                rerun = p.index  # fired: always_call forward hooks then fire, as in one process
            elif answer.get("stale"):
                failure = RuntimeError(f"the client answered a hook event of "
                                       f"{self.stage.name} stale, though no earlier answer "
                                       "changed anything")
            elif steers(answer):
                p.record.steers = True
                rerun = p.index
            else:
                p.use(answer)
                for i in answer.get("watch") or ():
                    _move_last_hook(p.originals[i], p.hooked[i])
        self.pending = []
        if failure is not None:
            raise failure
        return rerun

    def learn(self, rerun: int | None) -> None:
        """Note whether this pass left the stage's parameters and buffers as they were; a
        pass that must run again must have."""
        changed = self._versions() != self._state[0]
        known = self.stage.pure.get(self.key)
        self.stage.pure[self.key] = not changed and known is not False
        if changed and rerun is not None:
            if self.fired[rerun][1].type == "error":
                raise _hook_error(self.stage.name, self.fired[rerun][1])
            raise RuntimeError(
                f"a client hook's answer changed what {self.stage.name} computes after it, "
                f"but the {self.key[0]}, run ahead of that answer, changed the stage's "
                f"parameters or buffers (which no earlier {self.key[0]} did), so it cannot "
                "run again: make the hook change its tensors in every call, or keep that "
                "state outside the stage")

    def restore(self, rerun: int) -> None:
        """Back to the state the run started from, to run again up to firing ``rerun`` on
        the answers recorded."""
        self.replay = self.fired[:rerun + 1]
        self.stage.ran_again += 1
        _, stream, taps, retained, grads = self._state
        for t, grad, data in grads:  # a backward's gradients, as they were
            t._grad = grad
            if data is not None:
                grad._data[...] = data
        disthook.random._set_stream_state(stream)
        job = self.job
        job.taps.clear()
        job.taps.update(taps)
        job.retained[:] = retained
        self.worker.captures.forget_since(job)  # what worker hooks captured in this run


class EarlyAnswer:
    """How a pass whose result goes to the client sends it before its hooks' answers are
    taken: ``send(out, round)`` sends the client's answer for result ``out``, naming the
    round whose answers decide whether it stands. ``sent``: whether the answer of the run
    that stood (the last one) went early; the caller then sends none of its own. ``went``:
    whether any run's did; the caller undoes what ``send`` did (a kept graph) if the pass
    fails afterwards (also in a run again, after an answer that was an error)."""

    __slots__ = ("send", "sent", "went")

    def __init__(self, send: Callable[[Any, str], None]):
        self.send = send
        self.sent = self.went = False


def run_ahead(worker, job, stage, compute: Callable, phase: str = "forward",
              grads: tuple = (), early: EarlyAnswer | None = None):
    """``compute()`` (one forward of ``stage``, or with ``phase="backward"`` one backward,
    which adds to the ``.grad`` of ``grads`` and must keep its graph for a run again), its
    client hooks' firings running ahead of their answers where they may; run again when an
    answer asks for it (see the module docstring). With ``early``, a run whose firings are
    still ahead when it ends sends its result to the client at once."""
    spec = job.spec = Speculation(worker, job, stage, phase, grads)
    try:
        while True:
            spec.begin()
            failure: BaseException | None = None
            try:
                out = compute()
                if early is not None and spec.pending:
                    early.send(out, spec.round)
                    early.sent = early.went = True
                    stage.answered_ahead += 1
            except (Exception, Stale) as exc:  # noqa: BLE001 - an answer ahead may explain it
                out, failure = None, exc
            rerun = spec.settle()
            spec.learn(rerun)
            if rerun is None:
                if isinstance(failure, Stale):
                    raise RuntimeError(f"{stage.name}: a waited hook answer came back stale "
                                       "though no earlier answer changed anything")
                if failure is not None:
                    raise failure
                return out
            if early is not None:  # the client does not use what went early: its round broke
                early.sent = False
            spec.restore(rerun)
    finally:
        job.spec = None
        worker.captures.added.pop(id(job), None)


def _hook_error(stage_name: str, answer) -> RuntimeError:
    """The error of a client hook whose answer (fired on ``stage_name``) was an error."""
    return RuntimeError(f"the client's hook (fired on {stage_name}) raised "
                        f"{answer['kind']}: {answer['message']}")


def _hook_count(t) -> int:
    hooks = t._backward_hooks
    return 0 if hooks is None else len(hooks)


def _move_last_hook(t, place: int) -> None:
    """Put the tensor hook registered last on ``t`` at ``place`` among its hooks: where it
    would be had it been registered when its event left (the stage's own code may have
    hooked the tensor since), so that hooks fire in the order they were registered."""
    hooks = t._backward_hooks
    if hooks is None or len(hooks) - 1 <= place:
        return
    items = list(hooks.items())
    hooks.clear()
    hooks.update(items[:place] + items[-1:] + items[place:-1])
