"""A shared model whose module keeps what it computed in an attribute (a dict of its
outputs, a count of its calls): an attached client read the deployer's activations from
it. Its call's answer carried the dict whole (the outputs of the deployer's secret input,
then its own) and the count of every client's calls; now each client's calls see only what
they set, as each client's model in one process, and the deployer's dict holds none of the
attached client's outputs."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import connect

pytestmark = pytest.mark.timeout(180)


class Cache(nn.Module):
    """Keeps each output under its call's number, and counts its calls."""

    def __init__(self):
        super().__init__()
        self.proj, self.outputs, self.calls = nn.Linear(3, 3), {}, 0

    def forward(self, x):
        self.calls += 1
        self.outputs[f"call {self.calls}"] = out = self.proj(x)
        return out


def test_an_attached_client_sees_none_of_the_deployers_kept_outputs(cluster):
    torch.manual_seed(0)
    model = nn.Sequential(Cache(), nn.ReLU(), nn.Linear(3, 2))
    one_process = nn.Sequential(Cache(), nn.ReLU(), nn.Linear(3, 2))
    one_process.load_state_dict(model.state_dict())
    remote = cluster.deploy(model, stages=2, name="s4-cache")
    secret, mine = torch.full((1, 3), 7.0), torch.zeros(1, 3)
    with torch.no_grad():
        remote(secret)
        remote(secret)
        with connect(cluster.address) as other:
            attached = other.attach("s4-cache")
            attached(mine)
            one_process(mine)
            got = attached[0].outputs
            assert attached[0].calls == 1 and list(got) == ["call 1"], \
                f"{len(got)} outputs, {len(got) - 1} of them the deployer's"
            np.testing.assert_allclose(got["call 1"].numpy(), one_process[0].outputs["call 1"].numpy(),
                                       rtol=1e-6)
        remote(secret)
    assert remote[0].calls == 3 and len(remote[0].outputs) == 3
    assert all(np.all(o.numpy() == remote[0].outputs["call 1"].numpy())
               for o in remote[0].outputs.values())
    remote.close()
