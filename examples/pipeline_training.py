"""Pipelined training with checkpoints. On a cluster each step is ``remote.train_step``:
the batch cut into micro-batches that flow through the stages under 1F1B, the loss on the
last stage; ``remote.save`` writes a checkpoint every few steps and ``cluster.load`` puts the
last one on the workers again. In one process: an ordinary loop and ``np.savez``. Both
print the same losses: micro-batch losses are weighted by their share of the batch.

    python examples/pipeline_training.py [--workers 2] [--steps 6] [--every 3] [--ckpt DIR]
"""
import tempfile
from pathlib import Path

import numpy as np
from common import optimizer, parser, placed

import disthook as torch
from disthook import nn


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--every", type=int, default=3, help="steps between checkpoints")
    p.add_argument("--ckpt", default=None, help="checkpoint directory (default: a temporary one)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="disthook-ckpt-") as tmp:
        train(args, Path(args.ckpt or tmp))


def train(args, ckpt: Path):
    ckpt.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 4))
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    with placed(model, args.workers, chunks=4, schedule="1f1b") as (net, cluster):
        opt = optimizer(net, cluster, torch.optim.SGD, lr=0.2)
        for step in range(1, args.steps + 1):
            if cluster:
                losses = net.train_step(x, y, nn.functional.cross_entropy)
                loss = losses.mean().item()  # of 4 micro-batches of 16 rows each
            else:
                batch_loss = nn.functional.cross_entropy(net(x), y)
                batch_loss.backward()
                loss = batch_loss.item()
            opt.step()
            opt.zero_grad()
            print(f"step {step}: loss {loss:.5f}")
            if step % args.every == 0:
                if cluster:
                    net.save(str(ckpt), optimizer=opt, step=step)
                else:
                    np.savez(ckpt / "model.npz", **{k: v.numpy() for k, v in
                                                    net.state_dict().items()})
                print(f"  checkpoint of step {step} in {ckpt}")
        if cluster:  # the checkpoint deployed afresh, as another program would
            restored = cluster.load(str(ckpt))
        else:
            restored = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32),
                                     nn.ReLU(), nn.Linear(32, 4))
            with np.load(ckpt / "model.npz") as saved:
                restored.load_state_dict({k: torch.from_numpy(saved[k]) for k in saved.files})
        with torch.no_grad():
            loss = nn.functional.cross_entropy(restored(x), y).item()
        print(f"restored from the checkpoint: loss {loss:.5f}")


if __name__ == "__main__":
    main()
