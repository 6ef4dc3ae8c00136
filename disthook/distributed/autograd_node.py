"""``RemoteBackward0``: the client-side autograd node of one forward of a deployed model.

When the client's backward reaches it, the gradient goes to the stage that answered the
forward (the last, or the one a run_until stopped at), travels back worker to worker, and
the first stage answers with the gradient for the input. The workers keep their graphs
exactly when the client's backward keeps its own (``retain_graph``); a node collected
without such a backward releases the workers' graphs through its finalizer.
"""
from __future__ import annotations

import itertools
import sys
import warnings
import weakref
from typing import TYPE_CHECKING

import numpy as np

from disthook import wire
from disthook.amp import autocast_mode
from disthook.autograd import engine, grad_mode
from disthook.autograd.graph import SECOND_BACKWARD_MSG, gradient_edge
from disthook.distributed import async_calls, attr_changes
from disthook.distributed.backward_state import given_changed, say_stopped
from disthook.distributed.graph_grads import create_graph_chain_refused
from disthook.distributed.hook_table import graph_keeps_removed
from disthook.distributed.placement import split_rows
from disthook.distributed.remote_values import from_record, grad_data
from disthook.distributed.saved_here import SavedHere
from disthook.distributed.tap_node import (
    LiveEdges,
    RemoteTapBackward0,
    kept_result_left_out,
    kept_result_only,
    used_here,
    workers_keeping,
)
from disthook.service.values import GIVEN_TAP, one_object_grads
from disthook.tensor import Tensor
from disthook.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment

__all__ = ["RemoteBackward0"]

# modules whose reads of a node's edges are the engine's or the deployment's own
_OWN_MODULES = ("disthook.", "workers.", "coordinator.")


class RemoteBackward0(SavedHere, LiveEdges):
    """The client-side node of one remote forward: backward crosses to the workers. With
    micro-batches, one context per micro-batch: their backwards are sent at once and flow
    back through the stages as a pipeline."""

    def __init__(self, model: Deployment, ctx_ids: list[str], x: Tensor | list[Tensor],
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
        self._layouts = async_calls.layouts(xs)  # (part of its backward's key)
        # tensors client forward hooks were given in this forward (one context): further
        # inputs of this node while something here still holds them, whose gradients the
        # workers send when a backward needs them (autograd.grad(out, kept))
        # (key, weakref to the tensor here, shape, dtype); a key ending in "@" is a tensor
        # of the client's own a hook returned (fed to the worker), whose .grad accumulates
        self._taps: list[tuple] = []
        self._live: list[tuple] = []  # the taps alive when the engine last read the edges
        # parameters on the workers that a backward asks the gradient of (autograd.grad or
        # backward(inputs=...) naming them, see wants_parameter): key -> (weakref, shape,
        # dtype); an edge to each one's accumulator comes after the taps'
        self._params: dict[str, tuple] = {}
        for i, ctx_id in enumerate(ctx_ids):
            for key, t, base in model._hub.taps.pop(ctx_id, ()):
                if len(ctx_ids) == 1:
                    self._taps.append((key, weakref.ref(t), t._data.shape, t._data.dtype))
                if base is not None and isinstance(base._grad_fn, RemoteTapBackward0):
                    # the workers keep this forward's graph while the kept tensor's lives
                    base._grad_fn._keeps = self
        if self._call:
            self._output_meta = []  # filled as the outputs are made (call_placed)
            self.materialize_grads = False
        self._model = model
        self._ctx_ids = ctx_ids
        self._sizes = sizes  # rows of each micro-batch (None: one, the whole batch)
        # a graph dropped without a backward that freed it: the workers free theirs. (Bound
        # to the hub, not to its list of pending releases, which a flush replaces.)
        self._finalizer = weakref.finalize(self, model._hub.release, ctx_ids)
        # the hooks removed from now on, which this graph's backward may still fire
        self._removed_hooks = graph_keeps_removed(model._hub)
        self._path = None  # the part called, for a call from code running here
        self._op_params = None  # an op's call: its parameters, which its answers depend on
        self._ran_in = None  # the id of the backward it last ran in
        self._region = autocast_mode.caching_region()  # (see autocast_mode.check_one_cast)
        self._casts = None  # what the call's region cast and kept, keyed (None: not said)
        # the id of a backward whose holding lists this call as still to come on its worker
        # (see _hold): that backward runs it even when no gradient reaches it
        self._awaited = None
        self._given: dict = {}  # tap key -> the gradient the workers sent for it
        # the taps whose use here this backward differentiates, each a backward of its own
        # from the tap after this one (see tap_node.used_here): the workers keep the graph
        self._after: set = set()

    _mb = None  # the micro-batch of the client's forward that made it (chunks=)

    def weights_require_grad(self) -> bool:
        """Whether a parameter of the deployed model requires grad: the call's graph on the
        workers then leads to leaves (torch.func's transforms keep their results' graph)."""
        return any(p.requires_grad for p in self._model._local.parameters())
    @property
    def _part(self) -> str | None:
        """The part whose call this node's graph on the worker comes from: for the node of
        a kept backward (double backward), the part of the call it was the backward of."""
        return self.__dict__.get("_of_part", self._path)

    @_part.setter
    def _part(self, part: str | None) -> None:
        self.__dict__["_of_part"] = part

    def name(self) -> str:
        return type(self).__name__

    def register_hook(self, fn) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs)`` after this node; for a placed part's call whose
        part runs node hooks on its worker (``glue.route_node_hooks``), after the node of the
        last op of the part's forward there, the one this node stands for, as in one
        process; refused otherwise (``_node_hooks_refused``)."""
        routes = self._model.__dict__.get("_node_routes")
        if routes is not None and self._path in routes.paths:
            return routes.add(self, fn)
        raise NotImplementedError(self._node_hooks_refused("register_hook"))

    def register_prehook(self, fn) -> RemovableHandle:
        """Refused: see ``_node_hooks_refused``."""
        raise NotImplementedError(self._node_hooks_refused("register_prehook"))

    def _node_hooks_refused(self, method: str) -> str:
        """A hook on this node would see other gradients than one process's node gives it:
        that node (the last op of the forward) ran on the worker, and this one stands for
        the whole call, its inputs' gradients (not the op's operands') and its outputs'
        together; its pre-hooks would also fire before the tensor hooks on the worker's
        output, which one process runs first."""
        return (f"grad_fn.{method}(fn) on an output of a deployed "
                f"{self._model._class_name} (or a register_backward_hook on a module that "
                f"returns it): its {self.name()} ran on the model's worker, and the grad_fn "
                "here stands for the whole call, so a hook on it would not see that node's "
                "gradients. Hook the output instead (out.register_hook(fn) sees its "
                "gradient, the node's grad_outputs), or the module that made it "
                "(register_full_backward_hook sees its grad_input), or run the model in one "
                "process (model.to_local())")

    def made_by(self, name: str | None) -> None:
        """Take the name of the node that made the output on its worker: the node becomes
        an instance of a subclass called so (``AddmmBackward0``), so that a program prints
        its outputs' ``grad_fn`` as in one process; it stays a ``RemoteBackward0``."""
        if name and name.isidentifier() and name != type(self).__name__:
            cls = _NAMED.get(name)
            if cls is None:
                cls = _NAMED[name] = type(name, (RemoteBackward0,), {
                    "__module__": __name__, "__qualname__": f"RemoteBackward0[{name}]"})
            self.__class__ = cls

    # the live edges: the taps', then the parameters' a backward names
    def _live_edges(self) -> list:
        if not (self._path or "").startswith("<") and not sys._getframe(2).f_globals.get(
                "__name__", "").startswith(_OWN_MODULES):  # (read by the program itself)
            self._say_collapsed()  # (an op run where its operands are is one node, as here)
        live = [(key, *gradient_edge(t), shape, dtype) for key, ref, shape, dtype in self._taps
                if (t := ref()) is not None and not kept_result_left_out(key, t, self)]
        return live + [(key, p._accumulator, 0, shape, dtype) for key, (ref, shape, dtype)
                       in self._params.items() if (p := ref()) is not None]

    def _say_collapsed(self) -> None:
        """A program walks the graph through this node, a part's or stages' call
        (torchviz's ``make_dot``, torch-pruning's dependency graph): say that the ops it
        stands for are not in the graph."""
        what = (f"the call of its part {self._path!r}" if self._call and self._path
                else f"its stage{'s' if self._stage else ''} 0" +
                (f" to {self._stage}" if self._stage else ""))
        where = "their workers" if self._stage and not self._call else "its worker"
        warnings.warn(
            f"{self.name()} of a program's graph stands for {what} of the deployed "
            f"{self._model._class_name}, which ran on {where}: its next_functions lead "
            "straight to that call's inputs. The ops in between, their parameters' "
            "AccumulateGrad nodes, and the nodes of the tensors its hooks were given are on "
            f"{where}, not in this graph, so a walk of it sees fewer nodes than one process "
            "does. Walk the model's graph before deploying it, or that of remote.to_local().",
            UserWarning, stacklevel=4)

    def wants_parameter(self, p) -> bool:
        """Give this node an edge to ``p``'s accumulator if its workers' backward computes
        ``p``'s gradient (``p`` is a parameter of its model used by the stages or the part it
        stands for), so that a backward naming ``p`` among its inputs reaches it: the
        workers then send that gradient as they send a tap's."""
        path = p.__dict__.get("_path")
        if p.__dict__.get("_model") is not self._model or path is None:
            return False
        covered = self.uses_parameter(path)
        if covered:
            self._params[PARAM_TAP + path] = (weakref.ref(p), tuple(p.shape),
                                              np.dtype(p.dtype.np))
        return covered

    _unreached: frozenset = frozenset()  # its parameters the graph there misses (by name)

    def unreached(self, names_by_answer: list) -> None:
        """Take the ``unreached`` of the call's answers (one per micro-batch: a parameter
        none of their graphs reaches, ``values.graph_facts``, is none of its edges)."""
        self._unreached = frozenset.intersection(*(frozenset(n or ()) for n in names_by_answer))

    def uses_parameter(self, path: str) -> bool:
        """Whether the workers' backward of this call computes the gradient of its model's
        parameter at ``path`` (a parameter of the part, or of the stages, it stands for,
        which the call's graph there reaches)."""
        if self._unreached and not self._unreached.isdisjoint(_names(self._model, path)):
            return False
        if self._call:
            return _in_part(self._model, self._part, path)
        stage = self._model._layout.stage_of(path)
        return stage is not None and stage <= self._stage

    @staticmethod
    def _accumulates() -> bool:
        """Whether the backward now running grows the workers' ``.grad``: a plain backward
        does; autograd.grad, and a backward restricted to ``inputs=`` (none of which live on
        a worker), do not."""
        tasks = getattr(engine._running, "tasks", None)
        return not tasks or (tasks[-1].accumulate and tasks[-1].needed is None)

    @property
    def runs_without_grads(self) -> bool:
        """A call that a backward listed to its worker as still to come runs in it even
        when none of its outputs got a gradient (a gradient penalty through a constant
        seed, an output unused): its request, with no gradient, counts it off there, and
        the parameter gradients held for it reach ``.grad``, as one process gives them."""
        return self._call and self._awaited is not None \
            and self._awaited == engine.current_task_id()

    def _pass(self) -> dict:
        """``pass`` (which backward of the client) for a call whose first backward kept its
        graph, and for that graph's: see workers/twice_split.py."""
        return {"pass": engine.current_task_id()} if self.__dict__.get("_twice") else {}

    def _hold(self) -> dict | None:
        """For the workers (``hold`` of a backward request, see workers/held_grads.py): when
        this backward runs several calls of the model apart, its id and the contexts of
        those still to run, so that a parameter used by more than one gets their summed
        gradient once, as in one process; with micro-batches, the calls of this call's own
        micro-batch (hooks fire once per micro-batch). None: a single call, a chain's
        micro-batches, or not a plain backward."""
        tasks = getattr(engine._running, "tasks", None)
        task = tasks[-1] if tasks else None
        model = self._model
        if (task is None or not task.accumulate or task.needed is not None
                or self._sizes is not None or grad_mode.is_grad_enabled()):
            return None
        key = (RemoteBackward0, id(model), self._mb)
        calls = task.typed.get(key)
        if calls is None:
            calls = task.typed[key] = [n for n in engine.nodes_of(task, RemoteBackward0)
                                       if n._model is model and n._sizes is None
                                       and n._mb == self._mb]
        if len(calls) < 2:
            return None
        if self._call:  # the first call to reach its worker lists those still to come there
            told = task.typed.setdefault((key, "told"), set())
            if self._stage in told:
                return {"task": task.id}  # the worker counts them off
            told.add(self._stage)
        # (a chain's calls are on every stage's worker: each lists them)
        later = [n for n in calls if n is not self and (
            not (self._call and n._call) or n._stage == self._stage)
            and not engine.has_run(task, n)]
        for n in later:
            n._awaited = task.id
        return {"task": task.id, "later": [n._ctx_ids[0] for n in later]}

    def _inputs_wanted(self) -> bool:
        """Whether this backward needs the call's inputs' gradients (an autograd.grad or a
        backward(inputs=) to the taps alone does not: the workers then stop at them and keep
        the rest, so that the hooks beyond them, a full backward hook on the inputs' side,
        do not fire, as in one process)."""
        tasks = getattr(engine._running, "tasks", None)
        task = tasks[-1] if tasks else None
        if task is None or task.needed is None:
            return True
        return any(node is not None and engine.will_execute(task, node)
                   for node, _ in self._edges)

    def _wanted_taps(self) -> list[str]:
        """The keys of the live taps this backward needs: those a backward with inputs=
        reaches, the client's own tensors fed to a worker, and those with tensor hooks or
        retain_grad here."""
        tasks = getattr(engine._running, "tasks", None)
        task = tasks[-1] if tasks else None
        wanted = []
        for key, node, nr, _, _ in self._live:
            if key.startswith(PARAM_TAP):  # only where this backward names the parameter
                # (a plain backward adds its gradient to .grad on the worker already)
                if task is not None and task.needed is not None and engine.will_execute(
                        task, node):
                    wanted.append(key)
                continue
            if key.endswith("="):  # a forward hook's result: where a backward names it
                # (its hooks and retain_grad are served by its vjp, which the worker asks)
                if task is not None and task.needed is not None and self._needed_here(
                        task, node, {}):
                    kept_result_only(task, node)
                    wanted.append(key)
                continue
            hooked = bool((node._tensor_hooks or {}).get(nr)) or nr in (node._retains or {})
            fed = key.endswith("@")  # the client's own leaf: backward accumulates its .grad
            if hooked or (task is not None and (
                    fed and engine.will_execute(task, node)
                    or task.needed is not None and self._needed_here(task, node, {}))):
                wanted.append(key)
        return wanted

    def _needed_here(self, task, node, seen: dict) -> bool:
        """Whether a backward with inputs= needs a tap's gradient for what lies between the
        tap and this call's own graph: a gradient it captures or a leaf it accumulates into
        there (the tap itself, what a hook computed from it: its in-place change), or a
        route to another call. What lies past this call's tap nodes is this call's graph on
        the worker, which this node's own backward covers: a gradient taken through the tap
        too would run the hook's part twice (its vjp the worker asked for, then here)."""
        if node is None or node not in task.needed or (
                isinstance(node, RemoteTapBackward0) and node._keeps is self):
            return False
        done = seen.get(node)
        if done is None:
            seen[node] = False  # (a DAG; set before the walk below)
            nexts = [n for n, _ in node.next_functions if n is not None]
            done = seen[node] = (
                any(captured is node for captured, _ in task.captures)
                or (node in task.runs and not any(n in task.needed for n in nexts))
                or any(self._needed_here(task, n, seen) for n in nexts))
        return done

    def _tap_grads(self, tapped: dict | None, wanted: list[str]) -> tuple:
        """A gradient (or None) per live tap, from the workers' answer."""
        tapped = tapped or {}
        out = []
        for key, _, _, shape, dtype in self._live:
            g = tapped.get(key) if key in wanted else None
            out.append(None if g is None else Tensor._make(np.array(g, dtype), None, 0))
        self._given = {key: g for (key, *_), g in zip(self._live, out)}
        return tuple(out)

    def _backward(self, grads: list) -> tuple:
        ran_in = self._ran_in
        try:
            out = self._remote_backward(grads)
        except Exception:
            if self._ran_in != ran_in:  # (it went to the workers)
                say_stopped(self, within=True)
            raise
        engine.on_error(lambda exc: say_stopped(self, within=False))
        return out

    def _remote_backward(self, grads: list) -> tuple:
        if self._freed:
            raise RuntimeError(SECOND_BACKWARD_MSG)
        if self._saved_outputs:
            self._check_saved_outputs()
        if grad_mode.is_grad_enabled() and not self._call:  # create_graph through a chain
            raise NotImplementedError(create_graph_chain_refused(self._model))
        # the workers keep their graphs exactly when this backward keeps the client's, or
        # when it goes on from a tensor a hook got here (see tap_node.used_here)
        retain = engine.retains_graph()
        self._after = used_here(self)
        retain = retain or bool(self._after)
        model = self._model
        if self._region is not None and self.weights_require_grad():
            for key in ([(id(model), self._part)] if self._casts is None else self._casts):
                autocast_mode.check_one_cast(self._region, key, self,
                                             engine.current_task_id(),
                                             f"the deployed {self._part or model._class_name}")
        self._ran_in = engine.current_task_id()  # the taps' segments see that it ran
        # the engine reads the edges again after this: the taps it counted must still be
        # there when the context's stand-ins are dropped below
        self._pinned = [t for _, ref, _, _ in self._taps if (t := ref()) is not None]
        if self._call:
            return self._call_backward(grads, retain)
        items = self.__dict__.get("_items")  # a chain's last stage returned several
        g = grads[0] if items is None else None
        wanted = self._wanted_taps()
        parts = ([g._data] if items is None else [[None if gi is None else gi._data
                                                   for gi in grads]]
                 ) if self._sizes is None else split_rows(g._data, self._sizes)
        hold = self._hold()
        with workers_keeping(retain):
            replies = model._hub.request_all(
                [(model._addresses[self._stage], {
                    "stage": self._stage, "grads": [part] if items is None else part,
                    "retain_graph": retain,
                    "reply_to": model._hub.reply_to, "mb": None if self._sizes is None else i,
                    "taps": wanted or None, "accumulate": self._accumulates(),
                    "inputs": self._inputs_wanted(), "hold": hold, **self._pass()}, ctx_id)
                 for i, (part, ctx_id) in enumerate(zip(parts, self._ctx_ids))],
                "backward", what="backward through the remote stages")
        for reply in replies:  # what the stages' hooks set on their modules, stage by stage
            attr_changes.apply(model, reply["result"].get("attrs"))
        given_changed([g] if items is None else list(grads),
                      [r["result"].get("tapped") for r in replies], self._sizes)
        taps = self._tap_grads(_summed([r["result"].get("tapped") for r in replies]),
                               wanted)
        if not retain:
            self._finalizer.detach()  # the workers closed the contexts themselves
            self._removed_hooks = None  # (and fire no hook of theirs again)
            for ctx_id in self._ctx_ids:
                model._hub.drop_context(ctx_id)
        gxs = [r["result"]["grads"][0] for r in replies]
        if all(gx is None for gx in gxs):
            return (None, *taps)
        gxs = [np.zeros(p.shape, g._data.dtype) if gx is None else np.asarray(gx)
               for gx, p in zip(gxs, parts)] if items is None else [np.asarray(gxs[0])]
        return (Tensor._make(np.concatenate(gxs) if len(gxs) > 1 else np.array(gxs[0]),
                             None, 0), *taps)

    def _call_backward(self, grads: list, retain: bool) -> tuple:
        """Backward of one submodule's call: a gradient (or None) per output to its stage,
        a gradient (or None) per input back."""
        model = self._model
        wanted = self._wanted_taps()
        address = model._addresses[self._stage]
        # the input gradients stay on the worker (a node before this one takes them there)
        keep = f"{self._ctx_ids[0]}~{next(_backwards)}"
        fields = {"stage": self._stage, "grads": one_object_grads(
                      [grad_data(g, address, model) for g in grads], grads),
                  "retain_graph": retain, "reply_to": model._hub.reply_to,
                  "taps": wanted or None, "accumulate": self._accumulates(),
                  "inputs": self._inputs_wanted(), "keep_grads": keep,
                  "hold": self._hold(), **self._pass()}
        what = f"backward of {self._path!r}"
        if fields["accumulate"]:  # the part's p.grad grows: no longer one kept with a graph
            held = model.__dict__.get("_graph_grads") or {}
            for path in [k for k in held if _in_part(model, self._part, k)]:
                del held[path]
        if grad_mode.is_grad_enabled():  # create_graph: the gradients keep their graph
            return self._backward_with_graph(grads, fields, retain, wanted)
        forms = model.__dict__.setdefault("_forms", async_calls.Forms())
        key = form = None
        if async_calls.may_go_on(model) and not wanted and not self._taps:
            key = async_calls.call_key("backward", address, self._path, retain,
                                       fields["accumulate"], fields["inputs"], self._needs,
                                       async_calls.params_form(self._op_params),
                                       args=(self._meta, self._layouts, grads))
            form = forms.get(key)
        if form is not None:  # the answer's form is known: go on without it
            def landed(reply):
                if reply["result"].get("attrs"):  # (late: the next backward waits)
                    forms.put(key, None)
                    attr_changes.apply(model, reply["result"]["attrs"])
                if any(k.startswith(GIVEN_TAP) for k in reply["result"].get("tapped") or ()):
                    forms.put(key, None)
                    raise RuntimeError(
                        f"{what}: a hook changed in place a gradient this backward gave "
                        "the call, after the program went on without the worker's answer; "
                        "in one process that change reaches the program's gradient tensor. "
                        "Gradients computed since may be wrong: return the changed "
                        "gradient from the hook instead")
                diff = async_calls.differs(form, reply["result"]["grads"])
                if diff is not None:
                    raise RuntimeError(
                        f"{what}: the worker's answer differs from the one the previous "
                        f"backward of this call gave, which the program went on with: "
                        f"{diff}. Gradients computed from it may be wrong")

            model._hub.send_async(address, "backward", fields, self._ctx_ids[0], what,
                                  landed)
            result = {"grads": async_calls.with_ids(form, keep)}
        else:
            with workers_keeping(retain):
                (reply,) = model._hub.request_all([(address, fields, self._ctx_ids[0])],
                                                  "backward", what=what)
            result = reply["result"]
            # what the part's tensor hooks set on its modules there (then the next backward
            # waits too, so that the program reads them after it as in one process)
            attr_changes.apply(model, result.get("attrs"))
            changed = given_changed(grads, [result.get("tapped")])
            if key is not None and not result.get("attrs") and not changed:
                forms.put(key, async_calls.form_of(result["grads"]))
        if not retain:
            self._finalizer.detach()
            model._hub.drop_context(self._ctx_ids[0])
        return (*(_grad_in(model, address, g) for g in result["grads"]),
                *self._tap_grads(result.get("tapped"), wanted))

    def _backward_with_graph(self, grads: list, fields: dict, retain: bool,
                             wanted: list) -> tuple:
        """``backward(create_graph=True)``: the worker keeps the input gradients and their
        graph (a context named by ``keep_grads``); they come back as kept values whose node
        leads to the given gradients and to this call's inputs, so that differentiating them
        (a gradient penalty) runs that graph's backward on the worker."""
        if any(not key.startswith(PARAM_TAP) for key, *_ in self._live) or (
                wanted and fields["accumulate"]):
            raise NotImplementedError(
                f"backward(create_graph=True) through {self._path!r}: a forward hook kept a "
                "tensor of this call for a later gradient (or backward(inputs=...) named a "
                "parameter); remove that hook, or take the two gradients in two passes "
                "without create_graph")
        model = self._model
        address = model._addresses[self._stage]
        fields["create_graph"] = True
        self._twice = True  # its later backwards name theirs (workers/twice_split.py)
        if fields["accumulate"]:  # its parameters' .grad keep their graph, on the worker
            model.__dict__.setdefault("_grads_with_graph", set()).add(self._part)
        (reply,) = model._hub.request_all([(address, fields, self._ctx_ids[0])], "backward",
                                          what=f"backward of {self._path!r} with its graph")
        if not retain:
            self._finalizer.detach()
            model._hub.drop_context(self._ctx_ids[0])
        result = reply["result"]
        keep = fields["keep_grads"]
        given = [grads[i] for i in result["seeded"]]
        node = RemoteBackward0(model, [keep], given, None, self._stage)
        node._path = f"{self._path} (its backward)"
        node._op_params = self._op_params
        node._part = self._part  # (the parameters whose gradients it computes)
        node._twice = True
        node.next_functions = node._edges + self._edges
        node.needs_input_grad = node._needs + self._needs
        node._input_meta = node._meta + self._meta
        out, nr = [], 0
        for g in result["grads"]:
            if g is None:
                out.append(None)
                continue
            t = from_record(model, address, g, node, nr)
            node._output_meta.append((tuple(g["shape"]), wire.dtype_named(g["dtype"])))
            out.append(t)
            nr += 1
        # backward: p.grad with its graph; autograd.grad: the parameters it names (taps)
        held = model.__dict__.setdefault("_graph_grads", {}) if fields["accumulate"] else {}
        for path, g in result.get("params") or ():  # kept there, with their graph
            held[path] = from_record(model, address, g, node, nr)
            node._output_meta.append((tuple(g["shape"]), wire.dtype_named(g["dtype"])))
            nr += 1
        node._output_meta = tuple(node._output_meta)
        if fields["accumulate"]:
            return tuple(out)
        self._given = {key: held.get(key) for key, *_ in self._live}
        return (*out, *self._given.values())

    def _release(self) -> None:
        self._freed = True


_NAMED: dict[str, type] = {}  # worker node name -> its RemoteBackward0 subclass
_backwards = itertools.count()  # numbers the backwards of a call (ids of kept gradients)


def _grad_in(model, address: str, g):
    """An input gradient a call's backward answered: None, an array, or a kept value."""
    if g is None:
        return None
    if isinstance(g, dict):
        return from_record(model, address, g, None, 0)
    return Tensor._make(np.array(g), None, 0)


def _in_part(model, part: str, path: str) -> bool:
    """Whether the part at ``part`` uses the parameter ``path``, under any of its names (a
    tied weight is every part's that holds it)."""
    return part == "" or any(name == part or name.startswith(part + ".")
                             for name in _names(model, path))


def _names(model, path: str) -> list:
    """Every name of the model's parameter at ``path`` (a tied one has several)."""
    return [name for name, first in model._canonical.items() if first == path] or [path]


PARAM_TAP = "param:"  # a tap key naming a parameter of the model (wants_parameter)


def _summed(tapped: list) -> dict:
    """The taps' gradients of several micro-batches' answers, summed by key (a parameter's
    comes from each; a tensor a hook kept, from its own micro-batch's)."""
    out: dict = {}
    for one in tapped:
        for key, g in (one or {}).items():
            if g is not None:
                out[key] = np.asarray(g) if key not in out else out[key] + np.asarray(g)
    return out
