"""Optimizers on complex parameters, as torch steps them: each complex element's real and
imaginary parts are stepped as two real numbers (torch views the parameter, its gradient and
its state as real pairs), while the state keeps the parameter's complex dtype and ``step``
stays a real counter. Each case runs a few steps on a complex parameter and a real one in the
same optimizer, in disthook and in torch, and compares the parameters and the state dict."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

REAL = {np.complex64: np.float32, np.complex128: np.float64}
TOL = {np.complex64: {"rtol": 2e-5, "atol": 1e-6}, np.complex128: {"rtol": 1e-10, "atol": 1e-12}}

CASES = [
    ("Adam", {}, 3),
    ("Adam", {"amsgrad": True, "weight_decay": 0.1}, 3),
    ("Adam", {"maximize": True, "weight_decay": 0.1, "decoupled_weight_decay": True}, 3),
    ("AdamW", {"amsgrad": True}, 3),
    ("Adamax", {"weight_decay": 0.1, "maximize": True}, 3),
    ("NAdam", {"weight_decay": 0.1, "decoupled_weight_decay": True}, 3),
    ("NAdam", {"maximize": True, "weight_decay": 0.1}, 3),
    ("RAdam", {"weight_decay": 0.1}, 3),
    ("RAdam", {"betas": (0.9, 0.9), "decoupled_weight_decay": True, "weight_decay": 0.1}, 8),
    ("RMSprop", {"momentum": 0.9, "centered": True, "weight_decay": 0.1}, 3),
    ("RMSprop", {"maximize": True}, 3),
    ("Adagrad", {"initial_accumulator_value": 0.1, "lr_decay": 0.01, "weight_decay": 0.1}, 3),
    ("Adadelta", {"weight_decay": 0.1, "maximize": True}, 3),
    ("ASGD", {"t0": 1, "weight_decay": 0.1}, 3),
    ("Rprop", {}, 3),
    ("Rprop", {"maximize": True}, 3),
]


def _data(dtype):
    rng = np.random.default_rng(7)

    def cplx(*shape):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)

    return {"w": cplx(3, 2), "x": cplx(4, 3), "r": rng.standard_normal((4, 2)).astype(REAL[dtype])}


def _run(lib, name, kwargs, steps, data, lbfgs=False):
    """``steps`` steps of ``lib.optim.<name>`` on a complex ``w`` and a real ``r``; returns
    the parameters, the optimizer and its parameters' tensors."""
    w = lib.nn.Parameter(lib.tensor(data["w"]))
    r = lib.nn.Parameter(lib.tensor(data["r"]))
    x = lib.tensor(data["x"])
    extra = {} if lbfgs else {"foreach": False}
    opt = getattr(lib.optim, name)([w, r], lr=0.1 if name != "Adadelta" else 1.0,
                                   **extra, **kwargs)

    def closure():
        opt.zero_grad()
        loss = (((x @ w).abs() - r) ** 2).sum()
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure) if lbfgs else (closure(), opt.step())
    return w, r, opt


def _numpy(value):
    return value.detach().numpy() if hasattr(value, "detach") else value


def _same_state(got, want, tol):
    """The two state dicts agree: keys, dtypes (complex state stays complex), values."""
    assert got["param_groups"][0]["params"] == want["param_groups"][0]["params"]
    assert list(got["state"]) == list(want["state"])
    for key in want["state"]:
        g, t = got["state"][key], want["state"][key]
        assert sorted(g) == sorted(t), key
        for name in t:
            _same_value(g[name], t[name], tol, f"state[{key}][{name!r}]")


def _same_value(g, t, tol, where):
    if isinstance(t, (list, tuple)):
        assert len(g) == len(t), where
        for i, (a, b) in enumerate(zip(g, t)):
            _same_value(a, b, tol, f"{where}[{i}]")
    elif isinstance(t, torch.Tensor):
        a, b = _numpy(g), _numpy(t)
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, **tol, err_msg=where)
    elif isinstance(t, float):
        assert g == pytest.approx(t, rel=tol["rtol"] * 10, abs=tol["atol"]), where
    else:
        assert g == t, where


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["cfloat", "cdouble"])
@pytest.mark.parametrize("name, kwargs, steps", CASES,
                         ids=[f"{n}-{'-'.join(k) or 'plain'}" for n, k, _ in CASES])
def test_complex_parameter_steps_as_torch(name, kwargs, steps, dtype):
    data = _data(dtype)
    tol = TOL[dtype]
    w, r, opt = _run(disthook, name, kwargs, steps, data)
    tw, tr, topt = _run(torch, name, kwargs, steps, data)
    assert w.dtype == disthook.complex64 if dtype is np.complex64 else disthook.complex128
    np.testing.assert_allclose(_numpy(w), _numpy(tw), **tol)
    np.testing.assert_allclose(_numpy(r), _numpy(tr), **tol)
    _same_state(opt.state_dict(), topt.state_dict(), tol)


@pytest.mark.parametrize("name, kwargs", [("Adam", {"amsgrad": True}),
                                          ("RMSprop", {"momentum": 0.5, "centered": True}),
                                          ("Adagrad", {}), ("Rprop", {}), ("ASGD", {"t0": 1})])
def test_a_loaded_state_dict_keeps_complex_state_and_steps_on(name, kwargs):
    """Save after two steps, load into a fresh optimizer over copies, step once more in
    each: the same parameters as torch's three steps."""
    dtype = np.complex128
    data = _data(dtype)
    w, r, opt = _run(disthook, name, kwargs, 2, data)
    saved = opt.state_dict()
    w2 = disthook.nn.Parameter(w.detach().clone())
    r2 = disthook.nn.Parameter(r.detach().clone())
    fresh = getattr(disthook.optim, name)([w2, r2], lr=0.1, foreach=False, **kwargs)
    fresh.load_state_dict(saved)
    for key, value in fresh.state[w2].items():
        if isinstance(value, disthook.Tensor) and value.shape == w2.shape:
            assert value.dtype == disthook.complex128, key
    x = disthook.tensor(data["x"])
    loss = (((x @ w2).abs() - r2) ** 2).sum()
    loss.backward()
    fresh.step()
    tw, tr, _ = _run(torch, name, kwargs, 3, data)
    np.testing.assert_allclose(_numpy(w2), _numpy(tw), **TOL[dtype])
    np.testing.assert_allclose(_numpy(r2), _numpy(tr), **TOL[dtype])


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_steps_a_complex_parameter_as_its_real_pairs(line_search_fn):
    """torch's L-BFGS flattens a complex parameter's gradient as real pairs and moves the
    parameter's real pairs: the same losses, parameters and state."""
    dtype = np.complex128
    data = _data(dtype)
    kwargs = {"line_search_fn": line_search_fn, "max_iter": 5}
    w, r, opt = _run(disthook, "LBFGS", kwargs, 2, data, lbfgs=True)
    tw, tr, topt = _run(torch, "LBFGS", kwargs, 2, data, lbfgs=True)
    tol = {"rtol": 1e-8, "atol": 1e-10}
    np.testing.assert_allclose(_numpy(w), _numpy(tw), **tol)
    np.testing.assert_allclose(_numpy(r), _numpy(tr), **tol)
    _same_state(opt.state_dict(), topt.state_dict(), tol)


@pytest.mark.parametrize("lib", [torch, disthook], ids=["torch", "disthook"])
def test_adafactor_refuses_a_complex_parameter_at_the_step_as_torch(lib):
    r = lib.nn.Parameter(lib.ones(2))
    w = lib.nn.Parameter(lib.ones(2, dtype=lib.cfloat))
    opt = lib.optim.Adafactor([r, w])  # made, as torch's is
    (w.abs().sum() + r.sum()).backward()
    with pytest.raises(RuntimeError, match="Adafactor does not support complex parameters"):
        opt.step()
    np.testing.assert_array_equal(_numpy(w), np.ones(2, np.complex64))
    np.testing.assert_array_equal(_numpy(r), np.ones(2, np.float32))  # nothing stepped


def test_rprop_on_float64_takes_its_etas_at_full_width():
    """Rprop's growth and shrink factors were made float32 (where() of Python numbers) and
    then widened: a float64 step size grew by 1.2000000476837158, not torch's 1.2."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(6)

    def run(lib):
        w = lib.nn.Parameter(lib.tensor(w0))
        opt = lib.optim.Rprop([w], lr=0.1, foreach=False)
        for _ in range(3):
            opt.zero_grad()
            (w * w * w).sum().backward()
            opt.step()
        return _numpy(w), _numpy(opt.state[w]["step_size"])

    for got, want in zip(run(disthook), run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
