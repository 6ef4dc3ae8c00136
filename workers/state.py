"""What a worker decides, as plain state: no sockets, no threads, no module code.

The socket shell (``workers/server.py``) turns what arrives into events and hands each to
``WorkerState.handle``, the only place that changes this state; what comes back is a list
of instructions the shell carries out. The decisions kept here:

- which request runs now and which waits: requests that change a stage run one at a time
  per (model, client), in arrival order ("lanes"); reads (status, state, hooks, captures)
  run at once, even while a request of the same client waits on its hook;
- the waits of running requests: a client hook's answer, a neighbour's pipeline message;
  each has a deadline, and a client that goes away fails its waits at once;
- the forward graphs kept for a backward (contexts), per model and context id, with the
  client that opened them: released by the client, dropped with the client, or expired;
- the pipeline mailbox: activations and gradients of training steps, kept until the step's
  schedule asks for them, bounded, and emptied when the step ends (where a step is in its
  schedule: ``workers.step_run.StepRun``).

Stage code (the modules, their hooks and graphs) runs in the jobs the shell starts; it asks
this state for waits and contexts and reports back when a job is done.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import time
from typing import Any

from workers.mailbox import admit, forget_values, whose
from workers.queues import QueueCaps

__all__ = ["ANSWERS", "ClientGone", "Context", "Job", "JobDone", "Log", "MessageIn", "Reply",
           "Resume", "Run", "Tick", "Wait", "WorkerState"]

HOOK_TIMEOUT_S = 300.0  # a client hook's answer: the client is alive (its pings answer) but slow
PIPE_TIMEOUT_S = 300.0  # a neighbour stage's activation or gradient of a training step
MAILBOX_LIMIT = 4096  # pipeline messages kept before anyone asked for them
FINISHED_STEPS_KEPT = 256  # steps whose late pipeline messages are dropped on arrival
GONE_KEPT = 1024  # clients remembered as gone (a running job of theirs waits no more)

# requests that only read (or drop graphs) run at once, never queued: a hook may read its model
AT_ONCE = frozenset({"hello", "status", "get_state", "form", "list_hooks", "captured",
                     "release", "pin", "waits", "fetch"})
# answers to a wait of a running request, recognised by (sender, request id)
ANSWERS = frozenset({"hook_reply", "error"})
# what a neighbour stage sends: a client's call carried on (its client named by reply_to),
# and a training step's pipeline messages; from anyone but a worker they are refused
FORWARDED = frozenset({"forward", "backward", "release", "pipe", "pin", "write"})


# ---- events (what happened) -----------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class MessageIn:
    """A decoded message on the worker's endpoint from ``sender`` (its routing identity).
    ``forwarder``: the transport says the sender is a worker of the cluster (with keys, it
    authenticated with the servers' key), which may carry a client's call (``reply_to``)."""

    sender: bytes
    msg: Any  # wire.Message
    forwarder: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class JobDone:
    """A request's job ended (answered, failed, or given up)."""

    job: Job


@dataclasses.dataclass(frozen=True, slots=True)
class ClientGone:
    """The connection of ``identity`` closed (the process died, or missed its heartbeats)."""

    identity: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: deadlines of waits and contexts are checked against ``now``."""

    now: float


# ---- instructions (what the shell does) ---------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """Start the job of a request (the shell runs its handler)."""

    job: Job


@dataclasses.dataclass(frozen=True, slots=True)
class Resume:
    """A wait ended (``wait.outcome`` or ``wait.error`` is set): its job goes on."""

    wait: Wait


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """Answer ``to`` at once with an error: what it sent fits nothing here."""

    to: bytes
    req: int
    kind: str
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Log:
    level: str  # "info" | "warning"
    text: str
    peer: bytes | None = None  # about what this peer sent: rate-limited per peer


# ---- records ----------------------------------------------------------------------------------
@dataclasses.dataclass(eq=False, slots=True)
class Job:
    """One request being served: who asked, for which model, and what it waits on now."""

    sender: bytes  # who sent the request (the client, or the previous stage)
    msg: Any  # wire.Message
    client: bytes  # whose request it is (the forward's reply_to when a neighbour sent it)
    model: str | None
    lane: tuple | None = None  # (model, client) when it runs in a lane; None: at once
    waiting: Wait | None = None
    stage: Any = None  # the stage it runs on, once looked up (for error reports)
    retained: list = dataclasses.field(default_factory=list)  # see Context.retained
    taps: dict = dataclasses.field(default_factory=dict)  # see Context.taps
    # id -> (tensor, its name): the tensors its client hook events sent, named once each so
    # that the client gives each the same object in every event (workers/client_hooks.py)
    named: dict = dataclasses.field(default_factory=dict)
    # the client's random stream while the job draws from it (see wire's forward "rng"):
    # kept here while it waits, since another client's job may draw meanwhile
    rng: str | None = None
    micro_batch: int | None = None  # what capture hooks record as the micro-batch
    # the forward it runs ahead of client hooks' answers (workers.speculation), if any
    spec: Any = None
    # its weights' version (workers.versions): None, the newest; older if another wrote meanwhile
    version: Any = None
    # calls a write of this job found on its way, for the next stage (workers.versions)
    pins: list = dataclasses.field(default_factory=list)
    announced: bool = False  # the later stages heard it waits here (workers.versions)
    as_of: dict | None = None  # the writes its forward counts (workers.versions), answered

    @property
    def kind(self) -> str:
        return self.msg.type


@dataclasses.dataclass(eq=False, slots=True)
class Wait:
    """A running job waits for an answer: a client's hook answer (``client`` and ``req``) or
    a pipeline message (``keys``: the mailbox keys any of which ends it)."""

    id: int
    job: Job
    what: str
    timeout: float
    deadline: float
    client: bytes | None = None
    req: int | None = None
    keys: tuple = ()
    outcome: Any = None  # the answer message, or the mailbox key that came
    error: BaseException | None = None
    done: bool = False


@dataclasses.dataclass(eq=False)
class Context:
    """The graph of one forward on a stage, kept for its backward."""

    client: bytes
    inputs: list
    output: Any
    retained: list  # (client, hook id, key, tensor) whose gradient goes to the client
    created: float
    direct: bool = False  # one submodule's call from the client: backward answers it too
    # a double backward's graph was built on this one (backward(create_graph=True)): its
    # backwards keep the graph, which the other pass reads too (freed with the contexts)
    keep_graph: bool = False
    # tensors client forward hooks were given, keyed "<event key>#<index>": a backward may ask
    # for their gradients (autograd.grad on the client with respect to a tensor a hook kept)
    taps: dict = dataclasses.field(default_factory=dict)
    version: Any = None  # the weights its forward computed with (see Job.version)
    nbytes: int = 0  # the arrays it holds, weights aside (workers.limits)
    # the graph of a call's first backward: that call's context (workers/twice_split.py)
    twice_of: Any = None


class WorkerState:
    """Every decision of a worker that is not stage arithmetic; see the module docstring."""

    def __init__(self, worker_id: str, *, context_ttl: float = 600.0,
                 hook_timeout: float = HOOK_TIMEOUT_S, pipe_timeout: float = PIPE_TIMEOUT_S,
                 mailbox_limit: int = MAILBOX_LIMIT, clock=time.monotonic, who=None):
        self.worker_id = worker_id
        # how logs name a peer (the shell's way, as status numbers it), never by its identity
        self.who = who or _Numbered("peer").name
        self.context_ttl = context_ttl
        self.hook_timeout = hook_timeout
        self.pipe_timeout = pipe_timeout
        self.mailbox_limit = mailbox_limit
        self.clock = clock
        self.models: set[str] = set()  # models with a stage here
        # (model, client, ctx id) -> graph: each client's contexts are its own
        self.contexts: dict[tuple[str, bytes, str], Context] = {}
        self.mailbox: dict[tuple, Any] = {}  # (model, step, kind, mb) -> pipe message/fields
        # (model, client) -> value id -> a tensor kept for the client (workers/values.py)
        self.values: dict[tuple[str, bytes], dict[str, Any]] = {}
        self.finished_steps: dict[tuple, None] = {}  # (model, step), oldest first
        # (model, client, step) -> mb -> bytes its forward keeps (limits.keep_step_graph)
        self.step_graphs: dict[tuple, dict[int, int]] = {}
        self.waits: dict[int, Wait] = {}
        self._answered_by: dict[tuple, Wait] = {}  # (client, event id) -> the wait it ends
        self.lanes: dict[tuple, collections.deque] = {}  # busy lane -> requests queued in it
        self.queues = QueueCaps()  # their caps per client
        self.jobs: set[Job] = set()  # running (or waiting) jobs
        self.gone: dict[bytes, None] = {}  # clients whose connection closed (the latest)
        # writes to a model's weights held until no other client's call of it runs (none mid-call)
        self.held_writes: list[Job] = []
        self.step_clients: dict[tuple, bytes] = {}  # (model, step) -> the client running it
        self._wait_ids = itertools.count(1)

    # ---- the one entry point ------------------------------------------------------------------
    def handle(self, event) -> list:
        """Apply one event; the instructions it calls for, in order."""
        kind = type(event)
        if kind is MessageIn:
            return self._on_message(event.sender, event.msg, event.forwarder)
        if kind is JobDone:
            return self._on_job_done(event.job)
        if kind is ClientGone:
            return self._on_client_gone(event.identity)
        if kind is Tick:
            return self._on_tick(event.now)
        raise TypeError(f"not a worker event: {event!r}")

    def _on_message(self, sender: bytes, msg, forwarder: bool = False) -> list:
        if msg.type in ANSWERS:
            wait = self._answered_by.get((sender, msg.req))
            if wait is not None:
                return [self._end_wait(wait, outcome=msg)]
            if msg.type == "error":  # never answer an error with an error
                return [Log("info", f"worker {self.worker_id}: an error answer to hook event "
                                    f"{msg.req}, which no request waits for; dropped")]
            return [Reply(sender, msg.req, "LookupError",
                          f"worker {self.worker_id} has no hook event {msg.req} waiting for "
                          "an answer (it ended, or none was sent)")]
        try:
            client = self._client_of(sender, msg, forwarder)
        except PermissionError as exc:
            if isinstance(exc, _CarriedForGone) and not msg.req:  # one-way: nobody to tell
                return [Log("info", f"worker {self.worker_id}: dropped {exc}")]
            return [Reply(sender, msg.req, "PermissionError", str(exc)),
                    Log("warning", f"worker {self.worker_id}: refused {msg.type} from "
                                   f"{self.who(sender)}: {exc}", sender)]
        if msg.type == "pipe":
            return self.pipe_arrived(msg)
        model = msg.get("model") if isinstance(msg.get("model"), str) else None
        if msg.type == "train_step":  # whose step it is: only they may abort it
            self.step_clients[(model, msg.get("step"))] = client
            while len(self.step_clients) > FINISHED_STEPS_KEPT:
                del self.step_clients[next(iter(self.step_clients))]
        job = Job(sender, msg, client, model)
        if msg.type in AT_ONCE or model is None:
            self.jobs.add(job)
            return [Run(job)]
        job.lane = (model, client)
        queued = self.lanes.get(job.lane)
        if queued is not None and self._from_own_hook(job):
            job.lane = None  # sent from inside the client's hook: runs as it would there
            if _writes(msg) and self._others_running(job):
                self.held_writes.append(job)
                return []
            self.jobs.add(job)
            return [Run(job)]
        if queued is not None:  # that client's earlier request on this model is running
            # (workers/queues.py; a call a neighbour stage carries on is not refused here)
            refused = self.queues.refusal(self.lanes, job, sender == client)
            if refused:
                return [Reply(sender, msg.req, "RuntimeError", refused), Log("warning", (
                    f"worker {self.worker_id}: refused {msg.type} from {self.who(sender)}: "
                    f"{refused}"), sender)]
            queued.append(job)
            return []
        self.lanes[job.lane] = collections.deque()
        if _writes(msg) and self._others_running(job):
            self.held_writes.append(job)  # its lane stays taken: its later requests wait
            return []
        self.jobs.add(job)
        return [Run(job)]

    def _client_of(self, sender: bytes, msg, forwarder: bool) -> bytes:
        """Whose request this is: the sender's, from its connection. Only a worker carrying
        a client's call on (a forward, a backward, a release) names another client, in
        ``reply_to``; a client naming anyone but itself, or anyone else sending what only
        workers send, is refused (``PermissionError``)."""
        reply_to = msg.get("reply_to")
        if not forwarder:
            if msg.type == "pipe" and (msg.get("kind") != "abort" or self.step_clients.get(
                    (msg.get("model"), msg.get("step")), sender) != sender):
                raise PermissionError("pipeline messages come only from the neighbour stages "
                                      "of a training step; a client may only abort its own")
            if msg.type == "pin":
                raise PermissionError("pin comes only from a neighbour stage")
            if isinstance(reply_to, str) and reply_to != sender.hex():
                raise PermissionError(
                    f"{msg.type}: reply_to names another connection than the one it came on; "
                    "a client acts only as itself (leave reply_to as its own identity)")
            return sender
        if msg.type not in FORWARDED:
            raise PermissionError(f"a neighbour stage does not send {msg.type!r}; only "
                                  f"{', '.join(sorted(FORWARDED))}")
        if not isinstance(reply_to, str):
            return sender
        try:
            client = bytes.fromhex(reply_to)
        except ValueError:
            raise PermissionError(f"{msg.type}: reply_to {reply_to[:40]!r} is not a "
                                  "connection's identity") from None
        if client in self.gone:  # checked against the call: its client is still here
            raise _CarriedForGone(f"{msg.type}: the client it is carried for went away")
        return client

    def _from_own_hook(self, job: Job) -> bool:
        """Whether it comes from inside its client's hook a running request of its lane waits
        for (a hook's code runs inside the call in one process; a write waits for nothing): a
        call only if it says so (``within``: that request's ctx), or it keeps its order."""
        within, call = job.msg.get("within"), job.msg.type in ("forward", "backward", "train_step")
        return (within is not None or not call) and any(
            w.job.lane == job.lane and w.client == job.client and not w.done
            and (not call or w.job.msg.ctx == within) for w in self.waits.values())

    def _others_running(self, job: Job) -> bool:
        return any(j.model == job.model and j.client != job.client for j in self.jobs)

    def _release_writes(self) -> list:
        """The held writes that may run now."""
        out = []
        for job in list(self.held_writes):
            if not self._others_running(job):
                self.held_writes.remove(job)
                self.jobs.add(job)
                out.append(Run(job))
        return out

    def _on_job_done(self, job: Job) -> list:
        self.jobs.discard(job)
        if self.held_writes:
            return self._next_in_lane(job) + self._release_writes()
        return self._next_in_lane(job)

    def _next_in_lane(self, job: Job) -> list:
        if job.waiting is not None:  # ended while waiting (stopped): the wait goes too
            self._drop_wait(job.waiting)
            job.waiting = None
        if self.waits:  # answers a job that ran ahead did not take
            for wait in [w for w in self.waits.values() if w.job is job]:
                self._drop_wait(wait)
        if job.lane is None or job.lane not in self.lanes:
            return []
        queued = self.lanes[job.lane]
        if not queued:
            del self.lanes[job.lane]
            return []
        nxt = queued.popleft()
        self.queues.taken(nxt)
        if _writes(nxt.msg) and self._others_running(nxt):
            self.held_writes.append(nxt)
            return []
        self.jobs.add(nxt)
        return [Run(nxt)]

    def _on_client_gone(self, identity: bytes) -> list:
        self.gone[identity] = None
        while len(self.gone) > GONE_KEPT:
            del self.gone[next(iter(self.gone))]
        out: list = []
        for wait in [w for w in self.waits.values()
                     if identity in (w.client, w.job.client)]:
            out.append(self._end_wait(wait, error=ConnectionError(
                f"the client went away while worker {self.worker_id} waited for "
                f"{wait.what}")))
        dropped = 0
        for lane in [lane for lane in self.lanes if lane[1] == identity]:
            dropped += len(self.lanes[lane])
            self.lanes[lane].clear()  # the running job ends by itself; nothing after it
            self.queues.cleared(lane)
        graphs = [key for key, c in self.contexts.items() if c.client == identity]
        for key in graphs:
            del self.contexts[key]
        for key in [key for key in self.values if key[1] == identity]:
            del self.values[key]
        forget_values(self.mailbox, identity)  # values pushed here for its calls
        if out or dropped or graphs:  # a warning when it left requests unfinished
            level = "warning" if out or dropped else "info"
            out.append(Log(level, f"worker {self.worker_id}: {self.who(identity)} went "
                                  f"away: {len(out)} wait(s) ended, {dropped} queued "
                                  f"request(s) and {len(graphs)} graph(s) dropped"))
        return out

    def _on_tick(self, now: float) -> list:
        out: list = []
        for wait in [w for w in self.waits.values() if now >= w.deadline]:
            text = f"worker {self.worker_id} waited {wait.timeout:g} s for {wait.what}"
            out.append(self._end_wait(wait, error=TimeoutError(text)))
            out.append(Log("warning", f"{text}; its request ({wait.job.kind} from "
                                      f"{self.who(wait.job.client)}) ends with that error"))
        for key in [k for k, c in self.contexts.items() if now - c.created > self.context_ttl]:
            del self.contexts[key]
            out.append(Log("warning", f"worker {self.worker_id}: context {key[2]} of model "
                                      f"{key[0]} expired after {self.context_ttl:g} s "
                                      "without backward"))
        return out

    # ---- waits ----------------------------------------------------------------------------------
    def wait_for_client(self, job: Job, client: bytes, req: int, what: str) -> Wait:
        """The job waits for ``client``'s (the job's own) answer to hook event ``req``."""
        return self._open_wait(job, what, self.hook_timeout, client=client, req=req)

    def expect_from_client(self, job: Job, client: bytes, req: int, what: str) -> Wait:
        """Like ``wait_for_client``, but the job goes on meanwhile (it ran ahead of a client
        hook's answer, see workers.speculation): the answer is kept in the wait when it comes,
        and the job sleeps on the wait only when it needs the answer. A job may hold several
        such waits besides the one it sleeps on; all go when it ends."""
        return self._open_wait(job, what, self.hook_timeout, sleeps=False, client=client,
                               req=req)

    def wait_for_pipe(self, job: Job, keys: tuple, what: str) -> Wait | None:
        """The job waits until one of the mailbox ``keys`` is there (None: one is already)."""
        return None if any(k in self.mailbox for k in keys) else self._open_wait(
            job, what, self.pipe_timeout, keys=tuple(keys))

    def _open_wait(self, job: Job, what: str, timeout: float, sleeps: bool = True,
                   **how) -> Wait:
        if job not in self.jobs or job.client in self.gone or how.get("client") in self.gone:
            raise ConnectionError(f"the client went away; worker {self.worker_id} does not "
                                  f"wait for {what}")
        wait = Wait(next(self._wait_ids), job, what, timeout, self.clock() + timeout, **how)
        self.waits[wait.id] = wait
        if wait.client is not None:
            self._answered_by[(wait.client, wait.req)] = wait
        if sleeps:
            job.waiting = wait
        return wait

    def _end_wait(self, wait: Wait, *, outcome=None, error=None) -> Resume:
        self._drop_wait(wait)
        wait.outcome, wait.error, wait.done = outcome, error, True
        if wait.job.waiting is wait:
            wait.job.waiting = None
        return Resume(wait)

    def _drop_wait(self, wait: Wait) -> None:
        self.waits.pop(wait.id, None)
        if wait.client is not None:
            self._answered_by.pop((wait.client, wait.req), None)

    # ---- the pipeline mailbox ---------------------------------------------------------------
    def pipe_arrived(self, msg) -> list:
        """A pipe record from a neighbour stage (a worker: ``handle``'s checks passed, or a
        local link's hello named it: its message, or from a link its fields' dict) goes to
        the mailbox; the wait for it ends. (Few calls: the path often runs cold.)"""
        key = (msg["model"], msg["step"], msg["kind"], msg["mb"])
        if key[0] not in self.models or key[:2] in self.finished_steps:
            return []  # for no model held here, or late: dropped
        dropped = admit(self.mailbox, key, msg, self.mailbox_limit, self.worker_id, self.gone)
        out = [Log("warning", text, peer) for text, peer in dropped] if dropped else []
        ends = [w for w in self.waits.values() if key in w.keys]  # (all, then ended)
        return out + [self._end_wait(w, outcome=key) for w in ends] if ends else out

    def finish_step(self, model: str, step: str) -> None:
        """A training step ended here: its mailbox entries go, later ones are dropped."""
        self.finished_steps[(model, step)] = None  # (a dict: found without a walk)
        while len(self.finished_steps) > FINISHED_STEPS_KEPT:
            del self.finished_steps[next(iter(self.finished_steps))]
        for key in [k for k in self.mailbox if k[:2] == (model, step)]:
            del self.mailbox[key]

    # ---- contexts -------------------------------------------------------------------------------
    def keep_context(self, model: str, ctx_id: str, context: Context) -> None:
        self.contexts[(model, context.client, ctx_id)] = context

    def contexts_of(self, model: str, client: bytes) -> int:
        """How many forward graphs ``client`` keeps on ``model`` here."""
        return sum(1 for (m, who, _) in self.contexts if m == model and who == client)

    def clients_of(self, model: str) -> dict[bytes, int]:
        """Each client with graphs kept on ``model`` here, and how many."""
        out: dict[bytes, int] = {}
        for (m, who, _) in self.contexts:
            if m == model:
                out[who] = out.get(who, 0) + 1
        return out

    def context(self, model: str, client: bytes, ctx_id: str) -> Context | None:
        """``client``'s graph of context ``ctx_id`` (each client names its own contexts:
        another's of the same id is not found)."""
        return self.contexts.get((model, client, ctx_id))

    def end_context(self, model: str, client: bytes, ctx_id: str) -> None:
        self.contexts.pop((model, client, ctx_id), None)

    def release(self, model: str, client: bytes, ctx_ids) -> int:
        """Forget ``client``'s graphs of these contexts (it dropped their outputs)."""
        return sum(self.contexts.pop((model, client, c), None) is not None for c in ctx_ids)

    def unload(self, model: str) -> None:
        self.models.discard(model)
        for key in [k for k in self.contexts if k[0] == model]:
            del self.contexts[key]
        for key in [k for k in self.mailbox if k[0] == model]:
            del self.mailbox[key]
        for key in [k for k in self.values if k[0] == model]:
            del self.values[key]

    # ---- values kept for clients ------------------------------------------------------------
    def keep_value(self, model: str, client: bytes, vid: str, tensor) -> None:
        self.values.setdefault((model, client), {})[vid] = tensor

    def value(self, model: str, client: bytes, vid: str):
        """``client``'s value ``vid`` (None: not here; each client names its own)."""
        return self.values.get((model, client), {}).get(vid)

    def values_of(self, model: str, client: bytes) -> int:
        return len(self.values.get((model, client), ()))

    def drop_values(self, model: str, client: bytes, vids) -> int:
        kept = self.values.get((model, client), {})
        return sum(kept.pop(v, None) is not None for v in vids)

    def describe(self, label, own=None) -> dict:
        """What runs, what it waits for and for how long, and what is queued behind it (the
        ``waits`` request: a stall's diagnosis); clients named by ``label(identity)``; of
        the clients ``own(client)`` passes only (None: of every client)."""
        now = self.clock()
        own = own or (lambda client: True)

        def job_view(job: Job) -> dict:
            wait = job.waiting
            return {"kind": job.kind, "model": job.model, "client": label(job.client),
                    "waits_for": None if wait is None else wait.what,
                    "waiting_s": None if wait is None else round(
                        now - (wait.deadline - wait.timeout), 3)}

        counts = self.counts(own)
        return {"running": [job_view(j) for j in self.jobs if own(j.client)],
                "queued": [{"model": lane[0], "client": label(lane[1]),
                            "kinds": [j.kind for j in queue]}
                           for lane, queue in self.lanes.items() if queue and own(lane[1])],
                "held_writes": [job_view(j) for j in self.held_writes if own(j.client)],
                "waits": [{"what": w.what, "kind": w.job.kind, "client": label(w.job.client),
                           "age_s": round(now - (w.deadline - w.timeout), 3)}
                          for w in self.waits.values() if own(w.job.client)],
                "mailbox": counts["mailbox"], "contexts": counts["contexts"]}

    def counts(self, own=None) -> dict:
        """For status: graphs kept, mailbox entries, kept values, jobs running and waiting,
        queued; of the clients ``own(client)`` passes only (None: of every client)."""
        if own is None:
            return {"contexts": len(self.contexts), "mailbox": len(self.mailbox),
                    "values": sum(len(kept) for kept in self.values.values()),
                    "jobs": len(self.jobs), "waits": len(self.waits),
                    "queued": sum(len(q) for q in self.lanes.values())}
        steps = self.step_clients
        return {"contexts": sum(1 for _, who, _ in self.contexts if own(who)),
                "mailbox": sum(1 for key in self.mailbox if own(whose(key, steps) or b"")),
                "values": sum(len(kept) for (_, who), kept in self.values.items() if own(who)),
                "jobs": sum(1 for job in self.jobs if own(job.client)),
                "waits": sum(1 for w in self.waits.values() if own(w.job.client)),
                "queued": sum(len(q) for (_, who), q in self.lanes.items() if own(who))}


def _writes(msg) -> bool:
    """Whether a request changes a model in a way no version keeps apart (its mode, its
    structure, whether it is held): it waits until no other client's call of the model
    runs. Changes to weights do not wait: they make a new version (workers.versions)."""
    return msg.type in ("module_op", "train", "load_stage", "unload")


class _Numbered:
    """Peers named ``<kind> <n>`` in order of first sight (a state without a shell's names)."""

    def __init__(self, kind: str):
        self.kind, self.names, self._ids = kind, {}, itertools.count(1)

    def name(self, identity: bytes) -> str:
        if identity not in self.names:
            self.names[identity] = f"{self.kind} {next(self._ids)}"
        return self.names[identity]


class _CarriedForGone(PermissionError):
    """A neighbour carries on a message of a client that went away (a race, not a pose)."""
