"""Regenerate ``torch_settings.json``: every setting of ``torch._dynamo.config`` and
``torch._inductor.config`` with torch 2.13's default (dotted names for nested groups such as
``triton.cudagraphs``; a set as ``{"set": [...]}``; a path torch computes where it runs, under
the working directory or the directory torch is installed in, as ``{"cwd": rest}`` or
``{"site": rest}``, resolved where disthook runs). Run with torch installed:
``python -m disthook._surface.settings``. disthook's config modules read the file, so a script
may set whatever torch lets it set (each changes nothing here) and a misspelt name still fails.
"""
from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

DATA = Path(__file__).with_name("torch_settings.json")
MODULES = ("torch._dynamo.config", "torch._inductor.config")


def _as_json(value, site: str):
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(map(str, value))}
    if isinstance(value, str) and os.path.isabs(value):  # never this machine's paths
        for key, root in (("cwd", os.getcwd()), ("site", site)):
            if value == root or value.startswith(root + os.sep):
                return {key: os.path.relpath(value, root)}
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None  # an object only torch's compiler reads: kept as a settable name
    return value


def main() -> None:
    import torch

    site = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
    data = {}
    for name in MODULES:
        module = importlib.import_module(name)
        data[name] = {key: _as_json(getattr(module, key, None), site)
                      for key in sorted(module._config) if not key.startswith("_")}
    DATA.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
