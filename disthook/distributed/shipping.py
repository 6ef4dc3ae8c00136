"""Placed modules travel as objects: pickled by value with ``cloudpickle``, their tensors'
values as raw frames beside the pickle.

A deploying client (one whose workers take code: a ``local_cluster`` or ``launch``) sends
each stage's module tree as it is, the way Dask, Ray and PySpark send user code: no
constructor is called again, nothing is imported from the client's script on the worker, and
lambdas, closures, bound methods, mixin constructors and modules held in dicts or lists travel
as they are. What counts as the user's own code (``__main__``, and every module whose file is
outside the interpreter's standard library and site-packages, except disthook's own) goes by
value: the worker needs none of the client's files. Installed libraries (numpy, einops, ...)
go by reference and are imported on the worker.

Every numpy array of a dtype the wire carries is taken out of the pickle and sent as a frame
(``wire`` sends frames without copying; a tensor's value is never pickled). Hooks registered
on the modules before the deploy do not travel: they are the client's, and fire there
(``glue.carry_hooks``). A stage that reaches a module or a parameter of another stage (an
attribute holding a module placed elsewhere) is refused before anything is sent: it would
compute with a stale copy on its worker.

Unpickling runs code: ``loads`` is called only where code is trusted (a worker started with
``--allow-code``; an attached client that opts in with ``trust_code=True``).
"""
from __future__ import annotations

import io
import os
import pickle
import site
import sys
import sysconfig
import threading
import types
from collections import OrderedDict

import cloudpickle
import numpy as np

from disthook import _blas, wire
from disthook.distributed.parameters import RemoteStorage
from disthook.nn.modules.module import HOOK_DICTS, Module
from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor
from disthook.wire import DTYPES  # the dtypes that travel as frames

__all__ = ["CodeError", "dumps", "dumps_structure", "loads", "loads_structure",
           "own_code_modules", "stage_fields"]

# packages whose modules are always pickled by reference: the library and its processes
_OURS = frozenset({"disthook", "workers", "coordinator", "deploy", "cloudpickle"})
_by_value_lock = threading.Lock()  # cloudpickle's by-value registry is process-wide


class CodeError(TypeError):
    """A module tree that cannot travel as it is (it reaches another stage's module or
    parameter), or pickled code that cannot be loaded here."""


# ---- what is the user's own code ----------------------------------------------------------

def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # some virtualenvs' site module lacks it
        pass
    user = getattr(site, "getusersitepackages", lambda: None)()
    dirs.add(user)
    return tuple(os.path.realpath(d) + os.sep for d in dirs if d)


def own_code_modules() -> list[str]:
    """The names of the imported modules that are the user's own code: files outside the
    standard library and site-packages, and modules a program made itself (a stub put in
    ``sys.modules``), but not disthook's (``__main__`` is always by value in cloudpickle)."""
    libraries = None
    names = []
    for name, module in list(sys.modules.items()):
        key = (name, id(module), getattr(module, "__file__", None))
        own = _own_cache.get(key)
        if own is None:
            if libraries is None:
                libraries = _library_dirs()
            own = _is_own(name, module, libraries)
            if len(_own_cache) < _CACHE_LIMIT:
                _own_cache[key] = own
        if own:
            names.append(name)
    return names


# (name, id(module), its file) -> whether it is own code (a module's file stays put)
_own_cache: dict[tuple, bool] = {}
_CACHE_LIMIT = 1 << 16


def _is_own(name: str, module, libraries: tuple[str, ...]) -> bool:
    if not isinstance(module, types.ModuleType) or name == "__main__" \
            or name.split(".")[0] in _OURS:
        return False
    if getattr(module, "__name__", None) != name:  # an alias (torch -> disthook)
        return False
    path = getattr(module, "__file__", None)
    if not path:  # built in or frozen; or made by the program itself (a stub)
        return getattr(module, "__spec__", None) is None and name not in sys.builtin_module_names
    return not os.path.realpath(path).startswith(libraries)


# ---- pickling -----------------------------------------------------------------------------

def _new_module(cls: type) -> Module:
    return object.__new__(cls)


def _set_module_state(module: Module, state: dict) -> Module:
    state.pop(_CUSTOM_OPS, None)  # registered again as they were unpickled, just before
    module.__dict__.update(state)
    return module


# the root module's pickled state carries the client's torch.library custom operators: a
# forward may reach one by its name (torch.ops.<namespace>.<name>), not through an attribute
_CUSTOM_OPS = "__disthook_custom_ops__"


def _custom_ops() -> list:
    library = sys.modules.get("disthook.library")
    return list(library._OPS.values()) if library is not None else []


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, with arrays as frames, modules without their hooks, and a check that
    only modules and parameters of the stage itself are reached."""

    def __init__(self, file, outside, elsewhere: dict[int, str], placed=None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._outside, self._elsewhere, self._placed = outside, elsewhere, placed
        self._keep: list = []  # the stand-in arrays of placed tensors, alive while pickling
        self._root = None  # the module dumped (its state carries the custom operators)

    def persistent_id(self, obj):
        return self._outside(obj) if type(obj) is np.ndarray else None

    def reducer_override(self, obj):
        if isinstance(obj, (Module, Tensor)) and id(obj) in self._elsewhere:
            kind = "module" if isinstance(obj, Module) else "parameter or buffer"
            raise CodeError(
                f"the {kind} {self._elsewhere[id(obj)]!r} ({type(obj).__name__}) is placed on "
                "another worker, and a module of this stage holds it in an attribute: it "
                "would compute with a copy of it there. Reach it through the model's own "
                "tree in forward(), or place both on one worker (placement=)")
        if isinstance(obj, RemoteStorage):
            # a placed tensor sent again (recover: its old worker is gone): its shape and
            # dtype, in zeros, which the checkpoint loaded next fills
            twin = obj._twin._data
            array = np.zeros(twin.shape, twin.dtype)
            self._keep.append(array)
            if self._placed is not None:  # described by name (dumps_structure)
                self._placed(obj, array)
            local = Tensor._make(array, None, 0)
            if isinstance(obj, Parameter):
                local = Parameter(local, obj.requires_grad)
            return local.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        if isinstance(obj, Module):
            state = dict(obj.__dict__)
            state.pop("_placement", None)
            for name in HOOK_DICTS:
                if name in state:
                    state[name] = OrderedDict()
            state["_is_full_backward_hook"] = None
            if obj is self._root and _custom_ops():
                state[_CUSTOM_OPS] = _custom_ops()
            return (_new_module, (type(obj),), state, None, None, _set_module_state)
        if type(obj) is types.MethodType and _named(obj):
            # its object and its name, as pickle sends a method: cloudpickle would copy the
            # function behind it (a classmethod's, as Function.apply's) with its globals
            return (getattr, (obj.__self__, obj.__func__.__name__))
        return super().reducer_override(obj)


def _named(method: types.MethodType) -> bool:
    """Whether ``method``'s object gives it back under its function's name."""
    return getattr(method.__self__, method.__func__.__name__, None) == method


def dumps(module: Module, *, elsewhere: dict[int, str] | None = None
          ) -> tuple[np.ndarray, list[np.ndarray]]:
    """``module`` pickled by value: the pickle (as a uint8 array, a frame of its own) and
    the arrays it refers to, in order. ``elsewhere``: id -> path of modules and tensors that
    must not be reached (other stages')."""
    arrays: list[np.ndarray] = []
    index: dict[int, int] = {}

    def as_frame(array: np.ndarray):
        if array.dtype.str not in DTYPES:
            return None  # pickled inline
        if id(array) not in index:
            index[id(array)] = len(arrays)
            arrays.append(array)
        return index[id(array)]

    blob = _dump(module, as_frame, elsewhere or {}, "send it to its worker")
    frames = [wire.c_order(a) for a in arrays]
    return np.frombuffer(blob, dtype=np.uint8), frames


def dumps_structure(module: Module) -> bytes:
    """``module`` pickled by value without the values of its parameters and buffers (each
    stands for its name, shape and dtype): a checkpoint's or a published model's description
    of a model that holds code. Other arrays (a tensor kept in a plain attribute) go inside."""
    state: dict[int, tuple] = {}
    for name, t in [*module.named_parameters(remove_duplicate=False),
                    *module.named_buffers(remove_duplicate=False)]:
        if not isinstance(t, RemoteStorage):  # a placed one is described as it is reached
            state.setdefault(id(t._data), ("state", name, list(t._data.shape),
                                           t._data.dtype.str))

    def placed(t: RemoteStorage, array: np.ndarray) -> None:
        state[id(array)] = ("state", t._path, list(array.shape), array.dtype.str)

    return _dump(module, lambda array: state.get(id(array)), {}, "describe it", placed)


def _dump(module: Module, outside, elsewhere: dict[int, str], what: str,
          placed=None) -> bytes:
    buffer = io.BytesIO()
    with _by_value_lock:
        registered = []
        for name in own_code_modules():
            if not cloudpickle.cloudpickle._is_registered_pickle_by_value(sys.modules[name]):
                cloudpickle.register_pickle_by_value(sys.modules[name])
                registered.append(name)
        try:
            pickler = _Pickler(buffer, outside, elsewhere, placed)
            pickler._root = module
            pickler.dump(module)
        except CodeError:
            raise
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise CodeError(f"cannot pickle {type(module).__name__} to {what}: "
                            f"{_culprit(module, outside) or exc}") from exc
        finally:
            for name in registered:
                module_ = sys.modules.get(name)
                if module_ is not None:
                    cloudpickle.unregister_pickle_by_value(module_)
    return buffer.getvalue()


def _culprit(root: Module, outside) -> str | None:
    """Which attribute of which module cannot be pickled, for the message (None if each
    pickles alone)."""
    for path, module in root.named_modules():
        for name, value in module.__dict__.items():
            if name in HOOK_DICTS or name in ("_parameters", "_buffers", "_modules"):
                continue
            try:
                _Pickler(io.BytesIO(), outside, {}).dump(value)
            except Exception as exc:
                where = f"{path!r}" if path else "the root module"
                return (f"attribute {name!r} of {where} ({type(module).__name__}) holds a "
                        f"{type(value).__name__}, which cannot be pickled ({exc}): keep it "
                        "out of the module, or make it in forward()")
    return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, resolve):
        super().__init__(file)
        self.persistent_load = resolve


def _frames(arrays: list):
    def resolve(pid):
        if not isinstance(pid, int) or not 0 <= pid < len(arrays):
            raise CodeError(f"the pickled model refers to array {pid!r}, but "
                            f"{len(arrays)} came with it")
        return arrays[pid]
    return resolve


def loads(code, arrays: list) -> Module:
    """The module ``dumps`` made, with ``arrays`` (received frames, taken as they are).
    Runs code: call it only where the sender's code is trusted."""
    # each array copied into memory of its own, aligned as a factory aligns it on the client
    # (disthook._blas.aligned): the stage's products read it as fast as one process reads
    # its own, and a BLAS whose summation order follows alignment sums as it does there
    return _load(code, _frames([_blas.aligned(a, copy=True) for a in arrays]))


def loads_structure(code: bytes, array_of) -> Module:
    """The module ``dumps_structure`` described, each parameter and buffer given its array,
    ``array_of(name, shape, dtype)``. Runs code: only where the writer is trusted."""
    def resolve(pid):
        if not (isinstance(pid, tuple) and len(pid) == 4 and pid[0] == "state"):
            raise CodeError(f"the pickled model refers to {pid!r}, which is no tensor of it")
        _, name, shape, dtype = pid
        return array_of(name, tuple(shape), np.dtype(dtype))
    return _load(code, resolve)


def _load(code, resolve) -> Module:
    blob = code.tobytes() if isinstance(code, np.ndarray) else bytes(code)
    try:
        module = _Unpickler(io.BytesIO(blob), resolve).load()
    except CodeError:
        raise
    except ModuleNotFoundError as exc:
        raise CodeError(
            f"the model's code needs the module {exc.name!r}, which is not installed here: "
            "install it where the workers run (installed libraries are imported by name; "
            "only the client's own files travel with the model)") from exc
    if not isinstance(module, Module):
        raise CodeError(f"the pickled model is a {type(module).__name__}, not a Module")
    return module


# ---- a deploy's stages --------------------------------------------------------------------

def stage_fields(root: Module, stage_modules: list[Module], *, code: bool) -> list[dict]:
    """What ``load_stage`` carries of each stage of ``root``: its modules pickled by value
    (``code``: every worker takes code) or as data (a spec: classes by import path, plain
    attributes, arrays; what a shared service's workers take)."""
    if not code:
        from disthook.distributed.spec import SpecError, module_spec

        try:
            return [{"spec": module_spec(m)} for m in stage_modules]
        except SpecError as exc:
            raise SpecError(
                f"{exc}. This cluster's workers take no code (a shared service: disthook "
                "serve, or workers started without --allow-code), so the model must come "
                "as data; deploy it to a cluster you own (local_cluster, disthook launch), "
                "whose workers take it with its code") from None
    paths: dict[int, str] = {}
    for path, m in root.named_modules(remove_duplicate=False):
        paths.setdefault(id(m), path or type(root).__name__)
    for name, t in [*root.named_parameters(remove_duplicate=False),
                    *root.named_buffers(remove_duplicate=False)]:
        paths.setdefault(id(t), name)
    fields = []
    for stage in stage_modules:
        own = {id(m) for m in stage.modules()}
        own.update(id(t) for t in stage.parameters())
        own.update(id(t) for t in stage.buffers())
        blob, arrays = dumps(stage, elsewhere={k: p for k, p in paths.items() if k not in own})
        fields.append({"code": blob, "arrays": arrays})
    return fields
