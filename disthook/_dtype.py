"""dtypes: numpy dtypes under PyTorch's names.

They print under torch's names (``torch.float32``, legacy type ``torch.FloatTensor``) so that
printed output and string comparisons in torch programs are unchanged under
``import disthook as torch``.
"""
from __future__ import annotations

import numpy as np

try:  # numpy has no bfloat16; ml_dtypes (the JAX project's dtype package) gives it one
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - exercised by hiding the module
    _ml_dtypes = None

BF16 = None if _ml_dtypes is None else np.dtype(_ml_dtypes.bfloat16)  # its numpy dtype


def kind(np_dtype) -> str:
    """numpy's kind letter of ``np_dtype``, with bfloat16 a float ("f"; numpy says "V")."""
    return "f" if np_dtype == BF16 and BF16 is not None else np_dtype.kind


_CAST_ORDER = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def can_cast(src_np, dst_np) -> bool:
    """torch's rule for writing a result of numpy dtype ``src_np`` into ``dst_np`` (in-place
    ops, out=, torch.can_cast): never complex into real, floating into integer, nor anything
    but bool into bool; any integer into any other (uint8 takes int16, as torch)."""
    return _CAST_ORDER[kind(src_np)] <= _CAST_ORDER[kind(dst_np)]


class dtype:
    """A tensor element type; wraps a numpy dtype."""

    __slots__ = ("name", "np", "is_floating_point", "is_signed", "itemsize", "legacy_type")

    def __init__(self, name: str, np_dtype, legacy_type: str):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.is_floating_point = kind(self.np) == "f"
        self.is_signed = kind(self.np) in "fic"
        self.itemsize = self.np.itemsize
        self.legacy_type = legacy_type

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __reduce__(self):
        if self.np == BF16:  # (its numpy str, "<V2", names no dtype: by its name)
            return (_by_name, (self.name,))
        return (from_numpy_dtype, (self.np.str,))

    @property
    def is_complex(self) -> bool:
        return self.np.kind == "c"

    def to_complex(self) -> dtype:
        """The complex dtype whose parts are of this float dtype (float16's and bfloat16's
        are complex64: numpy has no complex32); a complex dtype is its own."""
        if kind(self.np) not in "fc":
            raise RuntimeError(f"to_complex is only supported for floating point dtypes, "
                               f"got {self}")
        return complex128 if self.np in (np.float64, np.complex128) else complex64

    def to_real(self) -> dtype:
        """The float dtype of a complex dtype's parts; a real dtype is its own."""
        if self.np.kind != "c":
            return self
        return float64 if self.np == np.complex128 else float32


float16 = half = dtype("float16", np.float16, "torch.HalfTensor")
float32 = float = dtype("float32", np.float32, "torch.FloatTensor")
float64 = double = dtype("float64", np.float64, "torch.DoubleTensor")
int8 = dtype("int8", np.int8, "torch.CharTensor")
int16 = short = dtype("int16", np.int16, "torch.ShortTensor")
int32 = int = dtype("int32", np.int32, "torch.IntTensor")
int64 = long = dtype("int64", np.int64, "torch.LongTensor")
uint8 = dtype("uint8", np.uint8, "torch.ByteTensor")
bool = dtype("bool", np.bool_, "torch.BoolTensor")
complex64 = cfloat = dtype("complex64", np.complex64, "torch.ComplexFloatTensor")
complex128 = cdouble = dtype("complex128", np.complex128, "torch.ComplexDoubleTensor")

class _NotStored(dtype):
    """A dtype torch has that disthook cannot hold tensors of (numpy has no such type): the
    name exists, so that programs that name it (``{"bfloat16": torch.bfloat16, ...}[x]``,
    ``x.dtype == torch.bfloat16``) run, and making a tensor of it raises a TypeError that
    says so."""

    __slots__ = ()

    def __init__(self, name: str, itemsize: int, legacy_type: str):
        self.name, self.legacy_type = name, legacy_type
        self.is_floating_point = self.is_signed = True
        self.itemsize = itemsize

    @property
    def np(self):
        raise TypeError(f"torch.{self.name} tensors cannot be made here: disthook keeps "
                        f"tensors in numpy, which has no {self.name}; use torch.float32 (or "
                        "torch.float16)")

    @property
    def is_complex(self) -> bool:
        return False

    def __reduce__(self):
        return (_by_name, (self.name,))


def _by_name(name: str) -> dtype:
    return globals()[name]


_not_stored = _by_name  # (the name pickles of earlier versions call)


ALL = (float16, float32, float64, int8, int16, int32, int64, uint8, bool, complex64, complex128)
if BF16 is None:
    bfloat16 = _NotStored("bfloat16", 2, "torch.BFloat16Tensor")
else:
    bfloat16 = dtype("bfloat16", BF16, "torch.BFloat16Tensor")
    ALL = (*ALL, bfloat16)
_BY_NP = {d.np: d for d in ALL}
_BY_LEGACY = {d.legacy_type: d for d in ALL}


def from_numpy_dtype(np_dtype) -> dtype:
    """The disthook dtype for a numpy dtype; TypeError names it when unsupported."""
    d = _BY_NP.get(np.dtype(np_dtype))
    if d is None:
        raise TypeError(
            f"can't convert np.ndarray of type numpy.{np.dtype(np_dtype).name}. The only supported "
            "types are: float64, float32, float16, complex64, complex128, int64, int32, int16, int8, "
            "uint8, and bool."
        )
    return d


def bfloat16_from_bits(bits: np.ndarray) -> tuple:
    """bfloat16 values from their 16-bit patterns (uint16, any byte order): a bfloat16 array
    over the same memory where it can be, and False; without ml_dtypes the float32 array of
    the same values (a bfloat16 is the high half of that float32), and True."""
    if not bits.dtype.isnative:
        bits = bits.astype(bits.dtype.newbyteorder("="))
    if BF16 is not None:
        return bits.view(BF16), False
    return (bits.astype(np.uint32) << 16).view(np.float32), True


def as_buffer(array: np.ndarray) -> np.ndarray:
    """``array`` in a form Python's buffer protocol takes (memoryview, file writes): a
    bfloat16 one as its 16-bit patterns (uint16, the same memory), any other as it is."""
    return array.view(np.uint16) if array.dtype == BF16 and BF16 is not None else array


def from_legacy(name: str) -> dtype:
    try:
        return _BY_LEGACY[name]
    except KeyError:
        raise ValueError(f"invalid type: '{name}'") from None


_C_TYPE_NAMES = {float16: "c10::Half", float32: "float", float64: "double", int8: "signed char",
                 int16: "short int", int32: "int", int64: "long int", uint8: "unsigned char",
                 bool: "bool", complex64: "c10::complex<float>",
                 complex128: "c10::complex<double>", bfloat16: "c10::BFloat16"}


def scalar_type_name(d: dtype) -> str:
    """torch's ScalarType name as its error messages print it: ``Float``, ``Long``."""
    return d.legacy_type[len("torch."):-len("Tensor")]


def c_type_name(d: dtype) -> str:
    """The C++ element type as some of torch's error messages print it: ``float``, ``long int``."""
    return _C_TYPE_NAMES[d]


_default = [float32]


def get_default_dtype() -> dtype:
    return _default[0]


def default_complex_dtype() -> dtype:
    """The complex dtype a Python complex number becomes: the default float dtype's."""
    return _default[0].to_complex()


def set_default_dtype(d: dtype) -> None:
    if not isinstance(d, dtype) or not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default[0] = d


# ---- the default dtype of a deployed model's client, on its workers ------------------------

_SENDABLE = {d.name: d for d in (float16, float32, float64, bfloat16) if d in ALL}


def default_dtype_field() -> dict:
    """What a request that computes on a worker carries of this process's default dtype:
    nothing for float32 (a worker's own), else its name, so that ``torch.zeros(n)`` in a
    placed module's forward makes what it makes in one process."""
    d = _default[0]
    return {} if d is float32 or d.name not in _SENDABLE else {"default_dtype": d.name}


class default_dtype_as:
    """The default dtype named by a request (None: as it is) while the request computes."""

    def __init__(self, name: str | None):
        if name is not None and name not in _SENDABLE:
            raise TypeError(f"default_dtype must name one of {sorted(_SENDABLE)}, got {name!r}")
        self.d = None if name is None else _SENDABLE[name]

    def __enter__(self):
        self.before = _default[0]
        if self.d is not None:
            _default[0] = self.d

    def __exit__(self, *exc):
        _default[0] = self.before
        return False


def to_dtype(d) -> dtype:
    """Accept a disthook dtype, a numpy dtype or a python type (float, int, bool)."""
    if isinstance(d, dtype):
        return d
    import builtins

    if d is builtins.float:
        return get_default_dtype()
    if d is builtins.int:
        return int64
    if d is builtins.bool:
        return bool
    return from_numpy_dtype(d)
