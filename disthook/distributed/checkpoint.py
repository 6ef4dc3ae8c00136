"""Checkpoints of a deployed model: one ``.npz`` per stage and a JSON manifest, written so
that a crash at any moment leaves either the previous checkpoint or the new one, whole.

Layout of a checkpoint directory::

    manifest.json               format, step, model class, fingerprint, stage layout,
                                the model's structure (spec without arrays; with
                                save(code=True) also the model pickled by value without its
                                tensors' values), optimizer hyperparameters and scalar
                                state, and each shard's sha256
    stage-<i>-<token>.npz       stage i's parameters and buffers ("param/<name>") and
                                optimizer tensors ("opt/<name>/<key>")

Every file is written under a temporary name and renamed into place; the manifest goes
last and names the shards of its own save (a fresh token per save), so an interrupted save
never mixes shards of two saves; shards no manifest names are removed after the rename.
Loading checks every shard's sha256 against the manifest.

``save`` / ``load`` fill and read that layout for a deployed model (``Deployment.save`` and
``load_checkpoint`` call them), and ``rebuild`` makes the module a checkpoint describes
(``Cluster.load``).
"""
from __future__ import annotations

import base64
import hashlib
import io
import itertools
import json
import math
import os
import stat
import sys
import uuid
import zipfile
from typing import TYPE_CHECKING

import numpy as np

from disthook import _dtype
from disthook.distributed.spec import SpecError, build_module, class_path, module_spec
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.nn.modules.module import Module

__all__ = ["CheckpointError", "fingerprint", "load", "placed_as", "read", "rebuild", "save",
           "write"]

FORMAT = 1
MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, damaged, or of another model."""


def fingerprint(module) -> str:
    """A hash of the model's structure: class paths, names, shapes and dtypes of every
    parameter and buffer (not their values)."""
    h = hashlib.sha256()
    for name, m in module.named_modules():
        h.update(f"module {name} {type(m).__module__}:{type(m).__qualname__}\n".encode())
    for name, t in module.state_dict().items():
        h.update(f"tensor {name} {tuple(t.shape)} {t._data.dtype.str}\n".encode())
    return h.hexdigest()


def _atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write(path: str, manifest: dict, shards: list[dict[str, np.ndarray]]) -> None:
    """Write ``shards`` (one dict of arrays per stage) and ``manifest`` into ``path``."""
    os.makedirs(path, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    entries = []
    for i, arrays in enumerate(shards):
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        data = buf.getvalue()
        name = f"stage-{i}-{token}.npz"
        _atomic_write(os.path.join(path, name), data)
        entries.append({"file": name, "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {**manifest, "format": FORMAT, "shards": entries}
    # keys in their order: a module's children are rebuilt in the order they are listed
    _atomic_write(os.path.join(path, MANIFEST), json.dumps(manifest, indent=1).encode())
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the renames themselves are durable
    finally:
        os.close(dir_fd)
    keep = {e["file"] for e in entries}
    for name in os.listdir(path):  # shards of earlier or interrupted saves
        if name.startswith("stage-") and name not in keep:
            os.remove(os.path.join(path, name))


def read(path: str, *, to_deploy: bool = True) -> tuple[dict, list[dict[str, np.ndarray]]]:
    """The manifest and the shards of the checkpoint at ``path``, verified; ``to_deploy``:
    with what deploying its model takes (not for loading it onto a deployed model)."""
    try:
        manifest = json.loads(_read_file(os.path.join(path, MANIFEST), f"{path}: {MANIFEST}"))
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path} (no {MANIFEST})") from None
    except (ValueError, RecursionError) as exc:  # (nested deeper than Python recurses)
        raise CheckpointError(f"{path}/{MANIFEST} is not valid JSON: {exc}") from None
    if isinstance(manifest, dict) and manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {manifest.get('format')!r}, "
                              f"expected {FORMAT}")
    _check_manifest(manifest, path, to_deploy)
    shards = []
    for entry in manifest["shards"]:
        name = entry.get("file") if isinstance(entry, dict) else None
        if not (isinstance(name, str) and name == os.path.basename(name)
                and name not in ("", ".", "..")):
            raise CheckpointError(f"{path}: a shard must be a file of the checkpoint's own "
                                  f"directory, named plainly; the manifest names {name!r:.80}")
        file = os.path.join(path, name)
        try:
            data = _read_file(file, f"{path}: shard {name}")
        except FileNotFoundError:
            raise CheckpointError(f"{path}: shard {entry['file']} is missing") from None
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise CheckpointError(f"{path}: shard {entry['file']} is damaged (its sha256 "
                                  "does not match the manifest)")
        _check_members(data, f"{path}: shard {entry['file']}")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            shards.append({k: npz[k] for k in npz.files})
    return manifest, shards


def _read_file(file: str, what: str) -> bytes:
    """The bytes of ``file``, a regular file (through links), read up to the size it had
    when opened; ``CheckpointError`` for anything else. A checkpoint handed over may name a
    pipe, whose read waited for ever, or link to a device (``/dev/zero``), whose read took
    memory without end; a file that grows while read is refused, not followed."""
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)  # (a pipe opens without a writer)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{what} is not a regular file (a pipe, a device or a "
                                  "directory, itself or where its link leads); a checkpoint "
                                  "holds files only")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(st.st_size + 1)
    finally:
        os.close(fd)
    if len(data) > st.st_size:
        raise CheckpointError(f"{what} grew while it was read; read it again once nothing "
                              "writes it")
    return data

# what the readers take of a manifest, of these types: every field ``save`` writes that
# load_checkpoint uses (all of them since the first checkpoints); "optimizer" may be absent
_MANIFEST_FIELDS = {"shards": list, "step": (int, type(None)), "class": str,
                    "fingerprint": str}
# and what deploying the model of a checkpoint uses (cluster.load, serve), which checkpoints
# older than the saved placement lack ("placement" may be absent)
_DEPLOY_FIELDS = {"stages": list, "chunks": int, "schedule": str,
                  "structure": (dict, type(None))}
_SHARD_FIELDS = {"file": str, "sha256": str}


def _check_manifest(manifest, path: str, to_deploy: bool) -> None:
    """``CheckpointError`` for a manifest that is not as ``save`` writes it: a JSON object
    with the fields its readers use, listing its shards, each shard's entry an object naming
    its file and hash. Before, a manifest someone handed a client failed inside the reader
    with an ``AttributeError``, a ``KeyError`` or a ``RecursionError``."""
    def off(value, what: str, fields: dict) -> str | None:
        if not isinstance(value, dict):
            return f"{what} is a JSON {type(value).__name__}, not an object"
        return next((f"{what} has no {key!r}" if key not in value else
                     f"{what}'s {key!r} is {_json_name(type(value[key]))}, not {_kinds(kind)}"
                     for key, kind in fields.items()
                     if key not in value or not isinstance(value[key], kind)), None)

    fields = {**_MANIFEST_FIELDS, **(_DEPLOY_FIELDS if to_deploy else {})}
    why = off(manifest, "the manifest", fields) or next(
        (w for w in (off(e, "a shard's entry", _SHARD_FIELDS) for e in manifest["shards"])
         if w), None)
    if why is not None:
        raise CheckpointError(f"{path}/{MANIFEST} is not a manifest as disthook's save writes "
                              f"it: {why}")


def _json_name(kind: type) -> str:
    return "null" if kind is type(None) else kind.__name__


def _kinds(kind) -> str:
    return " or ".join(map(_json_name, kind if isinstance(kind, tuple) else (kind,)))


def _check_members(data: bytes, where: str) -> None:
    """A shard's members as ``save`` writes them (np.savez): stored, each name once. A
    compressed member may expand to far more than the file (2 MiB of deflated zeros read
    as 2 GiB), and of two members of one name one would be taken without a word."""
    try:
        members = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise CheckpointError(f"{where} is not an .npz file: {exc}") from None
    seen = set()
    for info in members:
        if info.filename in seen:
            raise CheckpointError(f"{where} holds {info.filename!r} twice")
        seen.add(info.filename)
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise CheckpointError(
                f"{where}: {info.filename!r} is compressed ({info.compress_size} bytes that "
                f"declare {info.file_size}); a checkpoint's arrays are stored as they are "
                "(np.savez), so that reading one takes no more memory than its file")


def save(model, path: str, *, optimizer=None, step: int | None = None,
         code: bool = False) -> None:
    """Write the deployed model's parameters and buffers (and ``optimizer``'s state: a
    ``DistributedOptimizer``, or a plain ``disthook.optim`` optimizer over the model's
    parameters) as a checkpoint in directory ``path``, tagged with ``step``. The model is
    described by class paths and data; with ``code`` its code is kept too (pickled by value),
    which a model whose modules hold code (lambdas, bound methods) needs to be loaded by
    ``cluster.load`` (with ``trust_code=True``)."""
    # the model as it is now: the workers' values of its placed tensors, and the tensors
    # here (parameters of the modules kept or run here, a part replaced since the deploy:
    # its worker's copy is stale), each in the shard of its stage (stage 0's if here)
    shards: list[dict] = [{} for _ in model._addresses]
    for name, t in model._raw_state().items():
        shards[model._layout.stage_of(name) or 0][f"param/{name}"] = np.asarray(t._data)
    manifest = {"step": step, "class": class_path(type(model._local)),
                "fingerprint": fingerprint(model._local), "stages": model._stage_names,
                "chunks": model._chunks, "schedule": model._schedule,
                # how it was placed over its tree (None: contiguous stages of its children)
                "placement": model._placement_given,
                **_description(model._local, code)}
    if optimizer is not None and not _is_distributed(optimizer):
        manifest["optimizer"] = _save_plain(model, optimizer, shards)
    elif optimizer is not None:
        if set(optimizer.models) != {id(model)}:
            raise ValueError("save(optimizer=...) takes an optimizer of this model's parameters "
                             "only")
        state, groups = optimizer.state_by_name()
        scalars = {}
        for name, entries in state.items():
            shard = shards[model._stage_of(name)]
            for key, value in entries.items():
                if isinstance(value, np.ndarray):
                    shard[f"opt/{name}/{key}"] = value
                else:
                    scalars.setdefault(name, {})[key] = value
        manifest["optimizer"] = {"class": optimizer.class_name, "kwargs": optimizer.kwargs,
                                 "param_groups": groups, "scalars": scalars}
    write(path, manifest, shards)


def load(model, path: str, *, optimizer=None):
    """Restore the deployed model's parameters and buffers (and ``optimizer``'s state, of
    the kind it was saved with) from the checkpoint in ``path``, which must be of a model of
    the same structure. Returns the saved step."""
    manifest, shards = read(path, to_deploy=False)
    if manifest["fingerprint"] != fingerprint(model._local):
        raise CheckpointError(f"{path} holds a checkpoint of another model ({manifest['class']}, "
                              f"other parameter names or shapes) than this "
                              f"{model._class_name}")
    arrays = {k: v for shard in shards for k, v in shard.items()}
    model.load_state_dict({k[len("param/"):]: Tensor._make(v, None, 0)
                           for k, v in arrays.items() if k.startswith("param/")})
    if optimizer is not None:
        saved = manifest.get("optimizer")
        if saved is None:
            raise CheckpointError(f"{path} was saved without optimizer state")
        state: dict = {}
        for key, value in arrays.items():
            if key.startswith("opt/"):
                name, _, entry = key[4:].rpartition("/")
                state.setdefault(name, {})[entry] = value
        if not _is_distributed(optimizer):
            _load_plain(model, optimizer, saved, state, path)
            return manifest["step"]
        if saved["class"] != optimizer.class_name:
            raise CheckpointError(f"{path} holds {saved['class']} state, not "
                                  f"{optimizer.class_name}")
        if saved.get("plain"):
            raise CheckpointError(f"{path} holds the state of a plain {saved['class']} "
                                  "optimizer: load it into one made as it was (torch.optim."
                                  f"{saved['class']}(model.parameters(), ...)), not into a "
                                  "DistributedOptimizer")
        for name, entries in saved["scalars"].items():
            state.setdefault(name, {}).update(entries)
        optimizer.load_state_by_name(state, saved["param_groups"])
        if isinstance(manifest["step"], int):
            optimizer.steps = manifest["step"]  # its count goes on from the checkpoint's
    return manifest["step"]


# ---- a plain optimizer (torch.optim.SGD(model.parameters(), ...)) --------------------------

def _is_distributed(optimizer) -> bool:
    from disthook.distributed.optimizer import DistributedOptimizer

    return isinstance(optimizer, DistributedOptimizer)


def _param_names(model, optimizer, what: str) -> list[str]:
    """The name in the model of each parameter of ``optimizer``, in its groups' order (its
    state dict's ids); ``ValueError`` for one that is not the model's."""
    from disthook.optim import Optimizer

    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{what}(optimizer=...) takes a DistributedOptimizer or an optimizer "
                        f"of disthook.optim (torch.optim.SGD(model.parameters(), ...)), got "
                        f"{type(optimizer).__name__}")
    here = {id(p): n for n, p in model._local.named_parameters()}  # (those here too)
    names = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            name = p._path if getattr(p, "_model", None) is model else here.get(id(p))
            if name is None:
                raise ValueError(f"{what}(optimizer=...) takes an optimizer of this model's "
                                 f"parameters only; its {type(optimizer).__name__} has a "
                                 f"parameter of shape {tuple(p.shape)} that is not one of them")
            names.append(name)
    return names


def _save_plain(model, optimizer, shards: list[dict]) -> dict:
    """The manifest entry of a plain optimizer's state; its arrays go to the shard of the
    stage holding their parameter (stage 0's for a parameter kept on the client)."""
    names = _param_names(model, optimizer, "save")
    saved = optimizer.state_dict()
    scalars: dict = {}
    for index, entries in saved["state"].items():
        name = names[index]
        stage = model._layout.stage_of(name)
        for key, value in entries.items():
            if isinstance(value, Tensor):
                shards[stage or 0][f"opt/{name}/{key}"] = np.array(value.detach()._data)
            else:
                scalars.setdefault(name, {})[key] = _plain_value(value, key)
    groups = [{k: _plain_value(v, k) for k, v in group.items()}
              for group in saved["param_groups"]]
    kind = type(optimizer)
    return {"plain": True, "class": kind.__name__,
            "class_path": f"{kind.__module__}:{kind.__qualname__}", "params": names,
            "param_groups": groups, "scalars": scalars}


def _plain_value(value, key: str):
    """A hyperparameter or scalar state entry as JSON keeps it."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_plain_value(v, key) for v in value]
    raise TypeError(f"save(optimizer=...): the optimizer's {key!r} is a "
                    f"{type(value).__name__}, which a checkpoint cannot keep (numbers, "
                    "strings, None and lists of them)")


def _load_plain(model, optimizer, saved: dict, state: dict, path: str) -> None:
    """Restore a plain optimizer's state saved by ``_save_plain`` with its own
    ``load_state_dict`` (torch's checks; remote parameters' state goes to their workers)."""
    names = _param_names(model, optimizer, "load_checkpoint")
    if not saved.get("plain"):
        raise CheckpointError(f"{path} holds the state of a DistributedOptimizer of "
                              f"{saved['class']}: load it into DistributedOptimizer("
                              f"torch.optim.{saved['class']}, model.parameters(), ...)")
    if saved["class"] != type(optimizer).__name__:
        raise CheckpointError(f"{path} holds {saved['class']} state, not "
                              f"{type(optimizer).__name__}")
    if names != saved["params"]:
        wrong = next(i for i, pair in enumerate(itertools.zip_longest(names, saved["params"]))
                     if pair[0] != pair[1])
        raise CheckpointError(
            f"{path} holds optimizer state for {len(saved['params'])} parameters, this "
            f"optimizer has {len(names)}; they differ first at position {wrong} ("
            f"{_at(saved['params'], wrong)} saved, {_at(names, wrong)} here): make the "
            "optimizer over the parameters, in the groups and order, it was saved with")
    for name, entries in saved["scalars"].items():
        state.setdefault(name, {}).update(entries)
    position = {name: i for i, name in enumerate(names)}
    optimizer.load_state_dict({
        "state": {position[name]: {k: Tensor._make(np.array(v), None, 0)
                                   if isinstance(v, np.ndarray) else v
                                   for k, v in entries.items()}
                  for name, entries in state.items()},
        "param_groups": saved["param_groups"]})


def _at(names: list[str], i: int) -> str:
    return repr(names[i]) if i < len(names) else "nothing"


def placed_as(manifest: dict) -> tuple[int, dict]:
    """The stages and ``deploy`` options that place a model as the checkpoint's was: over
    its tree (its placement), whole on one worker, or as contiguous stages of its children."""
    stages = manifest["stages"]
    options = {"chunks": manifest["chunks"], "schedule": manifest["schedule"]}
    if manifest.get("placement"):
        return len(stages), {**options, "placement": manifest["placement"]}
    if stages == [[""]]:
        return 1, options
    sizes = [len(names) for names in stages]
    return len(stages), {**options, "split_points": [sum(sizes[:i])
                                                     for i in range(1, len(sizes))]}


def _description(module: Module, code: bool) -> dict:
    """The manifest's description of the model: ``structure`` (data: class paths, attributes,
    each tensor's shape and dtype; None when its modules hold code, with ``not_data`` saying
    why) and, with ``code``, the model pickled by value without its tensors' values
    (base64). Weights are saved either way: ``load_checkpoint`` onto a deployed model needs
    no description."""
    try:
        described = {"structure": _structure(module)}
    except SpecError as exc:
        described = {"structure": None, "not_data": str(exc)}
    if code:
        from disthook.distributed import shipping

        described["code"] = base64.b64encode(shipping.dumps_structure(module)).decode("ascii")
    return described


def _structure(module: Module) -> dict:
    """The module's spec with every tensor's data replaced by its shape and dtype: the
    checkpoint's description of the model, rebuilt with the saved arrays by ``load``."""
    def strip(spec):
        for kind in ("params", "buffers"):
            for entry in spec[kind].values():
                if entry is not None and "data" in entry:
                    arr = entry.pop("data")
                    entry["shape"], entry["dtype"] = list(arr.shape), arr.dtype.str
        for child in spec["children"].values():
            if child is not None:
                strip(child)
        return spec

    return strip(module_spec(module))


def rebuild(manifest: dict, shards: list[dict], *, path: str,
            trust_code: bool = False, allow_modules=()) -> Module:
    """The module a checkpoint describes, with its saved arrays (buffers that are not saved,
    the non-persistent ones, start as zeros): from its data, or, for a model whose modules
    hold code, from the code it was saved with (``trust_code``: run it). Importing a module
    runs its code, so without ``trust_code`` the classes and functions its manifest names
    come only from disthook, modules this program imported already, and ``allow_modules``
    (and their submodules); any other is refused before it is imported."""
    arrays = {k[len("param/"):]: v for shard in shards for k, v in shard.items()
              if k.startswith("param/")}
    structure = manifest.get("structure")
    # (a model kept as code says not which buffers are not saved: any, up to the cap)
    unsaved = _unsaved_buffers(structure) if isinstance(structure, dict) else None

    def array_of(full, shape, dtype):
        return _array_of(path, arrays, unsaved, full, shape, dtype)

    if structure is None:
        if not manifest.get("code"):
            why = manifest.get("not_data", "its modules hold code")
            raise CheckpointError(
                f"{path} keeps the weights of its model ({manifest['class']}) but cannot make the "
                f"model again: {why}. Deploy the model and load_checkpoint(path) onto it, or "
                "save with save(path, code=True) to keep its code for cluster.load")
        if not trust_code:
            raise PermissionError(
                f"{path} keeps its model ({manifest['class']}) as code (saved with code=True: its "
                "modules hold code, such as lambdas or bound methods), and loading it runs "
                "that code here: cluster.load(path, trust_code=True) if you trust whoever "
                "wrote it, or deploy the model yourself and load_checkpoint(path) onto it")
        from disthook.distributed import shipping

        return shipping.loads_structure(base64.b64decode(manifest["code"]),
                                        lambda name, shape, dtype: np.array(
                                            array_of(name, shape, dtype)))
    spec = with_arrays(structure, array_of)
    allow = None if trust_code else _imported_or(path, tuple(allow_modules))
    # classes of the client's own script resolve to it, as they did when it saved
    return build_module(spec, allow=allow, main=sys.modules.get("__main__"))


_BF16 = _dtype.bfloat16.np
MAX_UNSAVED_BYTES = 1 << 30  # a buffer save does not keep (made of zeros) at most this


def _unsaved_buffers(structure: dict) -> set[str]:
    """The full names of the buffers ``save`` does not keep (the non-persistent ones): the
    only tensors a checkpoint may declare without an array."""
    out: set[str] = set()

    def walk(spec, path):
        for name, entry in spec.get("buffers", {}).items():
            if isinstance(entry, dict) and entry.get("persistent") is False:
                out.add(f"{path}.{name}" if path else name)
        for name, child in spec.get("children", {}).items():
            if isinstance(child, dict):
                walk(child, f"{path}.{name}" if path else name)

    walk(structure, "")
    return out


def _array_of(path: str, arrays: dict, unsaved: set | None, full: str, shape: tuple, dtype):
    """The array of tensor ``full`` that the manifest declares as ``shape`` and ``dtype``:
    the shards' own, as declared; zeros only for a buffer ``save`` does not keep, of a
    dtype disthook has and at most ``MAX_UNSAVED_BYTES``. Before, any tensor the shards
    lacked was made of zeros of whatever the manifest declared (a 4 KiB checkpoint made a
    client allocate 2 GiB and send it to a worker), and the zeros were made, at the declared
    size, even for a tensor the shards held (tests/test_s7_checkpoint_dirs.py)."""
    if dtype.kind == "V" and dtype.itemsize == 2 and _BF16.kind == "V":
        dtype = _BF16  # (npz keeps a bfloat16 array as 2-byte voids: the only ones save writes)
    if dtype.kind not in "biufc" and dtype != _BF16:
        raise CheckpointError(f"{path}: tensor {full!r} is declared of dtype {dtype.str!r}, "
                              "which no tensor has; the checkpoint was not written by save")
    got = arrays.get(full)
    if got is not None and got.dtype.kind == "V" and dtype == _BF16 and got.itemsize == 2:
        got = got.view(_BF16)
    if got is not None:
        if got.shape != shape or got.dtype != dtype:
            raise CheckpointError(
                f"{path}: the manifest declares tensor {full!r} as {list(shape)} "
                f"{dtype.str}, its shard holds {list(got.shape)} {got.dtype.str}: the "
                "checkpoint is damaged (save writes them together)")
        return got
    if unsaved is not None and full not in unsaved:
        raise CheckpointError(
            f"{path}: no shard holds tensor {full!r}, which the manifest declares (only "
            "non-persistent buffers are not saved): the checkpoint is damaged or incomplete")
    nbytes = dtype.itemsize * math.prod(shape)
    if nbytes > MAX_UNSAVED_BYTES:
        raise CheckpointError(
            f"{path}: non-persistent buffer {full!r} is declared as {list(shape)} "
            f"{dtype.str} ({nbytes} bytes of zeros, more than {MAX_UNSAVED_BYTES}): a "
            "checkpoint declares such a buffer without its bytes, so its size is capped; "
            "make the buffer persistent, or make it in the model's code")
    return np.zeros(shape, dtype)


def _imported_or(path: str, allowed: tuple[str, ...]):
    """The allow-list of a checkpoint's names: a module already imported here (importing it
    again runs nothing), or disthook's or ``allowed``'s; the refusal says what to do."""
    def allow(module: str) -> bool:
        if module in sys.modules or any(module == a or module.startswith(a + ".")
                                        for a in ("disthook", *allowed)):
            return True
        raise SpecError(
            f"{path} names {module!r}, which this program has not imported, and importing "
            "it runs its code: import it yourself first if you trust it (then load again), "
            "or load with trust_code=True")
    return allow


def with_arrays(structure: dict, array_of) -> dict:
    """A module spec from a structure (``_structure``): each parameter and buffer entry
    given its array, ``array_of(full name, shape, dtype)``."""
    def fill(spec, path):
        spec = dict(spec)
        for kind in ("params", "buffers"):
            entries = {}
            for name, entry in spec[kind].items():
                if entry is not None and "shape" in entry:
                    full = f"{path}.{name}" if path else name
                    data = array_of(full, tuple(entry["shape"]), np.dtype(entry["dtype"]))
                    entry = {k: v for k, v in entry.items() if k not in ("shape", "dtype")}
                    entry["data"] = data
                entries[name] = entry
            spec[kind] = entries
        spec["children"] = {n: None if c is None else fill(c, f"{path}.{n}" if path else n)
                            for n, c in spec["children"].items()}
        return spec

    return fill(structure, "")

