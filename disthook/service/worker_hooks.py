"""Hooks that run inside the worker that owns the module or tensor: no round trip to the client.

Register them on a deployed model's proxies like any hook::

    from disthook.service import worker_hooks as hooks
    remote[2].register_forward_hook(hooks.capture("act"))        # the layer's outputs
    remote[2].register_full_backward_hook(hooks.capture("gout")) # its grad_output
    remote[0].weight.register_hook(hooks.clamp_grad(-1, 1))      # the weight's gradient, clamped
    remote[4].register_full_backward_pre_hook(hooks.scale_grad(0.5))
    remote[2].register_forward_hook(hooks.check_finite())        # raise on inf/nan
    remote[2].register_forward_hook(hooks.by_path("mypkg.probes:record", tag="l2"))
    remote[0].weight.register_hook(hooks.record_norm("gnorm"))   # only the gradient's L2 norm
    remote[0].weight.register_hook(hooks.clip_grad_norm(1.0))    # rescaled to norm <= 1
    ...
    cluster.captured("act")  # the captured tensors, oldest first (clear=True empties them)
    cluster.hook_counts()    # how many times hooks fired on each worker, by hook

What each sees, by the kind of hook it is registered as:

=================  ===================  ==================  ===================================
kind               capture stores       clamp/scale/clip    check_finite checks
                   (record_norm: its    return
                   L2 norm)
=================  ===================  ==================  ===================================
tensor             the gradient         the new gradient    the gradient
forward_pre        the positional args  (not allowed)       the positional args
forward            the output           (not allowed)       the output
full_backward      grad_output          the new grad_input  grad_input and grad_output
full_backward_pre  grad_output          the new grad_output grad_output
backward (legacy)  grad_output          the new grad_input  grad_input and grad_output
=================  ===================  ==================  ===================================

``by_path("pkg.module:function", **kwargs)`` runs a function of a module the worker was
started to allow (``disthook worker --allow-hook-module pkg``, or
``local_cluster(allow_hook_modules=["pkg"])``): it is called as the hook would be, with
``kwargs`` added, and its return value is used as the hook's.
"""
from __future__ import annotations

import collections
import importlib
import itertools
import math
import time

__all__ = ["WorkerHook", "by_path", "capture", "check_finite", "clamp_grad", "clip_grad_norm",
           "record_norm", "scale_grad"]

GRADIENT_KINDS = ("tensor", "full_backward", "full_backward_pre", "backward")
KINDS = (*GRADIENT_KINDS, "forward_pre", "forward")


class WorkerHook:
    """A hook to run on the worker, described as data: a built-in's name and its options."""

    def __init__(self, name: str, **options):
        self.name, self.options = name, options

    def spec(self) -> dict:
        return {"name": self.name, "options": self.options}

    def __call__(self, *args, **kwargs):
        raise TypeError(f"hooks.{self.name}(...) runs on a worker: register it on a module or "
                        "parameter of a deployed model (cluster.deploy(...))")

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"hooks.{self.name}({opts})"


def capture(name: str) -> WorkerHook:
    """Keep a detached copy of what the hook sees in the worker's buffer ``name``."""
    return WorkerHook("capture", buffer=_buffer_name("capture", name))


def record_norm(name: str) -> WorkerHook:
    """Keep only the L2 norm of what the hook sees (over all its tensors) in the worker's
    buffer ``name``, as a 0-dim float64 tensor: gradient flow without moving gradients."""
    return WorkerHook("record_norm", buffer=_buffer_name("record_norm", name))


def _buffer_name(hook: str, name) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"{hook}() takes a non-empty buffer name, got {name!r}")
    return name


def clamp_grad(min: float | None = None, max: float | None = None) -> WorkerHook:
    """Clamp gradients to [min, max] (either may be None), as ``grad.clamp(min, max)``."""
    if min is None and max is None:
        raise ValueError("clamp_grad() needs min or max")
    for label, v in (("min", min), ("max", max)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise TypeError(f"clamp_grad(): {label} must be a number, got {v!r}")
    if min is not None and max is not None and min > max:
        raise ValueError(f"clamp_grad(): min {min} is greater than max {max}")
    return WorkerHook("clamp_grad", min=min, max=max)


def scale_grad(factor: float) -> WorkerHook:
    """Multiply gradients by ``factor``."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise TypeError(f"scale_grad() takes a number, got {factor!r}")
    return WorkerHook("scale_grad", factor=factor)


def clip_grad_norm(max_norm: float) -> WorkerHook:
    """Rescale each gradient whose L2 norm exceeds ``max_norm`` to norm ``max_norm`` (per
    tensor and per call, unlike ``nn.utils.clip_grad_norm_``, which clips the total norm)."""
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)):
        raise TypeError(f"clip_grad_norm() takes a number, got {max_norm!r}")
    if not max_norm > 0 or math.isinf(max_norm):
        raise ValueError(f"clip_grad_norm(): max_norm must be positive and finite, "
                         f"got {max_norm}")
    return WorkerHook("clip_grad_norm", max_norm=max_norm)


def check_finite() -> WorkerHook:
    """Raise ``RuntimeError`` (a ``RemoteError`` at the client) naming the module path and the
    hook kind as soon as what the hook sees holds an inf or a nan."""
    return WorkerHook("check_finite")


def by_path(target: str, **kwargs) -> WorkerHook:
    """Run ``function`` of ``package.module`` (given as ``"package.module:function"``)."""
    if not isinstance(target, str) or target.count(":") != 1 or not all(target.split(":")):
        raise ValueError(f"by_path() takes 'package.module:function', got {target!r}")
    return WorkerHook("by_path", target=target, kwargs=kwargs)


# ---- on the worker ---------------------------------------------------------------------------

_sequence = itertools.count()


MAX_CAPTURE_BYTES = 256 << 20  # what one client's capture buffers may hold on one worker


class Captures:
    """A worker's capture buffers, each client's its own: (client, name) -> [(order key,
    path, kind, micro-batch, tensor)]. A client reads and empties only its own buffers, and
    what they hold is counted against ``max_bytes`` per client: past it a capture is refused
    (the hook raises, saying to fetch the buffers). ``micro_batch`` is set by the worker
    while it runs a micro-batch (None otherwise). ``fired`` counts the hook calls on this
    worker by whose they are (as ``account`` names a client) and hook name ("client" for
    client hooks): ``status`` shows a key its own (``fired_for``)."""

    def __init__(self, max_bytes: int = MAX_CAPTURE_BYTES):
        self.buffers: dict[tuple[bytes, str], list] = {}
        # who a client is counted as (the worker sets it: with keys, its key's name, so
        # that every connection of one key shares one allowance) -> bytes held
        self.account = lambda client: client
        self.held: collections.Counter = collections.Counter()
        self.max_bytes = max_bytes
        self.micro_batch: int | None = None
        self.fired: collections.Counter = collections.Counter()
        self.current = lambda: None  # the worker's request that runs now (set by the worker)
        # id of a request whose pass may run again -> [(buffer, item)] it added meanwhile
        self.added: dict[int, list] = {}

    def add(self, client: bytes, name: str, path: str, kind: str, value) -> None:
        size, who = _nbytes(value), self.account(client)
        if self.held[who] + size > self.max_bytes:
            raise RuntimeError(
                f"capture {name!r} on {path!r}: this client's capture buffers on this worker "
                f"hold {_size(self.held[who])}, and {_size(size)} more would pass the cap "
                f"of {_size(self.max_bytes)} (--max-capture-mb): fetch them with "
                "captured(name), which empties them, or remove the hook")
        item = ((time.time_ns(), next(_sequence)), path, kind, self.micro_batch, value)
        self.buffers.setdefault((client, name), []).append(item)
        self.held[who] += size
        job = self.current()
        if job is not None and getattr(job, "spec", None) is not None:
            self.added.setdefault(id(job), []).append(((client, name), item))

    def forget_since(self, job) -> None:
        """Take out what ``job``'s pass added since it (last) began: it runs again (other
        requests' records stay)."""
        for key, item in self.added.pop(id(job), ()):
            items = self.buffers.get(key, [])
            for i in range(len(items) - 1, -1, -1):
                if items[i] is item:
                    del items[i]
                    self._freed(key[0], [item])
                    break
            if not items:
                self.buffers.pop(key, None)

    def take(self, client: bytes, name: str, clear: bool = True) -> list:
        """``client``'s buffer ``name`` (emptied unless ``clear`` is False)."""
        items = self.buffers.get((client, name), [])
        if clear:
            self.buffers.pop((client, name), None)
            self._freed(client, items)
        return items

    def count(self, name: str) -> None:
        """A hook of kind ``name`` was called, for the request that runs now."""
        job = self.current()
        self.fired[None if job is None else self.account(job.client), name] += 1

    def fired_for(self, mine) -> dict[str, int]:
        """The hook calls by hook name of the clients ``mine`` passes (as named by
        ``account``): before, every client's together went to every key's ``status``,
        which told another key which kinds of hooks a client holds and each call it makes
        through them (tests/integration/test_s11_status_hooks.py)."""
        out: collections.Counter = collections.Counter()
        for (who, name), n in self.fired.items():
            if mine(who):
                out[name] += n
        return dict(out)

    def forget(self, client: bytes) -> None:
        """Drop every buffer of ``client`` (its connection closed), and its hook counts
        where they are its connection's (without keys; a key's outlast it)."""
        for key in [k for k in self.buffers if k[0] == client]:
            self._freed(client, self.buffers.pop(key))
        for key in [k for k in self.fired if k[0] == client]:
            del self.fired[key]

    def _freed(self, client: bytes, items) -> None:
        who = self.account(client)
        self.held[who] -= sum(_nbytes(item[4]) for item in items)
        if self.held[who] <= 0:
            del self.held[who]


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes} bytes"


def _nbytes(value) -> int:
    """The bytes the tensors in ``value`` hold."""
    from disthook.service.values import tensors_in

    return sum(t.numel() * t.element_size() for t in tensors_in(value))


def build(spec: dict, kind: str, path: str, captures: Captures, allowed: tuple[str, ...],
          client: bytes = b""):
    """The callable a worker registers for the worker hook ``spec`` as a ``kind`` hook of
    ``client`` (whose capture buffers it fills)."""
    import disthook
    from disthook.service.values import tensors_in

    name, opts = spec.get("name"), spec.get("options") or {}
    if kind not in KINDS:
        raise ValueError(f"unknown hook kind {kind!r}")
    where = f"{kind} hook on {path!r}"
    tensor_hook = kind == "tensor"

    def seen(args):
        """What the hook looks at, by kind (see the module docstring)."""
        if tensor_hook:
            return args[0]
        if kind == "forward_pre":
            return args[1]
        if kind == "forward":
            return args[2]
        return args[-1] if kind == "full_backward_pre" else args[2]  # grad_output

    def grads_out(args):
        """The gradients the hook may replace: its return value takes their place."""
        return args[0] if tensor_hook else args[1]  # grad_output of a pre hook, else grad_input

    if name == "capture":
        buffer = opts["buffer"]

        def hook(*args):
            captures.add(client, buffer, path, kind, _detached_copy(seen(args)))
    elif name == "record_norm":
        buffer = opts["buffer"]

        def hook(*args):
            squares = sum(float((t.detach().double() ** 2).sum()) for t in tensors_in(seen(args)))
            captures.add(client, buffer, path, kind, disthook.tensor(math.sqrt(squares),
                                                             dtype=disthook.float64))
    elif name in ("clamp_grad", "scale_grad", "clip_grad_norm"):
        if kind not in GRADIENT_KINDS:
            raise ValueError(f"hooks.{name} changes gradients: register it as a tensor hook or "
                             f"a backward hook, not as a {kind} hook")
        if name == "clamp_grad":
            def change(g):
                return g.clamp(opts.get("min"), opts.get("max"))
        elif name == "clip_grad_norm":
            def change(g):
                norm = math.sqrt(float((g.detach().double() ** 2).sum()))
                return g * (opts["max_norm"] / norm) if norm > opts["max_norm"] else g
        else:
            def change(g):
                return g * opts["factor"]

        def hook(*args):
            return _map_tensors(grads_out(args), change)
    elif name == "check_finite":
        def hook(*args):
            values = [seen(args)] if kind in ("tensor", "forward_pre", "forward",
                                              "full_backward_pre") else [args[1], args[2]]
            for value in values:
                for t in tensors_in(value):
                    if t.is_floating_point() and not bool(disthook.isfinite(t).all()):
                        bad = int((~disthook.isfinite(t)).sum())
                        raise RuntimeError(f"check_finite: {bad} non-finite value(s) in a "
                                           f"tensor of shape {tuple(t.shape)} seen by the "
                                           f"{where}")
    elif name == "by_path":
        fn = _import_allowed(opts["target"], allowed)
        kwargs = opts.get("kwargs") or {}

        def hook(*args):
            return fn(*args, **kwargs)
    else:
        raise ValueError(f"unknown worker hook {name!r}; expected capture, record_norm, "
                         "clamp_grad, scale_grad, clip_grad_norm, check_finite or by_path")

    def counted(*args):
        captures.count(name)
        return hook(*args)

    counted.__name__ = f"worker_hook_{name}"
    return counted


def check_importable(modules, option: str) -> None:
    """ValueError naming ``option`` (``--allow-hook-module``) for the first of ``modules``
    that cannot be imported here: a worker refuses a misspelt module when it starts, not at
    the first hook that names it."""
    import importlib.util

    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package that is missing, or an empty name
            found = False
        if not found:
            raise ValueError(f"{option} {name!r}: no module or package of that name can be "
                             "imported here; check the spelling, and that it lies on the "
                             "worker's PYTHONPATH or in its working directory")


def _import_allowed(target: str, allowed: tuple[str, ...]):
    from disthook.distributed.spec import SpecError, runs_a_program, walk_name

    module_name, _, attr = target.partition(":")

    def allow(name: str) -> bool:
        return not runs_a_program(name) and any(name == a or name.startswith(a + ".")
                                                for a in allowed)

    if not allow(module_name):
        raise PermissionError(
            f"hooks.by_path({target!r}): module {module_name!r} is not allowed on this worker "
            f"(allowed: {', '.join(allowed) or 'none'}); start the worker with "
            f"--allow-hook-module {module_name.split('.')[0]}")
    module = importlib.import_module(module_name)
    try:  # the function's own module must be allowed too, not only the one it is named by
        fn = walk_name(module, attr, target, allow)
    except AttributeError:
        raise AttributeError(f"hooks.by_path({target!r}): {module_name} has no {attr!r}") \
            from None
    except SpecError as exc:
        raise PermissionError(f"hooks.by_path: {exc}") from None
    if not callable(fn):
        raise TypeError(f"hooks.by_path({target!r}) is not callable")
    return fn


def _map_tensors(value, fn):
    import disthook

    if isinstance(value, disthook.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(_map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [_map_tensors(v, fn) for v in value]
    return value  # None stays None


def _detached_copy(value):
    import disthook

    if isinstance(value, disthook.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached_copy(v) for v in value)
    return value
