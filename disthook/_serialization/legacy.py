"""torch's format before 1.6 (and ``_use_new_zipfile_serialization=False``): pickles in a row.

A magic number, a protocol version (1001) and the writer's sys info, each pickled; then the
object, whose storages are persistent ids ``('storage', type, key, location, numel, view)``;
then the list of storage keys, pickled; then each storage's element count (8 bytes, little
endian) and bytes, in that order. The storages' arrays are allocated while the object is
unpickled, before their bytes come, so their declared sizes are checked against the bytes the
file has left first: nothing is allocated beyond what the file holds.
"""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook._serialization import names, unpickler
from disthook._serialization.rebuild import CheckpointError, Storage

MAGIC = 0x1950A86A20F9469CFC6C
PROTOCOL = 1001


def short(value) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _no_storages(pid):
    raise CheckpointError(f"a storage ({short(pid)}) where the file's header belongs")


def load(source, length: int, locate, weights_only: bool, encoding: str) -> tuple:
    """The object in a legacy file, and whether it holds bfloat16 storages (read as float32,
    as the zip format's are); ``locate(storage, location)`` applies map_location."""
    def header():
        return unpickler.run(unpickler.WeightsUnpickler(source, _no_storages, encoding))

    if header() != MAGIC:
        raise CheckpointError("not a torch file: its first pickle is not torch's magic number")
    if header() != PROTOCOL:
        raise CheckpointError("a legacy torch file of an unknown protocol version")
    info = header()
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise CheckpointError("a legacy torch file written on a big-endian machine")

    budget = [length - source.tell()]  # bytes the file has left for every storage
    storages: dict = {}  # key -> Storage (filled after the object is read)
    bfloat16: set = set()  # keys of the bfloat16 storages, whose bytes become float32

    def load_storage(pid):
        if (not weights_only and isinstance(pid, tuple) and len(pid) == 4
                and pid[0] == "module" and isinstance(pid[1], type)):
            return pid[1]  # a module's class, with its source (which is not checked)
        if not isinstance(pid, tuple) or len(pid) != 6 or pid[0] != "storage":
            raise CheckpointError(f"unknown persistent id {short(pid)}")
        _, kind, key, location, numel, view = pid
        if not isinstance(kind, names.StorageType) or not isinstance(key, str) or type(
                numel) is not int or numel < 0 or not isinstance(location, str):
            raise CheckpointError(f"malformed storage id {short(pid)}")
        if kind.dtype is None:
            raise CheckpointError(names.unsupported_reason("torch", kind.name))
        storage = storages.get(key)
        if storage is None:
            in_file = np.dtype(np.uint16 if kind.dtype == "bfloat16" else kind.dtype)
            if numel * in_file.itemsize + 8 > budget[0]:
                raise CheckpointError(f"storage {key!r} declares {numel} elements, more than "
                                      "the rest of the file holds")
            budget[0] -= numel * in_file.itemsize + 8
            held = in_file
            if kind.dtype == "bfloat16":  # (held as float32 without ml_dtypes)
                held = _dtype.BF16 if _dtype.BF16 is not None else np.float32
                if _dtype.BF16 is None:
                    bfloat16.add(key)
            storage = storages[key] = Storage(np.zeros(numel, held), key)
        if view is not None:
            if not (isinstance(view, tuple) and len(view) == 3 and type(view[1]) is int
                    and type(view[2]) is int and 0 <= view[1]
                    and view[1] + view[2] <= storage.array.size and view[2] >= 0):
                raise CheckpointError(f"storage view {view!r} outside storage {key!r}")
            storage = Storage(storage.array[view[1]:view[1] + view[2]], str(view[0]))
        return locate(storage, location)

    kind = unpickler.WeightsUnpickler if weights_only else unpickler.TrustedUnpickler
    obj = unpickler.run(kind(source, load_storage, encoding))
    keys = header()
    if not isinstance(keys, list) or sorted(keys) != sorted(storages):
        raise CheckpointError("the file's list of storages does not match its object")
    for key in keys:
        array = storages[key].array
        count = int.from_bytes(source.read(8), "little")
        if count != array.size:
            raise CheckpointError(f"storage {key!r} holds {count} elements where the object "
                                  f"names {array.size} (truncated?)")
        raw = np.empty(array.size, np.uint16) if key in bfloat16 else _dtype.as_buffer(array)
        got = source.readinto(memoryview(raw).cast("B")) if raw.nbytes else 0
        if got != raw.nbytes:
            raise CheckpointError(f"storage {key!r} is cut short: {got} of {raw.nbytes} "
                                  "bytes (truncated?)")
        if key in bfloat16:
            array[:] = _dtype.bfloat16_from_bits(raw)[0]
    return obj, bool(bfloat16)
