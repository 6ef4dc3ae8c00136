"""A chain (``nn.Sequential`` deployed with ``stages=``) whose last module returns tuples,
lists or dicts of tensors and plain values (``return logits, {"aux": aux, "n": 2}``): one
process returns that structure, a gradient through each tensor; deployed it was refused
("a stage must return one Tensor"). The last stage now answers with the structure, each
tensor an output of the chain's node with its own gradient."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _Split(nn.Module):
    def forward(self, x):
        return x[:, :2].tanh(), {"rest": [x[:, 2:] * 3, "tag"], "n": 2}


def _make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4), _Split())


@pytest.mark.parametrize("which", ["both", "first", "second"])
def test_a_chain_returning_a_structure(cluster, which):
    def run(model):
        x = torch.tensor([[0.3, -0.2, 0.5], [1.0, 2.0, -3.0]], requires_grad=True)
        a, d = model(x)
        b = d["rest"][0]
        loss = {"both": a.sum() + (b * b).sum(), "first": a.sum(), "second": b.sum()}[which]
        loss.backward()
        with torch.no_grad():
            plain = model(x)
        return {"a": a.detach().numpy(), "b": b.detach().numpy(), "n": d["n"],
                "tag": d["rest"][1], "x": x.grad.numpy(), "kinds": (type(d).__name__,
                                                                  type(d["rest"]).__name__),
                "plain": plain[0].numpy(), "grads": {n: p.grad.numpy() for n, p in
                                                     model.named_parameters()}}

    got, want = deployed_run(cluster, _make, run, stages=2)
    assert (got["n"], got["tag"], got["kinds"]) == (want["n"], want["tag"], want["kinds"])
    for key in ("a", "b", "x", "plain"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)
    assert sorted(got["grads"]) == sorted(want["grads"])
    for name, g in want["grads"].items():
        np.testing.assert_allclose(got["grads"][name], g, rtol=1e-5, atol=1e-6)


def test_a_structure_with_micro_batches_is_refused(cluster):
    remote = cluster.deploy(_make(), stages=2, chunks=2)
    try:
        with pytest.raises(NotImplementedError, match="chunks=1"):
            remote(torch.ones(4, 3))
    finally:
        remote.close()
