"""The safetensors format (Hugging Face's weights files), read and written here.

A file is an 8-byte little-endian header length, a JSON header (each tensor's dtype, shape
and ``data_offsets`` into the byte buffer that follows; optional ``__metadata__`` of
strings), then the raw little-endian bytes. The format is small and fixed, so disthook reads
and writes it itself rather than depending on the ``safetensors`` package (whose torch API
imports torch): nothing is pickled, and every offset and shape is checked against the bytes
the file holds before a tensor is made. ``disthook.safetensors`` is the public face.
"""
from __future__ import annotations

import json
import os
import warnings
from collections import OrderedDict

import numpy as np

from disthook import _dtype
from disthook._serialization.rebuild import too_large

MAX_HEADER_BYTES = 100_000_000
DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32",
          "I64": "int64", "F16": "float16", "F32": "float32", "F64": "float64",
          "BF16": "bfloat16"}
CODES = {v: k for k, v in DTYPES.items()}
UNSUPPORTED = ("U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3",
               "F6_E3M2", "C64")


class SafetensorError(RuntimeError):
    """A safetensors file that does not hold what its header declares."""


# ---- write ----------------------------------------------------------------------------------

def _check_tensors(tensors: dict) -> list:
    from disthook.tensor import Tensor

    if not isinstance(tensors, dict):
        raise TypeError(f"save_file takes a dict of name -> tensor, not "
                        f"{type(tensors).__name__}")
    arrays, seen = [], {}
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise TypeError(f"save_file takes str names and tensors; {name!r} is "
                             f"{type(t).__name__}")
        array = np.asarray(t._data)
        if not array.flags.c_contiguous:
            raise ValueError(f"tensor {name!r} is not contiguous (a view of another tensor?): "
                             "save the whole tensor and slice after loading, or save "
                             f"{name}.contiguous()")
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        # tensors that overlap in one buffer are shared; disjoint parts of one buffer (the
        # tensors of a loaded file) are not, as safetensors itself judges it
        start = array.__array_interface__["data"][0]
        stop = start + array.nbytes
        for first, (other_start, other_stop) in seen.get(id(root), {}).items():
            if array.nbytes and start < other_stop and other_start < stop:
                raise RuntimeError(f"tensors {first!r} and {name!r} share memory: a "
                                   "safetensors file holds each tensor's bytes once, so "
                                   "shared (tied) weights would come back as copies. Save one "
                                   "of them, or use save_model(model, filename), which drops "
                                   "the duplicates and load_model ties them again")
        seen.setdefault(id(root), {})[name] = (start, stop)
        arrays.append((name, array))
    return arrays


def save(tensors: dict, metadata: dict | None = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors`` (name -> tensor)."""
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise ValueError("metadata must be a dict of str -> str")
    arrays = _check_tensors(tensors)
    header: dict = {} if metadata is None else {"__metadata__": dict(metadata)}
    offset = 0
    # largest elements first, so that every tensor's bytes stay aligned to its element size
    arrays.sort(key=lambda item: (-item[1].itemsize, item[0]))
    for name, array in arrays:
        code = CODES.get(array.dtype.name)
        if code is None:
            raise ValueError(f"tensor {name!r} has dtype {array.dtype}, which safetensors "
                             "does not store")
        header[name] = {"dtype": code, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    parts = [len(text).to_bytes(8, "little"), text]
    parts += [array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
              for _, array in arrays]
    return b"".join(parts)


def save_file(tensors: dict, filename, metadata: dict | None = None) -> None:
    """Write ``tensors`` (name -> tensor) to ``filename`` as safetensors."""
    data = save(tensors, metadata)
    with open(os.fspath(filename), "wb") as f:
        f.write(data)


# ---- read -----------------------------------------------------------------------------------

def parse_header(head: bytes, buffer_bytes: int, where: str) -> tuple[dict, dict]:
    """(tensors: name -> (dtype, shape, begin, end), metadata), after checking that the
    tensors tile the ``buffer_bytes`` that follow the header exactly."""
    try:
        header = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SafetensorError(f"{where}: the header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise SafetensorError(f"{where}: the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorError(f"{where}: __metadata__ must map strings to strings")
    tensors, spans = {}, []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorError(f"{where}: tensor {name!r} has entry {info!r}; expected "
                                  "dtype, shape and data_offsets")
        code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if code in UNSUPPORTED:
            raise SafetensorError(f"{where}: tensor {name!r} is {code}, an element type "
                                  "disthook has no tensors of")
        if code not in DTYPES:
            raise SafetensorError(f"{where}: tensor {name!r} has unknown dtype {code!r}")
        if not (isinstance(shape, list) and len(shape) <= 64 and all(
                type(n) is int and n >= 0 for n in shape)):
            raise SafetensorError(f"{where}: tensor {name!r} has shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(
                type(n) is int for n in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise SafetensorError(f"{where}: tensor {name!r} has data_offsets {offsets!r}")
        itemsize = 2 if code == "BF16" else np.dtype(DTYPES[code]).itemsize
        why = too_large(shape, itemsize)
        if why is not None:
            raise SafetensorError(f"{where}: tensor {name!r} cannot be loaded: {why}")
        count = 1
        for n in shape:
            count *= n
        if count * itemsize != offsets[1] - offsets[0]:
            raise SafetensorError(f"{where}: tensor {name!r} of shape {shape} and dtype {code} "
                                  f"needs {count * itemsize} bytes but data_offsets {offsets} "
                                  "hold " + str(offsets[1] - offsets[0]))
        tensors[name] = (code, tuple(shape), offsets[0], offsets[1])
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise SafetensorError(f"{where}: tensor {name!r} starts at byte {begin} of the "
                                  f"data, where {end} was expected (tensors overlap or leave "
                                  "a hole)")
        end = stop
    if end != buffer_bytes:
        raise SafetensorError(f"{where}: the tensors declare {end} bytes of data but the file "
                              f"holds {buffer_bytes} after its header (truncated?)")
    return tensors, metadata


def _tensor(buffer: np.ndarray, entry, name: str, where: str, state: dict):
    from disthook.tensor import Tensor

    code, shape, begin, end = entry
    # the tensor's own bytes, an array of their own over the buffer (no copy): its storage
    # is its own, as safetensors.torch gives each tensor
    raw = np.frombuffer(buffer.data, np.uint8, end - begin, begin)
    if code == "BF16":
        array, widened = _dtype.bfloat16_from_bits(raw.view("<u2"))
        if widened and not state.get("warned"):
            state["warned"] = True
            warnings.warn(f"{where} holds bfloat16 tensors; numpy has no bfloat16 (without "
                          "the ml_dtypes package), so they load as float32 (the same values, twice the memory)", UserWarning,
                          stacklevel=4)
    else:
        array = raw.view(np.dtype(DTYPES[code]).newbyteorder("<"))
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
    return Tensor._make(array.reshape(shape), None, 0)


def _split(data, where: str) -> tuple[int, dict, dict]:
    if len(data) < 8:
        raise SafetensorError(f"{where}: {len(data)} bytes are too few for a safetensors file")
    size = int.from_bytes(bytes(data[:8]), "little")
    if size > MAX_HEADER_BYTES or 8 + size > len(data):
        raise SafetensorError(f"{where}: the header declares {size} bytes, more than the file "
                              f"holds ({len(data) - 8}) or than a header may be")
    tensors, metadata = parse_header(bytes(data[8:8 + size]), len(data) - 8 - size, where)
    return 8 + size, tensors, metadata


def load(data: bytes) -> dict:
    """The tensors (name -> tensor) in the bytes of a safetensors file."""
    start, tensors, _ = _split(data, "the safetensors bytes")
    buffer = np.frombuffer(bytes(data), np.uint8)[start:].copy()
    state: dict = {}
    return {name: _tensor(buffer, entry, name, "the safetensors bytes", state)
            for name, entry in tensors.items()}


class safe_open:
    """A safetensors file opened for reading tensors one at a time, mapped from disk
    (copy-on-write), as ``safetensors.safe_open(filename, framework="pt")``."""

    def __init__(self, filename, framework: str = "pt", device="cpu") -> None:
        if str(device) != "cpu":
            raise RuntimeError(f"disthook runs on the CPU only; device {device!r} is not "
                               "available")
        self._where = repr(os.fspath(filename))
        size = os.path.getsize(filename)
        with open(filename, "rb") as f:
            first = f.read(8)
            if len(first) < 8:
                raise SafetensorError(f"{self._where}: {len(first)} bytes are too few for a "
                                      "safetensors file")
            length = int.from_bytes(first, "little")
            if length > MAX_HEADER_BYTES or 8 + length > size:
                raise SafetensorError(f"{self._where}: the header declares {length} bytes, "
                                      f"more than the file holds ({size - 8}) or than a "
                                      "header may be")
            head = f.read(length)
        self._tensors, self._metadata = parse_header(head, size - 8 - length, self._where)
        data_bytes = size - 8 - length
        self._buffer = (np.memmap(filename, np.uint8, mode="c", offset=8 + length,
                                  shape=(data_bytes,)).view(np.ndarray) if data_bytes else
                        np.empty(0, np.uint8))  # a plain array over the map
        self._state: dict = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def keys(self) -> list:
        return sorted(self._tensors)

    def offset_keys(self) -> list:
        return sorted(self._tensors, key=lambda n: self._tensors[n][2])

    def metadata(self) -> dict:
        return dict(self._metadata)

    def get_tensor(self, name: str):
        if name not in self._tensors:
            raise KeyError(f"{self._where} has no tensor {name!r}")
        return _tensor(self._buffer, self._tensors[name], name, self._where, self._state)

    def get_slice(self, name: str):
        return _Slice(self.get_tensor(name))


class _Slice:
    """What ``safe_open.get_slice`` gives: shape and dtype, and ``[...]`` reads a part."""

    def __init__(self, tensor) -> None:
        self._tensor = tensor

    def get_shape(self) -> list:
        return list(self._tensor.shape)

    def get_dtype(self) -> str:
        return CODES[self._tensor._data.dtype.name]

    def __getitem__(self, index):
        return self._tensor[index].clone()


def load_file(filename, device="cpu") -> dict:
    """The tensors (name -> tensor) in a safetensors file, in the file's order."""
    with safe_open(filename, "pt", device) as f:
        return {name: f.get_tensor(name) for name in f.offset_keys()}


# ---- whole models, tied weights kept tied -----------------------------------------------------

def _tied_groups(state_dict: dict) -> list:
    groups: dict = {}
    for name, t in state_dict.items():
        array = np.asarray(t._data)
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        key = (id(root), array.__array_interface__["data"][0], array.shape, array.strides)
        groups.setdefault(key, []).append(name)
    return list(groups.values())


def save_model(model, filename, metadata: dict | None = None,
               force_contiguous: bool = False) -> None:
    """Save ``model.state_dict()``, one name per group of tied weights (the others are
    tied again by ``load_model``)."""
    state = model.state_dict()
    keep = {}
    for names in _tied_groups(state):
        first = min(names)
        keep[first] = state[first]
    if force_contiguous:
        keep = {k: v.contiguous() for k, v in keep.items()}
    save_file(keep, filename, metadata)


def load_model(model, filename, strict: bool = True, device="cpu") -> tuple[list, list]:
    """Load a file written by ``save_model`` (or any safetensors state dict) into ``model``;
    returns (missing, unexpected) names, and raises for them when ``strict``."""
    loaded = load_file(filename, device)
    state = model.state_dict()
    tied_to = {}
    for names in _tied_groups(state):
        for name in names:
            tied_to[name] = names
    missing = [n for n in state if n not in loaded and not any(
        m in loaded for m in tied_to.get(n, ()))]
    unexpected = [n for n in loaded if n not in state]
    if strict and (missing or unexpected):
        raise RuntimeError(f"Error(s) in loading state_dict for {type(model).__name__}: "
                           f"missing keys {missing}, unexpected keys {unexpected}")
    model.load_state_dict(OrderedDict((k, v) for k, v in loaded.items() if k in state),
                          strict=False)
    return missing, unexpected
