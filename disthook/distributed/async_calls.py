"""Calls that do not wait: a placed part's call, an op on kept values, or a call's backward
returns at once when what it answers can be known beforehand, and the program goes on while
the worker computes. The workers run a client's requests in the order they were sent, so
the values the call keeps can be used by the next request at once; the answer comes later
(``_Hub.send_async``), and a failure is raised by the next request the program waits for.

What the answer will be is learnt: the first call of a part (or op) with given arguments'
shapes, dtypes, layouts on the worker and flags waits, and its answer's form is kept
(``Forms``): the output's structure and each tensor's shape, dtype, layout and ``requires_grad``, whether the call
drew random numbers, and for a backward which input gradients came. A later call with the
same key goes without waiting; its answer is checked against the form when it comes, and a
difference fails the program's next waited request, saying so (never a silent difference).

A call waits as before whenever its timing could show: client hooks on the deployment (they
run in the call), a call that draws from the client's random stream (dropout in training:
the stream comes back with the answer), ``run_until``.
"""
from __future__ import annotations

import numpy as np

from disthook.distributed.remote_values import RemoteValue
from disthook.tensor import Tensor

__all__ = ["Forms", "call_key", "layouts", "may_go_on", "params_form"]


class Forms:
    """Answers' forms by call key (at most ``limit``; the oldest go first)."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self.forms: dict = {}

    def get(self, key):
        return self.forms.get(key)

    def forget(self) -> None:
        """The model changed in a way that may change an answer's form (a parameter's
        ``requires_grad``, a module's attribute, mode, dtype or children): none is known."""
        self.forms.clear()

    def put(self, key, form) -> None:
        self.forms[key] = form
        while len(self.forms) > self.limit:
            del self.forms[next(iter(self.forms))]


def forget(model) -> None:
    """No answer's form of ``model`` is known any more (``Forms.forget``)."""
    forms = model.__dict__.get("_forms")
    if forms is not None:
        forms.forget()


def may_go_on(model) -> bool:
    """Whether a call of ``model`` may return before its answer: no client hooks (they run
    in the call, and their effects must be there when it returns), no run_until."""
    hub = model._hub
    return not hub.hooks and model.__dict__.get("_stop_at") is None and not hub.lost


def call_key(*parts, args=None) -> tuple:
    """A hashable key of a call: ``parts`` and each argument's form (a tensor by shape,
    dtype, layout on the worker, flags and whether it is a leaf; plain values as they are)."""
    return (_freeze(parts), _freeze(args))


def params_form(params):
    """An op call's encoded parameters as its backward's key takes them: arrays by shape and
    dtype, not by value (a loss's targets change every step, the form of its gradients
    does not), everything else as it is."""
    if isinstance(params, np.ndarray):
        return ("a", params.shape, params.dtype.str)
    if isinstance(params, dict):
        return {k: params_form(v) for k, v in params.items()}
    if isinstance(params, (list, tuple)):
        return type(params)(params_form(v) for v in params)
    return params


_PLAIN = frozenset({type(None), bool, int, float, str})
# the array slot of a Tensor: for a kept value, its metadata array (no fetch, no look at the
# caller's bytecode, as a read of the ``_data`` property would take)
_SLOT_DATA = Tensor.__dict__["_data"]


def _freeze(value):
    kind = type(value)
    if kind in _PLAIN:  # (the common cases first: a key is made for every call)
        return value
    if kind is tuple or kind is list:
        return (kind.__name__, tuple([_freeze(v) for v in value]))
    if isinstance(value, Tensor):  # (a parameter kept on a worker reads its own way)
        data = _SLOT_DATA.__get__(value) if kind is RemoteValue or kind is Tensor \
            else value._data
        return ("t", data.shape, data.dtype.str, _layout(value, data),
                bool(value._requires_grad), value._grad_fn is None)  # (a leaf: one there)
    if isinstance(value, np.dtype):
        return ("dt", value.str)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("d", tuple((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, np.ndarray):
        return ("a", value.shape, value.dtype.str, hash(value.tobytes()))
    if isinstance(value, np.generic):
        return ("s", value.item())
    if isinstance(value, slice):
        return ("sl", _freeze(value.start), _freeze(value.stop), _freeze(value.step))
    return ("o", repr(value))


def _layout(t: Tensor, data: np.ndarray):
    """How ``t`` lies on the worker a call sends it to, where an op's output and a
    backward's gradients follow it: a kept value's strides there, unless C-contiguous;
    None for C-contiguous, as a tensor sent by value always arrives."""
    if type(t) is not RemoteValue or data.flags.c_contiguous:
        return None
    return data.strides


def layouts(tensors) -> tuple:
    """``_layout`` of each of a call's input ``tensors`` (part of its backward's key: each
    input's gradient comes in that input's layout on the worker)."""
    return tuple(_layout(t, _SLOT_DATA.__get__(t)) if type(t) is RemoteValue else None
                 for t in tensors)


def form_of(output_data) -> object:
    """The form of a packed answer: each kept tensor's record without its id and value."""
    if isinstance(output_data, dict):
        if isinstance(output_data.get("kept"), str):
            return {k: v for k, v in output_data.items() if k not in ("kept", "value")}
        return {k: form_of(v) for k, v in output_data.items()}
    if isinstance(output_data, list):
        return [form_of(v) for v in output_data]
    return output_data


def with_ids(form, prefix: str, counter: list | None = None):
    """The packed answer a form predicts for a call whose kept values are ``<prefix>.<i>``."""
    counter = [0] if counter is None else counter
    if isinstance(form, dict):
        if "shape" in form and "dtype" in form and "requires_grad" in form:
            record = dict(form, kept=f"{prefix}.{counter[0]}")
            counter[0] += 1
            return record
        return {k: with_ids(v, prefix, counter) for k, v in form.items()}
    if isinstance(form, list):
        return [with_ids(v, prefix, counter) for v in form]
    return form


def differs(form, output_data) -> str | None:
    """What in an answer differs from the form it was predicted by (None: nothing)."""
    got = form_of(output_data)
    if got == form:
        return None
    return f"expected {_short(form)}, got {_short(got)}"


def _short(form) -> str:
    text = repr(form)
    return text if len(text) <= 300 else text[:300] + "..."
