"""torch's global names (as a pickle names them) and disthook's objects, both ways.

Loading: ``weights_global`` is the whole of what a weights-only load admits; ``trusted_global``
maps any ``torch.*`` name to disthook's object of the same name (``torch.nn.modules.linear
.Linear`` is ``disthook.nn.Linear``) and never imports torch. Saving: ``torch_name`` gives the
name torch knows an object of disthook's by, so that real torch loads the file.
"""
from __future__ import annotations

import _compat_pickle
import codecs
import importlib
from collections import Counter, OrderedDict

from disthook._serialization import rebuild
from disthook._serialization.rebuild import StorageType

# torch's storage classes and the numpy element type each holds
STORAGE_DTYPES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "UntypedStorage": "uint8",
    "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
    "QInt8Storage": None,
    "QUInt8Storage": None, "QInt32Storage": None, "QUInt4x2Storage": None,
    "QUInt2x4Storage": None,
}
STORAGE_TYPES = {name: StorageType(name, dt) for name, dt in STORAGE_DTYPES.items()}

# public namespaces, torch's and ours, most specific first
NAMESPACES = (
    ("torch.nn.modules", "disthook.nn"), ("torch.nn.parameter", "disthook.nn"),
    ("torch.nn.functional", "disthook.nn.functional"), ("torch.nn.init", "disthook.nn.init"),
    ("torch.nn", "disthook.nn"), ("torch.optim.lr_scheduler", "disthook.optim.lr_scheduler"),
    ("torch.optim", "disthook.optim"), ("torch.utils.data", "disthook.utils.data"),
    ("torch", "disthook"),
)


def _latin1_bytes(text, encoding="latin1"):
    """``_codecs.encode`` as protocol 2 pickles use it for bytes, and for nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise rebuild.CheckpointError("_codecs.encode is admitted only to make bytes from a "
                                      "latin1 string")
    return codecs.encode(text, "latin1")


def _table() -> dict:
    from disthook import _dtype
    from disthook.nn.parameter import Parameter
    from disthook.tensor import Size, Tensor, device

    table = {
        "collections.OrderedDict": OrderedDict, "collections.Counter": Counter,
        "builtins.set": set, "builtins.frozenset": frozenset, "builtins.bytearray": bytearray,
        "builtins.complex": complex, "_codecs.encode": _latin1_bytes,
        "torch.Size": Size, "torch.device": device, "torch.Tensor": Tensor,
        "torch._tensor.Tensor": Tensor, "torch.nn.parameter.Parameter": Parameter,
        "torch._tensor._rebuild_from_type_v2": rebuild._rebuild_from_type_v2,
        "torch.storage.UntypedStorage": STORAGE_TYPES["UntypedStorage"],
    }
    for d in (*_dtype.ALL, _dtype.bfloat16):
        table[f"torch.{d.name}"] = d
    for name, kind in STORAGE_TYPES.items():
        table[f"torch.{name}"] = kind
    for name, fn in rebuild.REBUILD_FUNCTIONS.items():
        table[f"torch._utils.{name}"] = fn
    return table


_TABLE: dict = {}
_REVERSE: dict = {}  # id(object) -> (module, name), for saving
CALLABLE = {OrderedDict, Counter, set, frozenset, bytearray, complex, _latin1_bytes}
DATA_BUILDERS = [OrderedDict, Counter, set, frozenset, bytearray, complex]  # + Size, table()


def table() -> dict:
    if not _TABLE:
        _TABLE.update(_table())
        for full, obj in _TABLE.items():
            if full.startswith("torch.") and full != "torch._tensor.Tensor":
                module, _, name = full.rpartition(".")
                _REVERSE.setdefault(id(obj), (module, name))
        from disthook.tensor import Size, device

        CALLABLE.update({Size, device, rebuild._rebuild_from_type_v2,
                         *rebuild.REBUILD_FUNCTIONS.values()})
        DATA_BUILDERS.append(Size)
    return _TABLE


def fix_import(module: str, name: str) -> tuple[str, str]:
    """Python 2 names in protocol-2 pickles (``__builtin__``, ``copy_reg``) as Python 3's."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def weights_global(module: str, name: str, user_allowed: dict):
    """What a weights-only load gives for ``module.name``, or None where it is refused."""
    full = f"{module}.{name}"
    if full in user_allowed:
        return user_allowed[full]
    return table().get(full)


# torch dtypes that disthook lacks (those it has are in the table, which is asked first)
_DTYPES_WE_LACK = ("complex32", "chalf", "float8", "float4", "uint1",
                   "uint2", "uint3", "uint4", "uint5", "uint6", "uint7", "uint16", "uint32",
                   "uint64", "int1", "int2", "int3", "int4", "int5", "int6", "int7", "bits",
                   "qint", "quint")


def unsupported_reason(module: str, name: str) -> str | None:
    """Why a torch name disthook knows of cannot be loaded (sparse tensors, complex storages)."""
    if module == "torch._utils" and name in rebuild.UNSUPPORTED_REBUILDS:
        return (f"the file holds {rebuild.UNSUPPORTED_REBUILDS[name]}; disthook holds dense CPU "
                "tensors only")
    if module == "torch" and STORAGE_DTYPES.get(name, "") is None:
        return f"the file holds a {name}; disthook has no tensors of that element type"
    if module == "torch" and name in ("uint16", "uint32", "uint64"):
        return (f"the file names the dtype torch.{name}; disthook's tensors have torch's "
                "classic element types only (bool, uint8, int8 to int64, float16 to float64): "
                "save the tensor as torch.int32 or torch.int64 (t.to(torch.int64)) instead")
    if module == "torch" and name.startswith(_DTYPES_WE_LACK):
        return (f"the file names the dtype torch.{name}; disthook has no tensors of it "
                "(numpy has no such element type)")
    return None


def _get(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def trusted_global(module: str, name: str):
    """disthook's object for a torch name: the table, the same path under ``disthook``, or the
    public namespace it is exported from. None where disthook has no such name."""
    found = table().get(f"{module}.{name}")
    if found is not None:
        return found
    try:
        return _get("disthook" + module[len("torch"):], name)
    except (ImportError, AttributeError):
        pass
    for theirs, ours in NAMESPACES:
        if module == theirs or module.startswith(theirs + "."):
            try:
                return _get(ours, name)
            except (ImportError, AttributeError):
                continue
    return None


# packages whose files mirror torch's, so that a class's module names torch's module too
MIRRORED = ("disthook.nn.", "disthook.optim.", "disthook.utils.data.",
            "disthook.distributions.", "disthook.autograd.")


def torch_name(obj) -> tuple[str, str] | None:
    """The (module, name) real torch knows ``obj`` by, for disthook's classes, functions,
    dtypes and rebuild functions; None for anything else (it is pickled as it is)."""
    table()
    found = _REVERSE.get(id(obj))
    if found is not None:
        return found
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or not (
            module == "disthook" or module.startswith("disthook.")) or not (
            isinstance(obj, type) or callable(obj)):
        return None
    same = "torch" + module[len("disthook"):]
    if module.startswith(MIRRORED):
        return same, qualname
    for theirs, ours in reversed(NAMESPACES):  # the shortest public name first
        if theirs in ("torch.nn.modules", "torch.nn.parameter"):
            continue
        try:
            if _get(ours, qualname) is obj:
                return theirs, qualname
        except (ImportError, AttributeError):
            continue
    return same, qualname
