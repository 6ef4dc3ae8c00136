"""A model deployed writable opens its weights' values to attached clients, not what every
client's copy of the model mirrors: its train/eval mode, its modules' attributes, buffers
registered, dtypes and requires_grad. Before, an attached client's train(), a dropout's p
set or a weight's requires_grad_(False) changed the workers' model while the deployer's
still said eval, p=0.5 and requires_grad=True: the deployer computed with dropout and got
no gradient, silently. Now each is refused with PermissionError (the deployer's own still
go), and weight writes stay open."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, connect, local_cluster
from disthook.service.security import add_client

pytestmark = pytest.mark.timeout(180)


def test_an_attached_client_of_a_writable_model_changes_its_weights_not_its_form():
    with local_cluster(workers=2, secure=True, log_level="ERROR") as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5),
                                              nn.Linear(4, 2)),
                                stages=2, name="open", writable=True)
        remote.eval()
        x = torch.randn(5, 3)
        expected = remote(x).detach().numpy()
        add_client(cluster.keys.directory, "alice")
        with connect(cluster.address, keys=cluster.keys.directory, key_name="alice") as other:
            mine = other.attach("open")
            for change in (lambda: mine.train(),
                           lambda: mine[0].weight.requires_grad_(False),
                           lambda: setattr(mine[1], "p", 0.9),
                           lambda: mine[2].register_buffer("extra", torch.ones(1)),
                           lambda: mine[2].double()):
                with pytest.raises(RemoteError, match="PermissionError: .* beyond its weights' "
                                                      "values: the deployer opened its weights"):
                    change()
            out = remote(x)  # computes as the deployer's model says: eval, every weight trained
            np.testing.assert_array_equal(out.detach().numpy(), expected)
            out.sum().backward()
            assert remote[0].weight.grad is not None
            remote.zero_grad()
            # the weights' values stay open to it
            zeros = {k: torch.zeros(v.shape) for k, v in mine.state_dict().items()}
            mine.load_state_dict(zeros)
            assert not remote(x).detach().numpy().any()
        remote.train()  # the deployer's own changes go
        remote[1].p = 0.25
        assert remote.training and remote[1].p == 0.25
