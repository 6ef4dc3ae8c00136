"""The op machinery: one class per differentiable op, forward and backward side by side.

An op's ``forward(ctx, *arrays, **params)`` works on numpy arrays and returns an array (or a
tuple of arrays); its ``backward(ctx, *grads)`` works on Tensors, so the backward pass is
itself differentiable (``create_graph=True``). ``ctx`` is the graph Node, an instance of the
op's ``<Name>Backward0`` class. With grad mode off or no input requiring grad, ``apply``
only runs ``forward`` and builds no node.
"""
from __future__ import annotations

import re
import threading
import weakref
from sys import modules as _loaded

import numpy as np

from disthook import _dtype
from disthook._settings import FLOAT_WARNING
from disthook.autograd import grad_mode
from disthook.autograd.graph import Node, _SavedTensor, _sequence, grad_accumulator
from disthook.autograd.inference import DetachedInferenceVersion, InferenceVersion
from disthook.ops import _bf16


class RemoteOperand(BaseException):
    """Raised inside an op's ``forward`` by an input whose value is kept elsewhere (the
    output of a deployed model's part, on its worker): ``Op.apply`` then hands the op to
    ``remote_apply`` (set by ``disthook.distributed.remote_values``), which runs it where the
    value is. A BaseException, so that no op's own ``except Exception`` takes it."""


remote_apply = None  # (op class, inputs, params) -> output; installed with the first one


class Op(Node):
    """Base of every built-in op. Subclasses define ``forward`` and ``backward``."""

    __slots__ = ()
    node_name: str | None = None  # torch's name for the node, default "<Class>Backward0"
    differentiable = True
    complex_ok = False  # an op whose forward and backward are right on complex inputs says so
    drops_unneeded_grads = True
    view = False  # output shares memory and version counter with input 0
    _in_float32 = False  # the twin that computes a bfloat16 op in float32 (ops/_bf16.py)
    # an op whose forward and backward compute bfloat16 themselves (in float32 with torch's
    # roundings), so that no twin is made for it; unlike a twin, it is an op of its own name
    # (service/op_calls.py sends it to a worker by that name)
    handles_bfloat16 = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__ or "node_name" in cls.__dict__:
            name = cls.__dict__.get("node_name") or f"{cls.__name__}Backward0"
            cls._node_cls = type(name, (cls,), {"__slots__": (), "__module__": cls.__module__})

    @staticmethod
    def forward(ctx, *arrays, **params):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError

    def _backward(self, grads: list) -> tuple:
        outer = _running.node
        _running.node = self
        try:
            return self.backward(self, *grads)
        except RuntimeWarning as warning:  # numpy's float warning made an error: as in apply
            if np.geterr() == _QUIET or not _FLOAT_WARNING.match(str(warning)):
                raise
            with np.errstate(**_QUIET):
                return self.backward(self, *grads)
        finally:
            _running.node = outer

    @property
    def saved_tensors(self) -> tuple:
        """The saved tensors, for the op's own backward only: torch's built-in nodes have
        no ``saved_tensors`` (graph readers such as torchviz test ``hasattr(fn,
        "saved_tensors")`` to find custom Functions); they show ``_saved_<name>``."""
        if _running.node is not self:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute "
                                 "'saved_tensors'")
        return self._unpack_saved()

    @classmethod
    def apply(cls, *inputs, **params):
        """Run the op on Tensor ``inputs`` with keyword ``params``; wire it into the graph.
        A non-Tensor input is torch's TypeError, naming its position and type."""
        try:
            for t in inputs:
                if t._data.dtype.kind in "cV":
                    if t._data.dtype.kind == "V" and not (
                            cls.view or cls._in_float32 or cls.handles_bfloat16):
                        return _bf16.compute_in_float32(cls, inputs, params)
                    if t._data.dtype.kind == "c" and not cls.complex_ok:
                        refuse_complex(cls, t)
            if grad_mode._state.enabled and cls.differentiable:
                # one and two inputs spelled out: a comprehension costs a frame (Python 3.11)
                n = len(inputs)
                if n == 2:
                    a, b = inputs
                    needs = _NEEDS2[a._requires_grad, b._requires_grad]
                elif n == 1:
                    a = inputs[0]
                    needs = _NEEDS1[a._requires_grad]
                else:
                    needs = tuple([t._requires_grad for t in inputs])
                if True in needs:
                    ctx = _new(cls._node_cls)  # Node.__init__'s fields are all set right here
                    ctx._seq = next(_sequence)
                    ctx.needs_input_grad = needs
                    out = cls.forward(ctx, *inputs, **params)
                    if n == 2:
                        ctx.next_functions = (_edge(a), _edge(b))
                        # (the engine reads the metadata of inputs that need a gradient only)
                        ctx._input_meta = (
                            (a._data.shape, a._data.dtype) if needs[0] else None,
                            (b._data.shape, b._data.dtype) if needs[1] else None)
                    elif n == 1:
                        ctx.next_functions = (_edge(a),)
                        ctx._input_meta = ((a._data.shape, a._data.dtype),)
                    else:
                        ctx.next_functions = tuple([_edge(t) for t in inputs])
                        ctx._input_meta = tuple([(t._data.shape, t._data.dtype)
                                                 for t in inputs])
                    if type(out) is tuple:
                        ctx._output_meta = tuple([(o.shape, o.dtype) for o in out])
                        # integer outputs (max's indices) are not differentiable: no history
                        view = cls.view and MULTI_OUTPUT_VIEW
                        outs = tuple([_wrap(o, ctx, i, inputs, view) if _dtype.kind(o.dtype) in "fc"
                                      else _wrap(o, None, 0, inputs, view)
                                      for i, o in enumerate(out)])
                    elif type(out) is np.ndarray and not cls.view:
                        outs = _make(out, ctx, 0)
                    else:
                        outs = _wrap(out, ctx, 0, inputs, cls.view)
                    saved = ctx._saved
                    if saved is not None and OUTPUT in saved:
                        ctx._resolve_saved_output(outs)
                    return outs
            out = cls.forward(_NO_CTX, *inputs, **params)
            if type(out) is tuple:
                view = cls.view and MULTI_OUTPUT_VIEW
                return tuple([_wrap(o, None, 0, inputs, view) for o in out])
            return _wrap(out, None, 0, inputs, cls.view)
        except AttributeError:
            _check_tensors(cls, inputs)
            raise
        except RuntimeWarning as warning:
            # a program's warnings filter ("error") made numpy's float warning an exception
            # where torch gives inf or nan silently: the op runs again without the warning
            # (forwards are pure: an in-place op writes its result after)
            if np.geterr() == _QUIET or not _FLOAT_WARNING.match(str(warning)):
                raise
            with np.errstate(**_QUIET):
                return cls.apply(*inputs, **params)
        except RemoteOperand:  # an input's value is on a worker: the op runs there
            return remote_apply(cls, inputs, params)

    def _resolve_saved_output(self, outs) -> None:
        out = outs[0] if type(outs) is tuple else outs
        self._saved = tuple([_SavedTensor(out, self) if s is OUTPUT else s
                             for s in self._saved])

    def save_for_backward(self, *tensors) -> None:
        saved = []
        for s in tensors:
            saved.append(s if s is None or s is OUTPUT else _SavedTensor(s, self))
        self._saved = tuple(saved)


_QUIET = {"divide": "ignore", "over": "ignore", "under": "ignore", "invalid": "ignore"}
_FLOAT_WARNING = re.compile(FLOAT_WARNING)


def as_shown(value: int) -> int:
    """An int a built-in node keeps (``_saved_dim``, ``_saved_start`` ...) as torch shows it:
    a negative one as its 64-bit unsigned reading (-1 is 2**64 - 1)."""
    return int(value) % 2**64


def shown_dims(n) -> object:
    """``_saved_dim`` of a node that keeps the dim(s) as the program gave them (``n.given``),
    else the one it used (``n.dim``)."""
    given = getattr(n, "given", None)
    given = n.dim if given is None else given
    return tuple(as_shown(d) for d in given) if isinstance(given, tuple) else as_shown(given)


class _Running(threading.local):
    node = None  # the op node whose backward runs now in this thread


_running = _Running()
_new = object.__new__  # anomaly mode puts one that records here while on (anomaly_mode.py)
# the needs_input_grad tuples of one- and two-input ops, shared: one fewer object per node
_NEEDS1 = {flag: (flag,) for flag in (False, True)}
_NEEDS2 = {(x, y): (x, y) for x in (False, True) for y in (False, True)}


def _edge(t) -> tuple:
    """The (node, output_nr) that input ``t``'s gradient flows to; (None, 0) for none."""
    node = t._grad_fn  # read once: on a custom Function's view it is a checked property
    if node is not None:
        return (node, t._output_nr)
    return (grad_accumulator(t), 0) if t._requires_grad else _NO_EDGE


def floating_kernel(t, kernel: str, kinds: str = "biu") -> None:
    """torch's NotImplementedError for an integer or bool input (numpy kinds ``kinds``) to an
    op whose kernel does not take it (F.gelu of an int tensor), named as torch names
    ``kernel``."""
    if t._data.dtype.kind in kinds:
        raise NotImplementedError(
            f"\"{kernel}\" not implemented for '{_dtype.scalar_type_name(t.dtype)}'; convert the "
            "input with .float() first")


def refuse_complex(op, t) -> None:
    """The error for a complex input to an op that has not been made right for complex
    numbers (``op``: its class or its name): torch's kind, naming the op and the dtype."""
    name = op if isinstance(op, str) else re.sub(r"Backward\d*$", "", op.node_name or op.__name__)
    kind = "ComplexDouble" if t._data.dtype == np.complex128 else "ComplexFloat"
    raise NotImplementedError(  # (a RuntimeError, as torch's "not implemented for" errors)
        f'"{name.lower()}" not implemented for \'{kind}\' in disthook. Complex tensors are '
        "supported by "
        "+, -, *, /, neg, exp, log, sqrt, pow, sin, cos, tanh, sigmoid and their kin, sum, "
        "mean, cumsum, prod, cumprod, norms, matmul, einsum, linalg.inv, linalg.solve, the "
        "view and indexing ops, cat, stack, conj, abs, angle, real, "
        "imag, view_as_real and torch.fft; take the real "
        "part first (z.real, z.abs() or torch.view_as_real(z)) for anything else")


def _check_tensors(cls, inputs: tuple) -> None:
    """TypeError for the first input of ``cls`` that is not a Tensor (an AttributeError
    from inside an op means one was given: a hook returned a str, say)."""
    from disthook.tensor import Tensor

    for position, t in enumerate(inputs, 1):
        if not isinstance(t, Tensor):
            raise TypeError(f"{cls.__name__.lower()}(): argument (position {position}) must "
                            f"be Tensor, not {type(t).__name__}") from None
_NO_EDGE = (None, 0)  # the edge of an input that takes no gradient


def save_crossed(ctx, a, b) -> None:
    """Save each operand of a product only for the other operand's gradient, as torch does:
    ``a`` is kept only when ``b`` needs a gradient and vice versa, so an operand no gradient
    reads may be changed in place (and freed) before backward."""
    need = ctx.needs_input_grad
    if need:  # empty when no graph is recorded
        ctx.save_for_backward(a if need[1] else None, b if need[0] else None)


class _Output:
    """Marker for ``ctx.save_for_backward``: save the op's (first) output."""

    def __repr__(self) -> str:
        return "OUTPUT"


OUTPUT = _Output()


def _wrap(array, node, output_nr: int, inputs, view):
    """The output Tensor of an op. ``view``: falsy, True for a view op's output, or
    MULTI_OUTPUT_VIEW for one of the views a multi-output op (split, unbind) returns."""
    if type(array) is not np.ndarray:
        array = np.asarray(array)
    if not view:
        return _make(array, node, output_nr)
    base = inputs[0]
    if array is base._data:
        array = array.view()  # a no-op view (squeeze of nothing) is still a new view
    t = _make(array, node, output_nr)
    if array.base is not None and np.may_share_memory(array, base._data):
        _as_view(t, base, view)
    return t


# how a view was made (torch's CreationMeta): in-place on all but the first is forbidden under
# grad mode, since the history of such a view cannot be rebased
DEFAULT_VIEW, NO_GRAD_VIEW, MULTI_OUTPUT_VIEW, INFERENCE_VIEW = 0, 1, 2, 3


def _as_view(t, base, view) -> None:
    """Make ``t`` a view of ``base``: it shares the version counter, records the root base
    and how it was made, and registers with the root, so that an in-place change of the root
    or of another of its views rebases ``t``'s history (see ``Tensor._inplace``)."""
    root = base._base if base._base is not None else base
    vc = t._vc = base._vc
    if type(vc) is DetachedInferenceVersion:  # a view of it is a full inference tensor
        t._vc = InferenceVersion([0])
    t._base = root
    if not grad_mode._state.enabled:
        t._view_creation = INFERENCE_VIEW if grad_mode._state.inference else NO_GRAD_VIEW
        if root._requires_grad:  # torch: it requires grad through its base, yet is a leaf
            t._requires_grad = t._grad_from_base = True  # that no gradient reaches
            t._made_at_version = t._vc[0]
        return
    creation = MULTI_OUTPUT_VIEW if view == MULTI_OUTPUT_VIEW else base._view_creation
    if creation:
        t._view_creation = creation
    if root._grad_fn is not None or not root._requires_grad:
        # (a leaf that requires grad is never changed in place under grad mode: no need)
        views = root._views
        if views is None:
            root._views = [weakref.ref(t)]
        else:
            n = len(views)
            if n >= 16 and not n & (n - 1):  # at powers of two: drop the dead, amortised O(1)
                views[:] = [r for r in views if r() is not None]
            views.append(weakref.ref(t))


def _make(array, node, output_nr):
    global _make
    from disthook.tensor import Tensor

    _make = Tensor._make  # bound on first use: disthook.tensor imports this module
    return _make(array, node, output_nr)


class _NoCtx:
    """Stands in for the node when no graph is recorded: saving is a no-op."""

    needs_input_grad = ()

    def save_for_backward(self, *tensors) -> None:
        pass

    def __setattr__(self, name, value) -> None:
        pass


_NO_CTX = _NoCtx()


# ---- dtype promotion and scalar wrapping (torch's rules, not numpy's) -----------------------

_CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2, "V": 2, "c": 3}  # ("V": bfloat16)


def _category(np_dtype) -> int:
    return _CATEGORY[np_dtype.kind]


def _complex_of(np_dtype):
    """The complex dtype with ``np_dtype``'s precision (int and bool: the default's)."""
    if _dtype.kind(np_dtype) in "fc":
        return _dtype.from_numpy_dtype(np_dtype).to_complex().np
    return _dtype.default_complex_dtype().np


def _promote(da, db):
    """numpy's promotion, and torch's for bfloat16 (numpy knows none): with float16, float32;
    with a wider float, that one; with a complex, the complex of bfloat16's (complex64)."""
    if da == _dtype.BF16 or db == _dtype.BF16:
        other = db if da == _dtype.BF16 else da
        return np.promote_types(other, np.float32) if other != _dtype.BF16 else other
    return np.promote_types(da, db)


def result_dtype(a, b):
    """Numpy dtype of a binary op on Tensors/scalars under torch's promotion rules."""
    from disthook.tensor import Tensor

    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if ta and tb:
        da, db = a._data.dtype, b._data.dtype
        if da == db:
            return da
        ca, cb = _category(da), _category(db)
        if ca != cb:
            (hi, dhi), (lo, dlo) = ((a, da), (b, db)) if ca > cb else ((b, db), (a, da))
            if dhi.kind == "c" and _dtype.kind(dlo) == "f" and not (lo._data.ndim == 0 < hi._data.ndim):
                return _promote(dhi, dlo)  # complex64 with float64: complex128
            return dhi
        # within a category, a 0-dim tensor does not widen a dimensioned one
        if a._data.ndim == 0 and b._data.ndim != 0:
            return db
        if b._data.ndim == 0 and a._data.ndim != 0:
            return da
        return _promote(da, db)
    t, s = (a, b) if ta else (b, a)
    dt = t._data.dtype
    if isinstance(s, (bool, np.bool_)):
        return dt
    if isinstance(s, (int, np.integer)):
        return dt if dt.kind != "b" else np.dtype(np.int64)
    if isinstance(s, (float, np.floating)):
        return dt if _dtype.kind(dt) in "fc" else _dtype.get_default_dtype().np
    if isinstance(s, (complex, np.complexfloating)):
        return dt if dt.kind == "c" else _complex_of(dt)
    raise TypeError(f"unsupported operand type: '{type(s).__name__}'")


def binary_operands(a, b):
    """Tensors of a common dtype for a binary op; python scalars become constant Tensors."""

    dt = result_dtype(a, b)
    a = _as(a, dt)
    b = _as(b, dt)
    return a, b


def _as(x, dt):
    from disthook.tensor import Tensor

    if isinstance(x, Tensor):
        return x if x._data.dtype == dt else x.to(dt)
    if dt == _dtype.BF16 and isinstance(x, (float, np.floating)):
        dt = np.float32  # torch's bfloat16 kernels take a python float in float32
    wrapped = Tensor._make(np.asarray(x, dtype=dt), None, 0)
    wrapped.__dict__["_wrapped_number"] = True  # saved-tensor hooks skip it, as torch's
    return wrapped


def check_broadcast(sa: tuple, sb: tuple) -> None:
    """RuntimeError with torch's wording when shapes ``sa`` and ``sb`` do not broadcast."""
    for i in range(1, min(len(sa), len(sb)) + 1):
        x, y = sa[-i], sb[-i]
        if x != y and x != 1 and y != 1:
            dim = max(len(sa), len(sb)) - i
            raise RuntimeError(
                f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                f"non-singleton dimension {dim}")


def sum_to(g, shape: tuple):
    """Undo broadcasting: sum ``g`` (a Tensor) down to ``shape``. ValueError if impossible."""
    have = g._data.shape
    if have == shape:
        return g
    lead = len(have) - len(shape)
    if lead < 0:
        raise ValueError(f"cannot sum shape {tuple(have)} to {tuple(shape)}")
    dims = list(range(lead))
    for i, n in enumerate(shape):
        m = have[lead + i]
        if n == 1 and m != 1:
            dims.append(lead + i)
        elif n != m:
            raise ValueError(f"cannot sum shape {tuple(have)} to {tuple(shape)}")
    if dims and g._data.dtype.kind not in "bcV" and plain(g):
        # no graph to record (a gradient inside backward, a bias's): Sum's forward and the
        # reshape's view, without the methods' and apply's bookkeeping (25-30 us a call)
        summed = _make(_loaded["disthook.ops.reduce"].Sum.forward(_NO_CTX, g, tuple(dims), True),
                       None, 0)
        if lead:  # a view of the sum, as torch's
            return _wrap(summed._data.reshape(shape), None, 0, (summed,), True)
        return summed
    if dims:
        g = g.sum(dim=tuple(dims), keepdim=True)
    if lead:
        g = g.reshape(shape)
    return g


def plain(*tensors) -> bool:
    """May code that needs no graph (a backward formula, when no graph of it is recorded)
    compute on these tensors' arrays directly and wrap its result once, without the op
    layer? Yes when no graph would be recorded of them (grad mode off, or none requires
    grad) and each is a plain Tensor (not a subclass, nor a value kept elsewhere). The
    caller checks the dtypes its numpy code is right for."""
    tensor_type = _loaded["disthook.tensor"].Tensor
    enabled = grad_mode._state.enabled
    for t in tensors:
        if type(t) is not tensor_type or (enabled and t._requires_grad):
            return False
    return True


def plain_tensor(array: np.ndarray):
    """The Tensor, with no history, of a ``plain`` computation's new array (a numpy scalar,
    as numpy gives for 0-d operands, made a 0-d array)."""
    if type(array) is not np.ndarray:
        array = np.asarray(array)
    return _loaded["disthook.tensor"].Tensor._make(array, None, 0)


def plain_float(*tensors) -> bool:
    """``plain``, and each of float32 or float64, which numpy computes as torch's kernels do
    (not bfloat16, float16 or complex, whose formulas round once from float32 or take their
    own paths): a backward formula's arrays then give what its op layer would, bit for bit."""
    tensor_type = _loaded["disthook.tensor"].Tensor
    enabled = grad_mode._state.enabled
    for t in tensors:
        if (type(t) is not tensor_type or (enabled and t._requires_grad)
                or t._data.dtype.kind != "f" or t._data.dtype.itemsize == 2):
            return False
    return True
