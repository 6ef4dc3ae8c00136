"""``torch.save`` / ``torch.load`` in torch's own file format, both ways.

``save`` writes the zip archive real torch writes (``archive/data.pkl``, the pickled object
with each tensor as a view of a storage; ``archive/data/<key>``, each storage's bytes), so
``torch.load`` reads our files. ``load`` reads those files, whoever wrote them; by default
(``weights_only=True``, torch's default since 2.6) through a restricted unpickler that admits
tensors, storages, containers and primitives, runs nothing and refuses everything else with
torch's error; ``weights_only=False`` (trusted files only: it runs whatever the file names)
rebuilds whole pickled modules and optimizers, torch's classes read as disthook's. It also
reads torch's format before 1.6 (pickles in a row), the format disthook wrote before
(``disthook.json`` + ``.npy``) and ``.npz`` archives.

Malformed or hostile files fail with an error naming the file; nothing is allocated beyond
what the file holds (see ``_serialization.archive``).
"""
from __future__ import annotations

import contextlib
import io
import os
import pickle
import warnings
import zipfile
from collections import OrderedDict

import numpy as np

from disthook import _dtype
from disthook._serialization import archive as _archive
from disthook._serialization import disthook_v1, legacy, names, unpickler
from disthook._serialization.pickler import TorchPickler
from disthook._serialization.rebuild import CheckpointError, Storage, no_cuda

__all__ = ["SourceChangeWarning", "add_safe_globals", "clear_safe_globals",
           "default_restore_location", "get_safe_globals", "get_unsafe_globals_in_checkpoint",
           "load", "location_tag", "safe_globals", "save"]

DEFAULT_PROTOCOL = 2


class SourceChangeWarning(Warning):
    """torch's warning for a pickled module whose class source changed since it was saved;
    disthook never compares sources, so it is never raised (programs filter it by name)."""


# ---- safe globals (torch.serialization's allowlist for weights-only loads) -------------------

def add_safe_globals(safe_globals: list) -> None:
    """Let weights-only loads rebuild these classes and call these functions."""
    for entry in safe_globals:
        name, obj = unpickler.safe_global_name(entry)
        unpickler.SAFE_GLOBALS[name] = obj
        # disthook's own classes (torch.nn.Conv2d under `import disthook as torch`) are
        # named in files by torch's name of them
        theirs = None if isinstance(entry, tuple) else names.torch_name(obj)
        if theirs is not None:
            unpickler.SAFE_GLOBALS[".".join(theirs)] = obj


def get_safe_globals() -> list:
    return list({id(obj): obj for obj in unpickler.SAFE_GLOBALS.values()}.values())


def clear_safe_globals() -> None:
    unpickler.SAFE_GLOBALS.clear()


@contextlib.contextmanager
def safe_globals(safe_globals: list):
    """``add_safe_globals`` for the duration of a ``with`` block."""
    before = dict(unpickler.SAFE_GLOBALS)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        unpickler.SAFE_GLOBALS.clear()
        unpickler.SAFE_GLOBALS.update(before)


def get_unsafe_globals_in_checkpoint(f) -> list:
    """The ``module.name`` globals a torch checkpoint names that a weights-only load would
    refuse (read from its pickle without running it), to judge before allowing them."""
    is_path = isinstance(f, (str, os.PathLike))
    with (open(os.fspath(f), "rb") if is_path else contextlib.nullcontext(f)) as source:
        name = repr(os.fspath(f)) if is_path else "the file"
        with _open_zip(source, name) as archive:
            prefix = _archive.torch_prefix(archive.namelist())
            if prefix is None:
                raise RuntimeError(f"get_unsafe_globals_in_checkpoint: {name} is not a torch "
                                   "zip checkpoint")
            reader = _archive.ArchiveReader(archive, prefix, _archive.file_length(source))
            data = reader.read("data.pkl").tobytes()
    return [full for full in unpickler.globals_named(data)
            if names.weights_global(*names.fix_import(*full.rsplit(".", 1)),
                                    unpickler.SAFE_GLOBALS) is None]


# ---- save -----------------------------------------------------------------------------------

def save(obj, f, pickle_module=pickle, pickle_protocol: int = DEFAULT_PROTOCOL,
         _use_new_zipfile_serialization: bool = True,
         _disable_byteorder_record: bool = False) -> None:
    """Write ``obj`` to ``f`` (a path or a binary file object) in torch's zip format."""
    if pickle_module not in (None, pickle):
        raise ValueError("disthook.save pickles with Python's pickle module; pickle_module="
                         f"{getattr(pickle_module, '__name__', pickle_module)!r} is not "
                         "supported")
    if not _use_new_zipfile_serialization:
        raise ValueError("disthook.save writes torch's zip format only "
                         "(_use_new_zipfile_serialization=True), which every torch since 1.6 "
                         "reads")
    data = io.BytesIO()
    pickler = TorchPickler(data, pickle_protocol)
    pickler.dump(obj)
    is_path = isinstance(f, (str, os.PathLike))
    with (open(os.fspath(f), "wb") if is_path else contextlib.nullcontext(f)) as target:
        writer = _archive.ArchiveWriter(target)
        writer.write("data.pkl", data.getbuffer())
        writer.write(".format_version", b"1")
        writer.write(".storage_alignment", str(_archive.ALIGNMENT).encode())
        if not _disable_byteorder_record:
            writer.write("byteorder", b"little")
        for key, array in pickler.records:
            array = _dtype.as_buffer(array)
            writer.write(f"data/{key}", array.astype(array.dtype.newbyteorder("<"), copy=False))
        writer.write_trailer()
        writer.close()


# ---- load -----------------------------------------------------------------------------------

def _location(map_location, storage: Storage, location: str) -> Storage:
    """Where ``map_location`` sends a storage saved at ``location``: the CPU, or torch's error
    for a device this process does not have."""
    from disthook.tensor import device

    where = location
    if isinstance(map_location, dict):
        where = map_location.get(location, location)
    elif isinstance(map_location, (str, device)):
        where = str(map_location)
    elif callable(map_location):
        moved = map_location(storage, location)
        if isinstance(moved, Storage):
            return moved
        if moved is not None:
            raise TypeError(f"map_location returned {type(moved).__name__}; it must return "
                            "the storage it is given (or None)")
    elif map_location is not None:
        raise TypeError(f"map_location must be a str, a device, a dict or a callable, not "
                        f"{type(map_location).__name__}")
    where = str(where)
    if where.startswith("cuda"):
        raise no_cuda()
    if not where.startswith("cpu"):
        raise RuntimeError(f"disthook.load: the file's tensors are on {location!r}, mapped to "
                           f"{where!r}; only the CPU exists here: load with "
                           "map_location='cpu'")
    return storage


def default_restore_location(storage: Storage, location: str) -> Storage:
    """torch's restore for a storage saved at ``location`` (``map_location`` callables call
    it, e.g. ``lambda s, loc: default_restore_location(s, "cpu")``): the CPU, or torch's
    error for a device this process does not have."""
    return _location(None, storage, str(location))


def location_tag(storage) -> str:
    """Where a storage lives, as torch writes it in a checkpoint: always ``"cpu"`` here."""
    return "cpu"


def _check_map_location(map_location) -> None:
    """A map_location naming a GPU fails before the file is read, as in a CPU-only torch."""
    if map_location is None or callable(map_location) or isinstance(map_location, dict):
        return
    if str(map_location).startswith("cuda"):
        raise no_cuda()


class _StorageLoader:
    """persistent_load for torch archives: each storage record read once, checked, shared."""

    def __init__(self, reader: _archive.ArchiveReader, map_location, mmap: bool,
                 byteorder: str) -> None:
        self.reader, self.map_location, self.mmap = reader, map_location, mmap
        self.byteorder = byteorder
        self.loaded: dict = {}
        self.bfloat16 = False

    def __call__(self, pid):
        if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage":
            raise CheckpointError(f"unknown persistent id {legacy.short(pid)} (a torch "
                                  "archive names storages as ('storage', type, key, "
                                  "location, size))")
        _, kind, key, location, numel = pid
        if not isinstance(kind, names.StorageType) or not isinstance(key, str) or type(
                numel) is not int or numel < 0 or not isinstance(location, str):
            raise CheckpointError(f"malformed storage id {legacy.short(pid)}")
        if key in self.loaded:
            return self.loaded[key]
        if kind.dtype is None:
            raise CheckpointError(names.unsupported_reason("torch", kind.name))
        dtype = np.dtype(np.uint16 if kind.dtype == "bfloat16" else kind.dtype)
        raw = (self.reader.mmap if self.mmap else self.reader.read)(
            f"data/{key}", numel * dtype.itemsize)
        # typed over the record's memory and not a view of its bytes, so that tensors saved
        # again are views of this storage, as they were in the file
        array = np.frombuffer(raw.data, dtype.newbyteorder(
            "<" if self.byteorder == "little" else ">"))
        if not array.dtype.isnative:
            array = array.astype(dtype)
        if kind.dtype == "bfloat16":
            array, widened = _dtype.bfloat16_from_bits(array)
            self.bfloat16 = self.bfloat16 or widened
        storage = _location(self.map_location, Storage(array, key), location)
        self.loaded[key] = storage
        return storage


def _open_zip(source, name: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(source, "r")
    except (*_archive.archive_errors(), ValueError, OSError) as e:
        raise RuntimeError(f"disthook.load: {name} is damaged or truncated: its zip directory "
                           f"cannot be read ({e})") from None


def _load_torch(archive: zipfile.ZipFile, prefix: str, name: str, length: int, path,
                map_location, weights_only: bool, mmap: bool, encoding: str):
    reader = _archive.ArchiveReader(archive, prefix, length, path)
    byteorder = "little"
    if reader.has("byteorder"):
        byteorder = bytes(reader.read("byteorder")).decode("ascii", "replace")
        if byteorder not in ("little", "big"):
            raise CheckpointError(f"unknown byteorder {byteorder!r}")
    loader = _StorageLoader(reader, map_location, mmap, byteorder)
    data = io.BytesIO(reader.read("data.pkl").tobytes())
    kind = unpickler.WeightsUnpickler if weights_only else unpickler.TrustedUnpickler
    obj = unpickler.run(kind(data, loader, encoding))
    if loader.bfloat16:
        _warn_bfloat16(name, stacklevel=5)
    return obj


def _warn_bfloat16(name: str, stacklevel: int) -> None:
    warnings.warn(f"disthook.load: {name} holds bfloat16 tensors; numpy has no bfloat16 "
                  "(without the ml_dtypes package), so they load as float32 (the same "
                  "values, twice the memory)", UserWarning,
                  stacklevel=stacklevel)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "y", "yes", "true")


def _weights_only(weights_only, pickle_module) -> bool:
    """torch's rule: True unless asked otherwise; TORCH_FORCE_WEIGHTS_ONLY_LOAD forces True,
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD makes False the default (with a warning)."""
    if _env_true("TORCH_FORCE_WEIGHTS_ONLY_LOAD"):
        return True
    if weights_only is not None:
        return bool(weights_only)
    if _env_true("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"):
        warnings.warn("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set and load() was not given "
                      "weights_only: loading with weights_only=False, which runs whatever "
                      "code the file names (trusted files only)", UserWarning, stacklevel=3)
        return False
    return pickle_module is None


def load(f, map_location=None, pickle_module=None, *, weights_only: bool | None = None,
         mmap: bool | None = None, **pickle_load_args):
    """Read a file written by ``torch.save`` or ``disthook.save`` (or an ``.npz``).

    ``weights_only`` (default True) admits tensors, containers and primitives only;
    ``weights_only=False`` rebuilds any pickled object and so runs whatever code the file
    names: use it only for files from a source you trust. ``map_location`` may name the CPU
    (a str, device, dict or callable, as torch takes it); ``mmap=True`` maps the tensors'
    bytes from the file (copy-on-write) instead of reading them.
    """
    weights_only = _weights_only(weights_only, pickle_module)
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is "
                           "specified: pass weights_only=False to use your pickle module")
    if pickle_module not in (None, pickle):
        raise ValueError("disthook.load unpickles with Python's pickle module; pickle_module="
                         f"{getattr(pickle_module, '__name__', pickle_module)!r} is not "
                         "supported")
    encoding = pickle_load_args.pop("encoding", "utf-8")
    if pickle_load_args:
        raise TypeError(f"load() got unexpected keyword arguments {sorted(pickle_load_args)}")
    _check_map_location(map_location)
    is_path = isinstance(f, (str, os.PathLike))
    if mmap and not is_path:
        raise ValueError("f must be a file path in order to use the mmap argument")
    name = repr(os.fspath(f)) if is_path else "the file"
    with (open(os.fspath(f), "rb") if is_path else contextlib.nullcontext(f)) as source:
        start = source.tell() if hasattr(source, "tell") else 0
        magic = source.read(4)
        source.seek(start)
        if magic != b"PK\x03\x04" and magic[:1] != b"\x80":
            raise RuntimeError(f"disthook.load: {name} is not a checkpoint (torch.save "
                               "writes a zip archive; before torch 1.6, pickles)")
        if magic[:1] == b"\x80" and mmap:
            raise RuntimeError("mmap can only be used with files saved with "
                               "`torch.save(_use_new_zipfile_serialization=True)`")
        try:
            if magic[:1] == b"\x80":  # torch's format before 1.6
                obj, bfloat16 = legacy.load(
                    source, _archive.file_length(source),
                    lambda storage, where: _location(map_location, storage, where),
                    weights_only, encoding)
                if bfloat16:
                    _warn_bfloat16(name, stacklevel=3)
                return obj
            return _load_zip(source, name, os.fspath(f) if is_path else None, map_location,
                             weights_only, bool(mmap), encoding)
        except CheckpointError as e:
            raise CheckpointError(f"disthook.load: {name}: {e}") from None
        except _archive.archive_errors() as e:
            raise RuntimeError(f"disthook.load: {name} is damaged or truncated ({e})") from None
        except RecursionError:
            raise RuntimeError(f"disthook.load: {name} holds objects nested too deep to "
                               "read") from None
        except pickle.UnpicklingError as e:
            if weights_only and str(e).startswith("Weights only load failed"):
                raise
            raise pickle.UnpicklingError(f"disthook.load: {name}: {e}") from None


def _load_zip(source, name: str, path, map_location, weights_only: bool, mmap: bool,
              encoding: str):
    length = _archive.file_length(source)
    with _open_zip(source, name) as archive:
        members = archive.namelist()
        prefix = _archive.torch_prefix(members)
        if prefix is not None:
            return _load_torch(archive, prefix, name, length, path, map_location,
                               weights_only, mmap, encoding)
        reader = _archive.ArchiveReader(archive, "", length, path)

        def read_member(member: str) -> bytes:
            return reader.read(member).tobytes()

        if disthook_v1.MANIFEST in members:
            return disthook_v1.read(read_member)
        if members and all(n.endswith(".npy") for n in members):
            from disthook.tensor import Tensor

            return OrderedDict((n[:-4], Tensor._make(disthook_v1.read_npy(read_member, n),
                                                     None, 0)) for n in members)
        if any(n.endswith("constants.pkl") for n in members):
            raise RuntimeError(f"disthook.load: {name} is a TorchScript archive "
                               "(torch.jit.save), which holds compiled code; disthook.load "
                               "reads torch.save files")
        raise RuntimeError(f"disthook.load: {name} is a zip archive but not a checkpoint: it "
                           "has no data.pkl (torch.save), disthook.json (disthook.save before "
                           "it wrote torch's format) or .npy arrays (numpy.savez)")
