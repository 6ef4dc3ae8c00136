"""Shared pieces of the hook conformance suite (test_tensor_hooks, test_node_hooks,
test_handles, test_grad_accumulation, parity/test_seed_tensor_hooks).

Every test takes a ``T`` fixture (defined per module with ``load``): the module under test, ``disthook`` or ``torch``. The test
body is written once against the torch API and asserts hard-coded expected values, so the
torch run proves the expectations right and the disthook run is the real test. The torch
case is skipped when torch is not installed. ``libs(xfail=...)`` marks only the disthook case
as a strict expected failure, for behaviour disthook does not match yet.
"""
from __future__ import annotations

import importlib
import re

import pytest

SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)
NON_LEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
    "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. "
    "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
    "instead. See github.com/pytorch/pytorch/pull/30531 for more information."
)
NO_GRAD_HOOK = "cannot register a hook on a tensor that doesn't require gradient"
POST_ACC_NON_LEAF = "post accumulate grad hooks cannot be registered on non-leaf tensors"
POST_ACC_RETURN = "Tensor post accumulate grad hooks should return None."
RETAIN_NO_GRAD = "can't retain_grad on Tensor that has requires_grad=False"
# torch's create_graph=True backward warns about a parameter/gradient reference cycle
IGNORE_CREATE_GRAPH_WARNING = pytest.mark.filterwarnings(
    "ignore:Using backward\\(\\) with create_graph=True:UserWarning")


def load(name: str):
    """Import the library under test; the torch case is skipped when torch is missing.

    Each test module defines its ``T`` fixture as ``load(request.param)`` over
    ``["disthook", "torch"]``.
    """
    if name == "torch":
        return pytest.importorskip("torch")
    return importlib.import_module(name)


def libs(xfail: str | None = None):
    """Parametrize ``T`` explicitly; ``xfail`` marks only the disthook case (strict)."""
    dh = "disthook" if xfail is None else pytest.param(
        "disthook", marks=pytest.mark.xfail(strict=True, reason=xfail))
    return pytest.mark.parametrize("T", [dh, "torch"], indirect=True)


def exact(exc, msg: str):
    """pytest.raises for exactly this exception type and this whole message."""
    return _Exact(exc, msg)


class _Exact:
    def __init__(self, exc, msg):
        self.exc, self.msg = exc, msg
        self._cm = pytest.raises(exc, match="^" + re.escape(msg) + "$")

    def __enter__(self):
        self.info = self._cm.__enter__()
        return self.info

    def __exit__(self, *exc_info):
        suppressed = self._cm.__exit__(*exc_info)
        if not suppressed:  # another exception type: let it propagate as is
            return False
        assert type(self.info.value) is self.exc, (
            f"raised {type(self.info.value).__name__}, expected exactly {self.exc.__name__}")
        return suppressed


def vals(t):
    """The tensor's values as (nested) python floats, or None."""
    return None if t is None else t.tolist()


def grad_of(t):
    """``t.grad`` without the non-leaf warning (the tests that check it read it directly)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return t.grad
