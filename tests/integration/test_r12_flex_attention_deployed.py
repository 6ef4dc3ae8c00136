"""A BlockMask made in the model's own forward (modded-nanogpt's document-causal mask from
the input's document ids) and passed to placed blocks: it goes to their workers as its fields
(its ``mask_mod``, code, stays here), and loss and gradients are one process's."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.nn import functional as F
from disthook.nn.attention.flex_attention import create_block_mask, flex_attention

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, block_mask):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = flex_attention(q, k, v, block_mask=block_mask)
        return x + self.proj(y.transpose(1, 2).reshape(B, T, C))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(7, 8)
        self.blocks = nn.ModuleList([Attention(8, 2) for _ in range(2)])
        self.head = nn.Linear(8, 7)

    def forward(self, seq):
        docs = (seq == 0).cumsum(0)

        def document_causal(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (docs[q_idx] == docs[kv_idx])

        mask = create_block_mask(document_causal, None, None, len(seq), len(seq))
        x = self.embed(seq)[None]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)[0]


def test_a_block_mask_made_here_masks_the_placed_blocks_attention(cluster):
    torch.manual_seed(0)
    model = Net()
    seq = torch.tensor([3, 1, 0, 4, 2, 0, 5, 6, 1])
    target = torch.tensor([1, 0, 4, 2, 0, 5, 6, 1, 2])
    want = F.cross_entropy(model(seq), target)
    want.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    deployed = cluster.deploy(model, stages=2)
    try:
        got = F.cross_entropy(deployed(seq), target)
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
        for n, p in deployed.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), grads[n].numpy(), rtol=1e-5,
                                       atol=1e-7, err_msg=n)
    finally:
        deployed.close()
