"""Checkpoints of a deployed model: one ``.npz`` per stage and a JSON manifest, written so
that a crash at any moment leaves either the previous checkpoint or the new one, whole.

Layout of a checkpoint directory::

    manifest.json               format, step, model class, fingerprint, stage layout,
                                the model's structure (spec without arrays), optimizer
                                hyperparameters and scalar state, and each shard's sha256
    stage-<i>-<token>.npz       stage i's parameters and buffers ("param/<name>") and
                                optimizer tensors ("opt/<name>/<key>")

Every file is written under a temporary name and renamed into place; the manifest goes
last and names the shards of its own save (a fresh token per save), so an interrupted save
never mixes shards of two saves; shards no manifest names are removed after the rename.
Loading checks every shard's sha256 against the manifest.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import uuid

import numpy as np

__all__ = ["CheckpointError", "fingerprint", "read", "write"]

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
        h.update(f"tensor {name} {tuple(t.shape)} {t.numpy().dtype.str}\n".encode())
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
    _atomic_write(os.path.join(path, MANIFEST),
                  json.dumps(manifest, indent=1, sort_keys=True).encode())
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the renames themselves are durable
    finally:
        os.close(dir_fd)
    keep = {e["file"] for e in entries}
    for name in os.listdir(path):  # shards of earlier or interrupted saves
        if name.startswith("stage-") and name not in keep:
            os.remove(os.path.join(path, name))


def read(path: str) -> tuple[dict, list[dict[str, np.ndarray]]]:
    """The manifest and the shards of the checkpoint at ``path``, verified."""
    try:
        with open(os.path.join(path, MANIFEST), "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path} (no {MANIFEST})") from None
    except ValueError as exc:
        raise CheckpointError(f"{path}/{MANIFEST} is not valid JSON: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {manifest.get('format')!r}, "
                              f"expected {FORMAT}")
    shards = []
    for entry in manifest["shards"]:
        file = os.path.join(path, entry["file"])
        try:
            with open(file, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CheckpointError(f"{path}: shard {entry['file']} is missing") from None
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise CheckpointError(f"{path}: shard {entry['file']} is damaged (its sha256 "
                                  "does not match the manifest)")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            shards.append({k: npz[k] for k in npz.files})
    return manifest, shards
