"""``torch.hub``'s checkpoint downloads: ``load_state_dict_from_url`` (how timm, torchvision
and detectron2-style code fetch pretrained weights) and ``download_url_to_file``, with torch's
cache directory. Loading a model's code from a GitHub repository (``hub.load``, ``list``,
``help``) is not implemented: it refuses at use, as any other missing name.

A downloaded file is read by ``disthook.load``; it admits tensors, containers and primitives
unless ``weights_only=False`` is given (torch's hub default is False: disthook does not run a
pickle from the network unless asked to)."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import urllib.request
from urllib.parse import urlparse  # torch.hub has it too: timm imports it from there

__all__ = ["download_url_to_file", "get_dir", "load_state_dict_from_url", "set_dir"]

# a checkpoint named <name>-<first hex digits of its sha256>.<ext> (torchvision's convention)
HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")
READ_CHUNK_BYTES = 1 << 20
_hub_dir: str | None = None


def _get_torch_home() -> str:
    cache = os.getenv("XDG_CACHE_HOME", os.path.join("~", ".cache"))
    return os.path.expanduser(os.getenv("TORCH_HOME", os.path.join(cache, "torch")))


def get_dir() -> str:
    """Where hub keeps its files: set_dir's choice, else ``$TORCH_HOME/hub`` (torch's)."""
    return _hub_dir if _hub_dir is not None else os.path.join(_get_torch_home(), "hub")


def set_dir(d) -> None:
    global _hub_dir
    _hub_dir = os.path.expanduser(os.fspath(d))


def download_url_to_file(url: str, dst: str, hash_prefix: str | None = None,
                         progress: bool = True) -> None:
    """Save what ``url`` answers as ``dst``, through a temporary file beside it (no partial
    file under the final name); with ``hash_prefix``, its sha256 must start with it."""
    dst = os.path.expanduser(os.fspath(dst))
    request = urllib.request.Request(url, headers={"User-Agent": "torch.hub"})
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(dst) + ".", suffix=".partial",
                               dir=os.path.dirname(os.path.abspath(dst)))
    try:
        with urllib.request.urlopen(request) as answer, os.fdopen(fd, "wb") as out:
            while chunk := answer.read(READ_CHUNK_BYTES):
                out.write(chunk)
                digest.update(chunk)
        if hash_prefix is not None and not digest.hexdigest().startswith(hash_prefix):
            raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got '
                               f'"{digest.hexdigest()}")')
        shutil.move(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_state_dict_from_url(url: str, model_dir: str | None = None, map_location=None,
                             progress: bool = True, check_hash: bool = False,
                             file_name: str | None = None, weights_only: bool | None = None):
    """The object saved at ``url``, downloaded once into ``model_dir`` (default
    ``get_dir()/checkpoints``) and read from there afterwards. ``check_hash`` checks the
    download against the hash prefix in its file name (``resnet18-f37072fd.pth``)."""
    from disthook.serialization import load

    model_dir = model_dir if model_dir is not None else os.path.join(get_dir(), "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    filename = file_name or os.path.basename(urlparse(url).path)
    cached_file = os.path.join(model_dir, filename)
    if not os.path.exists(cached_file):
        sys.stderr.write(f'Downloading: "{url}" to {cached_file}\n')
        match = HASH_REGEX.search(filename) if check_hash else None
        download_url_to_file(url, cached_file, match.group(1) if match else None,
                             progress=progress)
    return load(cached_file, map_location=map_location, weights_only=weights_only)
