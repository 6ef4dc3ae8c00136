"""Another client cannot make the deployer's optimizer step run twice on a stage. A step
rides with the next forward; when that forward fails on a later stage the step goes again
with the next request, and the stages that ran it skip it by its number. Before, a stage
remembered the last 4096 numbers of all its clients together: a client attached to the
published model sent 4097 ``zero_grad`` calls of an optimizer of its own to the first
stage's worker meanwhile, and the deployer's step, sent again, ran a second time there
(with momentum the weights moved again), silently."""
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class RefusesNan(nn.Module):
    """Fails a forward on the last stage (after the first ran the step it carried)."""

    def forward(self, x):
        if bool(torch.isnan(x).any()):
            raise ValueError("NaN in the input")
        return x


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), RefusesNan())


def test_another_clients_optimizer_calls_do_not_make_a_step_run_twice(cluster):
    net, remote = _net(), cluster.deploy(_net(), stages=2, name="s12-stepped")
    try:
        opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (net, remote)]
        x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
        for opt, model in zip(opts, (net, remote)):
            for _ in range(2):  # the first makes the shares; the second rides with a forward
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        with pytest.raises(ValueError, match="NaN in the input"):
            remote(torch.full((5, 4), float("nan")))  # the first stage ran the step
        assert len(deployment_of(remote)._hub.pending_optimizer) == 1  # it goes again

        model = deployment_of(remote)._model_id
        (first,) = [w.address for w in cluster.workers() if f"stage 0 of {model}" in w.stages]
        with Peer(first) as mallory:  # another client of the published model, meanwhile
            spec = {"id": 1, "class": "SGD", "kwargs": {"lr": 0.1}, "params": ["0.weight"],
                    "action": "zero_grad"}
            for start in range(0, 4200, 600):
                for n in range(start, start + 600):
                    mallory.send("step", {"model": model, "optimizer": {**spec, "call": n}},
                                 req=10**6 + n)
                mallory.request("status", timeout=60)  # (each batch answered in order)
        for name, p in net.named_parameters():  # a read sends the step again first
            got = remote.get_parameter(name).detach().numpy()
            assert abs(got - p.detach().numpy()).max() < 1e-6, name  # before: stepped twice
        assert not deployment_of(remote)._hub.pending_optimizer
    finally:
        remote.close()
