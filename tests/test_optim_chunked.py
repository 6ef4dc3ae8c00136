"""SGD, Adam, RMSprop and Adagrad update plain contiguous parameters on numpy arrays a chunk at a time
(optim.optimizer.flat_arrays / chunked); any other parameter takes the Tensor ops. Both
paths must give the same bits, state and version counts."""
import numpy as np
import pytest

import disthook
from disthook.optim import adagrad, adam, optimizer, rmsprop, sgd

CONFIGS = {
    "sgd": lambda p: disthook.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: disthook.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_nesterov": lambda p: disthook.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "sgd_dampening_decay": lambda p: disthook.optim.SGD(p, lr=0.1, momentum=0.8, dampening=0.2,
                                                        weight_decay=0.01),
    "sgd_maximize": lambda p: disthook.optim.SGD(p, lr=0.01, momentum=0.5, maximize=True),
    "adam": lambda p: disthook.optim.Adam(p, lr=0.01),
    "adam_amsgrad_decay": lambda p: disthook.optim.Adam(p, lr=0.01, weight_decay=0.01,
                                                        amsgrad=True),
    "adam_betas": lambda p: disthook.optim.Adam(p, lr=0.02, betas=(0.8, 0.95), eps=1e-6),
    "adamw_amsgrad_maximize": lambda p: disthook.optim.AdamW(p, lr=0.01, weight_decay=0.1,
                                                             amsgrad=True, maximize=True),
    "rmsprop": lambda p: disthook.optim.RMSprop(p, lr=0.01),
    "rmsprop_centered_momentum": lambda p: disthook.optim.RMSprop(
        p, lr=0.01, momentum=0.9, centered=True, weight_decay=0.01),
    "rmsprop_momentum_maximize": lambda p: disthook.optim.RMSprop(p, lr=0.01, momentum=0.5,
                                                                  alpha=0.9, maximize=True),
    "adagrad": lambda p: disthook.optim.Adagrad(p, lr=0.1),
    "adagrad_decays": lambda p: disthook.optim.Adagrad(
        p, lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.5,
        maximize=True),
}


def _train(make, values, grads, contiguous: bool):
    """Parameters with ``values`` stepped on ``grads``; ``contiguous=False`` keeps each in a
    transposed (Fortran-ordered) array, which the chunked path does not take."""
    params = []
    for v in values:
        data = v.copy() if contiguous else np.asfortranarray(v)
        params.append(disthook.tensor(data).requires_grad_())
    assert all(p._data.flags.c_contiguous == contiguous for p in params if p.ndim > 1)
    opt = make(params)
    versions = []
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = disthook.tensor(g)
        before = [p._version for p in params]
        opt.step()
        versions.append([p._version - v for p, v in zip(params, before)])
    state = [{k: (v.numpy().copy(), v._version) for k, v in opt.state[p].items()}
             for p in params]
    return [p.detach().numpy().copy() for p in params], state, versions


def _bits(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", CONFIGS)
def test_chunked_update_equals_tensor_ops(monkeypatch, name, dtype):
    monkeypatch.setattr(optimizer, "STEP_CHUNK", 7)  # several chunks and a shorter last one
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s).astype(dtype) for s in [(5, 9), (3, 4), (2, 3)]]
    grads = [[rng.standard_normal(v.shape).astype(dtype) for v in values] for _ in range(4)]
    grads[2][0][1, 2] = np.inf  # inf and NaN go through both paths alike
    grads[3][1][0, 0] = np.nan
    with np.errstate(invalid="ignore"):
        fast = _train(CONFIGS[name], values, grads, contiguous=True)
        slow = _train(CONFIGS[name], values, grads, contiguous=False)
    for a, b in zip(fast[0], slow[0]):
        assert np.array_equal(_bits(a), _bits(b))
    for sa, sb in zip(fast[1], slow[1]):
        assert list(sa) == list(sb)
        for key in sa:
            assert np.array_equal(_bits(sa[key][0]), _bits(sb[key][0])), key
            assert sa[key][1] == sb[key][1], key  # the state's version counters too
    assert fast[2] == slow[2]


@pytest.mark.parametrize("make, module, fn, expected", [
    (lambda p: disthook.optim.Adam(p, lr=0.01), adam, "adam_arrays", 2),
    # the momentum buffer's first step is a copy of the gradient, as torch's
    (lambda p: disthook.optim.SGD(p, lr=0.1, momentum=0.9), sgd, "sgd_arrays", 1),
    (lambda p: disthook.optim.SGD(p, lr=0.1), sgd, "sgd_arrays", 2),
    (lambda p: disthook.optim.RMSprop(p, momentum=0.9, centered=True), rmsprop,
     "rmsprop_arrays", 2),
    (lambda p: disthook.optim.Adagrad(p), adagrad, "adagrad_arrays", 2),
])
def test_plain_parameters_take_the_chunked_path(monkeypatch, make, module, fn, expected):
    calls = []
    real = getattr(module, fn)
    monkeypatch.setattr(module, fn, lambda *a, **k: calls.append(1) or real(*a, **k))
    w = disthook.ones(4, 3, requires_grad=True)
    view = disthook.ones(3, 4).t().detach().requires_grad_()  # not contiguous: Tensor ops
    opt = make([w, view])
    for _ in range(2):
        w.grad, view.grad = disthook.ones(4, 3), disthook.ones(4, 3)
        opt.step()
    assert len(calls) == expected  # two steps of w; never the view
