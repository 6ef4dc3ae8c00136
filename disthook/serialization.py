"""``torch.save`` / ``torch.load`` in a format of disthook's own that never runs code.

A file is a zip archive (stored, not compressed) holding ``disthook.json`` — the format's
name and version and the saved object as a JSON tree — and one ``.npy`` file per distinct
tensor, read back with ``numpy.load(allow_pickle=False)``. What can be saved is what a
weights-only torch load accepts, and no more: tensors and Parameters; dicts, OrderedDicts
(a state dict's ``_metadata`` included), lists and tuples of them; None, bool, int, float,
str; dtypes and devices. A tensor saved twice (tied weights) comes back as one tensor.

``load`` also reads a plain ``.npz`` of arrays (``numpy.savez``) as a dict of tensors:
that is the way to bring weights over from torch (see ``TORCH_FILE_MSG``).
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from collections import OrderedDict

import numpy as np

__all__ = ["load", "save"]

FORMAT = "disthook.save"
VERSION = 1
MANIFEST = "disthook.json"

SUPPORTED = ("tensors, Parameters, dicts, OrderedDicts, lists and tuples of them, None, "
             "bool, int, float, str, dtypes and devices")
TORCH_FILE_MSG = (
    "{name} was written by torch.save: a pickle archive, which disthook never reads because "
    "unpickling can run code. disthook.load reads files written by disthook.save ({what}) "
    "and .npz archives of arrays. To bring weights over, in torch: numpy.savez(path, "
    "**{{k: v.detach().cpu().numpy() for k, v in state_dict.items()}}), then "
    "disthook.load(path) gives the state dict."
)


# ---- save -----------------------------------------------------------------------------------

class _Writer:
    """Turns an object into a JSON tree, collecting each distinct tensor's array once."""

    def __init__(self) -> None:
        self.arrays: list = []
        self.seen: dict = {}  # id(tensor) -> index into arrays

    def encode(self, obj, path: str):
        from disthook import _dtype
        from disthook.nn.parameter import Parameter
        from disthook.tensor import Tensor
        from disthook.tensor import device as _device

        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return {"int": str(obj)}  # JSON numbers lose big ints in other readers
        if isinstance(obj, float):
            return {"float": repr(obj)}
        if isinstance(obj, Tensor):
            index = self.seen.get(id(obj))
            if index is None:
                index = self.seen[id(obj)] = len(self.arrays)
                self.arrays.append(np.asarray(obj._data, order="C"))  # keeps 0-d
            return {"tensor": index, "requires_grad": bool(obj.requires_grad),
                    "parameter": isinstance(obj, Parameter)}
        if isinstance(obj, _dtype.dtype):
            return {"dtype": str(obj)}
        if isinstance(obj, _device):
            return {"device": str(obj)}
        if isinstance(obj, dict):
            items = [[self.encode(k, f"{path} key"), self.encode(v, f"{path}[{k!r}]")]
                     for k, v in obj.items()]
            node = {"ordered_dict" if type(obj) is OrderedDict else "dict": items}
            if type(obj) not in (dict, OrderedDict):
                raise TypeError(_unsupported(obj, path))
            metadata = getattr(obj, "_metadata", None)
            if metadata is not None:
                node["metadata"] = self.encode(metadata, f"{path}._metadata")
            return node
        if type(obj) in (list, tuple):
            kind = "list" if type(obj) is list else "tuple"
            return {kind: [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        raise TypeError(_unsupported(obj, path))


def _unsupported(obj, path: str) -> str:
    hint = ""
    if hasattr(obj, "state_dict") and hasattr(obj, "parameters"):
        hint = " Save its state_dict() instead, and load that into a new instance."
    return (f"disthook.save cannot store {type(obj).__module__}.{type(obj).__qualname__} "
            f"(at {path}): it stores {SUPPORTED}, and never pickles.{hint}")


def save(obj, f, pickle_module=None, pickle_protocol: int = 2,
         _use_new_zipfile_serialization: bool = True,
         _disable_byteorder_record: bool = False) -> None:
    """Write ``obj`` to ``f`` (a path or a binary file object). ``pickle_module`` and
    ``pickle_protocol`` are accepted for torch's signature and unused: nothing is pickled."""
    writer = _Writer()
    tree = writer.encode(obj, "obj")
    manifest = {"format": FORMAT, "version": VERSION, "object": tree,
                "arrays": [f"{i}.npy" for i in range(len(writer.arrays))]}
    target = os.fspath(f) if isinstance(f, (str, os.PathLike)) else f
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(MANIFEST, json.dumps(manifest))
        for i, array in enumerate(writer.arrays):
            buf = io.BytesIO()
            np.save(buf, array, allow_pickle=False)
            archive.writestr(f"{i}.npy", buf.getvalue())


# ---- load -----------------------------------------------------------------------------------

class _Reader:
    def __init__(self, arrays: list) -> None:
        self.arrays = arrays
        self.tensors: dict = {}  # index -> Tensor, so tied tensors stay one

    def decode(self, node):
        from disthook import _dtype
        from disthook.nn.parameter import Parameter
        from disthook.tensor import Tensor
        from disthook.tensor import device as _device

        if node is None or isinstance(node, (bool, str)):
            return node
        if not isinstance(node, dict) or len(node) == 0:
            raise _corrupt(f"unexpected entry {node!r}")
        if "int" in node:
            return int(node["int"])
        if "float" in node:
            return float(node["float"])
        if "tensor" in node:
            index = node["tensor"]
            t = self.tensors.get(index)
            if t is None:
                if not isinstance(index, int) or not 0 <= index < len(self.arrays):
                    raise _corrupt(f"tensor index {index!r} out of range")
                t = Tensor._make(self.arrays[index], None, 0)
                if node.get("parameter"):
                    t = Parameter(t, requires_grad=bool(node.get("requires_grad")))
                elif node.get("requires_grad"):
                    t.requires_grad_(True)
                self.tensors[index] = t
            return t
        if "dtype" in node:
            name = node["dtype"].removeprefix("torch.")
            value = getattr(_dtype, name, None)
            if not isinstance(value, _dtype.dtype):
                raise _corrupt(f"unknown dtype {node['dtype']!r}")
            return value
        if "device" in node:
            return _device(node["device"])
        for kind, make in (("dict", dict), ("ordered_dict", OrderedDict)):
            if kind in node:
                out = make((self._key(k), self.decode(v)) for k, v in node[kind])
                if "metadata" in node:
                    out._metadata = self.decode(node["metadata"])
                return out
        if "list" in node:
            return [self.decode(v) for v in node["list"]]
        if "tuple" in node:
            return tuple(self.decode(v) for v in node["tuple"])
        raise _corrupt(f"unknown entry kind {sorted(node)!r}")

    def _key(self, node):
        key = self.decode(node)
        if isinstance(key, (list, dict)):
            raise _corrupt("a dict key is a list or dict")
        return key


def _corrupt(what: str) -> RuntimeError:
    return RuntimeError(f"disthook.load: not a valid disthook.save file ({what})")


def _check_map_location(map_location) -> None:
    """Everything lives on the CPU: only map_locations that name it (or nothing) work."""
    if map_location is None or callable(map_location) or isinstance(map_location, dict):
        return
    if str(map_location).startswith("cuda"):
        raise RuntimeError(
            "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() "
            "is False. If you are running on a CPU-only machine, please use torch.load with "
            "map_location=torch.device('cpu') to map your storages to the CPU.")


def load(f, map_location=None, pickle_module=None, *, weights_only: bool | None = None,
         mmap: bool | None = None, **pickle_load_args):
    """Read what ``save`` wrote (or an ``.npz`` of arrays, as a dict of tensors).

    The format cannot hold code, so every load is weights-only; ``weights_only=False`` is
    accepted and changes nothing. A torch-made file raises RuntimeError saying how to
    convert it.
    """
    from disthook.tensor import Tensor

    _check_map_location(map_location)
    name = repr(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else "the file"
    source = os.fspath(f) if isinstance(f, (str, os.PathLike)) else f
    try:
        archive = zipfile.ZipFile(source, "r")
    except zipfile.BadZipFile:
        raise RuntimeError(f"disthook.load: {name} is not a disthook.save file (not a zip "
                           f"archive). It reads files written by disthook.save "
                           f"({SUPPORTED}) and .npz archives of arrays.") from None
    with archive:
        names = archive.namelist()
        if MANIFEST not in names:
            if any(n.endswith("data.pkl") for n in names):
                raise RuntimeError(TORCH_FILE_MSG.format(name=name.capitalize()
                                                         if name == "the file" else name,
                                                         what=SUPPORTED))
            if names and all(n.endswith(".npy") for n in names):
                return OrderedDict(
                    (n[:-4], Tensor._make(_read_npy(archive, n), None, 0)) for n in names)
            raise _corrupt("no disthook.json inside")
        manifest = json.loads(archive.read(MANIFEST))
        if manifest.get("format") != FORMAT:
            raise _corrupt(f"format {manifest.get('format')!r}")
        if manifest.get("version") != VERSION:
            raise RuntimeError(f"disthook.load: file format version {manifest.get('version')} "
                               f"is not supported (this disthook reads version {VERSION})")
        arrays = [_read_npy(archive, n) for n in manifest.get("arrays", [])]
        return _Reader(arrays).decode(manifest["object"])


def _read_npy(archive: zipfile.ZipFile, name: str) -> np.ndarray:
    with archive.open(name) as member:
        return np.load(io.BytesIO(member.read()), allow_pickle=False)
