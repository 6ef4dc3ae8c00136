"""``torch._dynamo.config``: the settings scripts set before ``torch.compile``, every one
torch 2.13 has, at its defaults (``disthook/_surface/torch_settings.json``). disthook compiles
nothing, so they change nothing; a name torch does not have is torch's AttributeError, so a
misspelt setting still fails. ``patch`` sets some for a ``with`` block or a function."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import types
from pathlib import Path

_SETTINGS = Path(__file__).resolve().parents[1] / "_surface" / "torch_settings.json"


class KnownSettings(types.ModuleType):
    """A settings module or group: its own names can be set, others are refused in torch's
    words."""

    def __setattr__(self, name: str, value) -> None:
        if not name.startswith("__") and name not in self.__dict__:
            raise AttributeError(f"torch.{self.__name__.partition('.')[2]}.{name} does not "
                                 "exist")
        super().__setattr__(name, value)

    def _lookup(self, dotted: str) -> tuple:
        owner, _, leaf = dotted.rpartition(".")
        group = self
        for part in filter(None, owner.split(".")):
            group = getattr(group, part)
        if leaf not in group.__dict__:
            raise AttributeError(f"torch.{self.__name__.partition('.')[2]}.{dotted} does not "
                                 "exist")
        return group, leaf

    def patch(self, arg1=None, arg2=None, **changes):
        """torch's ``config.patch``: ``patch("name", value)``, ``patch({"name": value})`` or
        ``patch(name=value)``; a context manager and a decorator that puts the values back."""
        if isinstance(arg1, str):
            changes[arg1] = arg2
        elif arg1 is not None:
            changes.update(arg1)
        return _Patch(self, changes)


class _Patch(contextlib.ContextDecorator):
    def __init__(self, settings: KnownSettings, changes: dict) -> None:
        self.places = [(*settings._lookup(name), value) for name, value in changes.items()]

    def __enter__(self):
        self.saved = [(group, leaf, getattr(group, leaf)) for group, leaf, _ in self.places]
        for group, leaf, value in self.places:
            setattr(group, leaf, value)
        return self

    def __exit__(self, *exc) -> None:
        for group, leaf, value in self.saved:
            setattr(group, leaf, value)


def _value(value):
    """A setting's default from the file: sets and paths (see disthook/_surface/settings.py)
    as they are where this program runs."""
    if isinstance(value, dict) and len(value) == 1:
        (key, rest), = value.items()
        if key == "set":
            return set(rest)
        if key == "cwd":  # (torch: under the working directory when it was imported)
            return os.path.normpath(os.path.join(os.getcwd(), rest))
        if key == "site":  # (torch: under the directory it is installed in)
            return os.path.normpath(os.path.join(_SITE, rest))
    return value


_SITE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # disthook's parent


@functools.cache
def _torch_settings() -> dict:
    return json.loads(_SETTINGS.read_text())


def load_settings(module_name: str) -> None:
    """Give module ``module_name`` torch's settings of that name (nested groups as
    KnownSettings of their own) and make it refuse names torch does not have."""
    module = sys.modules[module_name]
    for dotted, value in _torch_settings()[module_name.replace("disthook.", "torch.", 1)].items():
        owner = module
        *groups, leaf = dotted.split(".")
        for part in groups:
            if part not in owner.__dict__:
                types.ModuleType.__setattr__(
                    owner, part, KnownSettings(f"{owner.__name__}.{part}"))
            owner = owner.__dict__[part]
        types.ModuleType.__setattr__(owner, leaf, _value(value))
    module.__class__ = KnownSettings


load_settings(__name__)
