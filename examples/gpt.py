"""A small GPT written as PyTorch programs write one, trained for a few steps with hooks; with
--workers N the one changed line deploys it on N workers and everything else runs as is.

The model: token and position embeddings, causal self-attention blocks in a ModuleList, a
final LayerNorm and an output head whose weight is the token embedding's (tied). Training:
AdamW with two parameter groups (weight decay on matrices only), gradient clipping to norm
1.0. Hooks: a forward hook keeps a block's output, a tensor hook halves the head's gradient,
a full backward hook measures the gradient leaving the last block.

    python examples/gpt.py [--workers 2]
"""
import math
from dataclasses import dataclass

from common import parser

import disthook as torch
import disthook.nn.functional as F
from disthook import nn

TEXT = ("the cat sat on the mat and the dog sat on the log; "
        "a bird sang in the tree while the sun rose over the hill. ") * 4


@dataclass
class Config:
    vocab: int = 32
    context: int = 16
    width: int = 32
    heads: int = 4
    layers: int = 4


class SelfAttention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
        self.proj = nn.Linear(cfg.width, cfg.width)
        self.heads = cfg.heads
        mask = torch.tril(torch.ones(cfg.context, cfg.context))
        self.register_buffer("mask", mask.view(1, 1, cfg.context, cfg.context))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.width)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.width)
        self.mlp = nn.Sequential(nn.Linear(cfg.width, 4 * cfg.width), nn.GELU(),
                                 nn.Linear(4 * cfg.width, cfg.width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab, cfg.width),
            wpe=nn.Embedding(cfg.context, cfg.width),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.layers)]),
            ln_f=nn.LayerNorm(cfg.width)))
        self.lm_head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied

    def forward(self, idx, targets=None):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self, weight_decay, lr):
        params = dict(self.named_parameters())
        decay = [p for p in params.values() if p.dim() >= 2]
        no_decay = [p for p in params.values() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}],
                                 lr=lr, betas=(0.9, 0.95))


def batches(cfg: Config, steps: int, batch: int = 4):
    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(ch) for ch in TEXT], dtype=torch.long)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - cfg.context - 1, (batch,)).tolist()
        x = torch.stack([data[s:s + cfg.context] for s in starts])
        y = torch.stack([data[s + 1:s + cfg.context + 1] for s in starts])
        yield x, y


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    cfg = Config()
    model = GPT(cfg)
    cluster = None
    if args.workers:  # the one changed line (and the cluster it runs on)
        from disthook.distributed import local_cluster
        cluster = local_cluster(args.workers)
        model = cluster.deploy(model, stages=args.workers)
    try:
        train(model, cfg)
    finally:
        if cluster is not None:
            cluster.close()


def train(model, cfg: Config):
    kept = {}
    model.transformer.h[1].register_forward_hook(
        lambda m, inputs, output: kept.__setitem__("block 1", output.detach()))
    model.lm_head.weight.register_hook(lambda grad: grad * 0.5)
    model.transformer.h[-1].register_full_backward_hook(
        lambda m, grad_in, grad_out: kept.__setitem__("grad out", grad_out[0].norm().item()))
    optimizer = model.configure_optimizers(weight_decay=0.1, lr=3e-3)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")
    for step, (x, y) in enumerate(batches(cfg, steps=5)):
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        print(f"step {step}: loss {loss.item():.6f}, grad norm {norm.item():.6f}, "
              f"block 1 output mean {kept['block 1'].mean().item():.6f}, "
              f"grad into the last block {kept['grad out']:.6f}")
    with torch.no_grad():
        logits, _ = model(next(batches(cfg, steps=1))[0])
    print(f"logits after training: mean {logits.mean().item():.6f}, "
          f"std {logits.std().item():.6f}")


if __name__ == "__main__":
    main()
