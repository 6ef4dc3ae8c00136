"""A module that samples with a ``Generator`` of its own (``self.generator``, reseeded by
the program between generations, its state read or replaced): the worker held a copy of
the generator, so a reseed here did not reach the draws there, and the program's
generator never advanced: other tokens, no error. Now such a module's forward runs here,
drawing from the program's generator (its parents' forwards too; its weights and the other
parts stay on their workers), as in one process."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Sampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.temperature = nn.Linear(1, 1)
        self.generator = torch.Generator().manual_seed(1)

    def forward(self, logits):
        scale = self.temperature(torch.ones(1, 1)).exp()
        return torch.multinomial((logits * scale).softmax(-1), 1, generator=self.generator)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 7)
        self.sampler = Sampler()

    def forward(self, h):
        return self.sampler(self.proj(h)[:, -1])


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 5)
        self.head = Head()

    def forward(self, ids):
        return self.head(self.emb(ids))


def _run(model):
    out = []
    for reseed in (None, 1, 1, 4):
        if reseed is not None:
            model.head.sampler.generator.manual_seed(reseed)
        ids = torch.tensor([[1], [2], [3]])
        with torch.no_grad():
            for _ in range(5):
                ids = torch.cat([ids, model(ids)], 1)
        out += [ids.numpy().copy(), model.head.sampler.generator.get_state().numpy().copy()]
    model.head.sampler.generator = torch.Generator().manual_seed(9)  # replaced
    with torch.no_grad():
        out.append(model(torch.tensor([[5]])).numpy().copy())
    return out


def _model():
    torch.manual_seed(0)
    return Model()


@pytest.mark.parametrize("deploy", [{"stages": 2}, {"placement": {"emb": 0, "head": 1}}])
def test_a_module_s_own_generator_draws_as_in_one_process(cluster, deploy):
    want = _run(_model())
    model = cluster.deploy(_model(), **deploy)
    try:
        got = _run(model)
    finally:
        model.close()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
