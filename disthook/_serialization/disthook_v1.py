"""The format of disthook's own that ``disthook.save`` wrote before it wrote torch's.

A zip archive (stored) holding ``disthook.json`` (the format's name and version and the saved
object as a typed JSON tree) and one ``.npy`` per distinct tensor, read with
``allow_pickle=False``. Files users already have keep loading; nothing writes it any more.
"""
from __future__ import annotations

import io
import json
from collections import OrderedDict

import numpy as np

FORMAT = "disthook.save"
VERSION = 1
MANIFEST = "disthook.json"


def read(read_member):
    """The object a version-1 file holds; ``read_member(name)`` gives a member's bytes."""
    manifest = json.loads(read_member(MANIFEST))
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise _corrupt(f"format {found!r}")
    if manifest.get("version") != VERSION:
        raise RuntimeError(f"disthook.load: file format version {manifest.get('version')} "
                           f"is not supported (this disthook reads version {VERSION})")
    arrays = [read_npy(read_member, n) for n in manifest.get("arrays", [])]
    return _Reader(arrays).decode(manifest["object"])


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


def read_npy(read_member, name: str) -> np.ndarray:
    """A ``.npy`` member, after checking that its header's shape fits in its bytes (numpy
    would allocate the declared shape first) and that it holds no Python objects."""
    data = read_member(name)
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(stream)
    except (ValueError, SyntaxError, TypeError) as e:
        raise _corrupt(f"{name}: {e}") from None
    if dtype.hasobject:
        raise ValueError(f"disthook.load: {name} holds Python objects; arrays are read with "
                         "allow_pickle=False")
    count = 1
    for n in shape:
        count *= n
    start = stream.tell()
    if count * dtype.itemsize != len(data) - start:
        raise _corrupt(f"{name} declares shape {shape} ({count * dtype.itemsize} bytes) but "
                       f"holds {len(data) - start} bytes")
    flat = np.frombuffer(data, dtype, count, start).copy()
    return flat.reshape(shape, order="F" if fortran else "C")
