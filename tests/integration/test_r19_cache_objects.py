"""Generation loops hand each layer a cache object of their own (HF's DynamicCache and
StaticCache: ``k, v = cache.update(k, v, layer_idx, position)``, which grows a list or
writes a preallocated tensor in place). Such an object cannot go to a worker and come back
changed; before, a placed layer called with one raised TypeError. Now that layer's forward
runs on the client, between its hooks, as in one process: the cache stays the program's,
its children run on their workers, and values, gradients and hooks are one process's."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class GrowingCache:
    def __init__(self):
        self.keys = []

    def update(self, k, layer):
        if len(self.keys) <= layer:
            self.keys.append(k)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=1)
        return self.keys[layer]


class SlotCache:
    def __init__(self, batch, slots, width, layers):
        self.keys = [torch.zeros(batch, slots, width) for _ in range(layers)]

    def update(self, k, layer, position):
        self.keys[layer].index_copy_(1, position, k)
        return self.keys[layer][:, : int(position[-1]) + 1]


class Mixer(nn.Module):
    def __init__(self, index):
        super().__init__()
        self.index = index
        self.key, self.out = nn.Linear(6, 6), nn.Linear(6, 6)

    def forward(self, x, cache, position):
        keys = self.key(x)
        if cache is not None:
            keys = cache.update(keys, self.index) if position is None else \
                cache.update(keys, self.index, position)
        weights = torch.softmax(x @ keys.transpose(1, 2), dim=-1)
        return x + self.out(weights @ keys)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(9, 6)
        self.mixers = nn.ModuleList([Mixer(0), Mixer(1)])
        self.head = nn.Linear(6, 9)

    def forward(self, ids, cache=None, position=None):
        x = self.embed(ids)
        for mixer in self.mixers:
            x = mixer(x, cache, position)
        return self.head(x)


def _run(model, kind):
    """Greedy decoding with the cache, then a loss over one forward with a cache, its
    backward; a forward hook on a mixer logs what it saw."""
    seen = []
    handle = model.mixers[1].register_forward_hook(
        lambda m, args, out: seen.append(float(out.detach().abs().sum())))
    ids = torch.tensor([[1, 4, 2], [3, 3, 5]])
    cache = GrowingCache() if kind == "growing" else SlotCache(2, 8, 6, 2)
    step, position = ids, torch.arange(3)
    out = []
    with torch.no_grad():
        for _ in range(4):
            logits = model(step, cache, None if kind == "growing" else position)
            step = logits[:, -1].argmax(-1, keepdim=True)
            out.append(step.numpy().copy())
            position = position[-1:] + 1
    out.append(np.array(cache.keys[1].detach().numpy()))
    cache = GrowingCache() if kind == "growing" else SlotCache(2, 8, 6, 2)
    loss = model(ids, cache, None if kind == "growing" else torch.arange(3)).square().mean()
    loss.backward()
    out += [loss.item()] + [p.grad.numpy().copy() for p in model.parameters()]
    handle.remove()
    return out + seen


def _model():
    torch.manual_seed(0)
    return Net()


@pytest.mark.parametrize("kind", ["growing", "slots"])
def test_a_layer_given_a_cache_object_runs_as_in_one_process(cluster, kind):
    want = _run(_model(), kind)
    model = cluster.deploy(_model(), stages=2)
    try:
        got = _run(model, kind)
    finally:
        model.close()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_with_chunks_a_call_given_a_cache_object_runs_whole(cluster):
    """With ``chunks``, each micro-batch's forward got the whole cache object: a slot cache
    for the batch was written with one micro-batch's rows (a shape error), a growing cache
    joined the micro-batches' keys as if they were later positions (other tokens). A call
    given an object that cannot be cut now runs its forward once, whole."""
    for kind in ("growing", "slots"):
        want = _run(_model(), kind)
        model = cluster.deploy(_model(), stages=2, chunks=2)
        try:
            got = _run(model, kind)
        finally:
            model.close()
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
