"""Starting, attaching to and stopping a cluster: ``local_cluster`` and ``connect``.

``local_cluster(workers=N)`` starts a coordinator and N worker processes on loopback (free
ports), waits until every worker has registered, and on leaving the ``with`` block — normally,
by an exception or by Ctrl-C — asks the coordinator to shut the cluster down, waits for every
process and kills what does not end in time. The processes also stop by themselves when the
process that started them dies, so a crashed client leaves nothing behind.

``connect(address)`` attaches to a cluster someone else started (``disthook launch``); closing
it only closes the connection.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
import time
import weakref

from deploy.local import spawn, start_report, stderr_tail, why_it_ended
from deploy.roles import Role, coordinator_role, local_worker_id, worker_role
from deploy.threads import share_of_cores
from disthook.distributed.answer_cap import DEFAULT_MAX_ANSWER_MB, cap_bytes
from disthook.distributed.cluster_processes import announced_address, reap, stop_abandoned
from disthook.service.endpoint import check_free, parse, unknown_host
from disthook.service.rpc import (
    DEFAULT_TIMEOUT,
    ClusterError,
    CoordinatorUnreachable,
    Deadline,
    Peer,
    RemoteError,
    RemoteTimeout,
    dial_once,
    greet,
)
from disthook.service.security import CLIENT, Keys, generate
from disthook.wire import HEARTBEAT_S

__all__ = ["Cluster", "CoordinatorUnreachable", "WorkerInfo", "connect", "local_cluster"]

STARTING_GRACE_S = 6.0  # how long connect() tries again when nothing listens yet (a
# coordinator started at the same moment takes 1-5 s to listen on a busy 2-core machine)
IN_WORKER = False  # set in worker processes: they must not start clusters of their own


def _refuse_in_worker(call: str) -> None:
    """A worker imports the installed modules a model's classes come from; code in one of
    them that starts or attaches to a cluster must not run there (it would deploy onto the
    very worker that waits for it)."""
    if IN_WORKER:
        raise RuntimeError(
            f"{call} was called while a worker imported a module of the model it was given: "
            "a module that defines model classes must not start or attach to a cluster when "
            "imported; put that code under if __name__ == \"__main__\":")


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """One worker as the coordinator sees it."""

    id: str
    pid: int
    address: str
    host: str
    stages: list[str]  # "stage i of <model id>" for each stage it holds
    alive: bool
    last_seen: float
    memory: int | None
    code: bool = False  # it takes models pickled by value (code included) from deployers
    link: str | None = None  # its socket for neighbour stages on its host (workers/links.py)
    link_host: str | None = None  # what tells its host: neighbours with the same may link

    @property
    def stage(self) -> int | None:
        """The index of the (first) stage this worker holds; None when it holds none."""
        return int(self.stages[0].split()[1]) if self.stages else None


class Cluster:
    """A connection to a running cluster (and, for a local cluster, its processes)."""

    def __init__(self, address: str, *, timeout: float = DEFAULT_TIMEOUT,
                 keys: Keys | None = None, _processes: list[subprocess.Popen] | None = None,
                 max_answer_mb=DEFAULT_MAX_ANSWER_MB):
        _refuse_in_worker("Cluster()")
        cap_bytes(max_answer_mb)  # (a ValueError now)
        self.address = address
        self.timeout = timeout
        self.max_answer_mb = max_answer_mb  # the frames its models' answers may have
        self.keys = keys  # this client's pair and the servers' key, when the cluster uses keys
        self._coordinator = Peer(address, name=f"the coordinator at {address}", keys=keys)
        self._processes = list(_processes or [])
        self._lock = threading.Lock()
        self._closed = False
        # the program's open deployments, by id(): held weakly, so that a model the
        # program drops unloads (distributed/dropped.py), and forgotten once closed; those
        # published under a name are held in _published too (other clients use them)
        self._deployments: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._published: dict = {}
        self._left_behind: list = []  # (message, fields) for the coordinator (attach)
        self._restarter: tuple | None = None  # (stop event, thread) of restart=True
        self._cleanups: list = []  # run after the processes are gone (a scratch key dir)
        self._heartbeat: float | None = None
        self._started = False  # (a local cluster's: once every worker first registered)
        # the processes must not outlive an unreferenced cluster object either
        self._finalizer = weakref.finalize(self, stop_abandoned, self._processes)

    # ---- what the cluster is -----------------------------------------------------------------
    def status(self) -> dict:
        """The coordinator's view: itself and every worker."""
        self._check_open()
        return self._coordinator.request("status", timeout=self.timeout)["result"]

    @property
    def heartbeat(self) -> float:
        """The cluster's heartbeat interval in seconds (the coordinator's setting)."""
        if self._heartbeat is None:
            self._heartbeat = float(self.status()["coordinator"]["heartbeat"])
        return self._heartbeat

    def workers(self) -> list[WorkerInfo]:
        """Every registered worker: id, pid, address, host, stages held, liveness, memory."""
        return [WorkerInfo(**w) for w in self.status()["workers"]]

    def wait_for_workers(self, n: int, timeout: float = 60.0) -> list[WorkerInfo]:
        """Block until ``n`` workers are registered and alive (``ClusterError`` at the deadline;
        at once when a process of a local cluster ended, unless ``restart=True`` replaces it)."""
        deadline = time.monotonic() + timeout
        answered = None  # what the coordinator said last (None: it never answered)
        while True:
            self._check_processes()
            try:
                answered = self.workers()
                workers = [w for w in answered if w.alive]
            except RemoteTimeout:
                workers = []
            if len(workers) >= n:
                return workers
            if time.monotonic() > deadline:
                raise ClusterError(f"only {len(workers)} of {n} workers registered with "
                                   f"{self.address} within {timeout:g} s"
                                   f"{start_report(self._processes, answered)}")
            time.sleep(0.05)

    # ---- placing a model ----------------------------------------------------------------------
    def deploy(self, module, stages: int = 1, *, placement: dict | None = None,
               balance: str = "params", split_points=None, sample_input=None,
               chunks: int = 1, schedule: str = "gpipe", checkpoint: str | None = None,
               name: str | None = None, writable: bool = False, hooks_ahead: bool = True):
        """Place ``module`` on ``stages`` workers, in place, and return it: the same object,
        whose modules and tensors now live on the workers (docs/distributed.md, "Your
        model, placed"); its forward and methods run as written.

        Where the module's children can be cut into contiguous stages, they are (a chain:
        activations go worker to worker). Otherwise (too few children, tied weights across
        them, parameters of the root's own) its parts are placed over the module tree:
        ``placement`` maps module paths to stages (``{"transformer.h.0": 0, "lm_head":
        1}``; a path follows its nearest listed ancestor, and one not listed nor under a
        listed one stays here), or one is chosen (balanced by parameters, tied parts
        together, stateless parts here). A module whose parts are on several workers runs
        its forward here, calling each part on its worker.

        Contiguous stages are balanced by parameter count (``balance="params"``), by the children's
        forward time measured here on ``sample_input`` (``balance="time"``), or cut where
        ``split_points`` say (indices of the children that start stages 2..N). With
        ``chunks=M`` each call splits its batch along dim 0 into M micro-batches that flow
        through the stages as a pipeline (forward, and backward after it: GPipe); hooks fire
        once per micro-batch, in micro-batch order. ``remote.train_step(x, target, loss_fn)``
        runs a whole step with the loss on the last stage under ``schedule`` ("gpipe" or
        "1f1b", which holds at most as many micro-batches per stage as there are stages).
        ``checkpoint``: a directory written by ``remote.save``, whose weights are loaded
        (the module must have the structure it was saved with).

        ``name``: once loaded, the model is published under it on the coordinator, so that
        other clients find it (``models()``) and use it (``attach(name)``) until the
        model is closed; a name another live deployment holds is refused. By default
        they may not write its weights; ``writable=True`` lets them.

        ``hooks_ahead``: a forward or backward does not wait for the answer of a client hook
        that has only looked so far (returned None, changed nothing in place): it runs on
        and takes the answers when the stage's pass is done, running the pass again if one
        turns out to change something (docs/hooks.md). ``False``: every firing of the
        hooks registered on this model waits for its answer."""
        from disthook.distributed import registry
        from disthook.distributed.deploy import deploy

        self._check_open()
        if name is not None:  # refused before anything loads
            registry.check_name(self, name)
        from disthook.distributed.placed import deployment_of

        model = deploy(self, module, stages, split_points=split_points, balance=balance,
                       sample_input=sample_input, chunks=chunks, schedule=schedule,
                       placement=placement, writable=writable, hooks_ahead=hooks_ahead,
                       public=name is not None)
        remote = deployment_of(model)
        try:
            if checkpoint is not None:
                remote.load_checkpoint(checkpoint)
            if name is not None:
                registry.publish(self, remote, name, writable=writable)
        except BaseException:
            remote.close()
            raise
        self._keep(remote)
        return model

    def load(self, path: str, *, trust_code: bool = False):
        """Deploy the model saved in checkpoint ``path`` as it was saved (its classes, its
        placement: over its tree, contiguous stages or whole, micro-batches and schedule)
        with its weights; the model, placed. Its optimizer state is restored with
        ``remote.load_checkpoint(path, optimizer=...)``. A checkpoint that keeps its model as
        code (``save(path, code=True)``) loads only with ``trust_code=True``."""
        from disthook.distributed import checkpoint as ckpt

        manifest, shards = ckpt.read(path)
        module = ckpt.rebuild(manifest, shards, path=path, trust_code=trust_code)
        stages, options = ckpt.placed_as(manifest)
        return self.deploy(module, stages, **options)  # the module carries the saved weights

    # ---- models shared by name ----------------------------------------------------------------
    def attach(self, name: str, *, trust_code: bool = False, owner: str | None = None):
        """The model another client deployed and published as ``name``: the model rebuilt
        here from its description, of its own classes, placed on the same stages over
        connections of this client's own (forward, backward, hooks, ``state_dict``,
        gradients, as the deployer has them). Its class must be importable here (or defined
        in this script). Closing it leaves the stages loaded. ``UnknownModel`` (a
        ``KeyError``) lists the published names when none is ``name``. A model whose modules
        hold code (lambdas) is published with its code, which runs here only with
        ``trust_code=True``. ``owner`` (a key's name, as ``models()`` lists it): attach only
        to that deployer's model, else ``PermissionError``."""
        from disthook.distributed import registry

        self._check_open()
        from disthook.distributed.placed import deployment_of

        self._send_left_behind()
        model = registry.attach(self, name, trust_code=trust_code, owner=owner)
        remote = deployment_of(model)
        self._keep(remote)
        # dropped unclosed, it detaches before this client's next attach (its finalizer may
        # not use the coordinator's connection: it runs inside whatever the program does)
        detach = weakref.finalize(remote._hub, self._left_behind.append, ("detach", {
            "name": name, "model": remote._model_id, "client": registry.client_id(remote)}))
        detach.atexit = False
        object.__setattr__(remote, "_detach_when_dropped", detach)
        return model

    def _send_left_behind(self) -> None:
        """What the attached models dropped unclosed owe the coordinator: their detach (it
        counts a client's attachments, and refuses one past its limit). Before, a program
        that attached and dropped a model 64 times was refused every attach after."""
        from disthook.distributed.registry import LEAVE_TIMEOUT_S

        while self._left_behind:
            msg_type, fields = self._left_behind.pop(0)
            try:
                self._coordinator.request(msg_type, fields, timeout=LEAVE_TIMEOUT_S)
            except (RemoteTimeout, RemoteError, OSError):
                pass  # the coordinator gone: it forgot this connection's attachments then

    def _keep(self, remote) -> None:
        """Count ``remote`` among the open deployments that ``close`` closes (a published
        one held alive: others use it under its name)."""
        self._deployments[id(remote)] = remote
        if remote._published:
            self._published[id(remote)] = remote

    def _forget(self, remote) -> None:
        """``remote`` closed: nothing of the cluster holds it any more."""
        self._deployments.pop(id(remote), None)
        self._published.pop(id(remote), None)

    def models(self, *, calls: bool = True) -> list[dict]:
        """The published models, as the coordinator knows them: per model its ``name``,
        ``model`` (id), ``class``, ``owner``, ``writable``, ``created`` (unix seconds),
        ``live`` (owner connected, workers alive), ``stages`` (stage, worker, address,
        alive) and ``clients``, those attached (client, since). With ``calls`` each stage
        also says how many forwards its worker served for it (``forwards``; None where the
        worker did not answer)."""
        self._check_open()
        models = self._coordinator.request("models", timeout=self.timeout)["result"]
        if calls and models:
            served = {}
            for w in self.workers():
                if not w.alive:
                    continue
                try:
                    served[w.id] = self._ask_worker(w.address, w.id, "status")["stage_stats"]
                except (RuntimeError, OSError):  # an error, a time-out: None for its stages
                    pass
            for model in models:
                for stage in model["stages"]:
                    stats = served.get(stage["worker"], {}).get(
                        f"stage {stage['stage']} of {model['model']}", {})
                    stage["forwards"] = stats.get("forwards")
        return models

    def captured(self, name: str, *, clear: bool = False, details: bool = False) -> list:
        """What ``hooks.capture(name)`` kept on every worker, oldest first: per hook call, a
        detached Tensor (or a tuple of them, for a forward pre hook's args or a backward
        hook's grad_output). Reading keeps the workers' buffers, so a second call returns
        the same and more; ``clear=True`` empties them too (in a loop, do: they grow until
        emptied). With ``details`` each item is a dict: value, path, kind (of hook) and
        micro_batch (its index when the model runs micro-batches, else None)."""
        self._check_open()
        # each client's buffers are its own on a worker, by the connection its hooks came
        # on: asked over each model's own connections (one per worker and client identity)
        items, asked = [], set()
        for remote in list(self._deployments.values()):
            hub = getattr(remote, "_hub", None)
            if hub is None or getattr(remote, "_closed", False) or not hub.socks:
                continue
            todo = [a for a in dict.fromkeys(remote._addresses) if (hub.identity, a) not in asked]
            asked.update((hub.identity, a) for a in todo)
            if todo:
                replies = hub.request_all([(a, {"name": name, "clear": clear}) for a in todo],
                                          "captured", what=f"captured({name!r})")
                items += [item for reply in replies for item in reply["result"]]
        return captured_items(items, details)

    def hook_counts(self) -> dict[str, dict[str, int]]:
        """How many times hooks fired on each live worker since it started: worker id ->
        {hook name: calls}, worker hooks by their name (``capture``, ``clamp_grad``, ...),
        client hooks (whose stub fires on the worker) as ``client``."""
        return {worker_id: reply["hooks_fired"]
                for worker_id, reply in self._ask_workers("status").items()}

    def full_status(self, timeout: float | None = None) -> dict:
        """The coordinator's status with each worker's own status reply under its entry's
        ``"own"`` key (memory, open graphs as ``contexts``, ``waits``, ``queued``, messages
        decoded, hooks fired, per-stage stats); ``None`` there, and the reason under
        ``"error"``, for a worker that is lost or did not answer within ``timeout`` (default:
        the cluster's). One JSON-ready document, for ``disthook status --json``."""
        status = self.status()
        for w in status["workers"]:
            w["own"], w["error"] = None, None
            if not w["alive"]:
                w["error"] = "lost: no heartbeat"
                continue
            try:
                w["own"] = self._ask_worker(w["address"], w["id"], "status", timeout=timeout)
            except (RuntimeError, OSError) as exc:  # an error, a time-out: say so, go on
                w["error"] = str(exc)
        return status

    def _ask_workers(self, msg_type: str, fields: dict | None = None) -> dict:
        """Send one request to every live worker directly; worker id -> its result."""
        self._check_open()
        results = {}
        for w in self.workers():
            if w.alive:
                results[w.id] = self._ask_worker(w.address, w.id, msg_type, fields)
        return results

    def _ask_worker(self, address: str, worker: str, msg_type: str, fields: dict | None = None,
                    timeout: float | None = None):
        """One request to a worker directly; its result. A worker whose process is gone (listed
        alive until silent a few seconds) fails at once, not at the request deadline."""
        if dial_once(address, keys=self.keys, within=1.0) is False:
            raise ClusterError(f"worker {worker} at {address} refuses connections: its "
                               "process is gone (the coordinator lists it as lost soon)")
        with Peer(address, name=f"worker {worker}", keys=self.keys) as peer:
            return peer.request(msg_type, fields, timeout=timeout or self.timeout)["result"]

    # ---- ending ------------------------------------------------------------------------------
    def close(self, reason: str = "the client closed the cluster") -> None:
        """Shut a local cluster down and reap its processes (their logs say ``reason``); for
        ``connect``, just disconnect."""
        if self._closed:
            return
        self._closed = True
        if self._restarter is not None:  # workers stopping now must not be replaced
            self._restarter[0].set()
            self._restarter[1].join()
        for remote in list(self._deployments.values()):
            remote.close(unload=not self._processes)  # a local cluster's workers stop anyway
        try:
            if self._processes and self._processes[0].poll() is not None and not (
                    self._coordinator_listens()):
                # the coordinator died, none listens on its address again: nobody tells the
                # workers to stop (asking took 5 s, then the workers' 5 s of grace)
                for proc in self._processes[1:]:
                    proc.terminate()  # a worker stops cleanly on SIGTERM
            elif self._processes:
                try:
                    self._coordinator.request("shutdown", {"reason": reason}, timeout=5.0)
                except (RemoteTimeout, OSError):
                    pass  # the processes are terminated below anyway
        finally:
            self._coordinator.close()
            self._finalizer.detach()  # told to shut down: the processes are given the grace
            reap(self._processes, 5.0)  # waits for them, kills the stragglers
            for cleanup in self._cleanups:
                cleanup()

    def _coordinator_listens(self) -> bool:
        """Whether a coordinator listens at this cluster's address (one started again)."""
        try:
            return bool(dial_once(self.address, keys=self.keys, within=1.0))
        except (ClusterError, OSError):  # something else took the address, or refuses us
            return False

    def _start_restarter(self, coordinator: Role, worker: Role, stderr, *,
                         next_number: int) -> None:
        """A thread that replaces every process that exits (local clusters): a worker by a
        new worker (numbered on from ``next_number``: an id is never reused), the
        coordinator by a new one on the same address (the workers register with it again,
        keeping their stages)."""
        stop = threading.Event()
        procs, lock = self._processes, self._lock
        numbers = itertools.count(next_number)

        def watch():
            while not stop.wait(0.2):
                with lock:
                    for i, proc in enumerate(procs):
                        if proc.poll() is not None and not stop.is_set():
                            role = (coordinator if i == 0 else
                                    worker.named(local_worker_id(next(numbers))))
                            procs[i] = spawn(role, stderr)

        thread = threading.Thread(target=watch, name="disthook-restarter", daemon=True)
        thread.start()
        self._restarter = (stop, thread)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<disthook Cluster at {self.address} ({state})>"

    def _last_stderr(self, pid: int) -> list[str]:
        """The last stderr lines of this local cluster's process ``pid``, once it has ended
        (none for processes started elsewhere, or whose stderr went to a file)."""
        for proc in self._processes:
            if proc.pid == pid:
                return stderr_tail(proc)
        return []

    def _check_open(self) -> None:
        if self._closed:
            raise ClusterError(f"the cluster at {self.address} is closed")

    def _check_processes(self) -> None:
        if self._restarter is not None and self._started:  # one that ended is replaced:
            return  # no error (before: it "exited ... during start-up", killed long after)
        for proc in self._processes:
            if proc.poll() is not None:
                role = "coordinator" if proc.args[2:3] == ["coordinator"] else "worker"
                raise ClusterError(f"the {role} (pid {proc.pid}) {why_it_ended(proc)}")


def captured_items(items: list[dict], details: bool) -> list:
    """Workers' capture records (on_captured) as ``Cluster.captured`` returns them: oldest
    first, each its value, or with ``details`` a dict of value, path, kind, micro_batch."""
    from disthook.service.values import unpack

    items = sorted(items, key=lambda item: item["order"])
    if details:
        return [{"value": unpack(i["value"], classes=True), "path": i["path"], "kind": i["kind"],
                 "micro_batch": i["micro_batch"]} for i in items]
    return [unpack(item["value"], classes=True) for item in items]


def connect(address: str, *, timeout: float = DEFAULT_TIMEOUT, keys=None,
            key_name: str = CLIENT, max_answer_mb=DEFAULT_MAX_ANSWER_MB) -> Cluster:
    """Attach to a running cluster by its coordinator's endpoint (``tcp://host:port``, or
    ``host:port``). ``keys``: the cluster's key directory (or a ``Keys``), when it runs with
    keys; the client pair used is ``key_name`` (default "client"). A cluster that refuses the
    key raises ``AuthenticationError``; something that is not a disthook coordinator of this
    protocol version, ``NotACoordinator`` (within about a second); no coordinator there,
    ``CoordinatorUnreachable``
    (after ``STARTING_GRACE_S`` seconds when nothing listens, for one that is starting up
    meanwhile; after ``timeout`` seconds when something listens but does not answer).
    ``max_answer_mb``: the largest frame (an array of an answer) this client takes from a
    worker (2048 by default, the most the wire carries); a worker that sends a larger one
    has its connection closed unread, and the call raises ``AnswerTooLarge``."""
    _refuse_in_worker("connect()")
    cap_bytes(max_answer_mb)
    endpoint = parse(address, "connect()'s address")  # a ValueError before any socket
    if not timeout > 0:
        raise ValueError(f"connect() needs timeout > 0 seconds, got {timeout!r}")
    address = str(endpoint)
    if keys is not None and not isinstance(keys, Keys):
        keys = Keys.load(os.fspath(keys), key_name)
    listening = dial_once(address, keys=keys, within=min(timeout, 1.0))
    grace = Deadline(min(timeout, STARTING_GRACE_S))  # a coordinator still starting up
    while listening is False and grace.left() > 0:
        time.sleep(0.1)
        listening = dial_once(address, keys=keys, within=min(timeout, 1.0))
    if listening is False:
        raise CoordinatorUnreachable(address, refused=True, with_keys=keys is not None,
                                     unknown_host=unknown_host(endpoint))
    # what listens is a disthook coordinator of this version (NotACoordinator at once when
    # not), or nothing answers: fail now, not at the first real call
    if not greet(address, keys=keys, timeout=timeout):
        raise CoordinatorUnreachable(address, refused=False, waited=timeout,
                                     listening=listening, with_keys=keys is not None)
    return Cluster(address, timeout=timeout, keys=keys, max_answer_mb=max_answer_mb)


def local_cluster(workers: int = 2, *, host: str = "127.0.0.1", port: int = 0,
                  heartbeat: float = HEARTBEAT_S, timeout: float = DEFAULT_TIMEOUT,
                  start_timeout: float = 60.0, log_level: str = "WARNING",
                  stderr=None, allow_hook_modules=(), restart: bool = False,
                  secure: bool = False, keys=None, context_ttl: float = 600.0,
                  allow_code: bool = True, allow_model_modules=None,
                  threads: int | str | None = None) -> Cluster:
    """Start a coordinator and ``workers`` worker processes on this machine; a ``Cluster``.

    ``allow_hook_modules``: modules (or packages) whose functions ``hooks.by_path`` may run
    on the workers. With ``restart`` a worker process that dies is replaced by a new one
    (a model that had a stage there raises WorkerLost; ``remote.recover()`` places it again
    and loads its last checkpoint), and a coordinator that dies by a new one on the same
    address. With ``secure`` every connection is encrypted and the
    processes accept only this client's key: a fresh key directory is made for the cluster
    (and removed with it), or ``keys=DIR`` names one (``disthook keys generate DIR``).
    ``context_ttl``: seconds a worker keeps a forward's graph waiting for its backward (the
    graphs of a client that vanished are dropped then). ``allow_code``: workers take models
    pickled by value, code included, from the clients that deploy them (the default: this
    program owns the cluster; see docs/security.md); ``allow_model_modules``: when given, the
    only modules (or packages) besides disthook whose classes workers take (``disthook
    serve`` passes the served model's).
    ``threads``: the BLAS and OpenMP threads of each worker. None (the default): the
    environment's, as this process has them, so that the workers' arithmetic rounds as this
    process's does (BLAS sums in another order with another thread count); "share": each
    worker's share of this machine's cores (at least 1), unless the environment sets a count
    (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, ...); or a count. With several workers and no
    count set, each worker's BLAS takes every core and the workers take the cores from one
    another: "share" is the fast choice there."""
    _refuse_in_worker("local_cluster()")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"local_cluster() needs workers >= 1, got {workers!r}")
    if threads == "share":
        threads = share_of_cores(workers)
    elif threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)
                                  or threads < 1):
        raise ValueError(f"local_cluster() needs threads >= 1, \"share\" (each worker's "
                         f"share of the cores) or None (the environment's), got {threads!r}")
    check_free(f"tcp://{host}:{port}")  # EndpointInUse now, not a coordinator's traceback
    procs: list[subprocess.Popen] = []
    scratch = None  # a key directory made for this cluster alone
    if secure and keys is None:
        scratch = keys = tempfile.mkdtemp(prefix="disthook-keys-")
        generate(keys)
    key_dir = None if keys is None else os.fspath(keys)
    # with restart, the coordinator keeps its registry of published models in a file, so
    # one started again still knows every name and its owner
    state_dir = tempfile.mkdtemp(prefix="disthook-state-") if restart else None
    state = None if state_dir is None else os.path.join(state_dir, "registry")
    try:
        first = coordinator_role(f"tcp://{host}:{port}", heartbeat=heartbeat, keys=key_dir,
                                 log_level=log_level, state=state)
        coordinator = spawn(first, stderr, announce=True)
        procs.append(coordinator)
        address = announced_address(coordinator, start_timeout)
        # allow_code: this program owns the cluster and sends its models with their code (a
        # shared service turns it off and lists the modules models may come from:
        # allow_model_modules)
        worker = worker_role(address, bind=f"tcp://{host}:0", keys=key_dir,
                             log_level=log_level, allow_hook_modules=allow_hook_modules,
                             allow_code=allow_code, context_ttl=context_ttl,
                             allow_model_modules=allow_model_modules, threads=threads)
        for number in range(1, workers + 1):  # w1, w2, ...: ids a log line reads well
            procs.append(spawn(worker.named(local_worker_id(number)), stderr))
        cluster = Cluster(address, timeout=timeout, _processes=procs,
                          keys=None if keys is None else Keys.load(os.fspath(keys)))
        if scratch is not None:  # after the processes: they read the keys at start
            cluster._cleanups.append(weakref.finalize(cluster, shutil.rmtree, scratch, True))
        if restart:
            again = coordinator_role(address, heartbeat=heartbeat, keys=key_dir,
                                     log_level=log_level, state=state)  # the same address
            cluster._start_restarter(again, worker, stderr, next_number=workers + 1)
            cluster._cleanups.append(weakref.finalize(cluster, shutil.rmtree, state_dir, True))
    except BaseException:
        reap(procs, 5.0)
        for folder in (scratch, state_dir):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        raise
    try:
        cluster.wait_for_workers(workers, timeout=start_timeout)
    except BaseException:
        cluster.close()
        raise
    cluster._started = True
    return cluster
