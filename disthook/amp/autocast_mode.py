"""``torch.autocast``: regions whose ops torch runs in lower precision.

Inside an enabled ``autocast("cpu")`` the ops autocast covers run as torch 2.13 runs them:
matmul, linear, the convolutions, bmm, baddbmm ... in the region's dtype (bfloat16 by
default), the losses in float32, the rest in their inputs' dtype (``cpu_policy`` lists them).
Every other case behaves as torch's: ``enabled=False`` changes nothing; ``"cuda"`` warns that
CUDA is not available and disables itself; a dtype autocast does not support (float32, say)
warns and disables itself; another device type ("mps", "xpu", ...) is enabled but holds no
tensor, so changes nothing.
"""
from __future__ import annotations

import functools
import threading
import warnings

from disthook import _dtype
from disthook.amp import cpu_policy

__all__ = ["autocast", "clear_autocast_cache", "custom_bwd", "custom_fwd",
           "get_autocast_dtype", "is_autocast_available", "is_autocast_cache_enabled",
           "is_autocast_enabled", "set_autocast_cache_enabled"]


class _AbsentDtype:
    """A dtype torch has and disthook lacks: named in autocast's state and messages, never
    computed in."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


bfloat16 = getattr(_dtype, "bfloat16", None) or _AbsentDtype("bfloat16")
float16 = _dtype.float16
LOWER_PRECISION = (bfloat16, float16)  # the dtypes autocast accepts on every device type

# torch's device types, in the order its error message lists them
DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip",
                "ve", "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
                "privateuseone")
# the device types autocast is available for, with their default dtype (torch 2.13)
DEFAULT_DTYPES = {"cpu": bfloat16, "cuda": float16, "ipu": float16, "xpu": float16,
                  "maia": bfloat16, "xla": bfloat16, "mps": float16, "hpu": bfloat16,
                  "mtia": float16, "privateuseone": float16}

_state = threading.local()  # per thread, as torch's: {device type: enabled}, {...: dtype}


def _local() -> threading.local:
    if not hasattr(_state, "enabled"):
        _state.enabled, _state.dtype, _state.cache_enabled = {}, {}, True
        # regions open now (of any device type, enabled or not) and the casts of the
        # region's leaves (cpu_policy._cached_cast), dropped when the outermost one exits
        _state.nesting, _state.casts, _state.region = 0, {}, None
    return _state


class _Region:
    """The outermost autocast region open in a thread, while it is: what the deployed
    parts' backwards of the calls made in it did (``check_one_cast``)."""

    def __init__(self) -> None:
        self.ran: dict = {}  # (deployment id, part) -> (backward id, node id)


def _check_device_type(device_type: str) -> None:
    if device_type not in DEVICE_TYPES:
        raise RuntimeError(f"Expected one of {', '.join(DEVICE_TYPES)} device type at start of "
                           f"device string: {device_type}")


def is_autocast_available(device_type: str) -> bool:
    """Whether ``autocast`` accepts ``device_type`` (torch's answers for a CPU build)."""
    _check_device_type(device_type)
    return device_type in DEFAULT_DTYPES


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether this thread is in an enabled autocast region of ``device_type``. Never true
    for "cuda" (disabled: there is no CUDA)."""
    _check_device_type(device_type)
    return _local().enabled.get(device_type, False)


def get_autocast_dtype(device_type: str):
    """The dtype autocast of ``device_type`` uses in this thread (its default outside)."""
    _check_device_type(device_type)
    if device_type not in DEFAULT_DTYPES:
        raise RuntimeError("unsupported scalarType")
    return _local().dtype.get(device_type, DEFAULT_DTYPES[device_type])


def is_autocast_cache_enabled() -> bool:
    """Whether this thread's regions keep their weights' casts (see ``cpu_policy``): the
    innermost region's ``cache_enabled``, or the last ``set_autocast_cache_enabled``."""
    return _local().cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    """Set ``is_autocast_cache_enabled()`` for this thread (a region's exit puts back what
    it found)."""
    _local().cache_enabled = bool(enabled)


def clear_autocast_cache() -> None:
    """Drop the casts this thread's regions kept: the next use of a weight casts again."""
    _local().casts.clear()


class autocast:
    """A context manager and decorator taking torch's arguments; see the module's doc for
    what an enabled region does in disthook."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else dtype
        self.device = device_type
        if not is_autocast_available(device_type):
            raise RuntimeError(f"User specified an unsupported autocast device_type "
                               f"'{device_type}'")
        self._cache_enabled = _local().cache_enabled if cache_enabled is None else cache_enabled
        if enabled and device_type == "cuda":
            warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.",
                          stacklevel=2)
            enabled = False
        elif enabled and self.fast_dtype not in LOWER_PRECISION:
            name = device_type if device_type == "privateuseone" else device_type.upper()
            warnings.warn(f"In {name} autocast, but the target dtype is not supported. "
                          f"Disabling autocast.\n{name} Autocast only supports dtypes of "
                          "torch.bfloat16, torch.float16 currently.", stacklevel=2)
            enabled = False
        self._enabled = enabled

    def __enter__(self):
        if self._enabled and self.device == "cpu" and isinstance(self.fast_dtype,
                                                                 _dtype._NotStored):
            raise TypeError(f"autocast('cpu', dtype={self.fast_dtype}) computes in "
                            f"{self.fast_dtype}, which numpy has not without the ml_dtypes "
                            "package: pip install ml_dtypes (or run the region without "
                            "autocast)")
        state = _local()
        self.prev = state.enabled.get(self.device, False)
        self.prev_fastdtype = get_autocast_dtype(self.device)
        self.prev_cache_enabled = state.cache_enabled
        state.enabled[self.device] = self._enabled
        state.dtype[self.device] = self.fast_dtype
        state.cache_enabled = self._cache_enabled
        state.nesting += 1
        if state.nesting == 1:
            state.region = _Region()
        if self.device == "cpu":
            cpu_policy.count_region(1)
        return self

    def __exit__(self, exc_type: object, exc_val: object, exc_tb: object) -> bool:
        state = _local()
        state.nesting -= 1
        if state.nesting == 0:
            state.casts.clear()
            state.region = None
        state.enabled[self.device] = self.prev
        state.dtype[self.device] = self.prev_fastdtype
        state.cache_enabled = self.prev_cache_enabled
        if self.device == "cpu":
            cpu_policy.count_region(-1)
        return False

    def __call__(self, func):
        if not callable(func):
            raise TypeError(
                f"autocast()(func) requires a callable, but got {type(func).__name__}. Did you "
                "mean to use autocast as a context manager? For example:\n"
                "    with torch.autocast(device_type=...):\n"
                "        output = model(input)")

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorate_autocast


def custom_fwd(fwd=None, *, device_type: str, cast_inputs=None):
    """Decorates a custom Function's ``forward``: it records the autocast state for
    ``custom_bwd``; with ``cast_inputs`` in an enabled region it runs with autocast off
    (no disthook tensor is on a device whose autocast can be on, so none is cast)."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = get_autocast_dtype(device_type)
        enabled = is_autocast_enabled(device_type)
        ctx._fwd_used_autocast = enabled and cast_inputs is None
        if cast_inputs is not None and enabled:
            with autocast(device_type=device_type, enabled=False):
                return fwd(*args, **kwargs)
        return fwd(*args, **kwargs)

    return decorate_fwd


def custom_bwd(bwd=None, *, device_type: str):
    """Decorates a custom Function's ``backward``: it runs under the autocast state its
    ``forward`` ran under."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        ctx = args[0]
        with autocast(device_type=device_type, enabled=ctx._fwd_used_autocast,
                      dtype=ctx._dtype):
            return bwd(*args, **kwargs)

    return decorate_bwd


class cpu_autocast(autocast):
    """``torch.cpu.amp.autocast``: ``autocast("cpu", ...)`` under its deprecated name."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True) -> None:
        warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cpu', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cpu", dtype=bfloat16 if dtype is None else dtype, enabled=enabled,
                         cache_enabled=cache_enabled)


# ---- a deployed model's client's CPU region, on its workers ---------------------------------

def region_field() -> dict:
    """What a request that computes on a worker carries of this thread's CPU autocast
    region: nothing outside one (or in one switched off), else its dtype's name, which the
    worker computes under (``region_as``): the placed layers then compute in the region's
    dtype, as in one process."""
    state = _local()
    if not state.enabled.get("cpu", False):
        return {}
    return {"autocast": get_autocast_dtype("cpu").name}


def caching_region():
    """The outermost region a call made now belongs to when its weights' casts are kept
    for the region (an enabled CPU region, its cache enabled, grad mode on), else None."""
    from disthook.autograd import grad_mode

    state = _local()
    if not (state.enabled.get("cpu", False) and state.cache_enabled
            and grad_mode.is_grad_enabled()):
        return None
    return state.region


def cached_leaves() -> list:
    """The tensors this thread's region cast and keeps the cast of for the region so far
    (``cpu_policy._cached_cast``: leaves that require grad, a layer's weights): a worker
    says which its call cast, so that ``check_one_cast`` asks only where a cast was kept."""
    return [x for x, _ in _local().casts.values()]


def check_one_cast(region, key, node, backward_id: int, what: str) -> None:
    """Refuse the backward of a second call made in one caching region that cast a tensor
    an earlier call of one backward cast too (``key``: that tensor, a weight on a worker or
    a leaf the program gave; the deployment and the part where the call did not say what
    it cast): one process casts it once for the region and sums the calls' gradients in the region's dtype
    before the one cast's backward; the workers cast at each call, and each call's backward
    runs there on its own, so the gradients would meet in float32 (other bits)."""
    if region is None:
        return
    before = region.ran.get(key)
    region.ran[key] = (backward_id, id(node))
    if before is not None and before[0] == backward_id and before[1] != id(node):
        raise NotImplementedError(
            f"one backward reaches two calls of {what} made inside one torch.autocast('cpu') "
            "region: in one process its weights are cast to the region's dtype once for the "
            "region and the two calls' gradients are summed in that dtype before reaching "
            "the float32 weights; on the workers each call casts its own and runs its own "
            "backward, which would give other gradients. Open a region per call (with "
            "torch.autocast(...) around each call), pass cache_enabled=False to the region "
            "(both then cast at each call), or run the model in one process "
            "(model.to_local())")


def region_as(name: str | None) -> autocast:
    """The CPU autocast region a request names (None: none, switched off whatever this
    thread was in), to compute the request under."""
    dtypes = {d.name: d for d in LOWER_PRECISION}
    if name is None:
        return autocast("cpu", enabled=False)
    if name not in dtypes:
        raise TypeError(f"autocast must name one of {sorted(dtypes)}, got {name!r}")
    return autocast("cpu", dtype=dtypes[name])
