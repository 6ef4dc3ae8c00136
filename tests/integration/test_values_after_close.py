"""Values a deployed model's parts computed and the program still holds (outputs, an
intermediate activation, a loss) are read after the deployment closes, as a tensor of one
process is read after its model is gone: the close fetches them. Reading one raised 'the
deployed model ... is closed; deploy it again to use it'."""
import numpy as np
import pytest
from helpers import TwoLayers

import disthook as torch

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


Two = TwoLayers


def computed(model):
    x = torch.linspace(-2, 2, 192).reshape(64, 3)  # outputs too large to ride with answers
    y = model(x)
    return [y, model.p(x), y * 2, y.sum()]


def test_values_a_closed_deployment_computed_are_read_after_the_close(cluster):
    torch.manual_seed(0)
    local = Two()
    torch.manual_seed(0)
    remote = cluster.deploy(Two(), stages=2)
    values = computed(remote)
    assert type(values[0]).__name__ == "RemoteValue"
    remote.close()
    for got, want in zip(values, computed(local)):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
