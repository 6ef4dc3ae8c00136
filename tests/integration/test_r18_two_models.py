"""Programs with two models, each deployed, whose values and gradients flow between them
(GANs, distillation, target networks, projector heads). A loss term computed from what a
forward hook got on one model (here through a second model), added to the first model's
loss, while another forward hook of the first model replaces its output: the worker's
backward runs two passes through the call, and each asks the client for the replacing
hook's vector-Jacobian product. Before, the client freed that hook's graph after the first
pass, and the second pass raised "Trying to backward through the graph a second time"."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


def _models():
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 6))
    projector = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
    return backbone, projector


def _steps(backbone, projector):
    """Two steps of the program: a probe term through the projector, the first layer's
    output scaled by a hook that returns it; the losses and every gradient."""
    aux = []
    handles = [
        backbone[2].register_forward_hook(lambda m, i, o: aux.append(projector(o).pow(2).mean())),
        backbone[0].register_forward_hook(lambda m, i, o: o * 1.5),
    ]
    rng = np.random.RandomState(1)
    log = []
    for _ in range(2):
        x = torch.tensor(rng.randn(4, 5).astype("float32"))
        y = torch.tensor(rng.randn(4, 6).astype("float32"))
        loss = nn.functional.mse_loss(backbone(x), y) + aux.pop()
        loss.backward()
        log.append(loss.item())
        log += [p.grad.numpy().copy() for p in [*backbone.parameters(), *projector.parameters()]]
    for h in handles:
        h.remove()
    return log


@pytest.mark.parametrize("projector_deployed", [True, False])
def test_a_hook_term_beside_a_replacing_hook_is_one_process_s(cluster, projector_deployed):
    want = _steps(*_models())
    backbone, projector = _models()
    backbone = cluster.deploy(backbone)
    if projector_deployed:
        projector = cluster.deploy(projector)
    try:
        got = _steps(backbone, projector)
    finally:
        backbone.close()
        if projector_deployed:
            projector.close()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
