"""``RemoteBackward0``: the client-side autograd node of one forward of a deployed model.

When the client's backward reaches it, the gradient goes to the stage that answered the
forward (the last, or the one a run_until stopped at), travels back worker to worker, and
the first stage answers with the gradient for the input. The workers keep their graphs
exactly when the client's backward keeps its own (``retain_graph``); a node collected
without such a backward releases the workers' graphs through its finalizer.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from disthook.autograd import engine
from disthook.autograd.graph import SECOND_BACKWARD_MSG, Node, gradient_edge
from disthook.distributed.placement import split_rows
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.remote import RemoteModel

__all__ = ["RemoteBackward0"]


class RemoteBackward0(Node):
    """The client-side node of one remote forward: backward crosses to the workers. With
    micro-batches, one context per micro-batch: their backwards are sent at once and flow
    back through the stages as a pipeline."""

    def __init__(self, model: RemoteModel, ctx_ids: list[str], x: Tensor | list[Tensor],
                 sizes: list[int] | None, stage: int | None = None):
        super().__init__()
        # the stage whose output this is: the last, or the one a run_until stopped at
        self._stage = len(model._addresses) - 1 if stage is None else stage
        # a list of inputs: one submodule's call from code running here, whose outputs
        # (several, each with its gradient or None) are listed in _output_meta
        self._call = isinstance(x, list)
        xs = x if self._call else [x]
        self.next_functions = tuple(gradient_edge(t) for t in xs)
        self.needs_input_grad = tuple(t._requires_grad for t in xs)
        self._input_meta = tuple((t._data.shape, t._data.dtype) for t in xs)
        if self._call:
            self._output_meta = []  # filled as the outputs are made (call_placed)
            self.materialize_grads = False
        self._model = model
        self._ctx_ids = ctx_ids
        self._sizes = sizes  # rows of each micro-batch (None: one, the whole batch)
        # a graph dropped without a backward that freed it: the workers free theirs. (Bound
        # to the hub, not to its list of pending releases, which a flush replaces.)
        self._finalizer = weakref.finalize(self, model._hub.release, ctx_ids)

    def name(self) -> str:
        return "RemoteBackward0"

    def _backward(self, grads: list) -> tuple:
        if self._freed:
            raise RuntimeError(SECOND_BACKWARD_MSG)
        # the workers keep their graphs exactly when this backward keeps the client's
        retain = engine.retains_graph()
        model = self._model
        if self._call:
            return self._call_backward(grads, retain)
        (g,) = grads
        parts = [g._data] if self._sizes is None else split_rows(g._data, self._sizes)
        replies = model._hub.request_all(
            [(model._addresses[self._stage], {"stage": self._stage, "grads": [part],
                                     "retain_graph": retain, "reply_to": model._hub.reply_to,
                                     "mb": None if self._sizes is None else i}, ctx_id)
             for i, (part, ctx_id) in enumerate(zip(parts, self._ctx_ids))],
            "backward", what="backward through the remote stages")
        if not retain:
            self._finalizer.detach()  # the workers closed the contexts themselves
            for ctx_id in self._ctx_ids:
                model._hub.drop_context(ctx_id)
        gxs = [r["result"]["grads"][0] for r in replies]
        if all(gx is None for gx in gxs):
            return (None,)
        gxs = [np.zeros(p.shape, g._data.dtype) if gx is None else np.asarray(gx)
               for gx, p in zip(gxs, parts)]
        return (Tensor._make(np.concatenate(gxs) if len(gxs) > 1 else np.array(gxs[0]),
                             None, 0),)

    def _call_backward(self, grads: list, retain: bool) -> tuple:
        """Backward of one submodule's call: a gradient (or None) per output to its stage,
        a gradient (or None) per input back."""
        model = self._model
        (reply,) = model._hub.request_all(
            [(model._addresses[self._stage], {
                "stage": self._stage, "grads": [None if g is None else g._data for g in grads],
                "retain_graph": retain, "reply_to": model._hub.reply_to}, self._ctx_ids[0])],
            "backward", what=f"backward of {self._path!r}")
        if not retain:
            self._finalizer.detach()
            model._hub.drop_context(self._ctx_ids[0])
        return tuple(None if g is None else Tensor._make(np.array(g), None, 0)
                     for g in reply["result"]["grads"])

    def _release(self) -> None:
        self._freed = True
