"""Complex numbers in a deployed model, on 2 workers, equal to one process: a Fourier layer
whose complex parameter lives and is stepped (SGD) on its worker; rotary embeddings whose
complex table the client passes to each placed block; a placed part that takes and returns
complex tensors, its gradient coming back complex; and a deployed model's state dict with
a complex parameter saved and loaded."""
import io
import math

import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Spectral(nn.Module):
    """A Fourier neural operator's layer: the low modes of rfft2 times a complex weight."""

    def __init__(self, width=3, modes=3):
        super().__init__()
        self.modes = modes
        self.weight = nn.Parameter(torch.rand(width, width, modes, modes, dtype=torch.cfloat) / 9)

    def forward(self, x):
        x_ft = torch.fft.rfft2(x)
        out = torch.zeros(x.shape[0], self.weight.shape[1], x.shape[-2], x.shape[-1] // 2 + 1,
                          dtype=torch.cfloat)
        m = self.modes
        out[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m, :m], self.weight)
        return torch.fft.irfft2(out, s=x.shape[-2:])


class FourierNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.spectral = Spectral()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.spectral(x) + x))


def rotary(x, freqs_cis):
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(z * freqs_cis.view(1, x.shape[1], 1, -1)).flatten(3)


class RopeBlock(nn.Module):
    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads, self.qk = heads, nn.Linear(dim, 2 * dim, bias=False)

    def forward(self, x, freqs_cis):
        b, t, d = x.shape
        q, k = self.qk(x).view(b, t, 2, self.heads, d // self.heads).unbind(2)
        q, k = rotary(q, freqs_cis).transpose(1, 2), rotary(k, freqs_cis).transpose(1, 2)
        att = (q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)).softmax(-1)
        return x + (att @ q).transpose(1, 2).reshape(b, t, d)


class RopeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([RopeBlock(), RopeBlock()])
        angles = torch.outer(torch.arange(6.0), 1.0 / 10000 ** (torch.arange(0.0, 4, 2) / 4))
        self.freqs_cis = torch.polar(torch.ones_like(angles), angles)  # (a plain attribute)

    def forward(self, x):
        for block in self.blocks:
            x = block(x, self.freqs_cis[: x.shape[1]])
        return x


class Rotate(nn.Module):
    """Takes a complex tensor and gives one: both cross the wire, values and gradients."""

    def __init__(self):
        super().__init__()
        self.angle = nn.Parameter(torch.tensor([0.3, -0.2, 0.5]))

    def forward(self, z):
        return z * torch.polar(torch.ones_like(self.angle), self.angle)


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([2.0, -3.0, 0.5]))

    def forward(self, x):
        return x * self.weight


class ComplexPipe(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Rotate(), Rotate()

    def forward(self, x):
        z = self.b(self.a(torch.complex(x, x.flip(-1))))
        return torch.view_as_real(z).sum(-1)


class ToComplex(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))

    def forward(self, x):
        return torch.complex(x * self.w, x.flip(-1))


class RotateToReal(Rotate):
    def forward(self, z):
        return torch.view_as_real(super().forward(z)).sum(-1)


def chain():
    """An nn.Sequential whose stages pass a complex activation worker to worker."""
    torch.manual_seed(0)
    return nn.Sequential(ToComplex(), RotateToReal())


def train(inputs, target):
    """Three SGD steps (momentum) of ``model``: losses, gradients, parameters."""
    def run(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        log = []
        for _ in range(3):
            loss = ((model(inputs) - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.append(float(loss.detach()))
        log += [p.grad.numpy().tolist() for p in model.parameters()]
        log += [p.detach().numpy().tolist() for p in model.parameters()]
        return log

    return run


def made(cls):
    def make():
        torch.manual_seed(0)
        return cls()

    return make


@pytest.mark.parametrize("cls, shape", [(FourierNet, (2, 3, 8, 8)), (RopeNet, (2, 6, 8)),
                                        (ComplexPipe, (4, 3))],
                         ids=["fourier", "rope", "complex-io"])
def test_a_deployed_model_with_complex_numbers_trains_as_in_one_process(cluster, cls, shape):
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.standard_normal(shape).astype(np.float32))
    y = torch.tensor(rng.standard_normal(shape).astype(np.float32))
    got, want = deployed_run(cluster, made(cls), train(x, y))
    assert got[0] != got[2]  # it trained
    np.testing.assert_allclose(np.array(got[:3]), np.array(want[:3]), rtol=1e-6)
    for g, w in zip(got[3:], want[3:]):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-5, atol=1e-6)


def test_a_deployed_complex_parameter_saves_and_loads(cluster):
    model = cluster.deploy(made(FourierNet)(), stages=2)
    try:
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        buf.seek(0)
        state = torch.load(buf)
        assert state["spectral.weight"].dtype == torch.complex64
        fresh = FourierNet()
        fresh.load_state_dict(state)
        x = torch.ones(1, 3, 8, 8)
        np.testing.assert_array_equal(fresh(x).detach().numpy(), model(x).detach().numpy())
    finally:
        model.close()


def test_a_complex_activation_between_chain_stages_takes_its_gradient(cluster):
    """The stage after gets a complex leaf that requires grad, in a call and in a pipelined
    train_step: the first stage's parameter gets its gradient (it got none: the call's
    leaf did not require grad, and a custom Function's complex output had no history)."""
    x, y = torch.ones(4, 3), torch.zeros(4, 3)

    def grads(model, loss):
        return [float(loss)] + [p.grad.numpy().tolist() for p in model.parameters()]

    def called(model):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return grads(model, loss)

    got, want = deployed_run(cluster, chain, called)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-5)

    model = cluster.deploy(chain(), stages=2)
    try:
        losses = model.train_step(x, y, nn.functional.mse_loss)
        got = grads(model, losses[0])
    finally:
        model.close()
    one = chain()
    loss = nn.functional.mse_loss(one(x), y)
    loss.backward()
    want = grads(one, loss)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-5)


def test_a_deployed_model_converts_to_complex_and_back_on_its_workers(cluster):
    """module.to(torch.cfloat) and back to float32 on a placed model: its workers convert
    the parameters, as one process does (complex was refused there: 'not a floating dtype')."""
    x = torch.tensor([[0.5, -1.0, 2.0]])

    def session(model):
        with pytest.warns(UserWarning, match="Complex modules"):
            model.to(torch.cfloat)
        z = model(torch.complex(x, x))
        model.float()
        return [str(z.dtype), z.detach().numpy().tolist(), str(model(x).dtype),
                model(x).detach().numpy().tolist()]

    got, want = deployed_run(cluster, lambda: nn.Sequential(Scale(), Scale()), session)
    assert got == want and got[0] == "torch.complex64"
