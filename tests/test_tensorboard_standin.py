"""``torch.utils.tensorboard`` fails to import as torch's does without the tensorboard package,
and says why where the package is installed."""
from __future__ import annotations

import importlib
import sys

import pytest


def _import_error(name: str) -> BaseException:
    sys.modules.pop(name, None)
    with pytest.raises(ImportError) as info:
        importlib.import_module(name)
    return info.value


def test_import_fails_as_torchs_without_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # hidden, installed or not
    ours = _import_error("disthook.utils.tensorboard")
    assert type(ours) is ModuleNotFoundError and ours.name == "tensorboard"
    try:
        from disthook.utils.tensorboard import SummaryWriter  # noqa: F401  # a program's guard
    except ImportError:
        writer = None
    assert writer is None
    pytest.importorskip("torch")
    theirs = _import_error("torch.utils.tensorboard")
    assert type(theirs) is type(ours) and str(theirs) == str(ours)


def test_with_the_package_the_import_says_disthook_has_no_writer(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", type(sys)("tensorboard"))
    error = _import_error("disthook.utils.tensorboard")
    assert "disthook does not provide torch.utils.tensorboard's SummaryWriter" in str(error)


def test_hasattr_answers_false_as_for_torch(monkeypatch):
    import disthook

    monkeypatch.setitem(sys.modules, "tensorboard", None)
    sys.modules.pop("disthook.utils.tensorboard", None)
    assert not hasattr(disthook.utils, "tensorboard")
