"""train_step with micro-batches on a model whose forward runs on the client (a GPT-style
model): under 1F1B each worker runs its micro-batch forwards and backwards in its own
stage's order (disthook.distributed.stage_outbox), under GPipe in GPipe's; losses and
gradients are one process's; a value read mid-forward and an error inside one micro-batch's
call behave as without the reordering."""
import copy

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn
from disthook.distributed.stage_outbox import stage_order

pytestmark = pytest.mark.timeout(300)

CHUNKS, ROWS = 4, 10  # micro-batches of 3, 3, 2, 2 rows


class Probe(nn.Module):
    """Writes, on the worker that runs it, 1 to its log for each forward and 2 for each
    backward through it, in the order they run."""

    def __init__(self):
        super().__init__()
        self.register_buffer("log", torch.zeros(64))
        self.register_buffer("n", torch.zeros(1))

    def mark(self, code):
        with torch.no_grad():
            self.log[int(self.n.item()) % 64] = code
            self.n += 1

    def forward(self, x):
        self.mark(1.0)
        if x.requires_grad:
            x.register_hook(lambda g: self.mark(2.0))
        return x


class Bomb(nn.Module):
    """Raises in its ``fail_at``-th call (0: never)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))
        self.register_buffer("fail_at", torch.zeros(1))

    def forward(self, x):
        with torch.no_grad():
            self.calls += 1
        if self.fail_at.item() and self.calls.item() == self.fail_at.item():
            raise ValueError(f"the bomb went off in call {int(self.calls.item())}")
        return x


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.probe, self.bomb = Probe(), Bomb()
        self.ln, self.fc = nn.LayerNorm(width), nn.Linear(width, width)

    def forward(self, x):
        x = self.bomb(self.probe(x))
        return x + torch.tanh(self.fc(self.ln(x)))


class Net(nn.Module):
    """Embedding, an op between parts (on the client's code), blocks, head."""

    def __init__(self, vocab=20, width=16, blocks=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.h = nn.ModuleList([Block(width) for _ in range(blocks)])
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        x = self.wte(idx) * 0.5
        for block in self.h:
            x = block(x)
        return self.head(x)


PLACEMENTS = {  # stages -> placement, and the first block of each stage (whose probe we read)
    2: ({"wte": 0, "h.0": 0, "h.1": 0, "h.2": 1, "h.3": 1, "head": 1}, ["h.0", "h.2"]),
    3: ({"wte": 0, "h.0": 0, "h.1": 1, "h.2": 1, "h.3": 2, "head": 2}, ["h.0", "h.1", "h.3"]),
}


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


def data(seed=3):
    torch.manual_seed(seed)
    return torch.randint(0, 20, (ROWS, 5)), torch.randint(0, 20, (ROWS, 5))


def one_process_step(model, x, y, loss=loss_fn):
    """Micro-batch losses and the gradients of one process's step, each micro-batch's loss
    weighted by its share of the rows, as train_step does."""
    model.zero_grad()
    losses = []
    for part_x, part_y in zip(torch.tensor_split(x, CHUNKS), torch.tensor_split(y, CHUNKS)):
        out = loss(model(part_x), part_y)
        (out * (len(part_x) / ROWS)).backward()
        losses.append(out.item())
    return losses, {n: p.grad.numpy().copy() for n, p in model.named_parameters()}


def marks(model, path) -> list[int]:
    """The probe log of the block at ``path``, as its worker wrote it."""
    state = model.state_dict()
    n = int(state[f"{path}.probe.n"].item())
    return [int(v) for v in state[f"{path}.probe.log"].numpy()[:n]]


def as_order(codes: list[int]) -> list[tuple[str, int]]:
    """F/B codes as (kind, micro-batch): every order sends the forwards in micro-batch order,
    and the backwards too."""
    seen = {"F": 0, "B": 0}
    out = []
    for c in codes:
        kind = "F" if c == 1 else "B"
        out.append((kind, seen[kind]))
        seen[kind] += 1
    return out


def deployed(cluster, local, stages, schedule):
    placement, firsts = PLACEMENTS[stages]
    model = cluster.deploy(copy.deepcopy(local), stages=stages, chunks=CHUNKS,
                           schedule=schedule, placement=placement)
    return model, firsts


def same_step(got_losses, got_grads, want):
    np.testing.assert_allclose(got_losses, want[0], rtol=1e-5, atol=1e-6)
    for name, g in want[1].items():
        np.testing.assert_allclose(got_grads[name].numpy(), g, rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_each_stage_runs_its_schedule_order_with_one_process_gradients(cluster, stages,
                                                                       schedule):
    torch.manual_seed(0)
    local = Net()
    model, firsts = deployed(cluster, local, stages, schedule)
    x, y = data()
    opt = torch.optim.SGD(local.parameters(), lr=0.1, momentum=0.9)
    ropt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    try:
        for step in range(3):
            before = [len(marks(model, path)) for path in firsts]
            want = one_process_step(local, x, y)
            opt.step()
            ropt.zero_grad()
            losses = model.train_step(x, y, loss_fn).numpy()
            same_step(losses, model.named_gradients(), want)
            ropt.step()
            if step == 0:
                continue  # the first step learns the calls' answers, waiting for each
            ran = [as_order(marks(model, path)[before[s]:]) for s, path in enumerate(firsts)]
            assert ran == [stage_order(schedule, s, stages, CHUNKS) for s in range(stages)]
            if schedule == "1f1b":  # what the client sent, as step_stats report it
                assert [s["order"] for s in model.step_stats] == ran
    finally:
        model.close()


def test_a_value_read_mid_forward_and_a_client_hook_still_work(cluster):
    """A loss that reads a value (.item(): the client waits, which sends all held first),
    and a client forward hook that reads its output: the same numbers as one process."""
    torch.manual_seed(0)
    local = Net()
    model, _ = deployed(cluster, local, 2, "1f1b")
    x, y = data()
    read = {"local": [], "remote": []}

    def reading_loss(where):
        def loss(logits, target):
            read[where].append(logits.abs().max().item())
            return loss_fn(logits, target)
        return loss

    try:
        for step in range(2):
            want = one_process_step(local, x, y, reading_loss("local"))
            losses = model.train_step(x, y, reading_loss("remote")).numpy()
            same_step(losses, model.named_gradients(), want)
            model.zero_grad()
        np.testing.assert_allclose(read["remote"], read["local"], rtol=1e-5)
        seen = {"local": [], "remote": []}
        for where, m in (("local", local), ("remote", model)):
            m.h[1].register_forward_hook(
                lambda mod, args, out, where=where: seen[where].append(out.sum().item()))
        want = one_process_step(local, x, y)
        losses = model.train_step(x, y, loss_fn).numpy()
        same_step(losses, model.named_gradients(), want)
        assert len(seen["remote"]) == CHUNKS  # once per micro-batch
        np.testing.assert_allclose(seen["remote"], seen["local"], rtol=1e-5, atol=1e-5)
    finally:
        model.close()


def test_an_error_inside_one_micro_batch_names_the_call_and_the_model_stays_usable(cluster):
    torch.manual_seed(0)
    local = Net()
    model, _ = deployed(cluster, local, 2, "1f1b")
    x, y = data()
    try:
        model.train_step(x, y, loss_fn)  # learns the calls' answers: the next go on
        bomb = model.h[3].bomb
        bomb.fail_at.copy_(torch.tensor([CHUNKS + 2.0]))  # micro-batch 1 of the next step
        with pytest.raises(Exception) as failed:
            model.train_step(x, y, loss_fn)
        text = str(failed.value) + " ".join(getattr(failed.value, "__notes__", []))
        assert "the bomb went off in call 6" in text
        assert "forward of 'h.3'" in text
        bomb.fail_at.copy_(torch.tensor([0.0]))
        model.zero_grad()
        want = one_process_step(local, x, y)
        same_step(model.train_step(x, y, loss_fn).numpy(), model.named_gradients(), want)
    finally:
        model.close()


def test_a_forward_that_returns_to_its_first_worker_still_takes_one_process_steps(cluster):
    """wte and head on one worker, the blocks on another: the forward goes a -> b -> a, so
    the stages' 1F1B orders cannot all be kept (a's forward 1 needs b's, which b's order
    puts after b's backward 0, which needs a's); what is held goes when the step ends, each
    request after what it needs, and nothing hangs."""
    torch.manual_seed(0)
    local = Net()
    placement = {"wte": 0, "h.0": 1, "h.1": 1, "h.2": 1, "h.3": 1, "head": 0}
    model = cluster.deploy(copy.deepcopy(local), stages=2, chunks=CHUNKS, schedule="1f1b",
                           placement=placement)
    x, y = data()
    try:
        for _ in range(3):
            want = one_process_step(local, x, y)
            losses = model.train_step(x, y, loss_fn).numpy()
            same_step(losses, model.named_gradients(), want)
            model.zero_grad()
    finally:
        model.close()
