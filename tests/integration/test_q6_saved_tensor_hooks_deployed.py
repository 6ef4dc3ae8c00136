"""``saved_tensors_hooks`` around a deployed model (the saved-tensor hooks tutorial's pattern).
The placed parts save their tensors on their workers, where the client's ``pack`` and
``unpack`` cannot run: the call is refused, naming the hooks and what to do, where before the
hooks were silently not called for those tensors (one process: 8 packs; deployed: 1, the
client's own op). ``save_on_cpu`` and calls under ``no_grad`` go on, with one process's values."""
import numpy as np
import pytest
from helpers import TANH_X, TanhNet, tanh_chain

import disthook as torch

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2
X = TANH_X
Net, chain = TanhNet, tanh_chain


@pytest.mark.parametrize("make", [Net, chain], ids=["own-forward", "chain"])
def test_user_pack_hooks_around_a_deployed_model_are_refused(cluster, make):
    model = cluster.deploy(make(), stages=2)
    packed = []
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t,
                                                      lambda t: t):
            with pytest.raises(NotImplementedError, match=r"runs on a worker inside "
                               r"saved_tensors_hooks\(.*the tensors its ops save stay on the "
                               r"worker.*outside the saved_tensors_hooks context"):
                model(torch.tensor(X))
            with torch.no_grad():  # nothing is saved: nothing to refuse
                out = model(torch.tensor(X))
        np.testing.assert_allclose(out.numpy(), make()(torch.tensor(X)).detach().numpy(),
                                   rtol=1e-6)
    finally:
        model.close()


@pytest.mark.parametrize("make", [Net, chain], ids=["own-forward", "chain"])
def test_save_on_cpu_around_a_deployed_model_trains_as_one_process(cluster, make):
    def run(model):
        with torch.autograd.graph.save_on_cpu():
            loss = model(torch.tensor(X)).pow(2).sum()
        loss.backward()
        return [loss.item()] + [p.grad.numpy().copy() for p in model.parameters()]

    want = run(make())
    model = cluster.deploy(make(), stages=2)
    try:
        for a, b in zip(run(model), want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    finally:
        model.close()
