"""``to(dtype)``, ``double()``, ``half()`` and ``float()`` on a deployed model convert its
tensors on their workers, in place as in one process: the parameters stay the same objects
(an optimizer made before still steps them), their gradients are converted too, buffers
follow, and the model computes in the new dtype with one process's values. They were
refused before ("convert the model before deploying it")."""
import pytest
from helpers import norm_chain, norm_tree

import disthook as torch

pytestmark = pytest.mark.timeout(240)


def session(model):
    """Each conversion in turn, with a step of an optimizer made before them; what the
    model holds and computes after each."""
    torch.manual_seed(1)
    x = torch.randn(5, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []

    def look(tag, out):
        seen.append((tag, str(out.dtype), out.detach().numpy().tolist(),
                     sorted({str(t.dtype) for t in model.state_dict().values()}),
                     [None if p.grad is None else (str(p.grad.dtype), p.grad.numpy().tolist())
                      for p in model.parameters()]))

    out = model(x)
    out.sum().backward()
    model.double()  # the gradients of that backward are converted with the weights
    look("double", model(x.double()))
    opt.step()
    opt.zero_grad()
    out = model(x.double())
    out.pow(2).sum().backward()
    look("double, stepped", out)
    model.to(torch.float32)
    look("to float32", model(x))
    model.half()
    look("half", model(x.half()))
    model.float()
    look("float", model(x))
    return seen


@pytest.mark.parametrize("make", [norm_tree, norm_chain], ids=["tree", "chain"])
def test_conversions_run_on_the_workers_as_in_one_process(cluster_2_or_3, make):
    torch.manual_seed(0)
    want = session(make())
    torch.manual_seed(0)
    remote = cluster_2_or_3.deploy(make(), stages=2 if make is norm_tree else cluster_2_or_3.stages)
    try:
        got = session(remote)
    finally:
        remote.close()
    assert [g[:2] for g in got] == [w[:2] for w in want]  # the steps' dtypes
    assert got == want


def test_a_conversion_that_changes_nothing_sends_nothing(cluster_2_or_3):
    remote = cluster_2_or_3.deploy(norm_chain(), stages=cluster_2_or_3.stages)
    try:
        remote.stats(reset=True)
        remote.float()
        remote.to(torch.float32)
        remote.to("cpu")
        assert remote.stats()["requests"] == 0
    finally:
        remote.close()


class Quantize(torch.nn.Module):
    """A layer that makes a tensor of the default dtype in its forward (VQ-VAE's one-hot
    encodings: torch.zeros(n, k) then scatter_, then a matmul with its codebook)."""

    def __init__(self, width=4):
        super().__init__()
        self.codebook = torch.nn.Linear(width, width, bias=False)

    def forward(self, x):
        codes = torch.zeros(x.shape[0], x.shape[1])
        codes.scatter_(1, x.argmax(1, keepdim=True), 1)
        return x + torch.matmul(codes, self.codebook.weight)


class Coder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.quant = torch.nn.Linear(4, 4), Quantize()
        self.scale = torch.nn.Parameter(torch.ones(1))  # its own: its forward runs here

    def forward(self, x):
        return self.quant(self.enc(x) * self.scale)


def chain():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), Quantize(), torch.nn.Linear(4, 4),
                               Quantize())


def under_float64(model, steps):
    """The program sets float64 as its default: a forward, a backward, and the model's
    training steps (``train_step`` for a chain)."""
    x, y = torch.randn(6, 4), torch.randn(6, 4)
    out = model(x)
    out.sum().backward()
    seen = [str(out.dtype), out.detach().numpy().tolist()]
    for _ in range(steps):
        seen.append(model.train_step(x, y, torch.nn.functional.mse_loss).tolist())
    return seen


@pytest.mark.parametrize("make, steps", [(Coder, 0), (chain, 1)], ids=["tree", "chain"])
def test_a_forward_computes_under_the_programs_default_dtype(cluster_2_or_3, make, steps):
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        local = make()
        torch.manual_seed(0)
        remote = cluster_2_or_3.deploy(make(), stages=2)
        try:
            torch.manual_seed(1)
            if steps:  # one process's train_step: forward, loss, backward
                def step(x, y, loss_fn):
                    loss = loss_fn(local(x), y)
                    loss.backward()
                    return torch.tensor([loss.item()])

                local.train_step = step
            want = under_float64(local, steps)
            torch.manual_seed(1)
            got = under_float64(remote, steps)
            grads = [p.grad.numpy().tolist() for p in remote.parameters()]
        finally:
            remote.close()
    finally:
        torch.set_default_dtype(torch.float32)
    assert want[0] == "torch.float64"
    assert got == want
    assert grads == [p.grad.numpy().tolist() for p in local.parameters()]
