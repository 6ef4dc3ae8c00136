"""A view made under no_grad of a tensor that requires grad (E1), deployed: one process gives
it requires_grad=True with no gradient reaching it or its base, and a part that makes one in
its forward uses it as a leaf no gradient reaches. The deployed run must give the same
gradients (parameters, the program's tensor, the view) as one process."""
import numpy as np
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _ScalesByANoGradView(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            s = x[:, :1]  # requires grad through x, yet takes no gradient
        return self.lin(x) * s


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.part = _ScalesByANoGradView()
        self.head = nn.Linear(3, 1)

    def forward(self, x):
        return self.head(self.part(x)).tanh()


def _make():
    torch.manual_seed(0)
    return _Model()


def _run(model) -> dict:
    x = torch.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3),
                     requires_grad=True)
    with torch.no_grad():
        v = x[1:]
    out = model(v)
    out.sum().backward()
    return {"requires_grad": (v.requires_grad, out.requires_grad),
            "out": out.detach().numpy().copy(),
            "x_grad": x.grad, "v_grad": v.grad,
            "grads": {n: p.grad.numpy().copy() for n, p in model.named_parameters()}}


def test_a_no_grad_view_given_to_and_made_in_a_deployed_model(cluster):
    got, want = deployed_run(cluster, _make, _run)
    assert want["requires_grad"] == (True, True)
    assert got["requires_grad"] == want["requires_grad"]
    assert want["x_grad"] is None and want["v_grad"] is None
    assert got["x_grad"] is None and got["v_grad"] is None
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-6)
    assert got["grads"].keys() == want["grads"].keys()
    for name, g in want["grads"].items():
        np.testing.assert_allclose(got["grads"][name], g, rtol=1e-5, err_msg=name)
