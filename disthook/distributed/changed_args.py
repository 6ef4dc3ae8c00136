"""The program's tensors that a placed part (or a chain's first stage) changed in place, as
one process leaves them: a part's worker changes its copy of an argument the program gave
it; its answer says which (``changed``: the argument's number in ``pack``'s order, its new
value, how far its version counter moved; ``workers/given_args.changed_arguments``), and the
client writes the new value into the program's tensor (a view's base changes with it) and
moves its version counter by as much, so that a later in-place check, a saved tensor's
version, a ``_version`` read see what one process's do. A change the worker recorded with a
graph (a non-leaf argument that requires grad, changed under grad mode) is one more output
of a part's call, kept there: the program's tensor takes that output's history (the call's
node, whose backward reaches the worker's in-place op), as one process's takes the op's.
An argument that is a value kept on a worker (another part's output, a ``RemoteValue``) is
written so too: it becomes a local tensor over the new value, and its version moves, so that
the node of the call that made it, whose worker saved the old value for backward, refuses a
backward through it (``RemoteBackward0._check_saved_outputs``) as one process's node does."""
from __future__ import annotations

import numpy as np

from disthook.distributed.remote_values import RemoteValue
from disthook.tensor import _write_with

__all__ = ["write_back"]


def write_back(inputs: list, changes: list, what: str, rows: list | None = None,
               kept=None) -> None:
    """Write the ``changes`` of an answer (or, with ``rows``, of each micro-batch's answer:
    the row counts of the parts of the one input) into the program's tensors ``inputs``;
    ``kept(record)``: the call's output a change with a graph came as."""
    if rows is None:
        for change in changes or ():
            nr, record = int(change["arg"]), change.get("graph")
            if record is not None and 0 <= nr < len(inputs) and inputs[nr]._base is not None:
                raise NotImplementedError(
                    f"{what} changed in place its argument {nr}, a view of a tensor of the "
                    "program, with a graph recorded: in one process the view's base takes "
                    "that op's history, which a deployed call gives no view. Pass "
                    "the base itself, or a clone of the view")
            _write(inputs, nr, np.asarray(change["value"]), int(change["moved"]), what)
            if record is not None:  # its history: the call's, as that output's
                made = kept(record)
                inputs[nr]._set_history(made._grad_fn, made._output_nr)
        return
    if not any(changes):  # micro-batches of one input: put together, one change of it
        return
    (x,), parts, start, moved = inputs, [], 0, 0
    for n, change in zip(rows, changes):
        part = x._data[start:start + n]
        for c in change or ():
            part, moved = np.asarray(c["value"]), max(moved, int(c["moved"]))
        parts.append(part)
        start += n
    _write(inputs, 0, np.concatenate(parts), moved, what)


def _write(inputs: list, nr: int, value: np.ndarray, moved: int, what: str) -> None:
    if not 0 <= nr < len(inputs) or moved < 1:
        raise RuntimeError(f"{what}: the worker's answer names its argument {nr} as changed "
                           f"in place by {moved}; the call gave {len(inputs)} tensors")
    target = inputs[nr]
    if tuple(value.shape) != tuple(target.shape) or value.dtype != target._data.dtype:
        raise RuntimeError(f"{what}: argument {nr}, changed in place on the worker, came back "
                           f"as {value.dtype} {tuple(value.shape)}, not as the program's "
                           f"{target._data.dtype} {tuple(target.shape)}")
    for i, other in enumerate(inputs):
        if i != nr and not isinstance(other, RemoteValue) \
                and np.may_share_memory(other._data, target._data):
            raise NotImplementedError(
                f"{what} changed in place its argument {nr}, and its argument {i} shares "
                "memory with it in the program (one is a view of the other, or both of one "
                "tensor): in one process the change shows in both, but the worker was "
                "given a copy of each, and computed with the other one unchanged. Pass "
                "tensors that share no memory (x.clone()), or change a clone in the part")
    if isinstance(target, RemoteValue):  # kept on a worker: its old value is not read first
        target.__dict__["_ref"].value = _read_only(value)
    _write_with(target, None, value)  # (moves the counter by one: the rest after)
    target._vc[0] += moved - 1


def _read_only(value: np.ndarray) -> np.ndarray:
    value = np.array(value)
    value.flags.writeable = False
    return value
