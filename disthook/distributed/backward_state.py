"""What a deployed call's backward leaves where one process's would differ unless said or
done here: the program's gradient tensors a hook on the worker changed in place
(``given_changed``), and the state a failed backward leaves (``say_stopped``)."""
from __future__ import annotations

import warnings

import numpy as np

from disthook.autograd import grad_mode
from disthook.autograd.graph import AccumulateGrad
from disthook.distributed.remote_values import RemoteValue
from disthook.service.values import GIVEN_TAP
from disthook.tensor import Tensor

__all__ = ["STOPPED_ADVICE", "given_changed", "say_stopped"]

# what a deployed backward that failed where one process may have stopped elsewhere warns
STOPPED_ADVICE = "After catching this error, zero the gradients before going on"


def given_changed(grads: list, tapped: list, sizes: list | None = None) -> bool:
    """The gradients this backward gave a call (``grads``) that a hook on the worker changed
    in place, changed here too, as in one process, where the hook changes the program's
    gradient tensor (another branch the program's graph hands it to sees the change);
    ``tapped``: each micro-batch's answer (``sizes``: their rows), whose changes it takes
    out. Whether there were any."""
    changed = False
    for mb, one in enumerate(tapped):
        for key in [k for k in one or () if k.startswith(GIVEN_TAP)]:
            value = np.asarray(one.pop(key))
            g = grads[int(key[len(GIVEN_TAP):])]
            changed = True
            if g is None or isinstance(g, RemoteValue):  # (a value kept there: changed there)
                continue
            if sizes is not None:  # the rows of micro-batch mb
                start = sum(sizes[:mb])
                whole = np.array(g._data)
                whole[start:start + sizes[mb]] = value
                value = whole
            with grad_mode.no_grad():
                g.copy_(Tensor._make(value.astype(g._data.dtype, copy=False), None, 0))
    return changed


def say_stopped(node, within: bool) -> None:
    """The backward fails, ``node``'s call (a RemoteBackward0) ran in it (``within``: the
    error came from its workers): where one process may have stopped elsewhere, say so. A
    worker runs the backward of its part or stages whole, one process the nodes of the
    whole program in one order (a leaf's gradient as soon as it is complete): a hook
    of the program's that raises after this call's backward finds the workers' hooks
    fired and ``.grad`` grown where one process stops before some of them; a hook that
    raises inside it, the call's leaf inputs without the gradient and hooks one process
    may have given them before it."""
    what = (f"the call of {node._path!r}" if node._call and node._path
            else f"stage{'s' if node._stage else ''} 0" +
            (f" to {node._stage}" if node._stage else ""))
    if within:
        leaves = [what for what, there in (
            ("a leaf input of the call", any(isinstance(edge, AccumulateGrad)
                                             for edge, _ in node._edges)),
            # (a backward(inputs=...) naming them: the workers send their gradients with
            # the inputs', and .grad grows here, once the part's backward is done)
            ("a parameter the backward names in inputs=", node._params)) if there]
        if not leaves:
            return
        text = (f"the backward of the deployed {node._model._class_name} raised on its "
                f"worker ({what}), before the gradients of the call's inputs came back: "
                f"one process may have given {' or '.join(leaves)} its gradient (its hooks "
                "run, its .grad grown) before that point")
    else:
        text = (f"the backward failed after the deployed {node._model._class_name}'s "
                f"workers ran theirs ({what}) whole: its hooks there fired and its "
                "parameters' .grad grew, where one process may have stopped before some "
                "of them")
    warnings.warn(f"{text}. {STOPPED_ADVICE}", RuntimeWarning, stacklevel=2)
