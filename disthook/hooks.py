"""The hook toolkit: temporary hooks by path or pattern, activation caches, activation
patching, stopping a forward early and tracing, beyond what torch offers.

Every function takes the model first and works the same on a local ``nn.Module`` and on a
deployed model. They are functions, not ``Module`` methods: torch's modules have
none, and a model's own attribute named ``patch`` or ``hooks`` stays the model's. The
toolkit only registers and removes hooks; they are dispatched where all hooks are, in
``Module.__call__`` and the backward engine. On a deployed model:

- ``hooks(...)`` registers its hooks on the workers holding the modules (a Python callable
  runs in the client, a worker hook of ``disthook.service.worker_hooks`` in the worker);
- a hook on a module that runs on the client (its parts are on several workers, or it
  is kept there) is an ordinary hook there, as in one process;
- ``run_with_cache`` and ``trace`` record with ``hooks.capture`` on the workers (ordinary
  hooks for the modules that run here) and fetch the records once per call (as
  ``cluster.captured`` does, over the model's own connections), with no round trip per
  module; with micro-batches the pieces of each value are joined along dim 0;
- ``patch`` replaces outputs with client forward hooks (a function's result stays
  differentiable across the processes);
- ``run_until`` runs only the stages up to the one holding the module (a model whose own
  forward runs on the client: that forward, up to the module's output).

Keys name modules by their paths in ``named_modules()`` (the model itself, ``""``, is never
selected): an exact path (``"blocks.0.attn"``), a glob pattern (``"blocks.*.attn"``,
``fnmatch``), or a predicate ``fn(path, module) -> bool`` (on a deployed model ``module`` is
the local description of the module: its class and attributes, its weights not kept
current). Cache keys are the module paths, and ``"<path>.grad"`` for the gradient of the
loss with respect to that module's output.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import fnmatch
import itertools
import sys
import uuid
import warnings
import weakref
from collections import OrderedDict

from disthook.tensor import Tensor, cat

__all__ = ["ActiveHook", "StopForward", "Trace", "TraceDict", "active_hooks", "hooks",
           "patch", "run_until", "run_with_cache", "stop_after", "trace"]

TAG = "toolkit"  # how a deployed model's workers know the hooks registered here
KINDS = {"forward_pre": "register_forward_pre_hook", "forward": "register_forward_hook",
         "full_backward": "register_full_backward_hook"}
GLOB_CHARS = frozenset("*?[")
# what a full backward hook on a module whose inputs need no gradient warns (a regex)
FIRST_MODULE_WARNING = "Full backward hook is firing when gradients are computed with respect"


@dataclasses.dataclass(frozen=True)
class ActiveHook:
    """A hook the toolkit registered: its kind (``forward_pre``, ``forward`` or
    ``full_backward``), module path, where it runs (``"local"``, ``"client"`` or
    ``"worker <id>"``) and the id of its handle."""

    kind: str
    path: str
    where: str
    id: int


# model -> {handle id: ActiveHook} of the toolkit hooks registered in this process now (a
# deployed model's workers list their own, so that what they hold is what is reported)
_registry: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# deployed models: model -> {("here" or "worker", id): when it was registered}, so that the
# hooks here and on the workers are listed together in the order they were registered
_order: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_sequence = itertools.count()


def _dep(model):
    """The deployment of a deployed model (given as the model itself), or None."""
    placed = sys.modules.get("disthook.distributed.placed")  # loaded with any deployment
    dep = placed.deployment_of(model) if placed is not None else None
    return dep if dep is not None and dep._local is model else None


def _is_remote(model) -> bool:
    return _dep(model) is not None


# ---- selecting modules -----------------------------------------------------------------------

def _named_modules(model) -> list[tuple[str, object]]:
    """(path, module) of every submodule; a deployed model's from its local description."""
    return [(path, module) for path, module in model.named_modules() if path]


def _select(model, key, named: list | None = None) -> list[str]:
    """The paths ``key`` (an exact path, a glob pattern or a predicate) selects, in module
    order (``named``: ``_named_modules(model)``, when known); a key that selects nothing is
    an error naming it and paths that exist."""
    named = _named_modules(model) if named is None else named
    paths = [p for p, _ in named]
    if callable(key):
        found = [p for p, m in named if key(p, m)]
        what = f"the predicate {getattr(key, '__qualname__', key)!r}"
    elif isinstance(key, str) and GLOB_CHARS & set(key):
        found = [p for p in paths if fnmatch.fnmatchcase(p, key)]
        what = f"the pattern {key!r}"
    elif isinstance(key, str):
        if key in paths:
            return [key]
        raise AttributeError(f"{_model_name(model)} has no submodule {key!r}"
                             f"{_available(paths, key)}")
    else:
        raise TypeError("a module key is a path, a glob pattern or a predicate "
                        f"fn(path, module), got {type(key).__name__}")
    if not found:
        raise ValueError(f"{what} selects no module of {_model_name(model)}"
                         f"{_available(paths, key if isinstance(key, str) else '')}")
    return found


def _select_all(model, names) -> list[str]:
    """Paths selected by one key or a list of keys, each once, in module order."""
    keys = names if isinstance(names, (list, tuple)) else [names]
    named = _named_modules(model)
    chosen = {p for key in keys for p in _select(model, key, named)}
    return [p for p, _ in named if p in chosen]


def _available(paths: list[str], key: str) -> str:
    near = difflib.get_close_matches(key, paths, n=3) if key else []
    shown = ", ".join(repr(p) for p in paths[:8]) + (", ..." if len(paths) > 8 else "")
    hint = f"; did you mean {' or '.join(repr(p) for p in near)}?" if near else ""
    return f"{hint} (its {len(paths)} module paths: {shown or 'none'})"


def _model_name(model) -> str:
    return type(model).__name__


# ---- temporary hooks -------------------------------------------------------------------------

def _runs_here(model, path: str) -> bool:
    """Whether the module at ``path`` runs in this process: any module of a local model; on
    a deployed model one the client holds (its parts are on several workers, or it was kept
    here), whose hooks are ordinary hooks here, as in one process."""
    return not _is_remote(model) or _dep(model)._layout.stage_of(path) is None


def _add(model, plan: list[tuple]) -> list:
    """Register the toolkit hooks of ``plan`` [(kind, path, fn)]; their handles, in plan
    order. A hook on a module that runs here is registered here (an ordinary hook); on a
    deployed model the others go to their workers, the requests together. If one fails,
    none stays."""
    order = _order.setdefault(model, {})
    when = [next(_sequence) for _ in plan]  # listed in plan order, wherever each runs
    handles: dict[int, object] = {}
    try:
        for i, (kind, path, fn) in enumerate(plan):
            if _runs_here(model, path):
                handles[i] = _add_here(model, kind, path, fn)
                order[("here", handles[i].id)] = when[i]
        there = [i for i in range(len(plan)) if i not in handles]
        if there:
            made = _dep(model)._add_hooks([(plan[i][0], plan[i][1], plan[i][2],
                                      model.get_submodule(plan[i][1]), {}) for i in there],
                                    tag=TAG)
            for i, handle in zip(there, made):
                handles[i] = handle
                order[("worker", handle.id)] = when[i]
    except BaseException:
        _remove(model, list(handles.values()))
        raise
    return [handles[i] for i in range(len(plan))]


def _add_here(model, kind: str, path: str, fn):
    """One toolkit hook registered in this process on the module at ``path``."""
    worker_hooks = sys.modules.get("disthook.service.worker_hooks")
    if worker_hooks is not None and isinstance(fn, worker_hooks.WorkerHook):
        if _is_remote(model):
            raise TypeError(f"{fn!r} for {path!r} runs on a worker, but the module at "
                            f"{path!r} runs on the client (its parts are on several "
                            "workers, or it was kept here): pass a function for it, or "
                            "select the modules inside it")
        raise TypeError(f"{fn!r} for {path!r} runs on a worker: use it on a deployed "
                        "model (cluster.deploy(...)), or pass a function here")
    handle = getattr(model.get_submodule(path), KINDS[kind])(fn)
    where = "client" if _is_remote(model) else "local"
    _registry.setdefault(model, {})[handle.id] = ActiveHook(kind, path, where, handle.id)
    return handle


def _remove(model, handles: list) -> None:
    """Remove the toolkit hooks of ``handles``: those on workers with one request per
    worker, those here one by one (each is tried; the first failure is raised after)."""
    failure = None
    proxies = sys.modules.get("disthook.distributed.proxies")  # loaded with any deployment
    remote = getattr(proxies, "RemoteHandle", ())  # () before any: no handle is one
    on_workers = [h for h in handles if isinstance(h, remote)]
    here = [h for h in handles if not isinstance(h, remote)]
    if on_workers:
        try:
            _dep(model)._remove_hooks([handle.id for handle in on_workers])
        except Exception as exc:  # noqa: BLE001 - those here must still go
            failure = exc
        for handle in on_workers:
            _order.get(model, {}).pop(("worker", handle.id), None)
    for handle in reversed(here):
        try:
            handle.remove()
        except Exception as exc:  # noqa: BLE001 - the others must still go
            failure = failure or exc
        _registry.get(model, {}).pop(handle.id, None)
        _order.get(model, {}).pop(("here", handle.id), None)
    if failure is not None:
        raise failure


@contextlib.contextmanager
def hooks(model, forward: dict | None = None, backward: dict | None = None,
          forward_pre: dict | None = None):
    """Register hooks for the ``with`` block only: ``{key: hook}`` per kind, ``backward``
    being full backward hooks; removed on exit, also when the block raises. Yields the
    ``ActiveHook`` entries registered."""
    plan, named = [], _named_modules(model)
    for kind, table in (("forward_pre", forward_pre), ("forward", forward),
                        ("full_backward", backward)):
        if table is None:
            continue
        if not isinstance(table, dict):
            raise TypeError(f"hooks(): {kind} takes a dict {{module key: hook}}, got "
                            f"{type(table).__name__}")
        for key, fn in table.items():
            if not callable(fn):
                raise TypeError(f"hooks(): the {kind} hook for {key!r} must be callable, got "
                                f"{type(fn).__name__}")
            plan += [(kind, path, fn) for path in _select(model, key, named)]  # all checked
    handles = _add(model, plan)
    try:
        where = "local" if not _is_remote(model) else None
        yield [ActiveHook(kind, path, where or _where(fn, model, path), h.id)
               for (kind, path, fn), h in zip(plan, handles)]
    finally:
        _remove(model, handles)


def _where(fn, model, path: str) -> str:
    worker_hooks = sys.modules["disthook.service.worker_hooks"]
    if not isinstance(fn, worker_hooks.WorkerHook):
        return "client"
    dep = _dep(model)
    return f"worker {dep._workers[dep._stage_of(path)].id}"


def active_hooks(model) -> list[ActiveHook]:
    """The hooks the toolkit registered on ``model`` that are registered now, in the order
    they were registered; on a deployed model those on its workers as the workers list them,
    with those on the modules that run here."""
    here = list(_registry.get(model, {}).values())
    if not _is_remote(model):
        return here
    listed = [(("worker", h["hook"]), ActiveHook(
                   h["kind"], h["path"],
                   "client" if h["runs"] == "client" else f"worker {h['worker']}", h["hook"]))
              for h in _dep(model)._hooks_on_workers() if h["tag"] == TAG]
    listed += [(("here", h.id), h) for h in here]
    order = _order.get(model, {})
    # those another client registered (not in ``order``) after, by id (ids count up)
    listed.sort(key=lambda entry: (order.get(entry[0], float("inf")), entry[1].id))
    return [hook for _, hook in listed]


# ---- caches ----------------------------------------------------------------------------------

def run_with_cache(model, x: Tensor, names="*", include_grads: bool = False, loss_fn=None):
    """``(output, cache)``: the model's output on ``x`` and a dict of the output of every
    module ``names`` selects (a key or a list of keys; detached copies, by path). With
    ``include_grads``, ``loss_fn(output).backward()`` runs too (parameters' ``.grad``
    accumulate as after any backward) and ``cache["<path>.grad"]`` holds the gradient
    with respect to that module's output (``grad_output[0]``). A module called several
    times in one forward keeps its last call."""
    if include_grads and loss_fn is None:
        raise ValueError("run_with_cache(include_grads=True) needs loss_fn: the gradients "
                         "are those of loss_fn(output), computed by its backward")
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"run_with_cache(): loss_fn must be callable, got {loss_fn!r}")
    paths = _select_all(model, names)
    with _Recorder(model, paths, inputs=False, outputs=True, grads=include_grads) as rec:
        out = model(x)
        if include_grads:
            with warnings.catch_warnings():  # about the recording hooks: noise to the caller
                warnings.filterwarnings("ignore", message=FIRST_MODULE_WARNING)
                loss_fn(out).backward()
    cache = {}
    for path in paths:
        cache[path] = rec.seen["output"].get(path)
        if include_grads and path in rec.seen["grad"]:
            cache[f"{path}.grad"] = rec.seen["grad"][path]
    return out, cache


class _Recorder:
    """Records what the hooks of ``paths`` see while it is entered: the first positional
    input, the output and the gradient of the output, each of the module's last call, in
    ``seen[what][path]``. Where the module runs here, with hooks that store them; where it
    runs on a worker, with ``hooks.capture`` there, fetched by ``sync()`` (and on exit)."""

    def __init__(self, model, paths: list[str], *, inputs: bool, outputs: bool, grads: bool):
        self.model, self.paths = model, paths
        self.wanted = {"input": inputs, "output": outputs, "grad": grads}
        self.seen: dict[str, dict] = {"input": {}, "output": {}, "grad": {}}
        self.remote = _is_remote(model)
        self.buffer = f"toolkit-{uuid.uuid4().hex}"
        self.captured: list[dict] = []  # the remote records fetched so far
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> _Recorder:
        tables = {"forward_pre": {}, "forward": {}, "backward": {}}
        for path in self.paths:
            for what, kind in (("input", "forward_pre"), ("output", "forward"),
                               ("grad", "backward")):
                if self.wanted[what]:
                    tables[kind][path] = self._hook(what, path)
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(hooks(self.model, **tables))
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._stack.close()
        finally:
            if self.remote:
                self.sync()  # also after an error: the workers' buffer is emptied

    def _hook(self, what: str, path: str):
        if not _runs_here(self.model, path):
            from disthook.service.worker_hooks import capture

            return capture(self.buffer)
        store = self.seen[what]
        if what == "input":
            return lambda module, args: store.__setitem__(path, _detached(args[0]))
        if what == "output":
            return lambda module, args, out: store.__setitem__(path, _detached(out))
        return lambda module, grad_in, grad_out: store.__setitem__(path,
                                                                   _detached(grad_out[0]))

    def sync(self) -> None:
        """Fetch the workers' records (one request per worker) and update ``seen``."""
        if not self.remote:
            return
        self.captured += _dep(self.model)._captured(self.buffer)
        picks = {"forward_pre": ("input", lambda v: v[0]), "forward": ("output", None),
                 "full_backward": ("grad", lambda v: v[0])}
        calls: dict[tuple, list] = {}  # (what, path) -> [[(micro-batch, value), ...] per call]
        for item in self.captured:
            what, pick = picks[item["kind"]]
            value = item["value"] if pick is None else pick(item["value"])
            runs = calls.setdefault((what, item["path"]), [[]])
            mb = item["micro_batch"]
            if mb is None or (runs[-1] and runs[-1][-1][0] is not None
                              and mb <= runs[-1][-1][0]):
                runs.append([])  # a new call: no micro-batches, or they start over
            runs[-1].append((mb, value))  # fresh tensors, made from the fetched arrays
        for (what, path), runs in calls.items():
            last = sorted(runs[-1], key=lambda entry: entry[0] or 0)
            self.seen[what][path] = _join([value for _, value in last])


def _detached(value):
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v) for v in value)
    return value


def _join(values: list):
    """Micro-batch pieces of one value joined along dim 0 (tuples element by element)."""
    if len(values) == 1:
        return values[0]
    first = values[0]
    if isinstance(first, Tensor):
        return cat(values, 0)
    if isinstance(first, (tuple, list)):
        return type(first)(_join(list(parts)) for parts in zip(*values))
    return values[-1]


# ---- tracing ---------------------------------------------------------------------------------

class Trace:
    """What one traced module saw in its last call: ``input`` (its first positional
    argument), ``output`` and ``grad`` (of the output), each None unless retained and seen."""

    def __init__(self, recorder: _Recorder, path: str):
        self._recorder, self.path = recorder, path

    def _get(self, what: str):
        rec = self._recorder
        if rec.remote and rec._stack is not None:  # inside the block: fetch what is new
            rec.sync()
        return rec.seen[what].get(self.path)

    input = property(lambda self: self._get("input"))
    output = property(lambda self: self._get("output"))
    grad = property(lambda self: self._get("grad"))

    def __repr__(self) -> str:
        return f"Trace({self.path!r})"


class TraceDict(OrderedDict):
    """``Trace`` per traced module path, in module order."""


class _Tracing:
    def __init__(self, model, layers, retain_input: bool, retain_output: bool,
                 retain_grad: bool):
        self.single = isinstance(layers, str) and not GLOB_CHARS & set(layers)
        paths = _select_all(model, layers)
        self.recorder = _Recorder(model, paths, inputs=retain_input, outputs=retain_output,
                                  grads=retain_grad)
        self.traces = TraceDict((p, Trace(self.recorder, p)) for p in paths)

    def __enter__(self):
        self.recorder.__enter__()
        return next(iter(self.traces.values())) if self.single else self.traces

    def __exit__(self, *exc) -> None:
        try:
            self.recorder.__exit__(*exc)
        finally:
            self.recorder._stack = None  # values are final: no more fetching


def trace(model, layers, retain_input: bool = False, retain_output: bool = True,
          retain_grad: bool = False):
    """A context manager tracing ``layers`` (one key, or a list) while it is entered: it
    gives a ``Trace`` for one exact path, else a ``TraceDict`` of them, whose ``input``,
    ``output`` and ``grad`` are those of each module's last call (detached copies)."""
    return _Tracing(model, layers, retain_input, retain_output, retain_grad)


# ---- patching and stopping -------------------------------------------------------------------

def patch(model, patches: dict, x: Tensor):
    """The model's output on ``x`` with module outputs replaced: ``{key: tensor}`` puts the
    tensor in place of the output (same shape), ``{key: fn}`` puts ``fn(output)``, which
    stays differentiable. On a deployed model a given tensor cannot receive a gradient."""
    if not isinstance(patches, dict):
        raise TypeError(f"patch() takes a dict {{module key: tensor or fn}}, got "
                        f"{type(patches).__name__}")
    remote = _is_remote(model)
    # with micro-batches each call of a hook sees the next rows of the batch
    rows = x.shape[0] if remote and _dep(model)._chunks > 1 and x.dim() and x.shape[0] > 1 else None
    forward = {}
    for key, value in patches.items():
        if isinstance(value, Tensor):
            if remote and value.requires_grad:
                raise ValueError(f"patch({key!r}): on a deployed model the patch tensor "
                                 "cannot receive a gradient; pass value.detach(), or a "
                                 "function of the output")
        elif not callable(value):
            raise TypeError(f"patch({key!r}): a patch is a Tensor or a function of the "
                            f"output, got {type(value).__name__}")
        for path in _select(model, key):
            forward[path] = _replacement(path, value, rows)
    with hooks(model, forward=forward):
        return model(x)


def _replacement(path: str, value, rows: int | None):
    """The forward hook putting ``value`` (or ``value(output)``) in place of the output."""
    if not isinstance(value, Tensor):
        return lambda module, args, out: value(out)
    taken = [0]  # rows given out so far, with micro-batches

    def hook(module, args, out):
        if not isinstance(out, Tensor):
            raise TypeError(f"patch({path!r}): the module returned {type(out).__name__}, "
                            "not a Tensor, so a tensor cannot replace it")
        expected = tuple(out.shape) if rows is None else (rows, *out.shape[1:])
        if tuple(value.shape) != expected:
            raise RuntimeError(f"patch({path!r}): the patch has shape {tuple(value.shape)} "
                               f"but the module's output has shape {expected}")
        if rows is None:
            return value.clone()  # later in-place ops must not change the caller's tensor
        start = taken[0]
        taken[0] += out.shape[0]
        return value[start:taken[0]].clone()

    return hook


class StopForward(Exception):
    """Raised by the hook of ``stop_after`` to end a forward; carries the output."""

    def __init__(self, output):
        super().__init__("the forward stopped after the module run_until asked for")
        self.output = output


def stop_after(module, path: str, *args, **kwargs):
    """Call ``module`` but end its forward once submodule ``path`` has run; that output."""
    target = module.get_submodule(path)
    token = object()

    def stop(m, hook_args, out):
        exc = StopForward(out)
        exc.token = token
        raise exc

    handle = target.register_forward_hook(stop)
    try:
        module(*args, **kwargs)
    except StopForward as exc:
        if getattr(exc, "token", None) is not token:
            raise
        return exc.output
    finally:
        handle.remove()
    raise RuntimeError(f"run_until: {path!r} did not run in the forward of "
                       f"{type(module).__name__}")


def run_until(model, x: Tensor, path: str):
    """The output of module ``path`` (an exact path) on the way to the model's output: the
    forward stops there. On a deployed model the later stages do no work."""
    if not isinstance(path, str) or GLOB_CHARS & set(path):
        raise TypeError(f"run_until() takes the exact path of one module, got {path!r}")
    _select(model, path)
    if _is_remote(model):
        return _dep(model)._run_until(x, path)
    return stop_after(model, path, x)
