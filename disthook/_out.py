"""``out=``: a function's result written into tensors the caller gave, as torch does it.

The result is computed as usual, then copied into ``out`` (resized when its shape differs, with
torch's warning when it had elements; cast to its dtype within the same kind or wider), and
``out`` is returned. No graph leads through ``out``, so torch refuses it while any argument
requires grad; under ``no_grad`` it is allowed.
"""
from __future__ import annotations

import functools
import warnings

from disthook._dtype import can_cast, scalar_type_name
from disthook.autograd import grad_mode


def write_out(name: str, result, out):
    """``out`` (a tensor, or a tuple of tensors for a function with several results) holding
    ``result``; ``name`` is the function's, for the errors."""
    results = tuple(result) if isinstance(result, tuple) else (result,)
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(results):
        raise TypeError(f"{name}(): argument 'out' must be a tuple of {len(results)} Tensors, "
                        f"not {type(out).__name__} of {len(outs)}")
    if grad_mode.is_grad_enabled() and any(r.requires_grad for r in results):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad.")
    for r, o in zip(results, outs):
        _copy_into(r, o)
    return outs[0] if not isinstance(result, tuple) else _same_kind_of_tuple(result, outs)


def check_pin_memory(pin_memory) -> None:
    """A factory's ``pin_memory=``: False is what every tensor here is; True raises what a torch
    build without an accelerator raises (its words)."""
    if pin_memory:
        raise RuntimeError("pin_memory=True requires a CUDA or other accelerator backend; no "
                           "pinned memory allocator is available on this system.")


def check_layout(layout) -> None:
    """A factory's ``layout=``: ``torch.strided`` (or None) is what every tensor here is; a
    sparse layout is refused with the reason."""
    if layout is not None and getattr(layout, "name", None) != "strided":
        raise NotImplementedError(
            f"layout={layout!r} is not supported by disthook: sparse layouts are not "
            "modelled, every tensor is dense and strided; leave layout= out or pass "
            "torch.strided")


def factory_out(factory):
    """``factory`` (zeros, arange, ...) taking ``out=`` as torch's factories do: the result is
    made in ``out``'s dtype unless ``dtype`` is given, when the two must agree (tacotron2's
    ``torch.arange(0, n, out=torch.LongTensor(n))``), then written into ``out``; and torch's
    ``pin_memory=`` (``check_pin_memory``) and ``layout=`` (``check_layout``), in the same call."""
    name = factory.__name__

    @functools.wraps(factory)
    def made(*args, out=None, pin_memory=False, layout=None, **kwargs):
        if pin_memory:
            check_pin_memory(pin_memory)
        if layout is not None:
            check_layout(layout)
        if out is None:
            return factory(*args, **kwargs)
        from disthook.tensor import Tensor

        if not isinstance(out, Tensor):
            raise TypeError(f"{name}(): argument 'out' must be Tensor, not "
                            f"{type(out).__name__}")
        dtype = kwargs.get("dtype")
        if dtype is None:
            kwargs["dtype"] = out.dtype
        elif dtype != out.dtype:
            raise RuntimeError(f"dtype {scalar_type_name(dtype)} does not match dtype of out "
                               f"parameter ({scalar_type_name(out.dtype)})")
        return write_out(name, factory(*args, **kwargs), out)

    made.takes_pin_memory = True
    return made


def _same_kind_of_tuple(result: tuple, outs: tuple) -> tuple:
    """``outs`` as the kind of tuple ``result`` is, so ``.values``, ``.indices``, ``.Q`` work."""
    if hasattr(result, "_fields"):
        return type(result)(*outs)
    if hasattr(result, "_name"):  # (values, indices) of max, min, sort, topk
        return type(result)(*outs, f"{result._name}_out")
    if hasattr(result, "_names"):  # torch.linalg's named results
        return type(result)(result._names, outs)
    return outs


def _copy_into(result, out) -> None:
    from disthook.tensor import Tensor

    if not isinstance(out, Tensor):
        raise TypeError(f"argument 'out' must be Tensor, not {type(out).__name__}")
    if not can_cast(result._data.dtype, out._data.dtype):
        raise RuntimeError(f"result type {scalar_type_name(result.dtype)} can't be cast to "
                           f"the desired output type {scalar_type_name(out.dtype)}")
    with grad_mode.no_grad():
        if out.shape != result.shape:
            if out.numel():
                warnings.warn(
                    f"An output with one or more elements was resized since it had shape "
                    f"{list(out.shape)}, which does not match the required output shape "
                    f"{list(result.shape)}. This behavior is deprecated, and in a future "
                    "PyTorch release outputs will not be resized unless they have zero "
                    "elements. You can explicitly reuse an out tensor t by resizing it, "
                    "inplace, to zero elements with t.resize_(0).", UserWarning, stacklevel=4)
            out.resize_(*result.shape)
        out.copy_(result)

