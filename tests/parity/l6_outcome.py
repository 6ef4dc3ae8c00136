"""What a call gave, for comparing disthook with torch in the L6 parity tests."""
from __future__ import annotations


def outcome(fn):
    """``fn()``'s result as (dtype, shape, values), or the error it raised as (type, first
    line without the hint disthook may add after a ';')."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - the error is the result compared
        return (type(e).__name__, str(e).splitlines()[0].split(";")[0])
    if not hasattr(r, "dtype"):
        return r
    return (str(r.dtype).replace("torch.", ""), tuple(r.shape), r.tolist())
