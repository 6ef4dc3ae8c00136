"""Optimizers on a deployed model's complex parameters: each worker steps the ones it holds
as one process does (real and imaginary parts as real numbers of their own); the values and
the state dict, read back on the client, are one process's."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn, optim

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class Mix(nn.Module):
    """A complex weight and a real bias."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3, dtype=torch.cfloat))
        self.b = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return (x.to(self.w.dtype) @ self.w).abs() + self.b


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(Mix(), Mix())


def train(model, make_optimizer):
    torch.manual_seed(1)
    opt = make_optimizer(model.parameters())
    for _ in range(3):
        opt.zero_grad()
        ((model(torch.randn(4, 3)) - 1) ** 2).sum().backward()
        opt.step()
    state = {k: {n: v.detach().numpy().copy() if isinstance(v, torch.Tensor) else v
                 for n, v in s.items()} for k, s in opt.state_dict()["state"].items()}
    return {n: v.detach().numpy().copy() for n, v in model.state_dict().items()}, state


@pytest.mark.parametrize("make_optimizer", [
    lambda ps: optim.Adam(ps, lr=0.05, amsgrad=True, weight_decay=0.1),
    lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True),
    lambda ps: optim.Rprop(ps, lr=0.05),
], ids=["Adam", "RMSprop", "Rprop"])
def test_workers_step_complex_parameters_as_one_process(cluster, make_optimizer):
    want_values, want_state = train(make_net(), make_optimizer)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        got_values, got_state = train(remote, make_optimizer)
    finally:
        remote.close()
    assert got_values.keys() == want_values.keys()
    for name, want in want_values.items():
        assert got_values[name].dtype == want.dtype, name
        np.testing.assert_allclose(got_values[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
    assert got_state.keys() == want_state.keys()
    for key, want in want_state.items():
        assert got_state[key].keys() == want.keys(), key
        for name, value in want.items():
            got = got_state[key][name]
            assert getattr(got, "dtype", None) == getattr(value, "dtype", None), (key, name)
            np.testing.assert_allclose(got, value, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{key}.{name}")


def test_lbfgs_moves_a_deployed_complex_parameter_as_one_process(cluster):
    """L-BFGS steps here (its direction spans every parameter): a deployed complex
    parameter's gradient and values are read and written as real pairs through its storage."""
    def fit(model):
        opt = optim.LBFGS(model.parameters(), max_iter=4, line_search_fn="strong_wolfe")
        x = torch.linspace(-1, 1, 12).reshape(4, 3)

        def closure():
            opt.zero_grad()
            loss = ((model(x) - 1) ** 2).sum()
            loss.backward()
            return loss

        losses = [opt.step(closure).item() for _ in range(2)]
        return losses, {n: v.detach().numpy().copy() for n, v in model.state_dict().items()}

    want = fit(make_net())
    remote = cluster.deploy(make_net(), stages=2)
    try:
        got = fit(remote)
    finally:
        remote.close()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, value in want[1].items():
        assert got[1][name].dtype == value.dtype, name
        np.testing.assert_allclose(got[1][name], value, rtol=1e-4, atol=1e-5, err_msg=name)
