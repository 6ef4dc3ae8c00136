"""Micro-batches for a model whose forward runs on the client (any model that is not a chain
of stages: every transformer). With ``chunks=m`` each call cuts its batch along dim 0 into
``m`` micro-batches and runs the model's forward on each in turn; since the placed parts'
calls do not wait (``async_calls``), the program issues micro-batch 1 while the first worker
still computes micro-batch 0, and the stages work side by side as a pipeline. The outputs are
joined along dim 0. ``train_step`` issues each micro-batch's forward and backward in the
order of the model's schedule (GPipe: all forwards, then the backwards; 1F1B: after the
pipeline fills, one backward per forward). Under GPipe every stage runs that order; under
1F1B each stage wants its own, and the requests that go without waiting are held on the
client and released to each worker in its stage's order (``stage_outbox``).

Hooks fire once per micro-batch, as in torch's pipelining, and modules that look at the whole
batch (batch norm) see one micro-batch at a time.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from disthook.autograd import grad_mode
from disthook.distributed.placement import micro_batch_sizes
from disthook.distributed.stage_outbox import StageOutbox
from disthook.service.values import changed_container, containers_in, opaque_in, tensors_in
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment

__all__ = ["chunked_forward", "issue_order", "note_hook_error", "train_step"]


def chunked_forward(model: Deployment, forward):
    """``forward`` run once per micro-batch of its call, the outputs joined along dim 0."""
    def run(*args, **kwargs):
        if model.__dict__.get("_in_train_step"):  # train_step cut the batch already
            return forward(*args, **kwargs)
        rows = _rows(args, kwargs)
        m = min(model._chunks, rows or 1)
        if m <= 1 or opaque_in((args, kwargs)):
            # an object that cannot be cut (a generation loop's KV cache, a generator): the
            # forward runs once, whole, with it, as in one process
            return forward(*args, **kwargs)
        sizes = micro_batch_sizes(rows, m)
        outs = []
        try:
            for i in range(m):  # the calls of each micro-batch know theirs (RemoteBackward0)
                model.__dict__["_micro_batch"] = i
                part_args, part_kwargs = _part(args, rows, sizes, i), _part(kwargs, rows, sizes, i)
                held = containers_in((part_args, part_kwargs))
                outs.append(forward(*part_args, **part_kwargs))
                _refuse_changed(changed_container(held), m)
        finally:
            model.__dict__.pop("_micro_batch", None)
        return _join(outs, rows, f"{type(model._local).__name__}.forward", m)

    return run


def note_hook_error(exc: Exception, hooked) -> None:
    """A client hook on ``hooked`` (a placed module or tensor) failed on a model deployed with
    ``chunks``: a note on the exception says that it ran on one micro-batch, and that what a
    hook keeps between calls may be another micro-batch's (BackPACK's ``module.input0``), the
    usual cause of a shape mismatch there."""
    from disthook.distributed.placed import deployment_of

    deployment = getattr(hooked, "_model", None) or deployment_of(hooked)
    chunks = getattr(deployment, "_chunks", 1)
    if chunks > 1 and hasattr(exc, "add_note"):  # (Python 3.11)
        exc.add_note(
            f"This hook ran on one micro-batch: the model is deployed with chunks={chunks}, "
            "so its hooks fire once per micro-batch, each seeing that micro-batch's rows, "
            "and what a hook kept from an earlier call (a module's input or output that a "
            "forward hook stored) is from the micro-batch whose forward ran last, not "
            "necessarily the one this backward is for. Deploy with chunks=1 for hooks that "
            "see the whole batch, as in one process, or key what they keep by its rows.")


def _refuse_changed(container, m: int) -> None:
    """Each micro-batch's forward gets its own cut of a list or dict argument: one that the
    forward changed (a state dict it writes to) would leave the program's as it was."""
    if container is not None:
        kind = type(container).__name__
        raise NotImplementedError(
            f"with chunks={m} the model's forward runs once per micro-batch, each given its "
            f"own copy of a {kind} argument cut to its rows, and this forward changed the "
            f"{kind} it was given: the program's own would stay as it was. Deploy with "
            "chunks=1 for a forward that writes into its arguments, or keep such state on the "
            "module")


def _rows(args, kwargs) -> int | None:
    """The batch size: dim 0 of the first tensor argument."""
    for value in (*args, *kwargs.values()):
        for t in tensors_in(value):
            if t.dim() > 0:
                return t.shape[0]
    return None


def _part(value, rows: int, sizes: list[int], i: int):
    """Micro-batch ``i`` of ``value``: tensors with ``rows`` rows cut, the rest as they are."""
    if isinstance(value, Tensor):
        if value.dim() > 0 and value.shape[0] == rows:
            start = sum(sizes[:i])
            return value[start:start + sizes[i]]
        return value
    if isinstance(value, tuple):
        return tuple(_part(v, rows, sizes, i) for v in value)
    if isinstance(value, list):
        return [_part(v, rows, sizes, i) for v in value]
    if isinstance(value, dict):
        return {k: _part(v, rows, sizes, i) for k, v in value.items()}
    return value


def _join(outs: list, rows: int, what: str, m: int):
    first = outs[0]
    if isinstance(first, Tensor):
        if first.dim() == 0 or sum(o.shape[0] for o in outs) != rows:
            raise RuntimeError(
                f"with chunks={m} the output of {what} must keep the batch dimension (its "
                f"micro-batches' outputs are joined along dim 0); it returned a tensor of "
                f"shape {list(first.shape)} for a micro-batch. Return per-row outputs (the "
                "loss outside the model: train_step(x, target, loss_fn)), or deploy with "
                "chunks=1")
        from disthook import cat

        return cat(outs, 0)
    if isinstance(first, (tuple, list)):
        joined = [_join([o[k] for o in outs], rows, what, m) for k in range(len(first))]
        return type(first)(joined) if isinstance(first, tuple) else joined
    if isinstance(first, dict):
        return {k: _join([o[k] for o in outs], rows, what, m) for k in first}
    if all(o == first for o in outs):
        return first
    raise RuntimeError(f"with chunks={m}, {what} returned {first!r} for one micro-batch and "
                       f"something else for another: its output cannot be joined")


def issue_order(schedule: str, stages: int, m: int) -> list[tuple[str, int]]:
    """The order the client issues micro-batch forwards ("F") and backwards ("B") in: the
    order the first stage runs them in under ``schedule`` (a zero-bubble schedule's split
    backward is the workers' own, in a chain: here its micro-batches go in 1F1B's order)."""
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(stages - 1, m)  # 1F1B: the pipeline fills, then one backward per forward
    order = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(m - warm, m)]


def train_step(model: Deployment, x: Tensor, target: Tensor, loss_fn,
               scale_grads: bool = True) -> Tensor:
    """``Deployment.train_step`` of a model whose forward runs here: per micro-batch the
    forward (the model's own, its parts on their workers), ``loss_fn(output, target)`` and
    the backward, issued in the schedule's order without waiting; with ``scale_grads`` each
    micro-batch's loss weighted by its share of the rows. Returns the micro-batch losses."""
    if not callable(loss_fn):
        raise TypeError(f"train_step(): loss_fn must be callable, got {loss_fn!r}")
    rows = len(x)
    m = min(model._chunks, rows)
    sizes = micro_batch_sizes(rows, m)
    losses: list = [None] * m
    started = time.perf_counter()
    hub, workers = model._hub, len(set(model._addresses))
    outbox = None
    if model._schedule != "gpipe" and m > 1 and workers > 1:  # each stage its own order
        outbox = hub.stage_outbox = StageOutbox(hub.send, model._schedule, workers, m,
                                                 hub.together)
    object.__setattr__(model, "_in_train_step", True)
    try:
        _issue(model, x, target, loss_fn, scale_grads, m, sizes, losses, outbox)
    finally:
        object.__setattr__(model, "_in_train_step", False)
        if outbox is not None:
            try:
                outbox.drain()  # what is held goes, whatever happened
            finally:
                hub.stage_outbox = None
    from disthook import stack

    out = stack([t.reshape(()) for t in losses]).detach()
    values = np.array(out._data, np.float32)  # one read: every call ends before it
    wall = time.perf_counter() - started
    # the stages' compute time and memory are not measured apart when the forward runs here
    # (under 1F1B, "order": the micro-batch forwards and backwards sent to each, in order)
    object.__setattr__(model, "step_stats", [
        {"busy": None, "wall": wall, "peak_rss": None,
         "order": None if outbox is None else outbox.order_sent(address)}
        for address in model._addresses])
    return Tensor._make(values, None, 0)


def _issue(model: Deployment, x: Tensor, target: Tensor, loss_fn, scale_grads: bool, m: int,
           sizes: list[int], losses: list, outbox: StageOutbox | None) -> None:
    """Each micro-batch's forward, loss and backward, in the schedule's order (each tagged
    for the outbox, when there is one)."""
    rows = len(x)
    starts = np.cumsum([0, *sizes])
    with grad_mode.enable_grad():
        for kind, i in issue_order(model._schedule, len(model._addresses), m):
            if outbox is not None:
                outbox.begin((kind, i))
            if kind == "F":
                rows_i = slice(int(starts[i]), int(starts[i + 1]))
                loss = loss_fn(model._local(x[rows_i]), target[rows_i])
                if not isinstance(loss, Tensor) or loss.numel() != 1:
                    raise RuntimeError(
                        "train_step(): loss_fn must return a Tensor of one element to "
                        f"differentiate, got {type(loss).__name__}"
                        f"{' of shape ' + str(tuple(loss.shape)) if isinstance(loss, Tensor) else ''}")
                losses[i] = loss
            else:
                loss = losses[i]
                # the share of the rows as the gradient the backward starts from: the
                # gradients of (loss * share).backward(), without a call for the product
                loss.backward(_share(loss, sizes[i] / rows)
                              if scale_grads and m > 1 else None)
                losses[i] = loss.detach()
            if outbox is not None:
                outbox.end()


def _share(loss: Tensor, share: float) -> Tensor:
    """``share`` in a tensor of the loss's shape and dtype, made here (a kept loss's
    metadata is read, never its value)."""
    data = loss._data
    return Tensor._make(np.full(data.shape, share, data.dtype), None, 0)
