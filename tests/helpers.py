"""check_op: the one helper every op test goes through.

For ``fn`` written against the torch API it checks, in float64:
forward against numpy (``np_fn``) and torch; the gradient of ``sum(out * w)`` (``w`` random,
fixed) against central differences and torch; with ``double=True`` the gradient of
``sum(grad * v)`` (a Hessian-vector product) against central differences of the first
gradient along ``v`` and torch. Torch is optional: without it only the numpy and
finite-difference checks run.
"""
from __future__ import annotations

import numpy as np

import disthook

try:
    import torch
except ImportError:  # the finite-difference checks need no torch
    torch = None

FD_EPS = 1e-6
SEED = 0


def lib(t):
    """The module ``t`` belongs to (disthook or torch), so one ``fn`` runs under both."""
    return disthook if isinstance(t, disthook.Tensor) else torch


def nnf(name: str, *args, **kwargs):
    """``torch.nn.functional.<name>(x, *args, **kwargs)`` as a ``torch_fn``, looked up late."""
    return lambda x: getattr(torch.nn.functional, name)(x, *args, **kwargs)


def check_op(fn, *inputs, torch_fn=None, np_fn=None, atol=1e-6, fd_atol=1e-5, grad=True,
             double=False, low=-2.0, high=2.0, name=True):
    """Check ``fn`` on ``inputs`` (shapes become float64 uniform(low, high) arrays that
    require grad; arrays are taken as given and require grad when floating)."""
    rng = np.random.default_rng(SEED)
    arrays = [_input_array(x, rng, low, high) for x in inputs]
    diff = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]

    outs = _outputs(fn(*_dh_inputs(arrays, diff)))
    if np_fn is not None:
        _compare_forward(outs, _as_list(np_fn(*[a.copy() for a in arrays])), atol, "numpy")
    floats = [i for i, o in enumerate(outs) if o._data.dtype.kind == "f"]
    weights = [rng.standard_normal(outs[i].shape) for i in floats]
    vectors = [rng.standard_normal(arrays[i].shape) for i in diff]
    grad = grad and bool(diff) and any(outs[i].requires_grad for i in floats)

    if grad:
        grads = _dh_grads(fn, arrays, diff, floats, weights)
        fd = _fd_grads(lambda a: _dh_loss(fn, a, diff, floats, weights), arrays, diff)
        _compare_grads(grads, fd, fd_atol, "finite differences")
    if grad and double:
        hvp = _dh_hvp(fn, arrays, diff, floats, weights, vectors)
        fd2 = _fd_directional(lambda a: _dh_grads(fn, a, diff, floats, weights), arrays,
                              diff, vectors)
        _compare_grads(hvp, fd2, fd_atol, "finite differences of the gradient")

    if torch is None:
        return
    tfn = torch_fn or fn
    t_outs = _outputs(tfn(*_torch_inputs(arrays, diff)))
    _compare_forward(outs, t_outs, atol, "torch", name=name)
    if grad:
        _compare_grads(grads, _torch_grads(tfn, arrays, diff, floats, weights), atol, "torch")
    if grad and double:
        _compare_grads(hvp, _torch_hvp(tfn, arrays, diff, floats, weights, vectors), atol,
                       "torch second order")


# ---- inputs and outputs -----------------------------------------------------------------

def _input_array(x, rng, low, high) -> np.ndarray:
    if isinstance(x, tuple):
        return np.asarray(rng.uniform(low, high, size=x), dtype=np.float64)
    return np.array(x)


def _dh_inputs(arrays, diff):
    return [disthook.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]


def _torch_inputs(arrays, diff):
    return [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]


def _outputs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _as_list(out) -> list:
    return [np.asarray(o) for o in _outputs(out)]


def _np(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t
    return np.asarray(t.detach().numpy(force=True))


def _dtype_name(t) -> str:
    return np.asarray(t).dtype.name if isinstance(t, np.ndarray) else str(t.dtype)


def _compare_forward(outs, expected, atol, what, name=False) -> None:
    assert len(outs) == len(expected), f"{what}: {len(outs)} outputs, expected {len(expected)}"
    for k, (o, e) in enumerate(zip(outs, expected)):
        got = o._data
        want = _np(e)
        assert got.shape == want.shape, f"{what} output {k}: shape {got.shape} != {want.shape}"
        if not isinstance(e, np.ndarray):
            assert str(o.dtype) == str(e.dtype), f"{what} output {k}: dtype {o.dtype} != {e.dtype}"
            if name and e.grad_fn is not None:
                got_name = o.grad_fn.name() if o.grad_fn is not None else None
                assert got_name == e.grad_fn.name(), (
                    f"{what} output {k}: grad_fn {got_name} != {e.grad_fn.name()}")
        np.testing.assert_allclose(got, want, rtol=atol, atol=atol,
                                   err_msg=f"forward vs {what}, output {k}")


def _compare_grads(got, want, atol, what) -> None:
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"grad {k} vs {what}: shape {g.shape} != {w.shape}"
        np.testing.assert_allclose(g, w, rtol=atol, atol=atol, err_msg=f"grad {k} vs {what}")


# ---- disthook: loss, gradient, Hessian-vector product -----------------------------------

def _weighted_sum(lib_, outs, floats, weights):
    parts = [(outs[i] * lib_.tensor(w)).sum() for i, w in zip(floats, weights)]
    return sum(parts[1:], parts[0])


def _dh_loss(fn, arrays, diff, floats, weights) -> float:
    """``sum(out * w)`` of ``fn``'s outputs, summed in numpy (float64, as the graph's sum
    of ``_dh_grads`` is): the finite differences need its value only."""
    with disthook.no_grad():
        outs = _outputs(fn(*_dh_inputs(arrays, diff)))
    return float(sum(np.sum(outs[i]._data * w) for i, w in zip(floats, weights)))


def _zeros_for_none(grads, tensors) -> list:
    return [np.zeros(t.shape) if g is None else _np(g).copy() for g, t in zip(grads, tensors)]


def _dh_grads(fn, arrays, diff, floats, weights) -> list:
    xs = _dh_inputs(arrays, diff)
    loss = _weighted_sum(disthook, _outputs(fn(*xs)), floats, weights)
    wrt = [xs[i] for i in diff]
    return _zeros_for_none(disthook.autograd.grad(loss, wrt, allow_unused=True), wrt)


def _dh_hvp(fn, arrays, diff, floats, weights, vectors) -> list:
    return _hvp(disthook, fn, _dh_inputs(arrays, diff), diff, floats, weights, vectors)


def _hvp(lib_, fn, xs, diff, floats, weights, vectors) -> list:
    """Gradient of sum(grad_i * v_i): second order, through create_graph=True."""
    loss = _weighted_sum(lib_, _outputs(fn(*xs)), floats, weights)
    wrt = [xs[i] for i in diff]
    grads = lib_.autograd.grad(loss, wrt, create_graph=True, allow_unused=True)
    terms = [(g * lib_.tensor(v)).sum() for g, v in zip(grads, vectors)
             if g is not None and g.requires_grad]
    if not terms:  # the gradient does not depend on the inputs: second order is zero
        return [np.zeros(t.shape) for t in wrt]
    second = lib_.autograd.grad(sum(terms[1:], terms[0]), wrt, allow_unused=True)
    return _zeros_for_none(second, wrt)


def _fd_grads(loss, arrays, diff) -> list:
    """Central differences of the scalar ``loss(arrays)`` w.r.t. each differentiable input."""
    grads = []
    for i in diff:
        g = np.zeros(arrays[i].shape)
        for j in np.ndindex(arrays[i].shape):
            plus, minus = list(arrays), list(arrays)  # the other inputs as they are
            plus[i], minus[i] = arrays[i].copy(), arrays[i].copy()
            plus[i][j] += FD_EPS
            minus[i][j] -= FD_EPS
            g[j] = (loss(plus) - loss(minus)) / (2 * FD_EPS)
        grads.append(g)
    return grads


def _fd_directional(grads, arrays, diff, vectors) -> list:
    """Central differences of the gradient along ``vectors``: (g(x + e v) - g(x - e v)) / 2e.

    That is the Hessian times ``v``, every component of it, from two gradient evaluations
    (the Hessian of a scalar loss is symmetric, so it is also the gradient of ``grad . v``,
    which the double backward computes); the loss's own gradient is checked element by
    element against central differences first."""
    plus = [a.copy() for a in arrays]
    minus = [a.copy() for a in arrays]
    for i, v in zip(diff, vectors):
        plus[i] += FD_EPS * v
        minus[i] -= FD_EPS * v
    return [(p - m) / (2 * FD_EPS) for p, m in zip(grads(plus), grads(minus))]


# ---- torch ------------------------------------------------------------------------------

def _torch_grads(fn, arrays, diff, floats, weights) -> list:
    xs = _torch_inputs(arrays, diff)
    loss = _weighted_sum(torch, _outputs(fn(*xs)), floats, weights)
    wrt = [xs[i] for i in diff]
    return _zeros_for_none(torch.autograd.grad(loss, wrt, allow_unused=True), wrt)


def _torch_hvp(fn, arrays, diff, floats, weights, vectors) -> list:
    return _hvp(torch, fn, _torch_inputs(arrays, diff), diff, floats, weights, vectors)


# ---- small models with batch norm, for tests of a deployed model's tensors -----------------

def norm_tree():
    """A model whose forward runs on the client once deployed (Linear, BatchNorm1d, Linear),
    input width 4, 2 outputs."""
    from disthook import nn

    class NormNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.norm, self.b = nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2)

        def forward(self, x):
            return self.b(disthook.relu(self.norm(self.a(x))))

    return NormNet()


def norm_chain():
    """The same kind of model as an ``nn.Sequential``: a chain of stages once deployed."""
    from disthook import nn

    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 6),
                         nn.Tanh(), nn.Linear(6, 2))


def link_bytes(frames, identity: bytes = b"w1>next>7") -> bytes:
    """What a local link (workers/links.py) writes for the message ``frames``, as the
    kernel carries it to the other end."""
    import socket

    from workers.links import Link

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    Link(a, identity).send_multipart(frames)
    a.close()
    out = b""
    while chunk := b.recv(1 << 16):
        out += chunk
    b.close()
    return out


# ---- a program run in one process and on a deployed model, their logs compared -----------------

def same_logs(got, want, rtol: float = 1e-5, atol: float = 1e-6, where: str = "log") -> None:
    """Two logs of one program: arrays close (dtype and shape equal), None where None, lists
    and tuples item by item, anything else equal."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: {type(got).__name__}, not an array"
        assert got.dtype == want.dtype and got.shape == want.shape, (
            f"{where}: {got.dtype}{got.shape} against {want.dtype}{want.shape}")
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (
            f"{where}: {got!r} against {want!r}")
        for i, (a, b) in enumerate(zip(got, want)):
            same_logs(a, b, rtol, atol, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} against {want!r}"


def deployed_run(cluster, make, run, **deploy) -> tuple:
    """``run`` (a program, given the model) on ``make()`` in this process and on ``make()``
    deployed on ``cluster`` (``deploy``: deploy's options, 2 stages unless said): the two
    logs, the deployed one first; the deployment closed."""
    want = run(make())
    remote = cluster.deploy(make(), **{"stages": 2, **deploy})
    try:
        return run(remote), want
    finally:
        remote.close()


def micro_batched_grads(net, x, y, chunks: int) -> dict:
    """``train_step``'s arithmetic in one process: each of ``chunks`` equal micro-batches'
    cross-entropy, scaled by its share of the rows, backward; the parameters' gradients by
    name."""
    rows = len(x) // chunks
    for mb in range(chunks):
        piece = slice(mb * rows, (mb + 1) * rows)
        loss = disthook.nn.functional.cross_entropy(net(x[piece]), y[piece])
        (loss * (rows / len(x))).backward()
    return {n: p.grad.numpy() for n, p in net.named_parameters()}


class TwoLayers(disthook.nn.Module):
    """Linear(3, 4), tanh, Linear(4, 2) as parts ``p`` and ``q``: a tree deploy over 2
    workers places one on each."""

    def __init__(self):
        super().__init__()
        self.p, self.q = disthook.nn.Linear(3, 4), disthook.nn.Linear(4, 2)

    def forward(self, x):
        return self.q(disthook.tanh(self.p(x)))


TANH_X = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)


class TanhNet(disthook.nn.Module):
    """Linear(4, 8), tanh, Linear(8, 2) in a forward of its own, as parts ``a`` and ``b``
    (seeded: two instances hold the same weights)."""

    def __init__(self):
        super().__init__()
        disthook.manual_seed(0)
        self.a, self.b = disthook.nn.Linear(4, 8), disthook.nn.Linear(8, 2)

    def forward(self, x):
        return self.b(disthook.tanh(self.a(x)))


def tanh_chain():
    """The same layers as an ``nn.Sequential`` (a chain once deployed), seeded alike."""
    nn = disthook.nn
    disthook.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
