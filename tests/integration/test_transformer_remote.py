"""A small transformer language model (embedding, two TransformerEncoderLayers, a norm and a
head) deployed on 2 workers and trained as training programs write it: AdamW with a
decay and a no-decay group, a cosine schedule, clip_grad_norm_, a forward hook reading an
activation. Its losses and hook readings equal one process's exactly."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn, optim

pytestmark = pytest.mark.timeout(180)
VOCAB, WIDTH = 50, 32


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Embedding(VOCAB, WIDTH),
        nn.TransformerEncoderLayer(WIDTH, 4, 64, dropout=0.0, batch_first=True),
        nn.TransformerEncoderLayer(WIDTH, 4, 64, dropout=0.0, batch_first=True,
                                   activation=nn.functional.gelu),
        nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB))


def train(model, steps=3):
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt = optim.AdamW([{"params": decay, "weight_decay": 0.1},
                       {"params": rest, "weight_decay": 0.0}], lr=3e-3)
    schedule = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5)
    readings, losses = [], []
    handle = model[1].register_forward_hook(
        lambda module, args, out: readings.append(out.detach().abs().mean().item()))
    torch.manual_seed(1)
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (4, 8))
        targets = torch.randint(0, VOCAB, (4, 8))
        opt.zero_grad()
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        losses.append(loss.item())
    handle.remove()
    return losses, readings


def test_a_transformer_trains_on_two_workers_exactly_as_in_one_process(cluster):
    expected = train(make_model())
    remote = cluster.deploy(make_model(), stages=2)
    try:
        got = train(remote)
        assert [w[2] for w in remote.workers()] == [["0", "1"], ["2", "3", "4"]]
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-6)
        assert expected[0][-1] < expected[0][0]  # it learns
    finally:
        remote.close()
