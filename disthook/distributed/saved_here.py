"""What a deployed call's node checks before its backward: the tensors here that its
graph on the worker saved for backward, its outputs (by the node that made them, tanh's
result, or by a later op of the call) and its arguments (a linear layer's input). The worker
saved its own copy, which a change in place here never reaches: one process's backward
through the node that saved such a tensor raises torch's "modified by an inplace
operation", and so does this node's (``RemoteBackward0``)."""
from __future__ import annotations

import weakref

import numpy as np

from disthook.autograd import engine
from disthook.autograd.saved_hooks import current_pair
from disthook.tensor import Tensor

__all__ = ["SavedHere"]


class SavedHere:
    """The saved-tensor check of a call's node (a part of ``RemoteBackward0``)."""

    # tensors here that the call's graph on the worker saved for backward: its outputs (by
    # the node that made them, tanh's result, or by a later op of the call) and arguments
    # (a linear layer's input): (what, number, version counter, version, shape, np dtype,
    # whether saved-tensor hooks applied here, a weak reference to the tensor or None)
    _saved_outputs: tuple | list = ()

    def saved_output(self, t: Tensor, by_its_node: bool = True) -> None:
        """``t``, this call's output here, was saved for backward by its node on the worker
        (or by a later op of the call: ``y * y`` beside ``return y``): changed in place here
        (which the worker's copy never sees), this node's backward raises as that node's
        does in one process (naming the node that made it, or the tensor's own now)."""
        self._saved_here("output", t._output_nr, t, None if by_its_node else weakref.ref(t))

    def saved_input(self, t: Tensor, nr: int) -> None:
        """``t``, the call's argument ``nr``, was saved for backward on the worker (a copy
        of it): changed in place here after the call, this node's backward raises as the
        node that saved it does in one process."""
        self._saved_here("argument", nr, t, weakref.ref(t))

    def _saved_here(self, what: str, nr: int, t: Tensor, ref) -> None:
        if not self._saved_outputs:
            self._saved_outputs = []
        self._saved_outputs.append((what, nr, t._vc, t._vc[0], t._data.shape, t._data.dtype,
                                    current_pair() is not None, ref))

    def _check_saved_outputs(self) -> None:
        for what, nr, vc, version, shape, dtype, hooked, ref in self._saved_outputs:
            if vc[0] == version:
                continue
            if hooked:  # one process: the hooks keep the tensor, the backward uses its change
                raise NotImplementedError(
                    f"{what} {nr} of the deployed call {self._path or ''!r}, which its worker "
                    "saved for backward, was changed in place here after a forward under "
                    "save_on_cpu() (or checkpoint): in one process the backward would use "
                    f"the changed value, which the worker's saved copy does not have. Change "
                    f"a clone() of the {what} instead")
            saved = _SavedOutput(nr if what == "output" else 0, vc, version, shape, dtype)
            if ref is not None and ref() is not None:  # (named as a saved input is)
                saved.tensor, saved.is_output = ref(), False
            raise engine.inplace_error(saved, self)


class _SavedOutput:
    """What ``engine.inplace_error`` reads of a saved tensor, for an output of a call."""

    tensor, is_output = None, True

    def __init__(self, nr: int, vc: list, version: int, shape: tuple, dtype):
        self.output_nr, self.vc, self.version = nr, vc, version
        self.data = np.empty(shape, dtype)
