"""Inference tensors, as torch has them: a tensor made under ``inference_mode()`` carries no
version counter and no history, so outside the mode it may not be changed in place, saved
for backward or made to require grad.

Such a tensor is marked by its version counter's type (``InferenceVersion``, a list like the
normal one), which its views share. Its ``detach()`` and ``.data`` outside the mode are, as
in torch, inference tensors of a looser kind (``DetachedInferenceVersion``): they count
versions and may be changed in place themselves, but are not saved for backward nor made
to require grad, and a view of one is a full inference tensor.

The mark is set only while some thread is inside ``inference_mode()``: then ``Tensor._make``
is swapped for one that marks what the current thread makes there; the normal path pays
nothing. The checks read the counter's type only.
"""
from __future__ import annotations

import threading

from disthook.autograd import grad_mode

INPLACE_MSG = (
    "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
    "clone to get a normal tensor before doing inplace update.See "
    "https://github.com/pytorch/rfcs/pull/17 for more details.")
SAVED_MSG = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
    "inference mode in computation tracked by autograd. To work around this, you can make a "
    "clone to get a normal tensor and use it in autograd, or use `torch.no_grad()` instead of "
    "`torch.inference_mode()`.")
REQUIRES_GRAD_MSG = (
    "Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.")
VERSION_MSG = "Inference tensors do not track version counter."


class InferenceVersion(list):
    """The version counter of an inference tensor: bumping it (every in-place change does)
    outside inference mode is the error torch gives."""

    __slots__ = ()

    def __setitem__(self, i, value) -> None:
        check_inplace()
        list.__setitem__(self, i, value)


class DetachedInferenceVersion(list):
    """The version counter of an inference tensor's ``detach()`` or ``.data`` taken outside
    the mode."""

    __slots__ = ()


def detached(vc: list) -> list:
    """The version counter of ``detach()`` / ``.data`` of a tensor counting with ``vc``: a
    new one of the looser kind for an inference tensor's, outside the mode."""
    if type(vc) is not list and not grad_mode._state.inference:
        return DetachedInferenceVersion([0])
    return vc


def made_inference(t):
    """``t`` (a tensor without history) as one made in inference mode: a tensor a process
    made there and sent by value (a client hook's result)."""
    t._vc = InferenceVersion(t._vc)
    return t


def check_inplace(t=None) -> None:
    """Called for an inference tensor (of either kind) about to be changed in place."""
    if not grad_mode._state.inference and (t is None or type(t._vc) is InferenceVersion):
        raise RuntimeError(INPLACE_MSG)


def refuse_saved_index(index, *inputs) -> None:
    """An op that torch records with its integer or mask ``index`` saved for backward
    (gather, scatter, index_select, indexing by a tensor, embedding, nll_loss's target),
    where disthook keeps that index as an array: an inference tensor there refuses outside
    the mode when the op records a graph (an input requires grad), as a saved tensor does.
    ``index``: a tensor, or a tuple or list of index items."""
    items = index if isinstance(index, (tuple, list)) else (index,)
    if not any(type(getattr(i, "_vc", None)) in (InferenceVersion, DetachedInferenceVersion)
               for i in items):
        return
    if grad_mode.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in inputs):
        raise RuntimeError(SAVED_MSG)


def check_requires_grad(t, value) -> None:
    if value and type(t._vc) is not list and not grad_mode._state.inference:
        raise RuntimeError(REQUIRES_GRAD_MSG)


_lock = threading.Lock()
_inside = 0  # open inference_mode(True) blocks, of all threads together
_plain = None  # Tensor's own _make (a classmethod object)
_plain_make = None  # ... bound


def _marking_make(cls, data, grad_fn, output_nr):
    t = _plain_make(data, grad_fn, output_nr)
    if grad_mode._state.inference:
        t._vc = InferenceVersion(t._vc)
    return t


_MARKING = classmethod(_marking_make)


def _use(make) -> None:
    from disthook.ops import base
    from disthook.tensor import Tensor

    Tensor._make = make
    base._make = Tensor._make


def entered() -> None:
    """An ``inference_mode(True)`` block opens: tensors made from now on get the mark."""
    global _inside, _plain, _plain_make
    from disthook.tensor import Tensor

    with _lock:
        _inside += 1
        if _inside == 1:
            if _plain is None:
                _plain, _plain_make = Tensor.__dict__["_make"], Tensor._make
            _use(_MARKING)


def left() -> None:
    global _inside
    with _lock:
        _inside -= 1
        if _inside == 0:
            _use(_plain)
