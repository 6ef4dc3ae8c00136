"""What an enabled ``autocast("cpu")`` region does to the ops it covers, as torch 2.13 does.

torch's CPU autocast sorts ops in three kinds (measured: the dtype each op returns inside
``torch.autocast("cpu", dtype=torch.bfloat16)`` given float32 inputs):

- ``LOWER`` (matmul, mm, bmm, baddbmm, addmm, addbmm, linear, the convolutions and
  transposed convolutions, einsum and tensordot (which reach bmm/mm), prelu,
  scaled_dot_product_attention): float32 and float16 tensor arguments are cast to the
  region's dtype, so the op computes and returns it;
- ``FP32`` (the losses: cross_entropy, nll_loss, mse_loss, l1_loss, smooth_l1_loss,
  huber_loss, binary_cross_entropy(_with_logits), kl_div and the margin losses; prod,
  cdist; reflection padding of 1 or 2 dims and replication padding): bfloat16 and float16
  tensor arguments are cast to float32;
- every other op (layer_norm, softmax, the activations, sums, mv, dot, addmv, addr ...)
  computes in its inputs' dtype, as outside the region.

float64 tensors are never cast. A float32 leaf that requires grad (a weight), cast to the
region's dtype while grad mode is on and the region's cache is enabled, is cast once: the
cast is kept until the outermost region exits and every later use in the region takes it
(torch's cache), so the uses' gradients meet in the region's dtype at the one cast's node
and reach the weight as one float32 gradient. The op runs with autocast off inside (so the ops it is
written from cast nothing again), as torch's kernels run below autocast's dispatch key.
"""
from __future__ import annotations

import functools
import threading

from disthook import _dtype

LOWER, FP32 = "lower", "fp32"
active = [0]  # CPU autocast regions open now, in any thread (0: nothing to check)
_count_lock = threading.Lock()


def count_region(step: int) -> None:
    """A CPU autocast region opens (+1) or closes (-1), in any thread."""
    with _count_lock:  # (+= on a shared int is not atomic across threads)
        active[0] += step


def _state():
    from disthook.amp import autocast_mode

    return autocast_mode._local()


def _cached_cast(x, to, state):
    """``x.to(to)``, or the region's cast of ``x`` if it has one, as torch's cache: only a
    float32 leaf that requires grad and is no view, cast with grad mode on and the cache
    enabled, is kept (keyed by the tensor alone, whatever dtype the region nesting it asks;
    it then holds the cast made first)."""
    from disthook.autograd import grad_mode

    if not (x._data.dtype == _dtype.float32.np and x._requires_grad and x._grad_fn is None
            and x._base is None and state.cache_enabled and grad_mode.is_grad_enabled()):
        return x.to(to)
    kept = state.casts.get(id(x))
    if kept is None:  # (the entry holds x, so its id is not reused while it is kept)
        kept = state.casts[id(x)] = (x, x.to(to))
    return kept[1]


def _cast(x, policy: str, to, state):
    from disthook.tensor import Tensor

    if isinstance(x, Tensor):
        d = x._data.dtype
        if policy == LOWER and d in (_dtype.float32.np, _dtype.float16.np) and d != to.np:
            return _cached_cast(x, to, state)
        if policy == FP32 and d in (_dtype.float16.np, _dtype.BF16):
            return x.float()
        return x
    if isinstance(x, (list, tuple)) and any(isinstance(v, Tensor) for v in x):
        return type(x)(_cast(v, policy, to, state) for v in x)
    return x


def covered(policy: str):
    """Decorate an op's entry point with its kind (``LOWER`` or ``FP32``)."""

    def decorate(fn):
        @functools.wraps(fn)
        def autocast_cpu(*args, **kwargs):
            if not active[0]:
                return fn(*args, **kwargs)
            state = _state()
            if not state.enabled.get("cpu", False):
                return fn(*args, **kwargs)
            to = state.dtype["cpu"]
            # last argument first, as torch's wrapper makes its casts (its nodes then run
            # in torch's order in the backward: the first argument's gradient first)
            kwargs = dict(reversed([(k, _cast(v, policy, to, state))
                                    for k, v in reversed(kwargs.items())]))
            args = tuple(reversed([_cast(a, policy, to, state) for a in reversed(args)]))
            state.enabled["cpu"] = False
            try:
                return fn(*args, **kwargs)
            finally:
                state.enabled["cpu"] = True

        return autocast_cpu

    return decorate
