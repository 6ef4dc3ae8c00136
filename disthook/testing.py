"""``torch.testing``: ``assert_close`` (how programs and their tests check one result against
another) and its deprecated forerunner ``assert_allclose``; ``make_tensor`` and ``FileCheck``
refuse at use.

Two tensors are close when, element by element, ``|actual - expected| <= atol + rtol *
|expected|`` (NaNs equal only with ``equal_nan``), after their shapes and (unless
``check_dtype=False``) dtypes agree. Without ``rtol``/``atol`` the tolerances are torch's for
the dtype; integers and booleans must be equal. Containers are compared item by item, and a
failure names the item. The messages are torch's.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from disthook import _dtype

__all__ = ["assert_allclose", "assert_close"]

# (rtol, atol) by dtype; a dtype not listed (integers, bool) compares exactly
DEFAULT_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
                      "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7),
                      "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7)}
NUMBER_DTYPES = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}


class _Mismatch(AssertionError):
    pass


def _tolerances(dtypes, rtol, atol) -> tuple:
    if (rtol is None) != (atol is None):
        missing = "atol" if atol is None else "rtol"
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {missing}.")
    if rtol is not None:
        return rtol, atol
    pairs = [DEFAULT_TOLERANCES.get(d, (0.0, 0.0)) for d in dtypes]
    return max((p[0] for p in pairs), default=0.0), max((p[1] for p in pairs), default=0.0)


def _diff_report(actual: np.ndarray, expected: np.ndarray, rtol, atol, equal_nan, scalar,
                 what: str) -> str | None:
    """None when close; else torch's report of the worst elements."""
    close = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if close.all():
        return None
    exact = rtol == 0 and atol == 0
    kind = "equal" if exact else "close"
    if actual.dtype.kind in "biu":
        abs_diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
        rel_base = (abs_diff.astype(np.float32), np.abs(expected).astype(np.float32))
    else:
        abs_diff = np.abs(actual - expected)
        rel_base = (abs_diff, np.abs(expected))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_diff = rel_base[0] / rel_base[1]

    def allowed(tol):
        return "" if exact else f" (up to {tol} allowed)"

    if scalar:
        return (f"Scalars are not {kind}!\n\nExpected {expected.item()} but got "
                f"{actual.item()}.\nAbsolute difference: {abs_diff.item()}{allowed(atol)}\n"
                f"Relative difference: {rel_diff.item()}{allowed(rtol)}")
    bad = int((~close).sum())
    total = close.size

    def worst(diff):
        flat = diff.reshape(-1)
        at = int(np.argmax(np.where(np.isnan(flat), np.inf, flat)))
        return flat[at].item(), tuple(int(i) for i in np.unravel_index(at, diff.shape))

    (a_val, a_at), (r_val, r_at) = worst(abs_diff), worst(rel_diff)
    return (f"{what} are not {kind}!\n\nMismatched elements: {bad} / {total} "
            f"({100 * bad / total:.1f}%)\nGreatest absolute difference: {a_val} at index "
            f"{a_at}{allowed(atol)}\nGreatest relative difference: {r_val} at index "
            f"{r_at}{allowed(rtol)}")


def _no_pair(actual, expected) -> TypeError:
    return TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} and "
                     f"{type(expected)}.")


def _compare(actual, expected, path: str, options: dict) -> None:
    from disthook.tensor import Tensor

    if actual is None and expected is None:
        return
    if isinstance(actual, Tensor) and isinstance(expected, Tensor):
        if not options["allow_subclasses"] and type(actual) is not type(expected):
            raise _no_pair(actual, expected)
        _compare_tensors(actual, expected, path, options)
        return
    number = (bool, int, float, complex)
    if isinstance(actual, number) and isinstance(expected, number):
        if options["check_dtype"] and type(actual) is not type(expected):
            raise _Mismatch(f"The (d)types do not match: {type(actual)} != {type(expected)}."
                            + _at(path))
        dtypes = [NUMBER_DTYPES[type(v)] for v in (actual, expected)]
        rtol, atol = _tolerances(dtypes, options["rtol"], options["atol"])
        report = _diff_report(np.asarray(actual), np.asarray(expected), rtol, atol,
                              options["equal_nan"], True, "Scalars")
        if report:
            raise _Mismatch(report + _at(path))
        return
    if isinstance(actual, str) or isinstance(expected, str):
        raise _no_pair(actual, expected)
    if isinstance(actual, Mapping) and isinstance(expected, Mapping):
        if set(actual) != set(expected):
            missing = sorted(set(expected) - set(actual), key=repr)
            extra = sorted(set(actual) - set(expected), key=repr)
            raise _Mismatch(f"The keys of the mappings do not match:\nMissing keys in the actual "
                            f"mapping: {missing}\nAdditional keys in the actual mapping: {extra}")
        for key in expected:
            _compare(actual[key], expected[key], f"{path}[{key!r}]", options)
        return
    if isinstance(actual, Sequence) and isinstance(expected, Sequence):
        if len(actual) != len(expected):
            raise _Mismatch(f"The length of the sequences mismatch: {len(actual)} != "
                            f"{len(expected)}")
        for index, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{path}[{index}]", options)
        return
    raise _no_pair(actual, expected)


def _at(path: str) -> str:
    return f"\n\nThe failure occurred for item {path}" if path else ""


def _compare_tensors(actual, expected, path: str, options: dict) -> None:
    checks = {"shape": lambda t: t.shape}
    if options["check_dtype"]:
        checks["dtype"] = lambda t: t.dtype
    if options["check_stride"]:
        checks["stride()"] = lambda t: t.stride()
    for name, read in checks.items():
        a, e = read(actual), read(expected)
        if a != e:
            raise _Mismatch(f"The values for attribute '{name}' do not match: {a} != {e}."
                            + _at(path))
    names = [str(t.dtype).replace("torch.", "") for t in (actual, expected)]
    rtol, atol = _tolerances(names, options["rtol"], options["atol"])
    # (bfloat16 compared as the float32 of the same values: numpy's loops have no bfloat16)
    a, e = (t._data.astype(np.float32) if t.dtype is _dtype.bfloat16 else t.detach()._data
            for t in (actual, expected))
    common = np.result_type(a, e)
    report = _diff_report(a.astype(common), e.astype(common), rtol, atol, options["equal_nan"],
                          actual.ndim == 0, "Tensor-likes")
    if report:
        raise _Mismatch(report + _at(path))


def assert_close(actual, expected, *, allow_subclasses: bool = True, rtol=None, atol=None,
                 equal_nan: bool = False, check_device: bool = True, check_dtype: bool = True,
                 check_layout: bool = True, check_stride: bool = False, msg=None) -> None:
    """AssertionError unless ``actual`` and ``expected`` are close (see the module's doc);
    ``msg`` replaces the message, or (a callable) rewrites it."""
    options = {"allow_subclasses": allow_subclasses, "rtol": rtol, "atol": atol,
               "equal_nan": equal_nan, "check_dtype": check_dtype, "check_stride": check_stride}
    _tolerances([], rtol, atol)  # both or neither, before anything is compared
    try:
        _compare(actual, expected, "", options)
    except _Mismatch as mismatch:
        text = str(mismatch)
        if callable(msg):
            text = msg(text)
        elif msg is not None:
            text = msg
        raise AssertionError(text) from None


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan: bool = True,
                    msg: str = "") -> None:
    """The deprecated form: ``expected`` may be a number or a list (made a tensor like
    ``actual``), dtypes need not agree and NaNs are equal by default."""
    from disthook.tensor import Tensor, as_tensor

    warnings.warn("`torch.testing.assert_allclose()` is deprecated since 1.12 and will be "
                  "removed in a future release. Please use `torch.testing.assert_close()` "
                  "instead. You can find detailed upgrade instructions in "
                  "https://github.com/pytorch/pytorch/issues/61844.", FutureWarning,
                  stacklevel=2)
    if not isinstance(actual, Tensor):
        actual = as_tensor(actual)
    if not isinstance(expected, Tensor):
        expected = as_tensor(expected, dtype=actual.dtype)
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                 check_dtype=False, msg=msg or None)
