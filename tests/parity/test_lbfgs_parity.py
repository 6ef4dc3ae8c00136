"""LBFGS gives torch's parameters and losses step by step on a least-squares fit and a
small MLP, with fixed steps and with the strong-Wolfe line search, and torch's state."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(3)
A = RNG.standard_normal((12, 4)).astype(np.float32)
B = RNG.standard_normal(12).astype(np.float32)
W1 = (RNG.standard_normal((6, 4)) * 0.5).astype(np.float32)
W2 = (RNG.standard_normal((1, 6)) * 0.5).astype(np.float32)


def _fit(lib, line_search, model_kind, steps=4, **options):
    # float64: L-BFGS magnifies float32 rounding differences (numpy's tanh and sums against
    # torch's) step after step, which would hide whether the algorithm is the same
    a, b = lib.tensor(A, dtype=lib.float64), lib.tensor(B, dtype=lib.float64)
    if model_kind == "least squares":
        params = [lib.nn.Parameter(lib.zeros(4, dtype=lib.float64))]

        def loss_of():
            return ((a @ params[0] - b) ** 2).mean()
    else:
        params = [lib.nn.Parameter(lib.tensor(W1, dtype=lib.float64)),
                  lib.nn.Parameter(lib.tensor(W2, dtype=lib.float64))]

        def loss_of():
            hidden = (a @ params[0].t()).tanh()
            return ((hidden @ params[1].t()).reshape(-1) - b).pow(2).mean()

    opt = lib.optim.LBFGS(params, lr=1, max_iter=6, history_size=3,
                          line_search_fn=line_search, **options)

    def closure():
        opt.zero_grad()
        loss = loss_of()
        loss.backward()
        return loss

    losses = [float(opt.step(closure)) for _ in range(steps)]
    state = opt.state[params[0]]
    return (losses, [p.detach().numpy().copy() for p in params], state["func_evals"],
            state["n_iter"], sorted(state))


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
@pytest.mark.parametrize("model_kind", ["least squares", "mlp"])
def test_lbfgs_steps_like_torch(line_search, model_kind):
    ours = _fit(disthook, line_search, model_kind)
    theirs = _fit(torch, line_search, model_kind)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-9)
    for a, b in zip(ours[1], theirs[1]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    assert ours[2:] == theirs[2:]


def test_least_squares_reaches_the_solution():
    _, (x,), *_ = _fit(disthook, "strong_wolfe", "least squares", steps=3)
    np.testing.assert_allclose(x, np.linalg.lstsq(A, B, rcond=None)[0], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("lib", [torch, disthook], ids=["torch", "disthook"])
def test_errors_are_torchs(lib):
    p = [lib.nn.Parameter(lib.ones(2))]
    with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
        lib.optim.LBFGS([{"params": p}, {"params": [lib.nn.Parameter(lib.ones(1))]}])
    opt = lib.optim.LBFGS(p, line_search_fn="armijo")

    def closure():
        opt.zero_grad()
        loss = (p[0] * p[0]).sum()
        loss.backward()
        return loss

    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        opt.step(closure)


@pytest.mark.parametrize("max_eval", [2, 5, 8])
def test_the_line_search_stops_at_what_is_left_of_max_eval(max_eval):
    """torch's L-BFGS gives its line search only the evaluations ``max_eval`` leaves (not a
    fixed 25): on a long gentle slope (its minimum near 63) the step grows for several
    tries, cut short there."""
    def fit(lib):
        x = lib.nn.Parameter(lib.ones(3, dtype=lib.float64))
        opt = lib.optim.LBFGS([x], max_iter=4, max_eval=max_eval,
                              line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = -x.sum() + 1e-6 * (x ** 4).sum()
            loss.backward()
            return loss

        losses = [opt.step(closure).item() for _ in range(3)]
        return losses, x.detach().numpy().copy(), opt.state[x]["func_evals"]

    ours, theirs = fit(disthook), fit(torch)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-12)
    assert ours[2] == theirs[2]


def test_a_flat_cubic_gives_torchs_step_not_zerodivisionerror():
    """On a linear loss the line search's cubic has a zero denominator: torch's slopes are
    tensors, so the quotient is an infinity (clamped to the bounds) or NaN and the search
    goes on; a Python float division raised ZeroDivisionError instead."""
    def fit(lib):
        x = lib.nn.Parameter(lib.ones(2, dtype=lib.float64))
        opt = lib.optim.LBFGS([x], max_iter=3, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = -(x * lib.tensor([1.0, 2.0], dtype=lib.float64)).sum()
            loss.backward()
            return loss

        loss = opt.step(closure).item()
        return loss, x.detach().numpy().copy()

    ours, theirs = fit(disthook), fit(torch)
    assert ours[0] == theirs[0]
    np.testing.assert_array_equal(ours[1], theirs[1])
