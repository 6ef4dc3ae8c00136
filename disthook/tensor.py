"""Tensor: a numpy array with autograd, and the factory functions.

Tensor methods are thin: each one validates its arguments and calls one op from
``disthook.ops``; no method carries derivative code.
"""
from __future__ import annotations

import builtins
import functools
import numbers
import warnings
import weakref
from collections import OrderedDict

import numpy as np

from disthook import _blas, _dtype, _strides
from disthook import random as _random
from disthook._dtype import dtype as _DType
from disthook._indexing import check_index, check_number_fill, index_arg, numpy_words
from disthook._keywords import take_torch_keywords
from disthook._layout import empty_laid_out
from disthook._limits import check_memory_format, contiguous_format, preserve_format
from disthook._out import check_layout, check_pin_memory, factory_out, write_out
from disthook._tensor_math import INPLACE_NAMES, MathMethods, inplace_of
from disthook._tensor_reduce import ReduceMethods
from disthook._tensor_shape import NO_ACCELERATOR, ShapeMethods, by_keyword
from disthook.amp import cpu_policy
from disthook.autograd import grad_mode, inference
from disthook.ops import _bf16
from disthook.ops import complex as C
from disthook.ops import elementwise as E
from disthook.ops import linalg as L
from disthook.ops import math as M
from disthook.ops import reduce as R
from disthook.ops import shape as S
from disthook.ops import sort as SortOps
from disthook.ops.base import (
    _NO_CTX,
    RemoteOperand,
    binary_operands,
    check_broadcast,
    floating_kernel,
    refuse_complex,
    result_dtype,
)
from disthook.utils.hooks import RemovableHandle

SCATTER_REDUCE_WARNING = (
    "The reduce argument of torch.scatter with Tensor src is deprecated and will be removed "
    "in a future PyTorch release. Use torch.scatter_reduce instead for more reduction options.")
NON_LEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
    "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. "
    "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
    "instead. See github.com/pytorch/pytorch/pull/30531 for more information."
)
NO_GRAD_HOOK_MSG = "cannot register a hook on a tensor that doesn't require gradient"
TO_SCALAR_WARNING = (
    "Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
    "behavior.\nConsider using tensor.detach() first.")
NON_LEAF_REQUIRES_GRAD_MSG = "you can only change requires_grad flags of leaf variables."
NON_LEAF_REQUIRES_GRAD_HINT = (
    " If you want to use a computed variable in a subgraph that doesn't require "
    "differentiation use var_no_grad = var.detach().")
FACTORY_REQUIRES_GRAD_MSG = (
    "Only Tensors of floating point and complex dtype can require gradients")
NO_GRAD_VIEW_HINT = (
    " Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify "
    "your code by moving both the view and the inplace either both inside the no_grad block "
    "(if you don't want the inplace to be tracked) or both outside (if you want the inplace "
    "to be tracked).")
MULTI_OUTPUT_VIEW_HINT = (
    " This view is the output of a function that returns multiple views. Such functions do "
    "not allow the output views to be modified inplace. You should replace the inplace "
    "operation by an out-of-place one.")
_VIEW_HINTS = {S.NO_GRAD_VIEW: NO_GRAD_VIEW_HINT, S.MULTI_OUTPUT_VIEW: MULTI_OUTPUT_VIEW_HINT,
               S.INFERENCE_VIEW: NO_GRAD_VIEW_HINT.replace("no_grad block",
                                                           "inference_mode block")}
LEAF_INPLACE_MSG = "a leaf Variable that requires grad is being used in an in-place operation."
VIEW_OF_LEAF_INPLACE_MSG = "a view of " + LEAF_INPLACE_MSG


_new = object.__new__


class Size(tuple):
    """A tensor shape: a tuple that prints like ``torch.Size([2, 3])``."""

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, item):
        out = tuple.__getitem__(self, item)
        return Size(out) if isinstance(item, slice) else out

    # concatenation and repetition stay Sizes, from either side
    def __add__(self, other):
        if not isinstance(other, tuple):
            raise TypeError(f"can only concatenate tuple (not {type(other).__name__}) to "
                            "torch.Size")
        return Size(tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(other, self))

    def __mul__(self, n):
        out = tuple.__mul__(self, n)
        return out if out is NotImplemented else Size(out)

    __rmul__ = __mul__


def is_device_index(arg) -> bool:
    """``0`` in ``x.to(0)`` or ``device=local_rank``: an accelerator's index."""
    return isinstance(arg, numbers.Integral) and not isinstance(arg, builtins.bool)


class device:
    """Only the CPU exists; kept so torch code that names devices runs unchanged."""

    def __init__(self, type="cpu", index=None):
        if is_device_index(type):  # device(0): the first accelerator, and there is none
            raise RuntimeError(NO_ACCELERATOR)
        if isinstance(type, device):
            type, index = type.type, type.index
        if ":" in str(type):
            type, index = str(type).split(":")
            index = int(index)
        if type not in ("cpu", "cuda", "mps", "meta"):
            raise RuntimeError(f"Expected one of cpu, cuda, mps, meta device type at start of "
                               f"device string: {type}")
        self.type = type
        self.index = index

    def __repr__(self) -> str:
        idx = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{idx})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if not isinstance(other, device):
            return NotImplemented  # as in torch, a device never equals its name
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))


CPU = device("cpu")


def no_cuda() -> AssertionError:
    """What a CPU-only torch build raises for anything that needs CUDA, in its exact words
    (programs and tests match them)."""
    return AssertionError("Torch not compiled with CUDA enabled")


def _check_device(dev) -> None:
    """Only the CPU exists: other devices fail as they do in a CPU-only torch build."""
    if dev is None:
        return
    d = dev if isinstance(dev, device) else device(dev)
    if d.type == "cuda":
        raise no_cuda()
    if d.type == "mps":
        raise RuntimeError("PyTorch is not linked with support for mps devices")
    if d.type == "meta":
        raise NotImplementedError(
            "disthook has no 'meta' device: its tensors always hold values, on the CPU. A "
            "model moved to 'meta' only to be called with other tensors (model ensembling: "
            "functional_call(base_model, stacked_params, x)) works the same on the CPU: leave "
            "out the .to('meta') (its own tensors are put aside while the call runs).")
    if d.type != "cpu":
        raise RuntimeError(f"disthook runs on the CPU only; device '{d}' is not available")


def _complex_for(t) -> _dtype.dtype:
    """The complex dtype a real tensor's values take with a complex number (torch's
    promotion): its float dtype's complex kin, the default complex dtype for an integer or
    bool tensor."""
    dt = t.dtype
    return dt.to_complex() if dt.is_floating_point else _dtype.default_complex_dtype()


def _np_dtype(dtype):
    return None if dtype is None else _dtype.to_dtype(dtype).np


def _is_basic(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return builtins.all(
        i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice)) and
        not isinstance(i, (bool, np.bool_)) for i in items)


class Tensor(MathMethods, ShapeMethods, ReduceMethods):
    """An n-dimensional array that records the ops applied to it for backward."""

    # hot fields live in slots; the rest are class-level defaults, set per tensor only when used
    __slots__ = ("_data", "_requires_grad", "_grad_fn", "_output_nr", "_vc", "__weakref__",
                 "__dict__")
    _grad = None
    _backward_hooks = None
    _post_acc_hooks = None
    _retains_grad = False
    _base = None  # the root tensor whose memory a view shares
    _view_creation = 0  # ops.base.DEFAULT_VIEW / NO_GRAD_VIEW / ... (how a view was made)
    _views = None  # on a root: weak references to its views whose history follows it
    _grad_acc = None
    # a view made under no_grad (or inference mode) of a tensor that requires grad: it requires
    # grad through its base only, has no grad_fn and no AccumulateGrad, so that no gradient
    # reaches it or its base through it (torch's view of a no_grad-made view)
    _grad_from_base = False
    _made_at_version = 0  # such a view's version when made (see _check_base_unchanged)
    # numpy scalars and arrays defer to Tensor's reflected operators, as they do for torch's
    __array_priority__ = 1000

    # ---- construction ----------------------------------------------------------------------
    def __init__(self, *args, **kwargs):
        """Legacy constructor: ``Tensor(data)`` or ``Tensor(*sizes)``, float32."""
        dt = _dtype.get_default_dtype().np
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            src = args[0]
            data = np.array(src._data if isinstance(src, Tensor) else src, dtype=dt)
        else:
            data = np.empty(tuple(int(a) for a in args), dtype=dt)
        Tensor._init(self, data, None, 0)

    @staticmethod
    def _init(t, data, grad_fn, output_nr):
        t._data = data if data.size else empty_laid_out(data)
        t._requires_grad = False
        t._grad_fn = grad_fn
        t._output_nr = output_nr
        t._vc = [0]

    @classmethod
    def _make(cls, data, grad_fn, output_nr) -> "Tensor":
        t = _new(Tensor)
        t._data = data if data.size else empty_laid_out(data)
        t._requires_grad = grad_fn is not None
        t._grad_fn = grad_fn
        t._output_nr = output_nr
        t._vc = [0]
        return t

    # ---- metadata ------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim=None):
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[self._dim(dim)]

    @property
    def dtype(self) -> _DType:
        return _dtype.from_numpy_dtype(self._data.dtype)

    @property
    def device(self) -> device:
        return CPU

    is_cuda = False
    is_sparse = False
    is_quantized = False
    is_meta = False

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    ndimension = dim

    def numel(self) -> int:
        return self._data.size

    nelement = numel

    def element_size(self) -> int:
        return self._data.itemsize

    def is_floating_point(self) -> bool:
        return _dtype.kind(self._data.dtype) == "f"

    def is_complex(self) -> bool:
        return self._data.dtype.kind == "c"

    def is_contiguous(self, memory_format=None) -> bool:
        check_memory_format(memory_format, "is_contiguous")
        return _strides.is_contiguous_as(self._data, memory_format)

    def stride(self, dim=None):
        st = tuple(s // self._data.itemsize for s in self._data.strides)
        return st if dim is None else st[self._dim(dim)]

    def data_ptr(self) -> int:
        return self._data.__array_interface__["data"][0]

    def type(self, dtype=None):
        if dtype is None:
            return self.dtype.legacy_type
        if isinstance(dtype, str):
            dtype = _dtype.from_legacy(dtype)
        elif dtype is Tensor:  # the default tensor type: x.type(type(w)), loss-landscape's
            dtype = _dtype.get_default_dtype()
        elif isinstance(dtype, type):  # a legacy class: x.type(torch.FloatTensor)
            if not isinstance(getattr(dtype, "dtype", None), _DType):
                raise ValueError(f"invalid type: '{dtype.__name__}'")
            dtype = dtype.dtype
        return self.to(dtype)

    def get_device(self) -> int:
        return -1

    @property
    def _version(self) -> int:
        vc = self._vc
        if type(vc) is inference.InferenceVersion:
            raise RuntimeError(inference.VERSION_MSG)
        return vc[0]

    @property
    def output_nr(self) -> int:
        return self._output_nr

    def _dim(self, dim: int) -> int:
        """Wrap a possibly negative dim; IndexError with torch's wording when out of range."""
        n = builtins.max(self._data.ndim, 1)
        if not isinstance(dim, (int, np.integer)):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if not -n <= dim < n:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got "
                f"{dim})")
        return int(dim) % n

    # ---- autograd attributes -------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self._grad_fn is not None:
            raise RuntimeError(NON_LEAF_REQUIRES_GRAD_MSG + (
                "" if value else NON_LEAF_REQUIRES_GRAD_HINT))
        if value and _dtype.kind(self._data.dtype) not in "fc":
            raise RuntimeError(
                "only Tensors of floating point and complex dtype can require gradients")
        inference.check_requires_grad(self, value)
        self._set_requires_grad(builtins.bool(value))

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        # torch words these two checks differently from the property setter's
        if self._grad_fn is not None:
            if not requires_grad:
                raise RuntimeError(NON_LEAF_REQUIRES_GRAD_MSG + NON_LEAF_REQUIRES_GRAD_HINT)
            return self  # a non-leaf already requires grad
        if requires_grad and _dtype.kind(self._data.dtype) not in "fc":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        inference.check_requires_grad(self, requires_grad)
        self._set_requires_grad(builtins.bool(requires_grad))
        return self

    def _set_requires_grad(self, value: bool) -> None:
        """A leaf's own flag. On a view made under no_grad of a tensor that requires grad,
        False leaves it requiring grad through its base, and True makes it a leaf of its own
        whose .grad fills, as in torch."""
        if "_grad_from_base" in self.__dict__:
            self._grad_from_base = not value
            value = True
        self._requires_grad = value

    @property
    def grad_fn(self):
        node = self._grad_fn
        if node is None and self._grad_from_base:
            self._check_base_unchanged()
        return node

    @property
    def is_leaf(self) -> bool:
        if self._grad_from_base:
            self._check_base_unchanged()
        return self._grad_fn is None

    def _check_base_unchanged(self) -> None:
        """torch's error for a view made under no_grad (or inference mode) of a tensor that
        requires grad, once it or its base was changed in place (in any mode): its history
        would be ambiguous, so its grad_fn and every recorded use of it are refused."""
        if self._vc[0] == self._made_at_version or self._grad_fn is not None:
            return
        if self._view_creation == S.INFERENCE_VIEW:
            msg = ("A view was created in inference mode and its base or another view of its "
                   "base has been modified inplace in normal mode.")
        else:
            msg = ("A view was created in no_grad mode and its base or another view of its base "
                   "has been modified inplace with grad mode enabled.")
        raise RuntimeError(msg + _VIEW_HINTS[self._view_creation])

    @property
    def grad(self):
        if self._grad_fn is not None and not self._retains_grad and self._grad is None:
            warnings.warn(NON_LEAF_GRAD_WARNING, UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got grad of type "
                    f"{type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(
                    f"attempting to assign a gradient of size '{list(value.shape)}' to a "
                    f"tensor of size '{list(self.shape)}'. Please ensure that the gradient and "
                    "the tensor are the same size")
            if value._data.dtype != self._data.dtype:
                got = _dtype.c_type_name(value.dtype)
                want = _dtype.scalar_type_name(self.dtype)
                raise RuntimeError(
                    f"attempting to assign a gradient with dtype '{got}' to a tensor with "
                    f"grad_dtype '{want}'. The gradient must match the tensor's grad_dtype "
                    "(defaults to the tensor's dtype). You can set the tensor's grad_dtype "
                    "attribute with a specific dtype, or None to allow any dtype. Set grad_dtype "
                    "with caution. Diverging the dtypes of a tensor and its gradient may break "
                    "downstream systems that assume they match.")
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self._grad = None

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    @property
    def data(self) -> "Tensor":
        t = Tensor._make(self._data, None, 0)
        if type(self._vc) is not list:
            t._vc = inference.detached(self._vc)
        return t

    @data.setter
    def data(self, value: "Tensor") -> None:
        old = self._data
        self._data = value._data
        if _WRITE_THROUGH:
            _replaced_through(old, self._data)

    def set_(self, source: "Tensor | None" = None) -> "Tensor":
        """Make this tensor use ``source``'s data (empty without one), in place: its version
        goes up and a leaf gets a new AccumulateGrad, so graphs made before no longer lead
        to it (a GradientEdge taken before still does), as in torch."""
        if type(self._vc) is not list:
            inference.check_inplace(self)
        if grad_mode._state.enabled:
            if self._leaf_requiring_grad():
                raise RuntimeError(LEAF_INPLACE_MSG)
            if source is not None and source._requires_grad:
                raise NotImplementedError(
                    "set_() from a tensor that requires grad, under grad mode, is not "
                    "supported by disthook")
        self._data = np.empty(0, self._data.dtype) if source is None else source._data
        self._vc[0] += 1
        self._grad_acc = None
        return self

    # ---- hooks ---------------------------------------------------------------------------
    def register_hook(self, hook) -> RemovableHandle:
        """``hook(grad) -> Tensor | None`` runs when this tensor's gradient is computed."""
        if not self._requires_grad:
            raise RuntimeError(NO_GRAD_HOOK_MSG)
        if self._backward_hooks is None:
            if self._grad_fn is not None:
                self._backward_hooks = self._grad_fn._hooks_for_output(self._output_nr)
            else:
                self._backward_hooks = OrderedDict()
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        return handle

    def register_post_accumulate_grad_hook(self, hook) -> RemovableHandle:
        """``hook(tensor) -> None`` runs after this leaf's ``.grad`` was updated."""
        if not self._requires_grad:
            raise RuntimeError(NO_GRAD_HOOK_MSG)
        if self._grad_fn is not None:
            raise RuntimeError(
                "post accumulate grad hooks cannot be registered on non-leaf tensors")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = OrderedDict()
        handle = RemovableHandle(self._post_acc_hooks)
        self._post_acc_hooks[handle.id] = hook
        return handle

    def retain_grad(self) -> None:
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._grad_fn is None or self._retains_grad:
            return
        import weakref

        node = self._grad_fn
        if node._retains is None:
            node._retains = {}
        node._retains[self._output_nr] = weakref.ref(self)
        self._retains_grad = True

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        from disthook import autograd

        autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    # ---- conversion ----------------------------------------------------------------------
    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self._requires_grad and not force and grad_mode._state.enabled:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                "instead.")
        if self._data.dtype == _dtype.BF16:  # (numpy has no bfloat16: torch refuses too)
            raise TypeError("Got unsupported ScalarType BFloat16")
        return self._data

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)

    def item(self):
        if self._data.size != 1:
            raise RuntimeError(
                f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        return self._data.reshape(()).item()

    def tolist(self):
        return self._data.tolist()

    def __float__(self) -> float:
        if self._requires_grad and grad_mode._state.enabled:  # (torch: not under no_grad)
            warnings.warn(TO_SCALAR_WARNING, UserWarning, stacklevel=2)
        return builtins.float(self._real_scalar("double"))

    def __int__(self) -> int:
        return builtins.int(self._real_scalar("int64_t"))

    def __complex__(self) -> complex:
        if self._requires_grad and grad_mode._state.enabled:
            warnings.warn(TO_SCALAR_WARNING, UserWarning, stacklevel=2)
        return builtins.complex(self._scalar())

    def _real_scalar(self, c_type: str):
        """The one element for float() and int(): a complex one is torch's RuntimeError
        (its imaginary part would be lost)."""
        value = self._scalar()
        if isinstance(value, builtins.complex):
            raise RuntimeError(  # noqa: TRY004 (torch raises a RuntimeError here)
                f"value cannot be converted to type {c_type} without overflow")
        return value

    def _scalar(self):
        """The one element, for Python's number conversions (ValueError otherwise)."""
        if self._data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self._data.reshape(()).item()

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return builtins.int(self.item())

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError(
                "Boolean value of Tensor with more than one value is ambiguous")
        return builtins.bool(self._data.reshape(()).item())

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __hash__(self) -> int:
        return id(self)

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self._data, self._requires_grad))

    def __deepcopy__(self, memo):
        if self._grad_fn is not None:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment.  If you were attempting to deepcopy a "
                "module, this may be because of a torch.nn.utils.weight_norm usage, see "
                "https://github.com/pytorch/pytorch/pull/103001")
        t = type(self).__new__(type(self))
        Tensor._init(t, self._data.copy(), None, 0)
        t._requires_grad = self._requires_grad
        if self._grad is not None:
            t._grad = self._grad.__deepcopy__(memo)
        memo[id(self)] = t
        return t

    def __repr__(self, *, tensor_contents=None) -> str:
        from disthook._tensor_str import format_tensor

        suffixes = []
        if self._grad_fn is not None:
            suffixes.append(f"grad_fn=<{type(self._grad_fn).__name__}>")
        elif self._requires_grad:
            suffixes.append("requires_grad=True")
        return format_tensor(self._data, suffixes=suffixes)

    def __format__(self, spec: str) -> str:
        if self._data.ndim == 0 and spec:
            return self.item().__format__(spec)
        return object.__format__(self, spec) if spec else repr(self)

    def detach(self) -> "Tensor":
        """A new leaf sharing memory and version counter, but not a view: in-place changes of
        it are not tracked, as in torch."""
        t = Tensor._make(self._data, None, 0)
        t._vc = self._vc if type(self._vc) is list else inference.detached(self._vc)
        return t

    def _is_view(self) -> bool:
        return self._base is not None

    def detach_(self) -> "Tensor":
        if self._base is not None and self._base._requires_grad:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self._grad_fn = None
        self._requires_grad = False
        return self

    def clone(self, *, memory_format=None) -> "Tensor":
        """A copy laid out as torch lays it out: ``preserve_format`` (the default) keeps a
        dense source's strides (see disthook._strides)."""
        check_memory_format(memory_format, "clone")
        return Clone.apply(self, memory_format=memory_format)

    def contiguous(self, memory_format=None) -> "Tensor":
        """Itself where it already lies in ``memory_format``'s order (C order by default),
        else a copy in that order."""
        check_memory_format(memory_format, "contiguous")
        if memory_format is None or memory_format is preserve_format:
            memory_format = contiguous_format
        return self if self.is_contiguous(memory_format) else self.clone(
            memory_format=memory_format)

    def to(self, *args, **kwargs) -> "Tensor":
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``; CPU only. A
        ``memory_format=`` other than preserve_format lays the result out in that order (the
        tensor itself where it lies so already), as torch's."""
        fmt = kwargs.get("memory_format")
        check_memory_format(fmt, "to")
        out = self._to(args, kwargs)
        if fmt is None or fmt is preserve_format or (
                _strides.suggested(self._data) is fmt if out is self else _strides.exactly(out._data, fmt)):
            return out
        return FormatCopy.apply(out, memory_format=fmt)

    def _to(self, args, kwargs) -> Tensor:
        target = kwargs.get("dtype")
        copy = kwargs.get("copy", False)
        _check_device(kwargs.get("device"))
        for a in args:
            if isinstance(a, Tensor):
                target = a.dtype
            elif isinstance(a, (str, device)) or is_device_index(a):
                _check_device(a)
            elif a is not None:
                target = a
        if target is None:
            return self.clone() if copy else self
        np_dt = _dtype.to_dtype(target).np
        if np_dt == self._data.dtype:
            return self.clone() if copy else self
        if self._data.dtype.kind == "c" and np_dt.kind != "c":
            warnings.warn("Casting complex values to real discards the imaginary part",
                          UserWarning, stacklevel=2)
        return (ToCopy if _dtype.kind(np_dt) in "fc" else CastNoGrad).apply(self, dtype=np_dt)

    def cpu(self, memory_format=None) -> "Tensor":
        return self

    def to_dense(self, dtype=None, *, masked_grad=None) -> "Tensor":
        """Already dense (strided): the tensor itself, or a copy in ``dtype``, as torch's;
        code that densifies a gradient it expected sparse (``sparse=True``) runs as is."""
        return self if dtype is None else self.to(dtype)

    def cuda(self, device=None, non_blocking=False):
        raise no_cuda()

    def float(self):
        return self.to(_dtype.float32)

    def double(self):
        return self.to(_dtype.float64)

    def half(self):
        return self.to(_dtype.float16)

    def stft(self, *args, **kwargs):
        from disthook._stft import stft

        return stft(self, *args, **kwargs)

    def istft(self, *args, **kwargs):
        from disthook._stft import istft

        return istft(self, *args, **kwargs)

    def cfloat(self):
        return self.to(_dtype.complex64)

    def cdouble(self):
        return self.to(_dtype.complex128)

    def long(self):
        return self.to(_dtype.int64)

    def int(self):
        return self.to(_dtype.int32)

    def bool(self):
        return self.to(_dtype.bool)

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.to(other.dtype)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return tensor(data._data.copy() if isinstance(data, Tensor) else data,
                      dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_zeros(self, size, *args, dtype=None, **kwargs) -> "Tensor":
        return zeros(size, *args, dtype=dtype or self.dtype, **kwargs)

    def new_ones(self, size, *args, dtype=None, **kwargs) -> "Tensor":
        return ones(size, *args, dtype=dtype or self.dtype, **kwargs)

    def new_full(self, size, fill_value, *, dtype=None, **kwargs) -> "Tensor":
        return full(size, fill_value, dtype=dtype or self.dtype, **kwargs)

    def new_empty(self, size, *args, dtype=None, **kwargs) -> "Tensor":
        return empty(size, *args, dtype=dtype or self.dtype, **kwargs)

    # ---- arithmetic ----------------------------------------------------------------------
    def _binary(self, op, other, reverse=False, **params):
        dt = self._data.dtype
        kind = type(other)
        if (kind is Tensor or isinstance(other, Tensor)) and other._data.dtype == dt:
            a, b = self, other  # same dtype: no promotion needed
        elif (kind is builtins.float and dt.kind == "f") or (kind is builtins.int and dt.kind in "fiu"):
            a, b = self, _new(Tensor)  # a python scalar wrapped as a constant of self's dtype
            b._data = np.array(other, dt)
            b._requires_grad = False
            b._grad_fn = None
            b._output_nr = 0
            b._vc = [0]
            b.__dict__["_wrapped_number"] = True  # saved-tensor hooks skip it, as torch's
        elif not isinstance(other, (Tensor, numbers.Number, np.generic)):
            return NotImplemented
        elif _bf16.mixed_float(self, other) and grad_mode._state.enabled and (
                self._requires_grad or other._requires_grad):
            # bfloat16 beside another float dtype: the op's node takes both as they are, as
            # torch's mixed kernel (no cast node; the bfloat16 operand's gradient is cast
            # to it before the node's post-hooks see it)
            a, b = self, other
        else:
            a, b = binary_operands(self, other)
        if reverse:
            a, b = b, a
            if b._data.dtype.kind == "V" and "_wrapped_number" in a.__dict__:
                a = _bf16.wrapped_in_bfloat16(a)  # torch rounds a number first to bfloat16
        if a._data.shape != b._data.shape and b._data.ndim and a._data.ndim:
            sa, sb = a._data.shape, b._data.shape
            # (one shape the other's trailing dims, as a bias's: broadcasts, nothing to check)
            if sa[-len(sb):] != sb and sb[-len(sa):] != sa:
                check_broadcast(sa, sb)
        if grad_mode._state.enabled and (a._requires_grad or b._requires_grad):
            return op.apply(a, b, **params)
        if reverse and b._data.dtype.kind == "V":  # (a number % a bfloat16 tensor: bfloat16)
            return op.apply(a, b, **params)
        if a._data.dtype.kind in "cV":  # (complex: refused or not; bfloat16: in float32)
            if a._data.dtype.kind == "V":
                return op.apply(a, b, **params)
            if not op.complex_ok:
                refuse_complex(op, a)
        # no graph to record (as inside backward): the op's forward alone, without apply's
        # bookkeeping; every binary op returns one new array
        try:
            out = op.forward(_NO_CTX, a, b, **params)
        except (RemoteOperand, RuntimeWarning):  # an operand on a worker: the op runs there;
            return op.apply(a, b, **params)  # numpy's warning made an error: apply reruns it
        return Tensor._make(out if type(out) is np.ndarray else np.asarray(out), None, 0)

    def __add__(self, other):
        return self._binary(E.Add, other)

    # number + tensor and number * tensor are recorded tensor first, as torch records them
    # (its node's first edge leads to the tensor: the autograd tutorials walk
    # grad_fn.next_functions[0]); the values are the same, both ops being commutative
    def __radd__(self, other):
        return self._binary(E.Add, other, reverse=isinstance(other, Tensor))

    def __sub__(self, other):
        if self._data.dtype.kind == "b" or type(other) is builtins.bool or _bool_tensor(other):
            E.refuse_bool_subtraction(self, other)
        return self._binary(E.Sub, other)

    def __rsub__(self, other):
        if self._data.dtype.kind == "b" or type(other) is builtins.bool or _bool_tensor(other):
            E.refuse_bool_subtraction(other, self)
        if isinstance(other, (numbers.Number, np.generic)) and not isinstance(other, Tensor):
            dt = result_dtype(self, other)
            keep = self._data.dtype == dt or self._data.dtype.kind == "b"  # (the op refuses)
            return E.RsubScalar.apply(self if keep else self.to(dt), other=other)
        return self._binary(E.Rsub, other, reverse=True)

    def __mul__(self, other):
        return self._binary(E.Mul, other)

    def __rmul__(self, other):
        return self._binary(E.Mul, other, reverse=isinstance(other, Tensor))

    def __truediv__(self, other):
        return self._binary_float(E.Div, other)

    def __rtruediv__(self, other):
        if isinstance(other, (numbers.Number, np.generic)) and not (
                self._data.dtype.kind == "c" or isinstance(other, builtins.complex)):
            return self.reciprocal() * other  # torch's scalar / tensor
        return self._binary_float(E.Div, other, reverse=True)

    def _binary_float(self, op, other, reverse=False):
        # true division always produces a floating result
        if not isinstance(other, (Tensor, numbers.Number, np.generic)):
            return NotImplemented
        dt = result_dtype(self, other)
        if _dtype.kind(dt) not in "fc":
            dt = _dtype.get_default_dtype().np
        if _bf16.mixed_float(self, other):  # (no cast node: see _binary)
            return self._binary(op, other, reverse=reverse)
        a = self.to(dt)
        b = other.to(dt) if isinstance(other, Tensor) else other
        return a._binary(op, b, reverse=reverse)

    def __floordiv__(self, other):
        return self._binary(E.FloorDiv, other)

    def __rfloordiv__(self, other):
        return self._binary(E.FloorDiv, other, reverse=True)

    def __mod__(self, other):
        return self.remainder(other)

    def __rmod__(self, other):
        return self._binary(M.Remainder, other, reverse=True)

    def __neg__(self):
        return E.Neg.apply(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __pow__(self, exponent):
        return self.pow(exponent)

    def __rpow__(self, base):
        if isinstance(base, Tensor):
            return base.pow(self)
        x = self
        if isinstance(base, complex) and self._data.dtype.kind != "c":
            x = self.to(_complex_for(self))
        elif _dtype.kind(self._data.dtype) not in "fc":
            integral = isinstance(base, (int, np.integer))
            x = self.float() if not integral else self.long() if self.dtype.np.kind == "b" else self
        if x._data.dtype == _bf16.BF16 and isinstance(base, builtins.float):
            return E.RPowScalar.apply(x, base=_bf16.scalar_as_bfloat16(base), exact_base=base)
        return E.RPowScalar.apply(x, base=base)

    def __rmatmul__(self, other):
        # a tensor keeps its graph: Python calls this first where the right operand's class
        # overrides it (``x @ w`` with w a deployed model's parameter)
        return (other if isinstance(other, Tensor) else tensor(other)).matmul(self)

    def __eq__(self, other):
        return self._compare(E.Eq, other)

    def __ne__(self, other):
        return self._compare(E.Ne, other)

    def __lt__(self, other):
        return self._compare(E.Lt, other)

    def __le__(self, other):
        return self._compare(E.Le, other)

    def __gt__(self, other):
        return self._compare(E.Gt, other)

    def __ge__(self, other):
        return self._compare(E.Ge, other)

    def _compare(self, op, other):
        if not isinstance(other, (Tensor, numbers.Number, np.generic)):
            return NotImplemented
        return self._binary(op, other)

    def __and__(self, other):
        return self._binary(E.BitAnd, other)

    def __or__(self, other):
        return self._binary(E.BitOr, other)

    def __xor__(self, other):
        return self._binary(E.BitXor, other)

    def __invert__(self):
        return E.BitNot.apply(self)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    # augmented assignment is in place, as in torch: ``w -= lr * w.grad`` updates w itself
    def __iadd__(self, other):
        return self.add_(other) if _is_operand(other) else NotImplemented

    def __isub__(self, other):
        return self.sub_(other) if _is_operand(other) else NotImplemented

    def __imul__(self, other):
        return self.mul_(other) if _is_operand(other) else NotImplemented

    def __itruediv__(self, other):
        return self.div_(other) if _is_operand(other) else NotImplemented

    __idiv__ = __itruediv__

    def __ipow__(self, exponent):
        return self.pow_(exponent) if _is_operand(exponent) else NotImplemented

    def __iand__(self, other):
        return self._inplace_binary(E.BitAnd, other) if _is_operand(other) else NotImplemented

    def __ior__(self, other):
        return self._inplace_binary(E.BitOr, other) if _is_operand(other) else NotImplemented

    def __ixor__(self, other):
        return self._inplace_binary(E.BitXor, other) if _is_operand(other) else NotImplemented

    def __ifloordiv__(self, other):
        return self.floor_divide_(other) if _is_operand(other) else NotImplemented

    def __imod__(self, other):
        return self.remainder_(other) if _is_operand(other) else NotImplemented

    def __ilshift__(self, other):
        return self.bitwise_left_shift_(other) if _is_operand(other) else NotImplemented

    def __irshift__(self, other):
        return self.bitwise_right_shift_(other) if _is_operand(other) else NotImplemented

    def add(self, other, *, alpha=1):
        return self._binary(E.Add, other, alpha=_scalar("add", "alpha", alpha))

    def sub(self, other, *, alpha=1):
        E.refuse_bool_subtraction(self, other)
        return self._binary(E.Sub, other, alpha=_scalar("sub", "alpha", alpha))

    subtract = sub

    def mul(self, other):
        return self * other

    multiply = mul

    def div(self, other, *, rounding_mode=None):
        if rounding_mode is None:
            return self / other
        if rounding_mode not in ("floor", "trunc"):
            raise RuntimeError(
                f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                f"'{rounding_mode}'")
        if _integral_division(self, other):  # integers stay integers, exact (torch's)
            return self._binary(E.FloorDiv if rounding_mode == "floor" else E.TruncDiv, other)
        return self._binary(E.FloorDivGrad if rounding_mode == "floor" else E.TruncDivGrad,
                            other)

    divide = true_divide = div

    def pow(self, exponent):
        if isinstance(exponent, Tensor):
            return self._binary(E.Pow, exponent)
        if not isinstance(exponent, numbers.Number):
            raise TypeError(f"pow(): exponent must be a number or Tensor, got "
                            f"{type(exponent).__name__}")
        base = self
        if isinstance(exponent, complex) and self._data.dtype.kind != "c":
            # a complex power of a real tensor is complex, as torch's type promotion has it
            base = self.to(_complex_for(self))
        elif _dtype.kind(self._data.dtype) not in "fc" and isinstance(exponent, builtins.float):
            base = self.float()
        elif self._data.dtype.kind in "iu" and exponent < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        elif self._data.dtype.kind == "b":
            base = self.long()
        return E.PowScalar.apply(base, exponent=exponent)

    def neg(self):
        return E.Neg.apply(self)

    negative = neg

    def abs(self):
        return (C.AbsComplex if self._data.dtype.kind == "c" else E.Abs).apply(self)

    absolute = abs

    def sign(self):
        return E.Sign.apply(self)

    def floor(self):
        return E.Floor.apply(self)

    def ceil(self):
        return E.Ceil.apply(self)

    def round(self, decimals=0):
        if decimals:
            return (self * 10 ** decimals).round() / 10 ** decimals
        return E.Round.apply(self)

    def trunc(self):
        return E.Trunc.apply(self)

    def exp(self):
        return E.Exp.apply(self._floating())

    def log(self):
        return E.Log.apply(self._floating())

    def log2(self):
        return M.Log2.apply(self._floating())

    def log10(self):
        return M.Log10.apply(self._floating())

    def log1p(self):
        return M.Log1P.apply(self._floating())

    def expm1(self):
        return M.Expm1.apply(self._floating())

    def sqrt(self):
        return E.Sqrt.apply(self._floating())

    def rsqrt(self):
        return 1 / self.sqrt()

    def square(self):
        return self.pow(2)

    def reciprocal(self):
        return E.Reciprocal.apply(self._floating())

    def sin(self):
        return E.Sin.apply(self._floating())

    def cos(self):
        return E.Cos.apply(self._floating())

    def tan(self):
        return M.Tan.apply(self._floating())

    def tanh(self):
        return E.Tanh.apply(self._floating())

    def sigmoid(self):
        return E.Sigmoid.apply(self._floating())

    def erf(self):
        return E.Erf.apply(self._floating())

    def relu(self):
        return E.Relu.apply(self)

    def _floating(self) -> "Tensor":
        # (a complex tensor stays complex: the op it goes to takes it, or refuses it)
        return self if _dtype.kind(self._data.dtype) in "fc" else self.to(_dtype.get_default_dtype())

    def clamp(self, min=None, max=None):
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            return self._clamp_tensor(E.ClampTensor, min, max)
        kernel = _clamp_kernel(min is not None, max is not None)
        x = E.clamp_operand(self, (min, max), f"{kernel}_scalar_cpu")
        return E.Clamp.apply(x, min=min, max=max)

    def _clamp_tensor(self, op, min, max):
        bounds = [b for b in (min, max) if b is not None]
        if not builtins.all(isinstance(b, Tensor) for b in bounds):
            kinds = ", ".join(type(b).__name__ for b in (min, max))
            raise TypeError(f"clamp() received an invalid combination of arguments - got "
                            f"({kinds}), but expected one of: (Tensor min = None, Tensor max = "
                            "None) or (Number min = None, Number max = None)")
        shape = self._data.shape
        for b in bounds:
            check_broadcast(shape, b._data.shape)
            shape = np.broadcast_shapes(shape, b._data.shape)
        kernel = _clamp_kernel(min is not None, max is not None)
        x = E.clamp_operand(self, bounds, f"{kernel}_cpu", refuse_bool=len(bounds) == 2)
        dt = x._data.dtype
        return op.apply(x, *[b.to(dt) for b in bounds], has_min=min is not None,
                        has_max=max is not None)

    clip = clamp

    def clamp_min(self, min):
        if isinstance(min, Tensor):
            return self._clamp_tensor(E.ClampMinTensor, min, None)
        _number_bound("clamp_min", min)
        return E.ClampMin.apply(E.clamp_operand(self, (min,), "clamp_min_scalar_cpu"), min=min)

    def clamp_max(self, max):
        if isinstance(max, Tensor):
            return self._clamp_tensor(E.ClampMaxTensor, None, max)
        _number_bound("clamp_max", max)
        return E.ClampMax.apply(E.clamp_operand(self, (max,), "clamp_max_scalar_cpu"), max=max)

    def maximum(self, other):
        return self._binary(E.Maximum, other)

    def minimum(self, other):
        return self._binary(E.Minimum, other)

    def where(self, condition, other):
        """``torch.where(condition, self, other)``."""
        return where(condition, self, other)

    def masked_fill(self, mask, value):
        if isinstance(value, Tensor):
            if value.ndim != 0:
                raise RuntimeError(
                    "masked_fill_ only supports a 0-dimensional value tensor, but got tensor "
                    f"with {value.ndim} dimension(s).")
            if value._requires_grad:
                return where(mask, value.expand(self.shape), self)
            value = value.item()
        mask = _as_bool_mask(mask, "masked_fill_")
        _check_broadcast(mask, self)
        return S.MaskedFill.apply(self, mask, value=value)

    def lerp(self, end, weight):
        floating_kernel(self, f"lerp_kernel_{'tensor' if isinstance(weight, Tensor) else 'scalar'}")
        return _bf16.rounded_once(lambda a, b: a + weight * (b - a), self, end)

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def lt(self, other):
        return self < other

    def le(self, other):
        return self <= other

    def gt(self, other):
        return self > other

    def ge(self, other):
        return self >= other

    def equal(self, other) -> bool:
        return self.shape == other.shape and builtins.bool(np.array_equal(self._data, other._data))

    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
        return builtins.bool(np.allclose(self._data, other._data, rtol, atol, equal_nan))

    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return Tensor._make(np.isclose(self._data, _data_of(other), rtol, atol, equal_nan),
                            None, 0)

    def logical_and(self, other):
        return self._binary(E.LogicalAnd, other)

    def logical_or(self, other):
        return self._binary(E.LogicalOr, other)

    def logical_xor(self, other):
        return self._binary(E.LogicalXor, other)

    def logical_not(self):
        return E.LogicalNot.apply(self)

    def isnan(self):
        return E.IsNan.apply(self)

    def isinf(self):
        return E.IsInf.apply(self)

    def isfinite(self):
        return E.IsFinite.apply(self)

    # ---- reductions ----------------------------------------------------------------------
    def sum(self, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None and _dtype.to_dtype(dtype) is _dtype.bfloat16 is not self.dtype:
            return self.to(dtype).sum(dim, keepdim)  # (numpy would add in bfloat16)
        dims = R.norm_dims(dim, self.ndim)
        if dim is None and not keepdim:
            return R.SumAll.apply(self, dtype=_np_dtype(dtype))
        return R.Sum.apply(self, dim=dims, keepdim=keepdim, dtype=_np_dtype(dtype))

    def mean(self, dim=None, keepdim=False, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        dims = R.norm_dims(dim, self.ndim)
        if dim is None and not keepdim:
            return R.MeanAll.apply(x)
        return R.Mean.apply(x, dim=dims, keepdim=keepdim)

    def _correction(self, unbiased, correction):
        if correction is not None:
            return correction
        return 1 if unbiased is None or unbiased else 0

    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if isinstance(dim, builtins.bool):
            unbiased, dim = dim, None
        return R.Var.apply(self, dim=R.norm_dims(dim, self.ndim),
                           correction=self._correction(unbiased, correction), keepdim=keepdim)

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if isinstance(dim, builtins.bool):
            unbiased, dim = dim, None
        return R.Std.apply(self, dim=R.norm_dims(dim, self.ndim),
                           correction=self._correction(unbiased, correction), keepdim=keepdim)

    def max(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        if dim is None:
            return R.MaxAll.apply(self)
        if not self._data.ndim:  # a 0-d tensor's dim 0 or -1: itself, index 0 (as torch)
            self._dim(dim)
            return self.reshape(1).max(0)
        values, indices = R.MaxDim.apply(self, dim=self._dim(dim), keepdim=keepdim)
        return _ValuesIndices(values, indices, "max")

    def min(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        if dim is None:
            return R.MinAll.apply(self)
        if not self._data.ndim:
            self._dim(dim)
            return self.reshape(1).min(0)
        values, indices = R.MinDim.apply(self, dim=self._dim(dim), keepdim=keepdim)
        return _ValuesIndices(values, indices, "min")

    def amax(self, dim=(), keepdim=False):
        return R.Amax.apply(self, dim=R.norm_dims(dim, self.ndim), keepdim=keepdim)

    def amin(self, dim=(), keepdim=False):
        return R.Amin.apply(self, dim=R.norm_dims(dim, self.ndim), keepdim=keepdim)

    def argmax(self, dim=None, keepdim=False):
        _no_bool(self, "argmax")
        return self._arg(np.argmax, dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        _no_bool(self, "argmin")
        return self._arg(np.argmin, dim, keepdim)

    def _arg(self, fn, dim, keepdim):
        if self._data.dtype.kind == "c":
            raise RuntimeError(f"{fn.__name__}(): does not support complex input")
        name = fn.__name__
        if dim is None:
            if not self._data.size:
                raise IndexError(f"{name}(): Expected reduction dim to be specified for "
                                 "input.numel() == 0.")
            out = np.asarray(fn(self._data), dtype=np.int64)
            return Tensor._make(out.reshape((1,) * self.ndim) if keepdim else out, None, 0)
        d = self._dim(dim)
        if self._data.ndim and not self._data.shape[d]:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
        out = fn(self._data, axis=d)
        if keepdim and self._data.ndim:  # (a 0-d tensor's stays 0-d, as torch's)
            out = np.expand_dims(out, d)
        return Tensor._make(out.astype(np.int64), None, 0)

    @cpu_policy.covered(cpu_policy.FP32)
    def prod(self, dim=None, keepdim=False, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        if dim is None:
            return R.ProdAll.apply(x)
        if not self._data.ndim:  # a 0-d tensor's dim 0 or -1: its one element
            return R.Prod.apply(x.reshape(1), dim=(self._dim(dim),), keepdim=False)
        return R.Prod.apply(x, dim=(self._dim(dim),), keepdim=keepdim)

    def logsumexp(self, dim, keepdim=False):
        return R.LogSumExp.apply(self._floating(), dim=R.norm_dims(dim, self.ndim),
                                 keepdim=keepdim)

    def softmax(self, dim, dtype=None):
        x = self._softmax_input("softmax", dim, dtype)
        return R.Softmax.apply(x, dim=self._dim(dim), given=dim)

    def log_softmax(self, dim, dtype=None):
        x = self._softmax_input("log_softmax", dim, dtype)
        return R.LogSoftmax.apply(x, dim=self._dim(dim), given=dim)

    def _softmax_input(self, name: str, dim, dtype) -> Tensor:
        """An integer or bool input without ``dtype=`` is torch's NotImplementedError (its
        kernels are floating only): pass dtype=torch.float32, or convert first."""
        if dtype is not None:
            return self.to(dtype)
        if self._data.dtype.kind in "biu":
            last = self.ndim == 0 or self._dim(dim) == self.ndim - 1
            raise NotImplementedError(f'"{name}_{"lastdim_" if last else ""}kernel_impl" not '
                                      f"implemented for '{_SCALAR_TYPES[self._data.dtype.name]}'")
        return self._floating()

    def all(self, dim=None, keepdim=False):
        return self._test(np.all, dim, keepdim)

    def any(self, dim=None, keepdim=False):
        return self._test(np.any, dim, keepdim)

    def _test(self, fn, dim, keepdim):
        """all / any: bool, but uint8 for a uint8 tensor, as torch's."""
        out = np.asarray(fn(self._data, axis=dim, keepdims=keepdim))
        return Tensor._make(out.astype(np.uint8) if self._data.dtype == np.uint8 else out,
                            None, 0)

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        if not isinstance(p, numbers.Number) and p != "fro":
            raise NotImplementedError(f"norm(p={p!r}) is not supported by disthook")
        return R.vector_norm(self, 2.0 if p == "fro" else builtins.float(p), dim, keepdim, dtype)

    def cumsum(self, dim, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return R.Cumsum.apply(x, dim=self._dim(dim))

    # ---- sorting and selection -----------------------------------------------------------
    def sort(self, dim=-1, descending=False, *, stable=False):
        op = SortOps.SortStable if stable else SortOps.Sort
        values, indices = op.apply(self, dim=self._dim(dim), descending=descending,
                                   stable=builtins.bool(stable))
        return _ValuesIndices(values, indices, "sort")

    def argsort(self, dim=-1, descending=False, *, stable=False):
        d = self._dim(dim)
        if self._data.dtype.kind == "c":
            refuse_complex("argsort", self)
        if self.ndim == 0:
            return Tensor._make(np.zeros((), np.int64), None, 0)
        index = SortOps.sort_indices(self._data, d, descending, builtins.bool(stable))
        return Tensor._make(index.astype(np.int64), None, 0)

    def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
        """The distinct values (or slices along ``dim``), in ascending order whatever
        ``sorted`` says, as torch's CPU kernels give them; with ``return_inverse`` where each
        element (slice) went, with ``return_counts`` how many of each. Not differentiable."""
        if self._data.dtype.kind == "c":
            refuse_complex("unique", self)
        axis = None if dim is None else self._dim(dim)
        values, inverse, counts = np.unique(self._data, return_inverse=True,
                                            return_counts=True, axis=axis)
        if axis is None:
            inverse = inverse.reshape(self.shape)
        node = S.Unique2 if axis is None else S.UniqueDim  # (torch's node, backward its error)
        out = [node.apply(self, result=values.astype(self._data.dtype))]
        if return_inverse:
            out.append(Tensor._make(inverse.reshape(-1 if axis is not None else self.shape)
                                    .astype(np.int64), None, 0))
        if return_counts:
            out.append(Tensor._make(counts.astype(np.int64), None, 0))
        return out[0] if len(out) == 1 else tuple(out)

    def topk(self, k, dim=-1, largest=True, sorted=True):
        d = self._dim(dim)
        n = self.shape[d] if self.ndim else 1
        if not 0 <= k <= n:
            raise RuntimeError("selected index k out of range")
        if self._data.dtype.kind == "b":
            raise RuntimeError("topk does not support bool dtypes on CPU")
        values, indices = SortOps.Topk.apply(self, k=builtins.int(k), dim=d, largest=largest,
                                             sorted=sorted)
        return _ValuesIndices(values, indices, "topk")

    def multinomial(self, num_samples, replacement=False, *, generator=None):
        return multinomial(self, num_samples, replacement, generator=generator)

    # ---- triangles, rolls, repeats -------------------------------------------------------
    def _triangle(self, op, diagonal, inplace=False):
        if self.ndim < 2:
            raise RuntimeError(f"{op.method}: input tensor must have at least 2 dimensions")
        if inplace:
            return self._inplace(op, diagonal=builtins.int(diagonal))
        return op.apply(self, diagonal=builtins.int(diagonal))

    def tril(self, diagonal=0):
        return self._triangle(S.Tril, diagonal)

    def triu(self, diagonal=0):
        return self._triangle(S.Triu, diagonal)

    def tril_(self, diagonal=0):
        return self._triangle(S.Tril, diagonal, inplace=True)

    def triu_(self, diagonal=0):
        return self._triangle(S.Triu, diagonal, inplace=True)

    def roll(self, shifts, dims=None):
        shifts = (shifts,) if isinstance(shifts, numbers.Integral) else tuple(shifts)
        if dims is None:
            if len(shifts) != 1:
                raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                                   "dims:0")
            return S.Roll.apply(self, shifts=(builtins.int(shifts[0]),), dims=None)
        dims = (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)
        if len(shifts) != len(dims):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                               f"dims:{len(dims)}")
        return S.Roll.apply(self, shifts=tuple(builtins.int(s) for s in shifts),
                            dims=tuple(self._dim(d) for d in dims))

    def repeat_interleave(self, repeats, dim=None, *, output_size=None):
        if dim is None:
            x, d = self.reshape(-1), 0
        else:
            x, d = self, self._dim(dim)
        if isinstance(repeats, Tensor) and repeats.numel() != 1:
            counts = repeats._data.reshape(-1)
            if repeats.ndim > 1:
                raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
            if counts.size != x.shape[d]:
                raise RuntimeError(
                    "repeats must have the same size as input along dim, but got "
                    f"repeats.size(0) = {counts.size} and input.size({d}) = {x.shape[d]}")
            if counts.size and counts.min() < 0:
                raise RuntimeError("repeats can not be negative")
            index = np.repeat(np.arange(counts.size), counts).astype(np.int64)
            return S.IndexSelect.apply(x, index=index, dim=d)
        r = builtins.int(repeats.item() if isinstance(repeats, Tensor) else repeats)
        if r < 0:
            raise RuntimeError("Repeats must be non-negative")
        shape = list(x.shape)
        out_shape = shape[:d] + [shape[d] * r] + shape[d + 1:]
        spread = x.unsqueeze(d + 1).expand(*shape[:d + 1], r, *shape[d + 1:])
        return spread.contiguous().view(out_shape)

    def index_select(self, dim, index):
        d = self._dim(dim)
        if index.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        if index._data.dtype.kind not in "iu":
            raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
        n = self.shape[d] if self.ndim else 1
        idx = index._data.reshape(-1)
        bad = idx[(idx < -n) | (idx >= n)]
        if bad.size:
            raise IndexError("index out of range in self")
        inference.refuse_saved_index(index, self)
        out = S.IndexSelect.apply(self, index=idx % builtins.max(n, 1), dim=d)
        if not self._data.ndim and idx.size == 1:  # a 0-d tensor's is 0-d, as torch's
            return out.reshape(())
        return out

    # ---- scatter -------------------------------------------------------------------------
    def _scatter_checks(self, name, dim, index, src) -> int:
        d = self._dim(dim)
        if index._data.dtype != np.int64:
            raise RuntimeError(f"{name}(): Expected dtype int64 for index")
        if index.ndim != self.ndim and not (index.ndim <= 1 and self.ndim <= 1):
            raise RuntimeError("Index tensor must have the same number of dimensions as self "
                               "tensor")
        if isinstance(src, Tensor):
            if src._data.dtype != self._data.dtype:
                raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
            if src.ndim != index.ndim and not (src.ndim <= 1 and index.ndim <= 1):
                raise RuntimeError("Index tensor must have the same number of dimensions as "
                                   "src tensor")
        for k in range(index.ndim):
            too_big = k != d and index.shape[k] > self.shape[k]
            if too_big or (isinstance(src, Tensor) and index.shape[k] > src.shape[k]):
                src_part = (f" and to be no larger size than src {list(src.shape)}"
                            if isinstance(src, Tensor) else "")
                raise RuntimeError(
                    f"Expected index {list(index.shape)} to be no larger than self "
                    f"{list(self.shape)} apart from dimension {d}{src_part}")
        _check_index_bounds(self, index, d)
        return d

    def scatter(self, dim, index, src=None, *, value=None, reduce=None):
        return self._scatter(dim, index, src, value, reduce, inplace=False)

    def scatter_(self, dim, index, src=None, *, value=None, reduce=None):
        return self._scatter(dim, index, src, value, reduce, inplace=True)

    def _scatter(self, dim, index, src, value, reduce, inplace):
        src = value if src is None else src
        d = self._scatter_checks("scatter", dim, index, src)
        inference.refuse_saved_index(index, self, src)
        params = {"index": _along(index._data, self.ndim), "dim": d}
        if reduce is not None:
            if reduce not in ("add", "multiply"):
                raise RuntimeError("reduce argument must be either add or multiply.")
            if isinstance(src, Tensor):
                warnings.warn(SCATTER_REDUCE_WARNING, UserWarning, stacklevel=3)
            op, params["reduce"] = S.ScatterWithReduce, reduce
            operands = (src,) if isinstance(src, Tensor) else ()
            if not operands:
                params["value"] = src
        elif isinstance(src, Tensor):
            op, operands = S.Scatter, (src,)
        else:
            op, operands = S.ScatterValue, ()
            params["value"] = src
        if inplace:
            return self._inplace(op, *operands, **params)
        return op.apply(self, *operands, **params)

    def scatter_add(self, dim, index, src):
        if not isinstance(src, Tensor):
            raise TypeError(f"scatter_add(): argument 'src' (position 3) must be Tensor, not "
                            f"{type(src).__name__}")
        d = self._scatter_checks("scatter_add", dim, index, src)
        return S.ScatterAdd.apply(self, src, index=_along(index._data, self.ndim), dim=d)

    def scatter_add_(self, dim, index, src):
        if not isinstance(src, Tensor):
            raise TypeError(f"scatter_add_(): argument 'src' (position 3) must be Tensor, not "
                            f"{type(src).__name__}")
        d = self._scatter_checks("scatter_add", dim, index, src)
        return self._inplace(S.ScatterAdd, src, index=_along(index._data, self.ndim), dim=d)

    # ---- fused multiply-add --------------------------------------------------------------
    def addcmul(self, tensor1, tensor2, *, value=1):
        return self._addc(E.Addcmul, tensor1, tensor2, value)

    def addcdiv(self, tensor1, tensor2, *, value=1):
        if (tensor1._data.dtype.kind in "biu" and tensor2._data.dtype.kind in "biu"):
            raise RuntimeError(
                "Integer division with addcdiv is no longer supported, and in a future "
                "release addcdiv will perform a true division of tensor1 and tensor2. The "
                "historic addcdiv behavior can be implemented as (input + value * "
                "torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
                "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv "
                "behavior is just the latter implementation: (input + value * tensor1 / "
                "tensor2), for all dtypes.")
        return self._addc(E.Addcdiv, tensor1, tensor2, value)

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return self._addc(E.Addcmul, tensor1, tensor2, value, inplace=True)

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return self._addc(E.Addcdiv, tensor1, tensor2, value, inplace=True)

    def _addc(self, op, t1, t2, value, inplace=False):
        dt = np.result_type(result_dtype(self, t1), result_dtype(self, t2),
                            result_dtype(t1, t2))
        shape = np.broadcast_shapes(self._data.shape, t1._data.shape, t2._data.shape) \
            if not inplace else self._data.shape
        _check_broadcast(t1, t2)
        check_broadcast(self._data.shape, np.broadcast_shapes(t1._data.shape, t2._data.shape))
        if inplace:
            if np.broadcast_shapes(shape, t1._data.shape, t2._data.shape) != shape:
                raise RuntimeError(
                    f"output with shape {list(shape)} doesn't match the broadcast shape "
                    f"{list(np.broadcast_shapes(shape, t1._data.shape, t2._data.shape))}")
            return self._inplace(op, t1.to(self.dtype), t2.to(self.dtype), value=value)
        return op.apply(self.to(dt), t1.to(dt), t2.to(dt), value=value)

    # ---- matrix products -----------------------------------------------------------------
    @cpu_policy.covered(cpu_policy.LOWER)
    def matmul(self, other):
        if not isinstance(other, Tensor):
            raise TypeError(f"matmul(): argument 'other' must be Tensor, not "
                            f"{type(other).__name__}")
        if self._data.dtype.kind == "c" or other._data.dtype.kind == "c":
            L.check_same_dtype(self, other, "mm")
            return C.product(L.matmul, (self, other))
        return L.matmul(self, other)

    __matmul__ = matmul  # (``x @ w`` is torch.matmul, as in torch: one call fewer a product)

    @cpu_policy.covered(cpu_policy.LOWER)
    def mm(self, mat2):
        other = mat2
        if self.ndim != 2:
            raise RuntimeError("self must be a matrix")
        if other.ndim != 2:
            raise RuntimeError("mat2 must be a matrix")
        L.check_same_dtype(self, other, "mm")
        if self._data.dtype.kind == "c":
            return C.product(L.Mm.apply, (self, other))
        return L.Mm.apply(self, other)

    def mv(self, vec):
        L.check_same_dtype(self, vec, "mv")
        if self._data.dtype.kind == "c":
            return C.product(L.Mv.apply, (self, vec))
        return L.Mv.apply(self, vec)

    def dot(self, other):
        if self.ndim != 1 or other.ndim != 1:
            raise RuntimeError(f"1D tensors expected, but got {self.ndim}D and {other.ndim}D "
                               "tensors")
        L.check_same_dtype(self, other, "dot")
        if self._data.dtype.kind == "c":
            return C.product(L.Dot.apply, (self, other))
        return L.Dot.apply(self, other)

    @cpu_policy.covered(cpu_policy.LOWER)
    def bmm(self, mat2):
        other = mat2
        if self.ndim != 3 or other.ndim != 3:
            raise RuntimeError("batch1 must be a 3D tensor")
        L.check_same_dtype(self, other, "bmm")
        if self._data.dtype.kind == "c":
            return C.product(L.Bmm.apply, (self, other))
        return L.Bmm.apply(self, other)

    # ---- shape ---------------------------------------------------------------------------
    def _shape_arg(self, shape) -> tuple:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
            shape = tuple(shape[0])
        shape = tuple(builtins.int(s) for s in shape)
        n = self._data.size
        for i, s in enumerate(shape):
            if s < -1:
                raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape "
                                   f"{list(shape)}")
        if shape.count(-1) > 1:
            raise RuntimeError("only one dimension can be inferred")
        known = 1
        for s in shape:
            if s != -1:
                known *= s
        if (-1 in shape and (known == 0 or n % known)) or (-1 not in shape and known != n):
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {n}")
        return shape

    def view(self, *args, size=None):
        shape = args if size is None else by_keyword(args, size, "size", "view")
        if len(shape) == 1 and isinstance(shape[0], _DType):
            return self._view_dtype(shape[0])
        shape = self._shape_arg(shape)
        if not _can_view(self._data, shape):
            raise RuntimeError(
                "view size is not compatible with input tensor's size and stride (at least "
                "one dimension spans across two contiguous subspaces). Use .reshape(...) "
                "instead.")
        return S.View.apply(self, shape=shape)

    def _view_dtype(self, dtype: _DType) -> Tensor:
        """``view(dtype)``: the same bytes read as ``dtype`` (the last dim scales by the ratio
        of element sizes); as torch's, it shares memory and version, and has no history."""
        try:
            data = self._data.view(dtype.np) if self._data.ndim else (
                self._data.reshape(1).view(dtype.np).reshape(()))
        except ValueError:
            raise RuntimeError(
                f"self.stride(-1) must be 1 to view {self.dtype} as {dtype} (different "
                f"element sizes), or self.dim() must be 0 (here shape {list(self.shape)} and "
                f"strides {list(self.stride())}); call .contiguous() first") from None
        t = Tensor._make(data, None, 0)
        t._vc = self._vc
        return t

    def reshape(self, *args, shape=None):
        shape = self._shape_arg(args if shape is None else
                                by_keyword(args, shape, "shape", "reshape"))
        op = S.View if _can_view(self._data, shape) else S.UnsafeView
        return op.apply(self, shape=shape)

    def view_as(self, other):
        return self.view(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._dim(start_dim), self._dim(end_dim)
        if s > e:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        if s == e:
            return self
        shape = self.shape
        return self.reshape(shape[:s] + (-1,) + shape[e + 1:])

    def unflatten(self, dim, sizes):
        d = self._dim(dim)
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def squeeze(self, dim=None):
        if dim is None:
            return S.SqueezeAll.apply(self, dims=None)
        op = S.Squeeze if isinstance(dim, (int, np.integer)) else S.SqueezeDims
        dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
        keep = tuple(d for d in (self._dim(d) for d in dims) if self.ndim and self.shape[d] == 1)
        return op.apply(self, dims=keep, given=int(dim) if op is S.Squeeze else
                        tuple(int(d) for d in dims))

    def unsqueeze(self, dim):
        n = self.ndim + 1
        if not -n <= dim < n:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got "
                f"{dim})")
        return S.Unsqueeze.apply(self, dim=dim % n)

    def permute(self, *args, dims=None):
        dims = args if dims is None else by_keyword(args, dims, "dims", "permute")
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if len(dims) != self.ndim:
            raise RuntimeError(
                f"permute(sparse_coo): number of dimensions in the tensor input does not match "
                f"the length of the desired ordering of dimensions i.e. input.dim() = "
                f"{self.ndim} is not equal to len(dims) = {len(dims)}")
        dims = tuple(self._dim(d) for d in dims)
        if len(set(dims)) != len(dims):
            raise RuntimeError("permute(): duplicate dims are not allowed.")
        return S.Permute.apply(self, dims=dims)

    def transpose(self, dim0, dim1):
        if self.ndim == 0:
            return self
        return S.Transpose.apply(self, dim0=self._dim(dim0), dim1=self._dim(dim1))

    def swapaxes(self, axis0, axis1):
        return self.transpose(axis0, axis1)

    def t(self):
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                               f"{self.ndim}D")
        return S.T.apply(self)

    @property
    def T(self):
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def expand(self, *args, size=None):
        sizes = args if size is None else by_keyword(args, size, "size", "expand")
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, Size)):
            sizes = tuple(sizes[0])
        if len(sizes) < self.ndim:
            raise RuntimeError(
                f"expand({self.dtype.legacy_type}{{{list(self.shape)}}}, size={list(sizes)}): "
                f"the number of sizes provided ({len(sizes)}) must be greater or equal to the "
                f"number of dimensions in the tensor ({self.ndim})")
        lead = len(sizes) - self.ndim
        shape = []
        for i, s in enumerate(sizes):
            cur = self.shape[i - lead] if i >= lead else 1
            if s == -1:
                if i < lead:
                    raise RuntimeError("The expanded size of the tensor (-1) isn't allowed in a "
                                       "leading, non-existing dimension " f"{i}")
                s = cur
            elif cur != 1 and s != cur:
                raise RuntimeError(
                    f"The expanded size of the tensor ({s}) must match the existing size "
                    f"({cur}) at non-singleton dimension {i}.  Target sizes: {list(sizes)}.  "
                    f"Tensor sizes: {list(self.shape)}")
            shape.append(builtins.int(s))
        shape = tuple(shape)
        if shape == self.shape:
            return S.Expand.apply(self, shape=shape) if self._requires_grad else self
        return S.Expand.apply(self, shape=shape)

    def expand_as(self, other):
        return self.expand(other.shape)

    def broadcast_to(self, shape):
        return self.expand(shape)

    def repeat(self, *args, repeats=None):
        repeats = by_keyword(args, repeats, "repeats", "repeat")
        if len(repeats) == 1 and isinstance(repeats[0], (tuple, list, Size)):
            repeats = tuple(repeats[0])
        if len(repeats) < self.ndim:
            raise RuntimeError(
                "Number of dimensions of repeat dims can not be smaller than number of "
                "dimensions of tensor")
        repeats = tuple(builtins.int(r) for r in repeats)
        if builtins.min(repeats, default=0) < 0:
            padded = (1,) * (len(repeats) - self.ndim) + self.shape
            shape = [n * r for n, r in zip(padded, repeats)]
            raise RuntimeError(f"Trying to create tensor with negative dimension "
                               f"{builtins.min(shape)}: {shape}")
        return S.Repeat.apply(self, repeats=repeats)

    def narrow(self, dim, start, length):
        d = self._dim(dim)
        n = self.shape[d]
        if not -n <= start <= n:
            raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but "
                             f"got {start})")
        start = start % n if start < 0 else start
        if length < 0:
            raise RuntimeError("narrow(): length must be non-negative.")
        if start + length > n:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                               f"({n}).")
        index = [slice(None)] * self.ndim
        index[d] = slice(start, start + length)
        return S.Slice.apply(self, index=tuple(index), given={
            "dim": dim, "start": start, "end": start + length, "step": 1})

    def select(self, dim, index):
        d = self._dim(dim)
        n = self.shape[d]
        if not -n <= index < n:
            raise IndexError(f"select(): index {index} out of range for tensor of size "
                             f"{list(self.shape)} at dimension {d}")
        return S.Select.apply(self, index=(slice(None),) * d + (int(index),),
                              given={"dim": dim, "index": index})

    def split(self, split_size, dim=0):
        d = self._dim(dim)
        n = self.shape[d]
        if isinstance(split_size, (int, np.integer)):
            if split_size <= 0 and n:
                raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                                   f"dimension size of {n}")
            sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
        else:
            sizes = list(split_size)
            if builtins.sum(sizes) != n:
                raise RuntimeError(
                    f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's "
                    f"size at dimension {d}), but got split_sizes={sizes}")
        op = S.Split if isinstance(split_size, (int, np.integer)) else S.SplitWithSizes
        return op.apply(self, sizes=sizes, dim=d)

    def chunk(self, chunks, dim=0):
        if chunks <= 0:
            raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
        d = self._dim(dim)
        n = self.shape[d]
        size = -(-n // chunks) if n else 0
        return self.split(builtins.max(size, 1), d)

    def unbind(self, dim=0):
        return S.Unbind.apply(self, dim=self._dim(dim))

    # ---- indexing ------------------------------------------------------------------------
    def __getitem__(self, item):
        index = check_index(self._data.shape, index_arg(item))
        if _is_basic(index):
            return S.basic_index_op(index).apply(self, index=index)
        try:
            self._data[index]
        except IndexError as e:
            raise numpy_words(e) from None
        inference.refuse_saved_index(item, self)
        return S.Index.apply(self, index=index)

    def __setitem__(self, item, value):
        index = check_index(self._data.shape, index_arg(item))
        if self._leaf_requiring_grad() and grad_mode._state.enabled and _is_basic(index):
            # torch writes a basic index through a view of self: the error says so
            raise RuntimeError(VIEW_OF_LEAF_INPLACE_MSG)
        if not isinstance(value, Tensor) or value._data.size == 1:
            check_number_fill(item)
        if not isinstance(value, Tensor):
            value = Tensor._make(np.asarray(value, dtype=self._data.dtype), None, 0)
        # as torch: the value loses its leading 1-sized dims, then broadcasts to the slot
        try:
            slot = np.broadcast_to(np.int8(0), self._data.shape)[index].shape
        except IndexError as e:
            raise numpy_words(e) from None
        lead = 0
        while lead < value.ndim and value.shape[lead] == 1:
            lead += 1
        shape = value.shape[lead:]
        fits = len(shape) <= len(slot) and builtins.all(
            v in (1, s) for v, s in zip(shape[::-1], slot[::-1]))
        if not fits and not _is_basic(index):
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(shape)} cannot be "
                               f"broadcast to indexing result of shape {list(slot)}")
        if len(shape) > len(slot):
            raise RuntimeError(
                f"expand({value.type()}{{{list(shape)}}}, size={list(slot)}): the number of "
                f"sizes provided ({len(slot)}) must be greater or equal to the number of "
                f"dimensions in the tensor ({len(shape)})")
        if not fits:
            dim = next(len(slot) - 1 - k for k, (v, s) in enumerate(zip(shape[::-1], slot[::-1]))
                       if v not in (1, s))
            raise RuntimeError(
                f"The expanded size of the tensor ({slot[dim]}) must match the existing size "
                f"({shape[dim - len(slot) + len(shape)]}) at non-singleton dimension {dim}.  "
                f"Target sizes: {list(slot)}.  Tensor sizes: {list(shape)}")
        if lead:
            value = value.reshape(shape)
        if not _is_basic(index):
            inference.refuse_saved_index(item, self, value)
        self._inplace(S.IndexPut, value.to(self.dtype), index=index)

    def index_put(self, index, value, accumulate=False):
        if not isinstance(value, Tensor):
            value = Tensor._make(np.asarray(value, dtype=self._data.dtype), None, 0)
        inference.refuse_saved_index(index, self, value)
        return S.IndexPut.apply(self, value, index=index_arg(index), accumulate=accumulate)

    def gather(self, dim, index, *, sparse_grad=False):
        if sparse_grad:
            raise NotImplementedError(
                "gather(sparse_grad=True) is not supported by disthook: sparse layouts are not "
                "modelled, so the gradient could only be dense; leave sparse_grad out (the "
                "values and the gradient's values are the same)")
        d = self._dim(dim)
        if index._data.dtype not in (np.int32, np.int64):
            raise RuntimeError("gather(): Expected dtype int32/int64 for index")
        if index.ndim != self.ndim:
            raise RuntimeError(
                "Index tensor must have the same number of dimensions as input tensor")
        for k in range(self.ndim):
            if k != d and index.shape[k] > self.shape[k]:
                raise RuntimeError(
                    f"Size does not match at dimension {k} expected index {list(index.shape)} "
                    f"to be no larger than self {list(self.shape)} apart from dimension {d}")
        _check_index_bounds(self, index, d)
        inference.refuse_saved_index(index, self)
        return S.GatherAlong.apply(self, index=index._data, dim=d)

    # ---- in-place ------------------------------------------------------------------------
    def _inplace(self, op, *others, **params):
        """Apply ``op`` to (self, *others) and write the result into self's storage.

        When a graph is recorded, self's old value becomes the op's input (hooks registered
        before stay bound to it) and self takes the op's node as its grad_fn. When self is a
        view, its root base takes the history instead (a CopySlices node that runs the op's
        backward on the view's part of the gradient), and every view of the root is rebased
        onto it, as in torch.
        """
        if type(self._vc) is not list:
            inference.check_inplace(self)
        records = grad_mode._state.enabled and (
            self._requires_grad or builtins.any(o._requires_grad for o in others))
        if not records:
            if self._view_creation and grad_mode._state.enabled and self._base._requires_grad:
                self._check_view_inplace()  # a view made under no_grad of a tracked base
            with grad_mode.no_grad():
                out = op.apply(self, *others, **params)
            _write(self, out._data)
            return self
        if self._base is None:
            if self._leaf_requiring_grad():
                raise RuntimeError(LEAF_INPLACE_MSG)
            if "_custom_view" in self.__dict__:  # a placed call's output that is a custom
                self._check_view_inplace()  # Function's view on its worker (a hook's)
        else:
            self._check_view_inplace()
        old = Tensor._make(self._data.copy(), self._grad_fn, self._output_nr)
        old._requires_grad = self._requires_grad
        out = op.apply(old, *others, **params)
        _write(self, out._data)
        if self._base is None:
            self._set_history(out._grad_fn, out._output_nr)
            if self._views:
                S.rebase_views(self)
        else:
            S.rebase_on_view_inplace(self, out._grad_fn)
        return self

    def _leaf_requiring_grad(self) -> bool:
        """A leaf that requires grad, whose in-place change torch refuses under grad mode; or
        a deployed model's client hook's stand-in for one (the call's argument, which is the
        program's leaf: distributed.given_tensors.mark_leaf_argument)."""
        return self._grad_fn is None and self._requires_grad \
            or "_leaf_argument" in self.__dict__

    def _check_view_inplace(self) -> None:
        """Errors torch gives for a recorded in-place op on a view it cannot rebase."""
        custom_view = self.__dict__.get("_custom_view")
        if custom_view is not None:
            from disthook.autograd.function import VIEW_INPLACE_MSG

            raise RuntimeError(VIEW_INPLACE_MSG.format(i=custom_view[0], name=custom_view[1]))
        creation = self._view_creation
        if creation:
            if creation == S.INFERENCE_VIEW:
                msg = ("created in inference mode and is being modified inplace in normal "
                       "mode.")
            else:
                msg = ("created in no_grad mode and is being modified inplace with grad mode "
                       "enabled.")
            if self._grad_fn is None:
                msg = "A view was " + msg
            else:  # (a view taken under grad mode of one made under no_grad: its history)
                name = _strip_backward(self._grad_fn.name())
                msg = (f"Output {self._output_nr} of {name} is a view " + (
                    "and is being modified inplace." if creation == S.MULTI_OUTPUT_VIEW
                    else "of a view which was " + msg))
            raise RuntimeError(msg + _VIEW_HINTS[creation])
        root = self._base
        if root._leaf_requiring_grad():
            raise RuntimeError(VIEW_OF_LEAF_INPLACE_MSG)
        if self._data.dtype != root._data.dtype:
            raise RuntimeError("a view is being modified inplace while its base's gradient is "
                               "recorded." + OTHER_DTYPE_VIEW_HINT)

    def _set_history(self, node, output_nr: int) -> None:
        """Give this tensor a new grad_fn (after an in-place op): hooks registered before stay
        with the old one; retain_grad follows the tensor."""
        old_node, old_nr = self._grad_fn, self._output_nr
        self._grad_fn, self._output_nr = node, output_nr
        self._requires_grad = True
        self._backward_hooks = None
        if self._retains_grad:
            if old_node is not None and old_node._retains:
                old_node._retains.pop(old_nr, None)
            self._retains_grad = False
            self.retain_grad()

    def _inplace_binary(self, op, other, **params):
        if type(other) is Tensor and other._data.dtype == self._data.dtype:
            a, b = self, other  # same dtype: no promotion (an optimizer's step, every one)
        else:
            a, b = binary_operands(self, other)
        if a._data.dtype != self._data.dtype:
            if not _dtype.can_cast(a._data.dtype, self._data.dtype):
                raise RuntimeError(
                    f"result type {_kind_title(a._data.dtype)} can't be cast to the desired "
                    f"output type {_kind_title(self._data.dtype)}")
            b = b.to(self.dtype)
        if (b._data.shape != self._data.shape
                and np.broadcast_shapes(self._data.shape, b._data.shape) != self._data.shape):
            raise RuntimeError(
                f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                f"{list(np.broadcast_shapes(self._data.shape, b._data.shape))}")
        ufunc = _UFUNC_INPLACE.get(op) if not grad_mode._state.enabled else None
        if ufunc is not None and self._data.dtype != _dtype.BF16:  # (bfloat16: as op does)
            # no graph (an optimizer step): compute straight into self's memory
            alpha = params.get("alpha", 1)
            _write_with(self, ufunc, b._data if alpha == 1 else b._data * alpha)
            return self
        return self._inplace(op, b, **params)

    def add_(self, other, *, alpha=1):
        return self._inplace_binary(E.Add, other, alpha=_scalar("add_", "alpha", alpha))

    def sub_(self, other, *, alpha=1):
        E.refuse_bool_subtraction(self, other)
        return self._inplace_binary(E.Sub, other, alpha=_scalar("sub_", "alpha", alpha))

    def mul_(self, other):
        return self._inplace_binary(E.Mul, other)

    def div_(self, other, *, rounding_mode=None):
        if rounding_mode is not None:
            result = self.div(other, rounding_mode=rounding_mode)
            if not _dtype.can_cast(result._data.dtype, self._data.dtype):
                raise RuntimeError(f"result type {_kind_title(result._data.dtype)} can't be "
                                   f"cast to the desired output type "
                                   f"{_kind_title(self._data.dtype)}")
            return self.copy_(result)
        quotient = result_dtype(self, other)
        if _dtype.kind(quotient) not in "fc":
            quotient = _dtype.get_default_dtype().np  # integers' true quotient is floating
        if not _dtype.can_cast(quotient, self._data.dtype):
            raise RuntimeError(f"result type {_kind_title(quotient)} can't be cast to the "
                               f"desired output type {_kind_title(self._data.dtype)}")
        return self._inplace_binary(E.Div, other)

    def pow_(self, exponent):
        if isinstance(exponent, Tensor):
            return self._inplace_binary(E.Pow, exponent)
        if _dtype.kind(self._data.dtype) not in "fc" and isinstance(exponent, builtins.float):
            raise RuntimeError(f"result type Float can't be cast to the desired output type "
                               f"{_kind_title(self._data.dtype)}")
        if self._data.dtype.kind != "c" and isinstance(exponent, complex):
            raise RuntimeError(f"result type ComplexFloat can't be cast to the desired output "
                               f"type {_kind_title(self._data.dtype)}")
        return self._inplace(E.PowScalar, exponent=exponent)

    def neg_(self):
        return self._inplace(E.Neg)

    def abs_(self):
        if self._data.dtype.kind == "c":  # (|z| is real: it does not fit back, as torch says)
            raise RuntimeError("In-place abs is not supported for complex tensors.")
        return self._inplace(E.Abs)

    absolute_ = abs_

    def exp_(self):
        return self._inplace(E.Exp)

    def sqrt_(self):
        return self._inplace(E.Sqrt)

    def relu_(self):
        return self._inplace(E.Relu)

    def sigmoid_(self):
        return self._inplace(E.Sigmoid)

    def tanh_(self):
        return self._inplace(E.Tanh)

    def clamp_(self, min=None, max=None):
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        if not (isinstance(min, Tensor) or isinstance(max, Tensor)):
            kernel = _clamp_kernel(min is not None, max is not None)
            result = E.clamp_operand(self, (min, max), f"{kernel}_scalar_cpu")._data.dtype
            if result.kind != self._data.dtype.kind and result.kind in "fi":
                # a bool tensor clamped by ints, an integer one by a float: as torch
                raise RuntimeError(f"result type {_kind_title(result)} can't be cast to the "
                                   f"desired output type {_dtype.c_type_name(self.dtype)}")
        return self._inplace(E.Clamp, min=min, max=max)

    clip_ = clamp_

    def masked_fill_(self, mask, value):
        mask = _as_bool_mask(mask, "masked_fill_")
        if isinstance(value, Tensor):
            value = value.item()
        return self._inplace(S.MaskedFill, mask, value=value)

    def zero_(self):
        return self._inplace(Zero, value=0)

    def fill_(self, value):
        if isinstance(value, Tensor):
            value = value.item()
        return self._inplace(Fill, value=value)

    def copy_(self, src, non_blocking=False):
        if not isinstance(src, Tensor):
            src = tensor(src)
        src = src.to(self.dtype)
        if src.shape != self.shape:
            src = src.expand(self.shape)
        return self._inplace(CopyFrom, src)

    def uniform_(self, a=0.0, b=1.0, *, generator=None):
        return self._inplace(Uniform, low=a, high=b, generator=generator)

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        return self._inplace(Normal, mean=mean, std=std, generator=generator)


for _name in INPLACE_NAMES:
    if _name + "_" not in Tensor.__dict__:
        setattr(Tensor, _name + "_", inplace_of(_name))
del _name


def _write(t: Tensor, values: np.ndarray) -> None:
    """Write ``values`` into ``t``'s storage and bump its version counter."""
    _write_with(t, None, values)


# binary in-place ops that, without a graph, run as a numpy ufunc writing into the tensor
_UFUNC_INPLACE = {E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.Div: np.divide}


def _write_with(t: Tensor, ufunc, values: np.ndarray) -> None:
    """``t = ufunc(t, values)`` (or ``t = values`` without a ufunc) in ``t``'s storage, and
    bump its version counter."""
    if type(t._vc) is not list:
        inference.check_inplace(t)
    try:
        _write_into(t._data, ufunc, values)
    except ValueError:
        if _written_through(t._data, ufunc, values):
            t._vc[0] += 1
            return
        localize = getattr(type(t), "_localize", None)
        if localize is not None:  # a value kept on a worker: changed here, as a local one
            localize(t)
            return _write_with(t, ufunc, values)
        through = t.__dict__.get("_write_through")
        if through is not None:  # a view of a deployed tensor's value: changed on its worker
            return through(t, ufunc, values)
        broadcast = 0 in t._data.strides and t._data.size > 1  # one element, many places
        if not broadcast and not t._data.flags.writeable:
            raise RuntimeError(
                "the tensor written to in place has read-only memory; a deployed model's "
                "parameter read here (p.detach(), p.numpy()), or a view of a value a placed "
                "part computed (its output's detach()[i]), is such a copy of the value on its "
                "worker, where writing it would change nothing. Write the parameter itself "
                "under no_grad() (p.copy_(t), p.data.mul_(2)) or the output itself "
                "(out.data[i] = 0), or clone() the copy"
            ) from None
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation."
        ) from None
    t._vc[0] += 1


def _write_into(arr: np.ndarray, ufunc, values: np.ndarray) -> None:
    if ufunc is None:
        np.copyto(arr, values, casting="unsafe")
    else:
        ufunc(arr, values, out=arr, casting="unsafe")


# read-only arrays whose in-place writes are carried to where their value lives (a deployed
# model's gradient, read here: its worker): id(array) -> on_write(array)
_WRITE_THROUGH: dict = {}


def write_through(array: np.ndarray, on_write) -> None:
    """Let in-place writes into read-only ``array`` (through any tensor over it or a view of
    it) happen: each is made in it, then ``on_write(array)`` carries the new value on."""
    key = id(array)
    _WRITE_THROUGH[key] = on_write
    weakref.finalize(array, _WRITE_THROUGH.pop, key, None)


def _replaced_through(old: np.ndarray, new: np.ndarray) -> None:
    """``t.data = v`` on a tensor over an array given to ``write_through``: its new value is
    carried on as a write into it would be."""
    on_write = _WRITE_THROUGH.get(id(old))
    if on_write is not None:
        on_write(new)


def _written_through(arr: np.ndarray, ufunc, values: np.ndarray) -> bool:
    """Write into ``arr`` if it is (a view of) an array given to ``write_through``."""
    if not _WRITE_THROUGH:
        return False
    chain = [arr]
    while isinstance(chain[-1].base, np.ndarray):
        chain.append(chain[-1].base)
    on_write = _WRITE_THROUGH.get(id(chain[-1]))
    if on_write is None:
        return False
    for a in reversed(chain):  # the owner first: a view may be made writable only then
        a.flags.writeable = True
    try:
        _write_into(arr, ufunc, values)
    finally:
        for a in chain:
            a.flags.writeable = False
    on_write(chain[-1])
    return True


def _strip_backward(name: str) -> str:
    """A node's name as torch's messages print it: ``MulBackward0`` -> ``Mul``,
    ``PowBackward1`` -> ``Pow1``, ``MyFnBackward`` -> ``MyFn``."""
    stem, sep, digits = name.rpartition("Backward")
    if not sep or not (digits == "" or digits.isdigit()):
        return name
    return stem + ("" if digits in ("", "0") else digits)


def _is_operand(x) -> bool:
    """Can ``x`` be the other operand of an arithmetic op (else NotImplemented)?"""
    return isinstance(x, (Tensor, numbers.Number, np.generic))


def _scalar(fn: str, name: str, value):
    """A scalar argument (``alpha``) given as a one-element tensor, as torch takes it: its
    number (DARTS steps ``p.data.add_(v, alpha=r / v.norm())``); a longer one is refused."""
    if not isinstance(value, Tensor):
        return value
    if value._data.size != 1:
        raise TypeError(f"{fn}(): argument '{name}' must be Number, not Tensor")
    return value.item()


def _kind_title(dt) -> str:
    """torch's name for the numpy dtype ``dt`` in its cast errors: ``Int``, ``Half``, ``Long``."""
    return _dtype.scalar_type_name(_dtype.from_numpy_dtype(dt))


def _data_of(x):
    return x._data if isinstance(x, Tensor) else x


def _rebuild(data, requires_grad):
    t = Tensor._make(data, None, 0)
    t._requires_grad = requires_grad
    return t


take_torch_keywords(Tensor)  # x.sum(axis=1, keepdims=True)


def _can_view(data: np.ndarray, shape: tuple) -> bool:
    """Can ``data`` be reshaped to ``shape`` without a copy?"""
    if data.flags.c_contiguous or data.size <= 1:
        return True
    try:
        np.reshape(data, shape, copy=False)  # numpy >= 2.1
    except (ValueError, TypeError):
        return False
    return True


def _check_broadcast(a: Tensor, b: Tensor) -> None:
    """RuntimeError with torch's wording when two tensors' shapes do not broadcast."""
    check_broadcast(a._data.shape, b._data.shape)


_SCALAR_TYPES = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short",
                 "int32": "Int", "int64": "Long", "uint16": "UInt16", "uint32": "UInt32",
                 "uint64": "UInt64"}  # (torch's names for the integer types, in its errors)


def _no_bool(x, name: str) -> None:
    if x._data.dtype == np.bool_:
        raise RuntimeError(f"{name}(): does not support bool input")


def _clamp_kernel(has_min: bool, has_max: bool) -> str:
    """The name torch's errors give the clamp kernel for these bounds."""
    return "clamp" if has_min and has_max else ("clamp_min" if has_min else "clamp_max")


def _number_bound(name: str, bound) -> None:
    """clamp_min/clamp_max need their bound: None is torch's TypeError, not a no-op."""
    if bound is None:
        raise TypeError(f"{name}() received an invalid combination of arguments - got "
                        f"(NoneType), but expected one of: (Tensor {name[6:]}) or "
                        f"(Number {name[6:]})")


def _as_bool_mask(mask, where: str) -> Tensor:
    if not isinstance(mask, Tensor):
        mask = tensor(mask)
    if mask._data.dtype != np.bool_:
        raise RuntimeError(f"{where} only supports boolean masks, but got mask with dtype "
                           f"{_dtype.c_type_name(mask.dtype)}")
    return mask


def _check_index_bounds(t: Tensor, index: Tensor, d: int) -> None:
    """RuntimeError, worded as torch's gather/scatter, for an index outside dim ``d``."""
    n = t.shape[d] if t.ndim else 1
    bad = index._data[(index._data < 0) | (index._data >= n)]
    if bad.size:
        raise RuntimeError(f"index {bad.flat[0]} is out of bounds for dimension {d} with "
                           f"size {n}")


def _along(index: np.ndarray, ndim: int) -> np.ndarray:
    """An index for scatter along a dim, as numpy's put_along_axis takes it (0-d as 1-d)."""
    return index.reshape(1) if index.ndim == 0 and ndim <= 1 else index


class _ValuesIndices(tuple):
    """(values, indices) returned by ``max(dim)``, ``min(dim)``, ``sort`` and ``topk``."""

    def __new__(cls, values, indices, name):
        self = super().__new__(cls, (values, indices))
        self._name = name
        return self

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])

    def __repr__(self) -> str:
        return f"torch.return_types.{self._name}(\nvalues={self[0]!r},\nindices={self[1]!r})"


class _StaleView(Tensor):
    """A view made by a multi-output op (split, unbind) after its base changed in place: its
    history cannot be rebuilt, so reading its grad_fn (an op recording it, backward, repr)
    raises, as in torch. ``break_view`` turns a view into one."""

    __slots__ = ()
    _grad_fn_slot = Tensor.__dict__["_grad_fn"]

    @property
    def _grad_fn(self):
        raise RuntimeError(self.__dict__["_stale_msg"])

    @_grad_fn.setter
    def _grad_fn(self, node) -> None:
        _StaleView._grad_fn_slot.__set__(self, node)


def break_view(view: Tensor, hint: str = MULTI_OUTPUT_VIEW_HINT) -> None:
    name = _strip_backward(view._grad_fn.name())
    view.__dict__["_stale_msg"] = (
        f"Output {view._output_nr} of {name} is a view and its base or another view of its "
        "base has been modified inplace." + hint)
    view.__class__ = _StaleView


# the history of a view in another dtype than its base's (view_as_real, .real, .imag,
# view_as_complex) is not rebuilt after an in-place change: it is an error, never a wrong one
OTHER_DTYPE_VIEW_HINT = (
    " This view has another dtype than its base (view_as_real, .real, .imag, "
    "view_as_complex): disthook cannot rebuild its history after an in-place change. Change "
    "a copy (.clone()) or write the op out of place.")


# ---- ops that only Tensor methods use -----------------------------------------------------
from disthook.ops.base import Op


class Clone(Op):
    complex_ok = True

    @staticmethod
    def forward(ctx, a, memory_format=None):
        data = a._data
        if memory_format is None and data.flags.c_contiguous and data.size and (
                1 not in data.shape):  # (C order, no size-1 stride to keep: numpy's copy)
            return data.copy()
        out = _strides.new_like(data, data.shape, data.dtype, memory_format)
        np.copyto(out, data)
        return out

    @staticmethod
    def backward(ctx, g):
        return g


class FormatCopy(Clone):
    """``to(memory_format=...)``'s copy: torch records it as a ToCopy."""

    node_name = "ToCopyBackward0"


class ToCopy(Op):
    complex_ok = True  # complex to real keeps the real part; its gradient comes back real

    @staticmethod
    def forward(ctx, a, dtype):
        ctx.dtype = a._data.dtype
        data = a._data
        # complex to real or integer keeps the real part; to bool asks for nonzero, as torch
        real = data.dtype.kind == "c" and dtype.kind not in "cb"
        return (data.real if real else data).astype(dtype)

    @staticmethod
    def backward(ctx, g):
        # (a complex gradient for a real input: its real part, without Tensor.to's warning)
        return g if g._data.dtype == ctx.dtype else ToCopy.apply(g, dtype=ctx.dtype)


class CastNoGrad(ToCopy):
    """A cast to an integer or bool dtype: not differentiable, the result has no history."""

    differentiable = False


class Fill(Op):
    node_name = "FillBackward2"  # torch's name for fill_ with a number

    @staticmethod
    def forward(ctx, a, value):
        return np.full_like(a._data, value)

    @staticmethod
    def backward(ctx, g):
        return g * 0


class Zero(Fill):
    node_name = "ZeroBackward0"


class Uniform(Op):
    """``uniform_``: fresh values, independent of the old ones (gradient zero)."""

    @staticmethod
    def forward(ctx, a, low, high, generator):
        return _random.uniform(low, high, a._data.shape, a._data.dtype, generator)

    @staticmethod
    def backward(ctx, g):
        return g * 0


class Normal(Op):
    """``normal_``: fresh values, independent of the old ones (gradient zero)."""

    @staticmethod
    def forward(ctx, a, mean, std, generator):
        return _random.normal(mean, std, a._data.shape, a._data.dtype, generator)

    @staticmethod
    def backward(ctx, g):
        return g * 0


class CopyFrom(Op):
    node_name = "CopyBackwards"
    complex_ok = True

    def name(self) -> str:
        return "torch::autograd::CopyBackwards"  # torch's qualified name for this C++ node

    @staticmethod
    def forward(ctx, a, src):
        return src._data.copy()

    @staticmethod
    def backward(ctx, g):
        return g * 0, g


# ---- factories ------------------------------------------------------------------------------

def _infer_dtype(data) -> np.dtype:
    """torch.tensor's inference: bools → bool, ints → int64, floats → default dtype."""
    arr = np.asarray(data)
    kind = arr.dtype.kind
    if kind == "b":
        return np.dtype(np.bool_)
    if kind in "iu":
        return arr.dtype if isinstance(data, np.ndarray) else np.dtype(np.int64)
    if kind == "f":
        return arr.dtype if isinstance(data, np.ndarray) else _dtype.get_default_dtype().np
    if kind == "c":
        return arr.dtype if isinstance(data, np.ndarray) else _dtype.default_complex_dtype().np
    raise TypeError(f"Could not infer dtype of {type(data).__name__}")


def _bool_tensor(x) -> bool:
    return isinstance(x, Tensor) and x._data.dtype.kind == "b"


def _integral_division(a: Tensor, b) -> bool:
    """Whether ``a / b`` rounded has an integer dtype in torch: both integral (bools with an
    integer; bools alone torch does not divide so)."""
    kinds = a._data.dtype.kind + (b._data.dtype.kind if isinstance(b, Tensor)
                                  else np.asarray(b).dtype.kind)
    return builtins.all(k in "iub" for k in kinds) and kinds != "bb"


def _unwrap_nested(data):
    if isinstance(data, Tensor):
        return data._data
    if isinstance(data, (list, tuple)):
        return [_unwrap_nested(d) for d in data]
    return data


def takes_pin_memory(factory):
    """``factory`` with torch's ``pin_memory=`` and ``layout=`` keywords (``check_pin_memory``,
    ``check_layout``), published under the name ``torch.<name>`` so that it pickles by
    reference; a factory that takes ``out=`` (``factory_out``) takes them already, and comes
    back as it is."""
    if getattr(factory, "takes_pin_memory", False):
        return factory

    @functools.wraps(factory)
    def with_pin_memory(*args, pin_memory=False, layout=None, **kwargs):
        check_pin_memory(pin_memory)
        check_layout(layout)
        return factory(*args, **kwargs)

    with_pin_memory.__module__ = "disthook"
    return with_pin_memory


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False) -> Tensor:
    """A new leaf tensor with a copy of ``data``."""
    _check_device(device)
    check_pin_memory(pin_memory)
    if isinstance(data, Tensor):
        arr = data._data.copy() if dtype is None else data._data.astype(_np_dtype(dtype))
    else:
        data = _unwrap_nested(data)
        np_dt = _np_dtype(dtype) if dtype is not None else _infer_dtype(data)
        arr = np.array(data, dtype=np_dt)
    return _factory(arr, requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    _check_device(device)
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    if isinstance(data, np.ndarray):
        return from_numpy(data) if dtype is None else from_numpy(data.astype(_np_dtype(dtype)))
    return tensor(data, dtype=dtype)


def from_numpy(arr: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``arr``."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    _dtype.from_numpy_dtype(arr.dtype)
    return Tensor._make(arr, None, 0)


def _size_args(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list, Size)):
        size = tuple(size[0])
    out = tuple(builtins.int(s) for s in size)
    if builtins.any(s < 0 for s in out):
        raise RuntimeError(f"Trying to create tensor with negative dimension "
                           f"{builtins.min(out)}: {list(out)}")
    return out


def _factory(arr: np.ndarray, requires_grad: bool, device=None) -> Tensor:
    """A new leaf holding ``arr``; factories word the dtype check with a capital O."""
    _check_device(device)
    t = Tensor._make(_blas.aligned(arr), None, 0)
    if requires_grad:
        if _dtype.kind(arr.dtype) not in "fc":
            raise RuntimeError(FACTORY_REQUIRES_GRAD_MSG)
        t._requires_grad = True
    return t


def _float_dt(dtype):
    return _np_dtype(dtype) if dtype is not None else _dtype.get_default_dtype().np


def _filled(shape, dtype, value) -> np.ndarray:
    """A new array of ``value`` laid out as _factory keeps it (disthook._blas.aligned), made
    there at once rather than copied there."""
    out = _blas.empty(tuple(shape), dtype)
    out.fill(value)
    return out


@factory_out
def zeros(*args, size=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    size = by_keyword(args, size, "size", "zeros")
    return _factory(_filled(_size_args(size), _float_dt(dtype), 0), requires_grad, device)


@factory_out
def ones(*args, size=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    size = by_keyword(args, size, "size", "ones")
    return _factory(_filled(_size_args(size), _float_dt(dtype), 1), requires_grad, device)


@factory_out
def empty(*args, size=None, dtype=None, device=None, requires_grad=False,
          memory_format=None) -> Tensor:
    size = by_keyword(args, size, "size", "empty")
    return _factory(_filled(_size_args(size), _float_dt(dtype), 0), requires_grad, device)


@factory_out
def full(size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    if dtype is None:
        dtype = _infer_dtype(fill_value)
    return _factory(np.full(_size_args((size,)), fill_value, _np_dtype(dtype)), requires_grad,
                    device)


def _like(t: Tensor, dtype):
    # from the dtype, not the data: a deployed model's parameter knows it without its value
    return _np_dtype(t.dtype if dtype is None else dtype)


def _like_filled(t, dtype, memory_format, value) -> np.ndarray:
    """A new array of ``value`` shaped as ``t`` and laid out as torch lays out a ``*_like``
    of it (``memory_format``; a deployed parameter without its value: C order)."""
    out = _strides.new_like(_strides.held(t), tuple(t.shape), _like(t, dtype), memory_format)
    out.fill(value)
    return out


def zeros_like(input, *, dtype=None, device=None, requires_grad=False,
               memory_format=None) -> Tensor:
    check_memory_format(memory_format, "zeros_like")
    return _factory(_like_filled(input, dtype, memory_format, 0), requires_grad, device)


def ones_like(input, *, dtype=None, device=None, requires_grad=False,
              memory_format=None) -> Tensor:
    check_memory_format(memory_format, "ones_like")
    return _factory(_like_filled(input, dtype, memory_format, 1), requires_grad, device)


def empty_like(input, *, dtype=None, device=None, requires_grad=False,
               memory_format=None) -> Tensor:
    check_memory_format(memory_format, "empty_like")
    return _factory(_like_filled(input, dtype, memory_format, 0), requires_grad, device)


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False,
              memory_format=None) -> Tensor:
    check_memory_format(memory_format, "full_like")
    return _factory(_like_filled(input, dtype, memory_format, fill_value), requires_grad, device)


@factory_out
def arange(start=None, end=None, step=1, *, dtype=None, device=None,
           requires_grad=False) -> Tensor:
    if end is None:
        if start is None:
            raise TypeError("arange() missing required argument 'end' (pos 1)")
        start, end = 0, start
    elif start is None:  # arange(end=n)
        start = 0
    vals = [_data_of(v) for v in (start, end, step)]
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if dtype is None:
        is_float = builtins.any(isinstance(v, builtins.float) or
                                (isinstance(v, np.ndarray) and _dtype.kind(v.dtype) == "f") for v in vals)
        dtype = _dtype.get_default_dtype() if is_float else _dtype.int64
    np_dt = _np_dtype(dtype)
    if np_dt == _dtype.BF16:  # (numpy would step in bfloat16; torch steps in float)
        return _factory(np.arange(*vals, dtype=np.float64).astype(np.float32).astype(np_dt),
                        requires_grad, device)
    return _factory(np.arange(*vals, dtype=np_dt), requires_grad, device)


@factory_out
def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _factory(np.linspace(start, end, steps, dtype=_float_dt(dtype)), requires_grad,
                    device)


@factory_out
def eye(n, m=None, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _factory(np.eye(n, m, dtype=_float_dt(dtype)), requires_grad, device)


def where(condition, input=None, other=None, *, out=None) -> Tensor:
    """``where(cond, a, b)``: a where cond else b; ``where(cond)``: indices of True. With
    ``out=``, the result written into ``out``, as torch's."""
    if out is None:
        return _where(condition, input, other)
    # torch's out= form takes tensors only, and an out of the result's own dtype
    for position, (name, value) in enumerate((("input", input), ("other", other)), 2):
        if not isinstance(value, Tensor):
            raise TypeError(f"where(): argument '{name}' (position {position}) must be Tensor, "
                            f"not {type(value).__name__}")
    result = _where(condition, input, other)
    if isinstance(out, Tensor) and out.dtype != result.dtype:
        raise RuntimeError(f"Expected out type to be {_dtype.scalar_type_name(result.dtype)} "
                           f"but got {_dtype.scalar_type_name(out.dtype)}")
    return write_out("where", result, out)


def _where(condition, input=None, other=None) -> Tensor:
    if not isinstance(condition, Tensor):
        condition = tensor(condition)
    if input is None and other is None:
        return tuple(Tensor._make(i.astype(np.int64), None, 0)
                     for i in np.nonzero(condition._data))
    if condition._data.dtype != np.bool_:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {_dtype.scalar_type_name(condition.dtype)}")
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        input = tensor(input)  # two python scalars: input's type decides, as in torch
    a, b = binary_operands(input, other)
    _check_broadcast(a, b)
    shape = np.broadcast_shapes(a._data.shape, b._data.shape)
    check_broadcast(condition._data.shape, shape)
    return E.Where.apply(condition, a, b)


def cat(tensors, dim=0, *, out=None) -> Tensor:
    if out is not None:
        return write_out("cat", cat(tensors, dim), out)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               "concatenated")
    ref = next((t for t in tensors if t.ndim), tensors[0])
    d = ref._dim(dim)
    dt = tensors[0]._data.dtype
    for t in tensors[1:]:
        dt = result_dtype(Tensor._make(np.empty(0, dt), None, 0), t)
    parts = []
    for i, t in enumerate(tensors):
        if t.ndim == 1 and t.shape[0] == 0:
            continue  # torch skips legacy empty tensors
        if t.ndim != ref.ndim:
            raise RuntimeError(
                f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}")
        for k in range(ref.ndim):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size "
                    f"{ref.shape[k]} but got size {t.shape[k]} for tensor number {i} in the list.")
        parts.append(t.to(dt))
    return S.Cat.apply(*parts, dim=d)


concat = concatenate = cat


def stack(tensors, dim=0, *, out=None) -> Tensor:
    if out is not None:
        return write_out("stack", stack(tensors, dim), out)
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors[1:], 1):
        if t.shape != tensors[0].shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} "
                f"at entry 0 and {list(t.shape)} at entry {i}")
    n = tensors[0].ndim + 1
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return S.Stack.apply(*tensors, dim=dim % n)


@cpu_policy.covered(cpu_policy.LOWER)
def einsum(equation, *operands) -> Tensor:
    """Sum of products over the subscripts of ``equation`` (``'ij,jk->ik'``, ellipsis and
    implicit output as in torch); operands may be given as one list."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    inputs, output = L.parse_einsum(equation, [t.shape for t in operands])
    sizes = {}
    for k, (subs, t) in enumerate(zip(inputs, operands)):
        for c, n in zip(subs, t.shape):
            seen = sizes.setdefault(c, n)
            if seen != n and seen != 1 and n != 1:
                raise RuntimeError(f"einsum(): subscript {c} has size {n} for operand {k} which "
                                   f"does not broadcast with previously seen size {seen}")
            sizes[c] = builtins.max(seen, n)
    dt = L.einsum_dtype(inputs, output, [t._data for t in operands], sizes)
    expanded = []
    for subs, t in zip(inputs, operands):
        shape = tuple(sizes[c] for c in subs)
        t = t if t._data.dtype == dt else t.to(dt)
        expanded.append(t if tuple(t.shape) == shape else t.expand(shape))
    if dt.kind == "c":
        return C.product(lambda *parts: L.Einsum.apply(*parts, inputs=inputs, output=output),
                         expanded)
    return L.Einsum.apply(*expanded, inputs=inputs, output=output)


def _var_mean_args(input, dim, unbiased, correction, name):
    if _dtype.kind(input._data.dtype) != "f":
        raise RuntimeError(f"{name} only support floating point and complex dtypes")
    if isinstance(dim, builtins.bool):
        unbiased, dim = dim, None
    return R.norm_dims(dim, input.ndim), input._correction(unbiased, correction)


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None) -> tuple:
    """(variance, mean) of ``input`` over ``dim`` in one node, as torch records it."""
    dims, corr = _var_mean_args(input, dim, unbiased, correction, "var_mean")
    return R.VarMean.apply(input, dim=dims, correction=corr, keepdim=keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None) -> tuple:
    """(standard deviation, mean) of ``input`` over ``dim`` in one node."""
    dims, corr = _var_mean_args(input, dim, unbiased, correction, "std_mean")
    return R.StdMean.apply(input, dim=dims, correction=corr, keepdim=keepdim)


def multinomial(input, num_samples, replacement=False, *, generator=None) -> Tensor:
    """Indices drawn from the categories of each row, weighted by its (unnormalised)
    probabilities, with disthook's generator; without replacement each index at most once."""
    p = input._data
    if _dtype.kind(p.dtype) != "f":
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{_dtype.scalar_type_name(input.dtype)}")
    if p.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    n = p.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    rows = p.reshape(-1, n).astype(np.float64)
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    totals = rows.sum(axis=1, keepdims=True)
    if (totals <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    rng = _random.gen(generator)
    if replacement:
        cdf = np.cumsum(rows / totals, axis=1)
        draws = rng.random((rows.shape[0], num_samples))
        out = np.stack([np.minimum(np.searchsorted(c, d, side="right"), n - 1)
                        for c, d in zip(cdf, draws)])
    else:
        # the largest p / E (E exponential) are a weighted draw without replacement
        with np.errstate(divide="ignore"):
            keys = rows / rng.exponential(size=rows.shape)
        out = np.argsort(-keys, axis=1, kind="stable")[:, :num_samples]
    out = out.astype(np.int64)
    return Tensor._make(out if p.ndim == 2 else out.reshape(num_samples), None, 0)
