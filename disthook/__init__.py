"""disthook: a numpy autograd engine with PyTorch's hook semantics.

``import disthook as torch`` runs torch programs that use tensors, autograd and hooks.
"""
from __future__ import annotations

import builtins as _builtins
from importlib.util import find_spec as _find_spec

import numpy as _np

from disthook._settings import quiet_float_warnings as _quiet_float_warnings

_quiet_float_warnings()

from disthook import (  # noqa: F401
    _strides,
    _surface,  # first: from here on, torch's names that disthook lacks refuse at use
    autograd,
    cuda,
    fft,
    linalg,
    random,
    special,
    utils,
)
from disthook._dtype import (  # noqa: F401
    bfloat16,
    bool,
    cdouble,
    cfloat,
    complex64,
    complex128,
    double,
    dtype,
    float,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    int,
    int8,
    int16,
    int32,
    int64,
    long,
    set_default_dtype,
    short,
    uint8,
)
from disthook._fake_quantize import (  # noqa: F401
    fake_quantize_per_channel_affine,
    fake_quantize_per_tensor_affine,
)
from disthook._limits import check_memory_format as _check_memory_format
from disthook._out import write_out as _write_out
from disthook._stft import istft, stft  # noqa: F401
from disthook._tensor_shape import by_keyword as _by_keyword
from disthook._tensor_str import get_printoptions, set_printoptions  # noqa: F401
from disthook.autograd import (  # noqa: F401
    enable_grad,
    inference_mode,
    is_grad_enabled,  # (the mode set: grad_mode.grad_mode_shown)
    is_warn_always_enabled,
    no_grad,
    set_grad_enabled,
    set_warn_always,
)
from disthook.autograd.grad_mode import is_inference_mode_enabled  # noqa: F401
from disthook.ops import complex as _complex_ops
from disthook.random import (  # noqa: F401
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)
from disthook.tensor import (  # noqa: F401
    Size,
    Tensor,
    arange,
    as_tensor,
    cat,
    concat,
    concatenate,
    device,
    einsum,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    multinomial,
    ones,
    ones_like,
    stack,
    std_mean,
    tensor,
    var_mean,
    where,
    zeros,
    zeros_like,
)


def _assert(condition, message) -> None:
    """``torch._assert``: an assert that tracing keeps (models check shapes with it)."""
    if not condition:
        raise AssertionError(message)


def _check(cond, message=None) -> None:
    """``torch._check``: RuntimeError unless ``cond``; ``message`` is a callable giving the
    text, called only on failure."""
    if not cond:
        raise RuntimeError(message() if message is not None else
                           "Expected cond to be True, but got False.")


def is_tensor(obj) -> type(True):
    return isinstance(obj, Tensor)


def is_floating_point(t: Tensor) -> type(True):
    return t.is_floating_point()


def numel(t: Tensor) -> int:
    return t.numel()


# ---- random factories -------------------------------------------------------------------

def _size(size) -> tuple:
    from disthook.tensor import _size_args

    return _size_args(size)


def _rand_factory(arr, requires_grad, device):
    from disthook.tensor import _factory

    return _factory(arr, requires_grad, device)


def _float_np(dtype):
    return (dtype or get_default_dtype()).np if not isinstance(dtype, _np.dtype) else dtype


def _draw(draw, size, np_dtype, scale=1.0):
    """``draw(shape)`` as ``np_dtype``; a complex dtype draws its real and imaginary parts
    apart, each times ``scale``."""
    if np_dtype.kind != "c":
        return draw(size).astype(np_dtype)
    parts = draw(size + (2,)) * scale
    return (parts[..., 0] + 1j * parts[..., 1]).astype(np_dtype)


def rand(*args, size=None, dtype=None, device=None, requires_grad=False,  # noqa: F811
         generator=None) -> Tensor:
    size = _by_keyword(args, size, "size", "rand")
    arr = _draw(random.gen(generator).random, _size(size), _np.dtype(_float_np(dtype)))
    return _rand_factory(arr, requires_grad, device)


def randn(*args, size=None, dtype=None, device=None, requires_grad=False,  # noqa: F811
          generator=None) -> Tensor:
    size = _by_keyword(args, size, "size", "randn")
    # a complex normal has variance 1 in all: each part's is 1/2, as torch's
    arr = _draw(random.gen(generator).standard_normal, _size(size), _np.dtype(_float_np(dtype)),
                _np.sqrt(0.5))
    return _rand_factory(arr, requires_grad, device)


def rand_like(input: Tensor, *, generator=None, dtype=None, device=None,  # noqa: F811
              requires_grad=False, memory_format=None) -> Tensor:  # noqa: F811 (torch's names)
    _check_memory_format(memory_format, "rand_like")
    out = rand(input.shape, dtype=dtype or input.dtype, device=device,
              requires_grad=requires_grad, generator=generator)
    out._data = _strides.relaid(input, out._data, memory_format)  # (torch's layout)
    return out


def randn_like(input: Tensor, *, generator=None, dtype=None, device=None,  # noqa: F811
               requires_grad=False, memory_format=None) -> Tensor:  # noqa: F811 (torch's names)
    _check_memory_format(memory_format, "randn_like")
    out = randn(input.shape, dtype=dtype or input.dtype, device=device,
               requires_grad=requires_grad, generator=generator)
    out._data = _strides.relaid(input, out._data, memory_format)  # (torch's layout)
    return out


def randint(low=None, high=None, size=None, *, dtype=None, device=None, requires_grad=False,
            generator=None) -> Tensor:
    if low is None:  # randint(high=n, size=...)
        low = 0
    elif size is None:
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    np_dt = (dtype or int64).np
    arr = random.gen(generator).integers(low, high, size=_size((size,))).astype(np_dt)
    return _rand_factory(arr, requires_grad, device)


def randperm(n, *, dtype=None, device=None, requires_grad=False, generator=None) -> Tensor:
    return _rand_factory(random.gen(generator).permutation(n).astype((dtype or int64).np),
                         requires_grad, device)


def normal(mean, std, size=None, *, generator=None, dtype=None, device=None,  # noqa: F811
           requires_grad=False) -> Tensor:
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        if dtype is not None or device is not None or requires_grad:
            raise TypeError("normal(): dtype=, device= and requires_grad= go with a float mean "
                            "and std and a size; with a tensor mean or std the result takes "
                            "its dtype (call .to(dtype) or .requires_grad_() on it)")
        m = mean._data if isinstance(mean, Tensor) else mean
        s = std._data if isinstance(std, Tensor) else std
        shape = _np.broadcast_shapes(_np.shape(m), _np.shape(s))
        dt = (mean if isinstance(mean, Tensor) else std)._data.dtype
        return Tensor._make(random.gen(generator).normal(m, s, shape).astype(dt), None, 0)
    return _rand_factory(random.normal(mean, std, _size((size,)), _float_np(dtype), generator),
                         requires_grad, device)


def bernoulli(p: Tensor, *, generator=None) -> Tensor:
    if p.is_complex():
        return p.bernoulli()  # (which refuses it, as torch)
    return Tensor._make((random.gen(generator).random(p.shape) < p._data).astype(p._data.dtype),
                        None, 0)


# ---- function forms of Tensor methods ------------------------------------------------------

# the function forms torch lets a Python number come first in: ``torch.add(0, t)``
_NUMBER_FIRST = frozenset({"add", "sub", "subtract", "mul", "multiply", "div", "divide",
                           "true_divide", "floor_divide", "remainder", "pow", "xlogy"})


def _number_as_input(number, args: tuple, kwargs: dict) -> Tensor:
    """``number`` as torch takes it in first place: a 0-d tensor of the dtype the operation
    gives (an int beside a float32 tensor counts as float32, a float beside an int tensor
    as the default dtype), so the result's dtype is torch's."""
    other = args[0] if args else kwargs.get("other")
    if isinstance(other, Tensor) and type(number) is not _builtins.bool:
        return scalar_tensor(number, dtype=result_type(other, number))
    return tensor(number)


def _method(name: str):
    def fn(input, *args, **kwargs):
        if (name in _NUMBER_FIRST and type(input) in (_builtins.int, _builtins.float,
                                                        _builtins.bool)):
            input = _number_as_input(input, args, kwargs)
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                            f"{type(input).__name__}")
        out = kwargs.pop("out", None) if not name.endswith("_") else None
        result = getattr(input, name)(*args, **kwargs)
        return result if out is None else _write_out(name, result, out)

    fn.__name__ = name
    fn.__doc__ = f"``torch.{name}(input, ...)``: same as ``input.{name}(...)``."
    return fn


for _name in (
    "abs", "absolute", "neg", "negative", "exp", "expm1", "log", "log2", "log10", "log1p",
    "sqrt", "rsqrt", "square", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "erf", "sign",
    "floor", "ceil", "round", "trunc", "reciprocal", "clamp", "clip", "clamp_min", "clamp_max",
    "maximum", "minimum", "pow", "add", "sub", "subtract", "mul", "multiply", "div", "divide",
    "true_divide", "matmul", "mm", "mv", "dot", "bmm", "sum", "mean", "var", "std", "max",
    "min", "amax", "amin", "argmax", "argmin", "prod", "logsumexp", "softmax", "log_softmax",
    "all", "any", "norm", "cumsum", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
    "permute", "transpose", "swapaxes", "t", "chunk", "unbind", "narrow", "select",
    "masked_fill", "gather", "index_put", "eq", "ne", "lt", "le", "gt", "ge", "equal",
    "allclose", "isclose", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan",
    "isinf", "isfinite", "clone", "detach", "lerp", "broadcast_to", "repeat", "sort",
    "argsort", "topk", "tril", "triu", "roll", "repeat_interleave", "index_select", "scatter",
    "scatter_add", "addcmul", "addcdiv", "unique",
    # issue 31: math, scans, order statistics, shapes, indexing, products, in-place forms
    "abs_", "acos", "acos_", "acosh", "acosh_", "addbmm", "addmm", "addmv", "addr", "adjoint",
    "aminmax", "angle", "arccos", "arccos_", "arccosh", "arccosh_", "arcsin", "arcsin_",
    "arcsinh", "arcsinh_", "arctan", "arctan2", "arctan_", "arctanh", "arctanh_", "argwhere",
    "as_strided", "as_strided_", "asin", "asin_", "asinh", "asinh_", "atan", "atan2", "atan_",
    "atanh", "atanh_", "baddbmm", "bincount", "bitwise_and", "bitwise_left_shift",
    "bitwise_not", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "ceil_", "cholesky",
    "clamp_", "clamp_max_", "clamp_min_", "clip_", "conj", "conj_physical", "copysign",
    "corrcoef", "cos_", "cosh", "cosh_", "count_nonzero", "cov", "cross", "cummax", "cummin",
    "cumprod", "deg2rad", "deg2rad_", "det", "detach_", "diag", "diag_embed", "diagflat",
    "diagonal", "diagonal_scatter", "diff", "digamma", "dist", "dsplit", "erf_", "erfc",
    "erfc_", "erfinv", "exp2", "exp2_", "exp_", "expm1_", "fill_", "fix", "fix_", "flip",
    "fliplr", "flipud", "float_power", "floor_", "floor_divide", "fmax", "fmin", "fmod",
    "frac", "frac_", "frexp", "gcd", "gcd_", "ger", "get_device", "greater", "greater_equal",
    "heaviside", "histc", "histogram", "hsplit", "hypot", "i0", "i0_", "index_add",
    "index_copy", "index_fill", "index_put_", "index_reduce", "inner", "inverse", "isneginf",
    "isposinf", "isreal", "kron", "kthvalue", "lcm", "lcm_", "ldexp", "ldexp_", "less",
    "less_equal", "lgamma", "log10_", "log1p_", "log2_", "log_", "logaddexp", "logaddexp2",
    "logcumsumexp", "logdet", "logit", "logit_", "masked_scatter", "masked_select",
    "matrix_exp", "matrix_power", "median", "mode", "moveaxis", "movedim", "msort",
    "mvlgamma", "nan_to_num", "nan_to_num_", "nanmean", "nanmedian", "nanquantile", "nansum",
    "narrow_copy", "neg_", "negative_", "nextafter", "nonzero", "not_equal", "outer",
    "pinverse", "positive", "put", "qr", "quantile", "rad2deg", "rad2deg_", "ravel",
    "reciprocal_", "relu_", "remainder", "resize_as_", "resolve_conj", "resolve_neg", "rot90",
    "round_", "rsqrt_", "scatter_reduce", "select_scatter", "sgn", "sigmoid_", "signbit",
    "sin_", "sinc", "sinc_", "sinh", "sinh_", "slice_scatter", "slogdet", "split_with_sizes",
    "sqrt_", "square_", "svd", "swapdims", "take", "take_along_dim", "tan_", "tanh_",
    "tensor_split", "tile", "trace", "trunc_", "unsafe_chunk", "unsafe_split",
    "unsafe_split_with_sizes", "vdot", "vsplit", "xlogy", "xlogy_", "zero_",
    "renorm", "as_strided_scatter", "conj_physical_", "igamma", "igammac",
    "hardshrink", "prelu", "nonzero_static", "addmv_",
):
    globals()[_name] = _method(_name)
del _name


def split(tensor: Tensor, split_size_or_sections, dim: int = 0) -> tuple:
    """``torch.split``: its second argument's name is not the method's (``split_size``)."""
    return tensor.split(split_size_or_sections, dim)


def real(input: Tensor) -> Tensor:
    return input.real


def imag(input: Tensor) -> Tensor:
    return input.imag


def complex(real: Tensor, imag: Tensor) -> Tensor:
    """A complex tensor from its real and imaginary parts (float or double, same dtype)."""
    return _complex_ops.Complex.apply(real, imag)


def polar(abs: Tensor, angle: Tensor) -> Tensor:
    """The complex tensor abs * (cos(angle) + i sin(angle))."""
    return _complex_ops.Polar.apply(abs, angle)


def view_as_real(input: Tensor) -> Tensor:
    """A complex tensor's memory seen as real pairs, shape [..., 2]."""
    return _complex_ops.ViewAsReal.apply(input)


def view_as_complex(input: Tensor) -> Tensor:
    """Real pairs along a last dim of size 2 seen as complex numbers, in the same memory."""
    return _complex_ops.ViewAsComplex.apply(input)


def broadcast_tensors(*tensors):
    shape = _np.broadcast_shapes(*(t.shape for t in tensors))
    return tuple(t.expand(shape) for t in tensors)


def broadcast_shapes(*shapes):
    return Size(_np.broadcast_shapes(*shapes))


# ---- legacy tensor types: torch.FloatTensor, torch.LongTensor, ... --------------------------

class _LegacyTensorType(type):
    """The class of ``FloatTensor`` and the other legacy types, as torch's tensortype: calling
    one makes a plain Tensor of its dtype, from data or (uninitialised) from sizes, and
    ``isinstance`` asks whether a tensor has that dtype."""

    dtype: dtype

    def __instancecheck__(cls, obj) -> _builtins.bool:
        return isinstance(obj, Tensor) and obj._data.dtype == cls.dtype.np

    def __call__(cls, *args, device=None) -> Tensor:
        from disthook.tensor import device as as_device

        if device is not None and as_device(device).type != "cpu":
            raise RuntimeError("legacy constructor expects device type: cpu but device type: "
                               f"{as_device(device).type} was passed")
        if not args:
            return empty((0,), dtype=cls.dtype)
        if len(args) == 1 and isinstance(args[0], Size):
            return empty(tuple(args[0]), dtype=cls.dtype)
        sizes = [isinstance(a, (_builtins.int, _np.integer)) and not isinstance(a, _builtins.bool)
                 for a in args]
        if _builtins.all(sizes):
            for d in args:
                if d < 0:
                    raise RuntimeError(f"Trying to create tensor with negative dimension {d}: "
                                       f"{list(args)}")
            return empty(tuple(_builtins.int(a) for a in args), dtype=cls.dtype)
        if len(args) > 1:
            pos = sizes.index(False)
            raise TypeError(f"new(): argument 'size' failed to unpack the object at pos "
                            f"{pos + 1} with error \"type must be tuple of ints,but got "
                            f"{type(args[pos]).__name__}\"")
        return _legacy_from_data(cls.dtype, args[0])


def _legacy_from_data(dt: dtype, data) -> Tensor:
    """``FloatTensor(data)``: a copy of a sequence, or the tensor itself (as an alias, whose
    node is AliasBackward0) when it has the type's dtype; torch's errors otherwise."""
    from disthook._dtype import c_type_name

    if isinstance(data, Tensor):
        if data.dtype != dt:
            options = ("TensorOptions(dtype={}, device=cpu, layout=Strided, requires_grad=false "
                       "(default), pinned_memory=false (default), memory_format=(nullopt))")
            raise TypeError(f"expected {options.format(c_type_name(dt))} (got "
                            f"{options.format(c_type_name(data.dtype))})")
        return data[...]
    if isinstance(data, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    if not isinstance(data, (list, tuple, _np.ndarray)):
        kind = type(data)
        name = kind.__name__ if kind.__module__ == "builtins" else \
            f"{kind.__module__}.{kind.__name__}"
        raise TypeError(f"new(): data must be a sequence (got {name})")
    return tensor(data, dtype=dt)


def _legacy_type(dt: dtype) -> _LegacyTensorType:
    name = dt.legacy_type.split(".")[-1]
    return _LegacyTensorType(name, (), {"dtype": dt, "is_cuda": False, "is_sparse": False,
                                        "__doc__": f"Legacy constructor of {dt} tensors."})


HalfTensor = _legacy_type(float16)
FloatTensor = _legacy_type(float32)
DoubleTensor = _legacy_type(float64)
CharTensor = _legacy_type(int8)
ShortTensor = _legacy_type(int16)
IntTensor = _legacy_type(int32)
LongTensor = _legacy_type(int64)
ByteTensor = _legacy_type(uint8)
BoolTensor = _legacy_type(bool)

from disthook import (  # noqa: F401
    accelerator,
    amp,
    backends,
    distributions,
    futures,
    multiprocessing,
    nn,
    optim,
)
from disthook._functions import *
from disthook._functions import NN_ALIASES as _NN_ALIASES

GradScaler = amp.GradScaler  # torch.GradScaler is torch.amp.GradScaler


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """``torch.vmap``, which is ``torch.func.vmap`` (``disthook.func`` loads on first use)."""
    from disthook.func import vmap as _vmap

    return _vmap(func, in_dims, out_dims, randomness, chunk_size=chunk_size)


from disthook import _dynamo, _inductor  # noqa: F401  (torch._dynamo.eval_frame, _inductor.config)
from disthook._functions import _nn_alias
from disthook._layout import layout, strided  # noqa: F401
from disthook._limits import (  # noqa: F401
    channels_last,
    channels_last_3d,
    contiguous_format,
    e,
    finfo,
    iinfo,
    inf,
    memory_format,
    nan,
    newaxis,
    pi,
    preserve_format,
)
from disthook._settings import *
from disthook.amp.autocast_mode import (  # noqa: F401
    autocast,
    clear_autocast_cache,
    get_autocast_dtype,
    is_autocast_cache_enabled,
    is_autocast_enabled,
    set_autocast_cache_enabled,
)
from disthook.compiler import compile  # noqa: F401  # torch's wrapper of a module, run eagerly
from disthook.cuda import OutOfMemoryError  # noqa: F401
from disthook.storage import TypedStorage, UntypedStorage  # noqa: F401

for _name in _NN_ALIASES:  # those nn.functional defines (same argument order as torch's)
    if _nn_alias(_name) is not None:
        globals()[_name] = _nn_alias(_name)
del _name, _nn_alias

from disthook import _foreach
from disthook.serialization import load, save  # noqa: F401
from disthook.torch_version import TORCH_VERSION as _TORCH_VERSION
from disthook.torch_version import TorchVersion as _TorchVersion

# what programs compare torch.__version__ with: the torch release whose semantics these follow
__version__ = _TorchVersion(_TORCH_VERSION)

_foreach.install(globals())  # torch._foreach_add_ and the rest

from disthook.tensor import takes_pin_memory as _takes_pin_memory

for _name in ("zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
              "arange", "linspace", "logspace", "eye", "empty_like", "zeros_like", "ones_like",
              "full_like", "rand_like", "randn_like", "empty_strided", "normal",
              "bartlett_window", "hann_window", "tril_indices", "scalar_tensor"):
    globals()[_name] = _takes_pin_memory(globals()[_name])  # torch's pin_memory=
del _name, _takes_pin_memory

from disthook._keywords import torch_keywords_in as _torch_keywords_in

_torch_keywords_in(globals())  # torch.cat(xs, axis=0), torch.sum(x, axis=1)
del _torch_keywords_in

if _find_spec("einops") is not None:  # einops takes disthook tensors (its backend, found
    try:                             # by einops itself)
        from disthook import _einops  # noqa: F401
    except ImportError:  # an einops without the backend base class: disthook goes on without
        pass
