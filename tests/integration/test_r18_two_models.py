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


class _Encoder(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.embed_tokens, self.fc = shared, nn.Linear(6, 6)

    def forward(self, ids):
        return torch.tanh(self.fc(self.embed_tokens(ids))).mean(1)


class _Decoder(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.embed_tokens, self.fc = shared, nn.Linear(6, 6)

    def forward(self, ids, memory):
        return self.fc(self.embed_tokens(ids) + memory.unsqueeze(1)) @ self.embed_tokens.weight.T


def _seq2seq():
    torch.manual_seed(0)
    shared = nn.Embedding(10, 6)
    return _Encoder(shared), _Decoder(shared)


def _seq2seq_grads(encoder, decoder):
    src, tgt = torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[7, 8], [9, 0]])
    loss = nn.functional.cross_entropy(decoder(tgt, encoder(src)).reshape(-1, 10),
                                       tgt.reshape(-1))
    loss.backward()
    return [loss.item(), *(p.grad.numpy().copy() for p in
                           [encoder.embed_tokens.weight, encoder.fc.weight, decoder.fc.weight])]


def test_two_models_sharing_a_module_deploy_as_one_holding_both(cluster):
    """A seq2seq whose encoder and decoder share one embedding (T5's ``shared``), each
    deployed on its own: the second deploy is refused, saying what to deploy instead; that
    (one ModuleDict holding both) gives one process's gradients."""
    want = _seq2seq_grads(*_seq2seq())
    encoder, decoder = _seq2seq()
    cluster.deploy(encoder)
    try:
        with pytest.raises(ValueError, match=r"'embed_tokens' is deployed already .*holds "
                                             r"them all .*ModuleDict"):
            cluster.deploy(decoder)
    finally:
        encoder.close()
    both = cluster.deploy(nn.ModuleDict({"encoder": encoder, "decoder": decoder}), stages=2)
    try:
        got = _seq2seq_grads(both["encoder"], both["decoder"])
    finally:
        both.close()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
