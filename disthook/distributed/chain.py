"""The chain path of a deployed model: a root whose forward is ``nn.Sequential``'s own
(``placement.chains_its_children``), placed in contiguous stages, runs them one after the
other without the client in between. A call sends the input to the first stage; activations
go worker to worker and the last stage (or the one a ``run_until`` stops at) answers the
client, with ``chunks`` micro-batches in flight at once; ``train_step`` runs a GPipe or 1F1B
schedule with the loss on the last stage. (Any other root runs its forward here: ``glue``.)
"""
from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import numpy as np

from disthook import _dtype, random
from disthook.amp import autocast_mode
from disthook.autograd import grad_mode
from disthook.autograd.inference import made_inference
from disthook.distributed import attr_changes, changed_args, given_tensors
from disthook.distributed.autograd_node import RemoteBackward0
from disthook.distributed.glue import _checkpointing as checkpointing
from disthook.distributed.glue import refuse_saved_tensors_hooks
from disthook.distributed.graph_grads import part_by_part
from disthook.distributed.placement import micro_batch_sizes, split_rows
from disthook.distributed.socket_lock import nested_call
from disthook.distributed.spec import module_spec
from disthook.nn.modules.module import Module
from disthook.service.values import unpack
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment

__all__ = ["run_stages", "train_step"]


def run_stages(model: Deployment, x: Tensor, stop: str | None = None) -> Tensor:
    """The stages' forward on ``x``; with ``stop`` (a module path), only up to the stage
    holding that module, whose output is returned (the later stages do no work)."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"a model deployed as a chain of stages (its children cut into contiguous "
            f"stages, each passing one tensor to the next) takes one Tensor, got "
            f"{type(x).__name__}. Deploy it with {part_by_part(model)} instead: its forward "
            "then runs here, calling each part on its worker with any arguments (a "
            "PackedSequence for an LSTM)")
    refuse_saved_tensors_hooks(f"the deployed {model._class_name}'s forward")
    grad = grad_mode.is_grad_enabled()
    if grad and checkpointing() is not None:
        raise NotImplementedError(
            f"the deployed {model._class_name}, a chain of stages, called inside "
            "torch.utils.checkpoint: its stages would keep their saved tensors and not run "
            "again in the backward, where one process recomputes the forward there (its "
            "forward hooks firing again, its buffers moving again). Checkpoint the stages' "
            "layers one by one on a model deployed with placement= (each placed part called "
            "inside checkpoint runs checkpointed on its worker), or call the chain outside "
            "the checkpoint")
    rows = x._data.shape[0] if x._data.ndim else 0
    chunks = min(model._chunks, rows) if rows > 1 else 1
    sizes = None  # one micro-batch: the whole input
    if chunks > 1:
        sizes = micro_batch_sizes(rows, chunks)
    parts = [x._data] if sizes is None else split_rows(x._data, sizes)
    ctx_ids = [uuid.uuid4().hex for _ in parts]
    # one call: the random stream goes through the stages and comes back (dropout; a draw
    # in eval mode too: it drew from the stream another client left there); micro-batches,
    # which run side by side, each a stream of its own made from the client's (before,
    # none: they drew from the worker's, which another client's calls moved)
    streams = [random._stream_state()] if sizes is None else random._streams_of_parts(
        len(parts))
    # optimizer calls since the last request ride with the first micro-batch, which
    # reaches every stage before anything else of this call (not with stop: the later
    # stages would not hear them)
    taken, calls = (model._hub.take_optimizer_calls(model._addresses) if stop is None
                    else ([], None))
    # every micro-batch is sent at once: stage 0 works on the second while stage 1
    # works on the first, and so on (the GPipe fill and drain)
    if sizes is None:  # what a tensor a hook gets is, or (grad) can be differentiated to
        model._hub.pending_inputs[ctx_ids[0]] = [x]
    try:
        replies = model._hub.request_all(
            [(model._addresses[0], {"stage": 0, "inputs": [part], "grad_enabled": grad,
                                    **_dtype.default_dtype_field(),
                                    **autocast_mode.region_field(),
                                    "requires_grad": [x._requires_grad],
                                    **({"inference": [True]} if x.is_inference() else {}),
                                    "reply_to": model._hub.reply_to,
                                    "mb": None if sizes is None else i, "stop": stop,
                                    "rng": streams[i],
                                    "optimizer_calls": calls if i == 0 else None,
                                    **nested_call(model._hub, model._addresses[0])},
              ctx_id)
             for i, (part, ctx_id) in enumerate(zip(parts, ctx_ids))],
            "forward", what="forward through the remote stages" + (
                f" up to {stop!r}" if stop else ""), carries_optimizer_calls=stop is None)
    except BaseException:
        # a stage failed before passing them on: they go again (a stage that ran one
        # skips it)
        model._hub.pending_optimizer[:0] = taken
        # the stages before the one that failed keep their graphs for a backward that will
        # not come: they go with the next request (a context a stage never made is ignored)
        model._hub.release(ctx_ids)
        raise
    finally:
        model._hub.pending_inputs.pop(ctx_ids[0], None)
    results = [r["result"] for r in replies]
    changed_args.write_back(  # the input its first stage changed in place (nn.ReLU(inplace))
        [x], results[0].get("changed") if sizes is None else [r.get("changed") for r in results],
        f"the deployed {model._class_name}'s first stage", sizes)
    for result in results:  # what the stages' modules set on themselves, in stage order
        attr_changes.apply(model, result.get("attrs"))
    if sizes is None and results[-1].get("rng"):
        random._set_stream_state(results[-1]["rng"])
    elif sizes is not None and any(r.get("rng") != sent for r, sent in zip(results, streams)):
        random._after_parts(len(parts))  # they drew: this stream moves on
    if results[0].get("items"):  # the last stage returned tuples, lists or dicts
        return _items(model, x, results, ctx_ids, grad, stop)
    if len(results) == 1 and results[0].get("argument") == 0:
        # the model returned its input as it is (nn.Identity): as in one process, the
        # output is the program's own tensor (under no_grad too); the worker's graph goes
        model._hub.taps.pop(ctx_ids[0], None)
        if grad and results[0]["requires_grad"]:
            model._hub.release(ctx_ids)
        return x
    outs = [np.asarray(r["output"]) for r in results]
    if sizes is not None and any(o.ndim == 0 or len(o) != n for o, n in zip(outs, sizes)):
        raise RuntimeError(
            f"with chunks={chunks} the model's output must keep the batch dimension: "
            f"micro-batches of {sizes} rows gave outputs of shapes "
            f"{[tuple(o.shape) for o in outs]}")
    # one micro-batch: the received array itself (a writable view of its frame)
    out = np.concatenate(outs) if len(outs) > 1 else outs[0]
    if grad and all(r["requires_grad"] for r in results):
        # the hook's tensor for the output, where a hook here was given it: returned as
        # the output itself (one object, as in one process), no longer a tap of its own
        given = given_tensors.stand_in_of(model._hub.stand_ins, ctx_ids[0], results[-1].get(
            "name"), out.shape, out.dtype, as_given=True) if sizes is None else None
        given_tensors.drop_taps(model._hub.taps, ctx_ids[0], [given])
        stage = None if stop is None else model._stage_of(stop)
        node = RemoteBackward0(model, ctx_ids, x, sizes, stage)
        node.made_by(results[-1].get("grad_fn"))
        # (a stage's region kept a cast of a weight: autocast_mode.check_one_cast)
        node._casts = [(id(model), None)] if any(r.get("cast") for r in results) else []
        if all(r.get("cut") for r in results):  # the workers' graph misses the input
            node.next_functions, node.needs_input_grad = ((None, 0),), (False,)
        node.unreached([r.get("unreached") for r in results])  # and parameters
        out = given_tensors.become_output(given, Tensor._make(out, node, 0))
        views = [r.get("custom_view") for r in results]
        if all(views):  # the last module's full backward hook's view (see Tensor._inplace)
            out.__dict__["_custom_view"] = (int(views[0][0]), str(views[0][1]))
        if any(r.get("saved") for r in results):
            node.saved_output(out)
        if any(r.get("saved_input") for r in results):  # (stage 0 saved a copy of it)
            node.saved_input(x, 0)
        return out
    for ctx_id in ctx_ids:  # no graph: nothing to differentiate against
        model._hub.taps.pop(ctx_id, None)
    out = Tensor._make(out, None, 0)
    if all(r.get("inference") for r in results):  # (a last hook's result made there)
        made_inference(out)
    return out

def _items(model: Deployment, x: Tensor, results: list, ctx_ids: list, grad: bool,
           stop: str | None):
    """The answer of a chain whose last stage returned tuples, lists or dicts of tensors
    (and of plain values; ``workers/chain_items.py``): one structure, each tensor an output
    of the chain's one node, with its own gradient, as one process's are."""
    if len(results) > 1:
        model._hub.release(ctx_ids)
        raise NotImplementedError(
            f"the deployed {model._class_name}'s last stage returned "
            f"{type(unpack(results[0]['output'])).__name__} with chunks={len(results)}: "
            "micro-batches of a chain are put together as one tensor. Deploy it with "
            "chunks=1, or return one tensor from the last module")
    (result,) = results
    flags = result["requires_grad"]
    node = None
    if grad and any(flags):
        node = RemoteBackward0(model, ctx_ids, x, None,
                               None if stop is None else model._stage_of(stop))
        node._items = len(flags)
        node._casts = [(id(model), None)] if result.get("cast") else []
        if result.get("cut"):  # the workers' graph misses the input
            node.next_functions, node.needs_input_grad = ((None, 0),), (False,)
        node.unreached([result.get("unreached")])  # and parameters
        if result.get("saved_input"):  # (stage 0 saved a copy of it)
            node.saved_input(x, 0)
    else:
        model._hub.taps.pop(ctx_ids[0], None)
    made: list = []

    def make(array, requires_grad, grad_fn):
        nr = len(made)
        t = Tensor._make(np.array(array), node if node is not None and flags[nr] else None,
                         nr if node is not None and flags[nr] else 0)
        if node is not None and flags[nr] and result["saved"][nr]:
            node.saved_output(t)
        made.append(t)
        return t

    out = unpack(result["output"], make, classes=True)
    if node is not None:
        node._output_meta = tuple((t._data.shape, t._data.dtype) for t in made)
    return out


def train_step(model: Deployment, x: Tensor, target: Tensor, loss_fn,
               scale_grads: bool = True) -> Tensor:
    """``Deployment.train_step`` of a chain (``x`` and ``target`` checked): ``x`` and
    ``target`` are cut into the model's ``chunks`` micro-batches, every stage runs its list of
    the model's ``schedule`` (GPipe or 1F1B) against its neighbours, and gradients accumulate
    in ``.grad`` on the workers. With ``scale_grads`` each micro-batch's loss is weighted by
    its share of the rows, so that a mean-reduced ``loss_fn`` gives the gradients of the
    whole batch. Returns the micro-batch losses."""
    from disthook.distributed import schedule as schedules
    from disthook.nn import functional

    if isinstance(loss_fn, Module):
        loss = {"module": module_spec(loss_fn)}
    elif callable(loss_fn) and getattr(functional, getattr(loss_fn, "__name__", ""),
                                       None) is loss_fn:
        loss = {"function": loss_fn.__name__}
    else:
        raise TypeError("train_step(): loss_fn runs on the last worker, so it must be a "
                        "loss module (nn.CrossEntropyLoss()) or a function of "
                        f"disthook.nn.functional, got {loss_fn!r}")
    rows = len(x._data)
    m = min(model._chunks, rows)
    sizes = micro_batch_sizes(rows, m)
    scales = [n / rows if scale_grads else 1.0 for n in sizes]
    plan = schedules.schedule(model._schedule, len(model._addresses), m)
    step = uuid.uuid4().hex
    # optimizer calls since the last request: each stage gets its own
    taken, opt_calls = model._hub.take_optimizer_calls(model._addresses)
    calls = []
    # each stage draws (dropout) from a stream of its own made from the client's: the
    # stages run side by side (before, none: they drew from their worker's stream, which
    # another client's calls moved, and manual_seed did not repeat a step)
    streams = random._streams_of_parts(len(model._addresses))
    for s, address in enumerate(model._addresses):
        fields = {"step": step, "schedule": [list(a) for a in plan[s]],
                  "reply_to": model._hub.reply_to, "rng": streams[s],
                  "optimizer_calls": None if opt_calls is None else opt_calls[s],
                  **_dtype.default_dtype_field(), **autocast_mode.region_field()}
        if s == 0:
            fields["inputs"] = split_rows(x._data, sizes)
        if s == len(model._addresses) - 1:
            fields.update(targets=split_rows(target._data, sizes), loss=loss,
                          scales=scales)
        calls.append((address, fields))
    started = time.perf_counter()
    model._hub.in_step = True
    try:
        replies = model._hub.request_all(calls, "train_step", ctx=step,
                                         what=f"a {model._schedule} training step",
                                         carries_optimizer_calls=True)
    except BaseException:
        model._hub.pending_optimizer[:0] = taken  # they go again (see run_stages)
        raise
    finally:  # what the step's hook events left here (their events carry the step's id)
        model._hub.in_step = False
        for ctx_id in (step, *(f"{step}.{mb}" for mb in range(m))):
            model._hub.drop_context(ctx_id)
    wall = time.perf_counter() - started
    for reply in replies:  # what the stages' modules set on themselves in the step
        attr_changes.apply(model, reply["result"].get("attrs"))
    if any(r["result"].get("rng") != sent for r, sent in zip(replies, streams)):
        random._after_parts(len(streams))  # they drew: this stream moves on
    # per stage: seconds computing, the step's wall time seen here, the worker's RSS peak,
    # and its timeline of schedule actions ([kind, micro-batch, thread CPU s, wall start,
    # wall end], wall times on this host's monotonic clock)
    object.__setattr__(model, "step_stats", [
        {"busy": r["result"]["busy"], "wall": wall, "peak_rss": r["result"]["peak_rss"],
         "timeline": r["result"].get("timeline")}
        for r in replies])
    # (the losses as the stages computed them: in the default dtype, as torch.tensor makes)
    return Tensor._make(np.array(replies[-1]["result"]["losses"],
                                 _dtype.get_default_dtype().np), None, 0)
