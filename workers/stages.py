"""A worker's stages: what it holds of each model it was given (``Stage``), and the requests
that load and unload them (``StageHandlers``, a mixin of ``Worker``). A stage's modules come
pickled by value with their code, from a client that deploys to workers taking code
(``--allow-code``), or as data: classes by import path, from the modules this worker allows.
"""
from __future__ import annotations

import zmq

from disthook.distributed import aliases, shipping
from disthook.distributed.spec import build_module, runs_a_program
from disthook.nn.modules.module import Module
from disthook.service.loop import NO_REPLY
from workers import attr_changes
from workers.links import Link
from workers.peers import neighbour_identity
from workers.speculation import HookRecord
from workers.versions import Versions

__all__ = ["Stage", "StageHandlers"]

# optimizer calls known as run (see Stage.first_time): per client, and per stage in all
CALLS_PER_CLIENT = 1024
CALLS_REMEMBERED = 4096
_MISSING = object()


class Stage:
    """One model's stage on this worker: its modules (an nn.Sequential named as in the full
    model), its neighbour stages, client hooks and optimizer shares. Its forward graphs are
    kept in the worker's state (``WorkerState.contexts``).

    Several clients may use one stage; each sees the gradients of its own backward passes
    only, and the plain attributes its own calls set on the modules. The parameters'
    ``.grad`` and the modules' plain attributes hold one client's at a time (``use_client``,
    called whenever a job of a client touches the stage, and again when a job that waited
    goes on: jobs take turns, so what is installed is always the running job's client's);
    the others' wait in ``grads`` and ``attrs``. A client's attributes start as the stage's
    were when it was loaded (as its copy of the model has them), not as the calls of others
    left them: a module that keeps what it computed (``self.maps.append(attn)``) showed an
    attached client every other client's activations. One client costs nothing: nothing is
    swapped."""

    def __init__(self, model: str, index: int, module, owner: bytes = b"",
                 writable: bool = False, public: bool = False) -> None:
        self.model, self.index, self.module = model, index, module
        self.owner, self.writable = owner, writable  # who loaded it; may others write it
        self.public = public  # published: every client may use it (with keys, else its key's)
        self.shared = False  # another client has called it (workers/attr_changes: Snapshot)
        self.params = list(module.parameters())
        self.versions = Versions(module)  # the weights' versions (workers.versions)
        # what it is beyond its weights' values (modes, dtypes, buffers, requires_grad) changed
        # this many times: an attached client's answers carry it (workers/form.py)
        self.form = 0
        self.installed = owner  # whose gradients and attributes the modules hold now
        self.grads: dict[bytes, list] = {}  # every other client's, one per parameter
        # every other client's plain attributes, one dict per module; and as loaded
        self.modules = [m for _, m in module.named_modules()]
        self.attrs: dict[bytes, list[dict]] = {}
        self.loaded_attrs = [attr_changes.private(attr_changes.plain(m)) for m in self.modules]
        self.plain = attr_changes.Plain(self.modules)
        # (client, its backward's id) -> gradients kept for that backward's later calls
        self.held: dict[tuple, object] = {}  # (workers/held_grads.py)
        self.name = f"stage {index} of {model}"
        # "prev"/"next" -> a local link to that worker (workers.links), else a DEALER
        self.neighbours: dict[str, zmq.Socket | Link] = {}
        # (client, its hook id) -> the handle of the stub; -> what on_list_hooks tells of it
        self.hooks: dict[tuple, object] = {}
        self.hook_info: dict[tuple, dict] = {}
        self.forwards = 0  # forwards run (one per micro-batch), for status
        self.parameters = sum(p.numel() for p in module.parameters())
        # the bytes of its weights, and who they are counted against (LimitChecks.keeper)
        self.nbytes = sum({id(t): t.nbytes for t in module.state_dict(keep_vars=True).values()}
                          .values())
        self.keeper: bytes | str = owner
        self.optimizers: dict[tuple, object] = {}  # (client, optimizer id) -> local share
        # client -> the numbers of its optimizer calls that rode with a forward or training
        # step and ran here, oldest first: one sent again (its carrier failed on a later
        # stage) is skipped; self.calls_kept counts them all
        self.calls_done: dict[bytes, dict[int, None]] = {}
        self.calls_kept = 0
        # (pass, training mode) -> whether such a pass ("forward", "backward") left the
        # parameters and buffers as they were (learnt from the passes client hooks
        # watched), and (client, hook id, kind) -> what its answers showed so far: whether
        # they may run ahead (see workers/speculation.py)
        self.pure: dict[tuple, bool] = {}
        self.hook_records: dict[tuple, HookRecord] = {}
        self.ran_ahead = 0  # client hook firings whose answer the forward did not wait for
        self.ran_again = 0  # forwards or backwards run again: such an answer changed something
        self.answered_ahead = 0  # results sent to the client before such answers were taken

    def use_client(self, client: bytes) -> None:
        """Make the parameters' ``.grad`` and the modules' plain attributes those of
        ``client`` (kept aside for the one installed before)."""
        if client == self.installed:
            return
        self.grads[self.installed] = [p._grad for p in self.params]
        mine = self.grads.pop(client, None)
        for i, p in enumerate(self.params):
            p._grad = None if mine is None else mine[i]
        self.attrs[self.installed] = self.plain.take()
        attrs = self.attrs.pop(client, None)
        if attrs is None:  # its first job here: the attributes as loaded
            attrs = [attr_changes.private(a) for a in self.loaded_attrs]
        self.plain.put(attrs)
        self.installed = client

    def share_attr(self, module: Module, name: str) -> None:
        """The deployer set or deleted attribute ``name`` of ``module`` (``module_op``: what
        every client's model mirrors): every client's attributes take it, and so do those
        as loaded."""
        i = next((i for i, m in enumerate(self.modules) if m is module), None)
        if i is None:  # (a module added since the stage was loaded: every client's)
            return
        value = attr_changes.plain(module).get(name, _MISSING)
        for attrs in (*self.attrs.values(), self.loaded_attrs):
            if value is _MISSING:
                attrs[i].pop(name, None)
            else:
                attrs[i][name] = attr_changes.private(value)

    def record(self, client: bytes, hook_id: int, kind: str) -> HookRecord:
        """What the answers of ``client``'s hook ``hook_id`` fired as ``kind`` showed."""
        key = (client, hook_id, kind)
        found = self.hook_records.get(key)
        if found is None:
            found = self.hook_records[key] = HookRecord()
        return found

    def forget(self, client: bytes) -> None:
        """A client went away: its gradients, hooks' records and optimizer shares go."""
        for key in [k for k in self.hook_records if k[0] == client]:
            del self.hook_records[key]
        if client == self.installed and client != self.owner:
            self.use_client(self.owner)
        self.grads.pop(client, None)
        self.attrs.pop(client, None)
        for key in [k for k in self.held if k[0] == client]:
            del self.held[key]
        for key in [k for k in self.optimizers if k[0] == client]:
            del self.optimizers[key]
        self.calls_kept -= len(self.calls_done.pop(client, ()))

    def first_time(self, client: bytes, call: int | None) -> bool:
        """Whether ``client``'s optimizer call number ``call`` runs here for the first time
        (a call without a number always does); it is remembered as run from now on. A
        client's record forgets its own oldest past ``CALLS_PER_CLIENT``, and past
        ``CALLS_REMEMBERED`` on the stage the largest record forgets its oldest: another
        client's calls never push out those of a client that keeps fewer. Before, one
        record of the stage forgot the oldest of any client, and another client's 4096
        calls (zero_grad of an optimizer of its own) made a call that was sent again run
        a second time: its optimizer stepped twice, silently."""
        if call is None:
            return True
        mine = self.calls_done.setdefault(client, {})
        if call in mine:
            return False
        mine[call] = None
        self.calls_kept += 1
        if len(mine) > CALLS_PER_CLIENT:
            self._forget_oldest_call(client)
        while self.calls_kept > CALLS_REMEMBERED:
            self._forget_oldest_call(max(self.calls_done, key=lambda c: len(self.calls_done[c])))
        return True

    def _forget_oldest_call(self, client: bytes) -> None:
        calls = self.calls_done[client]
        del calls[next(iter(calls))]
        self.calls_kept -= 1
        if not calls:
            del self.calls_done[client]

    def check_write(self, client: bytes, what: str) -> None:
        """``PermissionError`` unless ``client`` may change the stage's weights."""
        if client != self.owner and not self.writable:
            raise PermissionError(
                f"{what} would change {self.name}, which its deployer shares read-only: "
                "this client may run it, hook it and take gradients, not change its weights "
                "(the deployer opens writes with deploy(..., writable=True), or, for a "
                "model published by `disthook serve`, with its --writable option)")

    def check_form(self, client: bytes, what: str) -> None:
        """``PermissionError`` unless ``client`` may change what the stage is beyond its
        weights' values (train/eval, attributes, buffers registered, dtypes, requires_grad):
        its deployer alone, also on a writable model, whose every client's model mirrors
        these and would compute silently otherwise than it says."""
        if client == self.owner:
            return
        if not self.writable:
            self.check_write(client, what)
        raise PermissionError(
            f"{what} would change {self.name} beyond its weights' values: the deployer "
            "opened its weights to this client (load_state_dict, in-place edits, optimizer "
            "steps), not its mode, attributes, buffers, dtypes or requires_grad, which every "
            "client's copy of the model mirrors; ask the deployer to change it")


# characters of a model's id (as the coordinator's of a published one): every heartbeat and
# status names each stage a worker holds, and two stages of 600 KB ids made a worker's
# heartbeat pass the coordinator's 1 MiB cap, which then listed the worker dead
MAX_MODEL_ID_CHARS = 256
_ANY_CLIENT = frozenset({"status", "load_stage"})  # (load_stage: _check_reload says who may)
MAX_RETIRED = 65536  # unloaded model ids a worker remembers (not taken by another)


def _check_reload(held: Stage | None, client: bytes) -> None:
    """A stage loaded again is replaced whole (its modules, neighbours, owner and settings,
    and every client's graphs, hooks and optimizer shares on it): only its deployer may,
    also on a writable model, whose clients may change its weights, not its placement."""
    if held is not None and client != held.owner:
        weights = ("its weights are open to this client (load_state_dict, optimizer steps), "
                   "its placement is not" if held.writable else "it is shared read-only")
        raise PermissionError(
            f"loading {held.name} again would replace it (its modules, neighbours and owner, "
            f"and what every client holds on it): only the client that deployed it may; "
            f"{weights}")


def _retire(held: dict, model: str, owner: bytes, keeper) -> None:
    """Remember in ``held["_retired"]`` (model id -> (owner, keeper)) that ``owner``'s model
    was unloaded, and in ``held["_retired_by"]`` (keeper -> its ids, oldest first) whose
    account it was. Past ``MAX_RETIRED`` the account that retired the most forgets its
    oldest: before, the oldest of all went, and a client that loaded and unloaded 65536
    models of its own made the worker forget another's id, which it could then load a
    model of its own under, for the clients still attached to that id to compute with."""
    retired = held.setdefault("_retired", {})
    by = held.setdefault("_retired_by", {})
    if model in retired:
        _, was = retired.pop(model)
        by[was].pop(model, None)
        if not by[was]:
            del by[was]
    retired[model] = (owner, keeper)
    by.setdefault(keeper, {})[model] = None
    while len(retired) > MAX_RETIRED:
        most = max(by, key=lambda k: len(by[k]))
        oldest = next(iter(by[most]))
        del by[most][oldest], retired[oldest]
        if not by[most]:
            del by[most]


class StageHandlers:
    """Loading and unloading stages, for ``Worker`` (a mixin: it uses the worker's sockets,
    state and helpers)."""

    def on_load_stage(self, job):
        """Make a stage of model ``msg["model"]`` (pickled by value, or from its spec) and
        connect to its neighbour stages; a stage of that model held before is replaced."""
        msg = job.msg
        if len(msg["model"]) > MAX_MODEL_ID_CHARS:
            raise ValueError(f"a model's id is at most {MAX_MODEL_ID_CHARS} characters, got "
                             f"{len(msg['model'])}: every heartbeat and status of this worker "
                             "names it")
        aliases.install(msg.get("aliases") or {})  # before the model's modules are imported
        module = self._stage_module(msg)
        _check_reload(self.stages.get(msg["model"]), job.client)
        self._check_retired(msg["model"], job.client)
        for field in ("prev", "next", "prev_link", "next_link"):  # a worker's (control.py)
            if msg.get(field):
                self.check_worker(msg[field], f"load_stage's {field}")
        stage = Stage(msg["model"], msg["stage"], module, owner=job.client,
                      writable=bool(msg.get("writable")), public=bool(msg.get("public")))
        self.check_models(job.client, stage.model, stage.nbytes)
        stage.keeper = self.keeper(job.client)
        self._drop(msg["model"])
        for side in ("prev", "next"):  # a local link where the neighbour is on this host
            if msg.get(side):
                stage.neighbours[side] = self.dial_neighbour(
                    msg, side, neighbour_identity(self.id, side))
        self.stages[stage.model] = stage
        self.state.models.add(stage.model)
        self.log.info("worker %s: %s loaded by %s (%s)%s", self.id, stage.name,
                      self.who(job.client), ", ".join(module._modules),
                      ", writable by others" if stage.writable else "")
        self._beat()
        return {"parameters": sum(p.numel() for p in module.parameters())}

    def check_use(self, job) -> None:
        """With keys, ``PermissionError`` for a request about a model that its deployer did
        not publish, from a client of another key: a model's id is no secret (``status``
        lists every stage), and any authorized key read the weights of, ran and hooked
        every other client's own models. A call a neighbour stage carries on was checked
        where it came in (a later stage may not know the client's key)."""
        st = self.stages.get(job.msg.get("model")) if job.msg.type not in _ANY_CLIENT else None
        if (st is None or st.public or self.peers.keys is None or job.sender != job.client
                or self.keeper(job.client) == st.keeper):
            return
        raise PermissionError(
            f"{job.msg.type}: model {st.model!r} on worker {self.id} is its deployer's own: "
            "it was not published, so only its deployer's key may use it (the deployer "
            "shares it with deploy(..., name=...), and clients attach by that name)")

    def _stage_module(self, msg) -> Module:
        """The stage's module tree: unpickled (code from a deploying client, only where this
        worker takes code) or built from data (classes by import path, allow-listed)."""
        if msg.get("code") is not None:
            if not self.allow_code:
                raise PermissionError(
                    "this worker takes no code: the model came pickled with its code, which "
                    "only workers started with --allow-code (local clusters, disthook "
                    "launch) run; a shared service takes models as data (classes from "
                    "installed modules, see disthook serve --allow-model-module)")
            return shipping.loads(msg["code"], msg.get("arrays") or [])
        if msg.get("spec") is None:
            raise ValueError("load_stage carries neither the stage's code nor its spec")
        return build_module(msg["spec"], allow=self.model_module_allowed)

    def model_module_allowed(self, module: str) -> bool:
        """Whether a model's class (or an optimizer's, or a function an attribute names) may
        be imported from ``module`` here (``--allow-model-module``); never a package's
        ``__main__``, even in an allowed package (spec.runs_a_program)."""
        if runs_a_program(module):
            return False
        allowed = self.allow_model_modules
        if allowed is None:
            return True
        return any(module == a or module.startswith(a + ".")
                   for a in ("disthook", *allowed))

    def on_unload(self, job):
        """Forget the stage of a model (its graphs, hooks and optimizer shares too): only
        its deployer may."""
        held = self.stages.get(job.msg["model"])
        if held is not None and job.client != held.owner:
            raise PermissionError(f"unloading {held.name}: only the client that deployed it "
                                  "may; close() of an attached model leaves it loaded")
        if self._drop(job.msg["model"]):
            self._beat()
        # no reply: the client sends this as it closes its connection and takes none (a
        # reply would wait for a route that never comes back, and be dropped with a warning)
        return NO_REPLY

    def _check_retired(self, model: str, client: bytes) -> None:
        """A model id another client's stage held here before it was unloaded is not taken
        again: the clients attached to that model are bound to its id and this worker, and
        would go on computing, unwarned, with whatever was loaded under it."""
        owner = self.__dict__.get("_retired", {}).get(model, (None,))[0]
        if owner is not None and owner != client:
            raise PermissionError(
                f"model id {model!r} was another client's model on worker {self.id}, "
                "unloaded since: an id is not used again for another model (clients attached "
                "to the old one would compute with it); deploy under a new id")

    def _drop(self, model: str) -> bool:
        stage = self.stages.pop(model, None)
        self.state.unload(model)
        self.__dict__.get("data_stats", {}).pop(model, None)  # (status's bytes sent for it)
        if stage is None:
            return False
        _retire(self.__dict__, model, stage.owner, stage.keeper)
        for sock in stage.neighbours.values():
            self.drop_neighbour(sock)
        for handle in stage.hooks.values():
            handle.remove()
        self.log.info("worker %s: %s unloaded", self.id, stage.name)
        return True

