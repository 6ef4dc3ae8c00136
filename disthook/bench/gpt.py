"""GPT rows of ``disthook bench dist``: a GPT written as nanoGPT writes one (its forward runs on
the client: embeddings added, blocks, head, loss), deployed on 2 workers, against the same
model in one process, in the same run:

- a training step (forward with the loss, backward, AdamW step);
- the same step as ``train_step`` with ``chunks=4`` under 1F1B (micro-batches pipelined);
- ``generate``: 32 new tokens, one forward per token on the growing context;
- ``run_with_cache``: one forward keeping every block's output (a forward hook on each).

Each row also gives what a training step moved, from ``stats()``: the requests the client
waited on and the bytes through the client.
"""
from __future__ import annotations

import copy
import math
import statistics

from disthook.bench.table import comparison
from disthook.bench.timing import paired, paired_ratio

__all__ = ["GPT", "rows"]


def _model_classes():
    import disthook as torch
    import disthook.nn.functional as F
    from disthook import nn

    class Attention(nn.Module):
        def __init__(self, width, heads, context):
            super().__init__()
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.heads = heads
            self.register_buffer("mask", torch.tril(torch.ones(context, context)).view(
                1, 1, context, context))

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
        def __init__(self, width, heads, context):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = Attention(width, heads, context)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self, vocab=65, context=64, width=128, heads=4, layers=4):
            super().__init__()
            self.context = context
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
            self.h = nn.ModuleList([Block(width, heads, context) for _ in range(layers)])
            self.ln_f = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, idx, targets=None):
            pos = torch.arange(0, idx.size(1), dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.head(self.ln_f(x))
            if targets is None:
                return logits
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)),
                                           targets.view(-1))

        @torch.no_grad()
        def generate(self, idx, new_tokens):
            for _ in range(new_tokens):
                logits = self(idx[:, -self.context:])
                nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
                idx = torch.cat((idx, nxt), dim=1)
            return idx

    return GPT


def GPT(**kwargs):
    """The bench's GPT (vocab 65, context 64, width 128, 4 heads, 4 blocks by default)."""
    return _model_classes()(**kwargs)


def rows(cluster, repeats: int, quick: bool = False) -> list[dict]:
    import disthook as torch
    import disthook.nn.functional as F

    torch.manual_seed(0)
    batch, t = (4, 16) if quick else (16, 64)
    local = GPT(context=t, width=64 if quick else 128)
    x = torch.randint(0, 65, (batch, t))
    y = torch.randint(0, 65, (batch, t))
    out = []

    def stepper(model, opt):
        def step():
            opt.zero_grad()
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            return loss.item()
        return step

    def chunked_stepper(model, opt):
        def step():
            opt.zero_grad()
            losses = model.train_step(x, y, lambda logits, target: F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), target.reshape(-1)))
            opt.step()
            return losses
        return step

    base_step = stepper(local, torch.optim.AdamW(local.parameters(), lr=1e-3))
    for chunks, what, make in ((1, "training step", stepper),
                               (4, "train_step, chunks=4, 1F1B", chunked_stepper)):
        model = cluster.deploy(copy.deepcopy(local), stages=2, chunks=chunks,
                               schedule="1f1b")
        step = make(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
        step()
        model.stats(reset=True)
        step()
        moved = model.stats()
        ours, base = paired([step, base_step], repeats)
        out.append(comparison(
            "dist", f"GPT {what}, 2 workers ({moved['waited']} waits, "
            f"{moved['bytes_from_workers'] + moved['bytes_to_workers']} B via client)",
            statistics.median(ours), statistics.median(base), 0.75, "one process",
            paired_ratio(ours, base)))
        model.close()

    prompt = x[:1, : t // 2]
    model = cluster.deploy(copy.deepcopy(local), stages=2)
    ours, base = paired([lambda: model.generate(prompt, 8 if quick else 32),
                         lambda: local.generate(prompt, 8 if quick else 32)], repeats)
    out.append(comparison("dist", f"GPT generate {8 if quick else 32} tokens, 2 workers",
                          statistics.median(ours), statistics.median(base), 2.0,
                          "one process", paired_ratio(ours, base)))

    def cache_run(m):
        cache = {}
        handles = [block.register_forward_hook(
            lambda mod, args, output, name=f"h.{i}": cache.__setitem__(name, output))
            for i, block in enumerate(m.h)]
        with torch.no_grad():
            m(x)
        for h in handles:
            h.remove()
        return cache

    ours, base = paired([lambda: cache_run(model), lambda: cache_run(local)], repeats)
    out.append(comparison("dist", "GPT run_with_cache (every block), 2 workers",
                          statistics.median(ours), statistics.median(base), 2.0,
                          "one process", paired_ratio(ours, base)))
    model.close()
    return out
