"""Training programs written for one process, deployed with one line: what third-party
training loops do (a GAN's two models, ...) gives what one process gives. Each test runs the
program in one process and deployed on 2 workers, from the same weights."""
import copy
from collections import namedtuple
from dataclasses import dataclass

import numpy as np

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(4, 6), nn.LeakyReLU(0.2, inplace=True),
                                  nn.Linear(6, 6), nn.Linear(6, 1), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1)


class Maker(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4))

    def forward(self, z):
        return self.main(z)


def gan_steps(make_g, make_d):
    """DCGAN's loop: the critic on real data and on the maker's output detached, then the
    maker through the critic; two Adam optimizers."""
    g, d = make_g(), make_d()
    opt_g = torch.optim.Adam(g.parameters(), lr=0.01, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=0.01, betas=(0.5, 0.999))
    bce = nn.BCELoss()
    rng = np.random.RandomState(0)
    out = []
    for _ in range(2):
        real = torch.tensor(rng.randn(5, 4).astype(np.float32))
        noise = torch.tensor(rng.randn(5, 3).astype(np.float32))
        d.zero_grad()
        err_real = bce(d(real), torch.ones(5))
        err_real.backward()
        fake = g(noise)
        err_fake = bce(d(fake.detach()), torch.zeros(5))
        err_fake.backward()
        opt_d.step()
        g.zero_grad()
        err_g = bce(d(fake), torch.ones(5))
        err_g.backward()
        out.append(g.main[0].weight.grad.numpy().copy())
        opt_g.step()
        out += [err_real.item(), err_fake.item(), err_g.item()]
    out += [g.main[2].weight.detach().numpy().copy(), d.main[3].weight.detach().numpy().copy()]
    return out


def test_one_models_output_feeds_another_deployed_model(cluster):
    """The maker's output, kept on its worker, is the critic's input (another deployment);
    the critic's input gradient goes back into the maker's backward. Before, the critic's
    worker waited for a value filed under the other deployment (a 30 s timeout)."""
    torch.manual_seed(0)
    g0, d0 = Maker(), Critic()
    one = gan_steps(lambda: copy.deepcopy(g0), lambda: copy.deepcopy(d0))
    two = gan_steps(lambda: cluster.deploy(copy.deepcopy(g0), stages=2),
                    lambda: cluster.deploy(copy.deepcopy(d0), stages=2))
    for a, b in zip(one, two, strict=True):
        close(a, b)


def lbfgs_fit(model, line_search_fn):
    """time_sequence_prediction's loop: L-BFGS over the model, the closure re-evaluating it."""
    x = torch.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4))
    y = torch.sin(x * 3)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4,
                            line_search_fn=line_search_fn)
    losses = []
    for _ in range(2):
        def closure():
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss
        losses.append(opt.step(closure).item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()], opt.state_dict()


def test_lbfgs_steps_a_deployed_model_as_one_process_does(cluster):
    """L-BFGS's direction is over all parameters and its line search calls the closure: it
    steps here, reading the workers' gradients and writing their values. Before, its step saw
    no parameter at all (IndexError), each worker being left to step its own share."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                        nn.Linear(8, 4))
    for search in (None, "strong_wolfe"):
        one = lbfgs_fit(copy.deepcopy(net), search)
        model = cluster.deploy(copy.deepcopy(net), stages=2)
        two = lbfgs_fit(model, search)
        close(one[0], two[0], 1e-5)
        for a, b in zip(one[1], two[1], strict=True):
            close(a, b, 1e-5)
        assert one[2]["state"][0]["n_iter"] == two[2]["state"][0]["n_iter"] > 0
        model.close()


def grad_writes(model):
    """Training loops that change gradients in place: the DQN tutorial's
    ``param.grad.data.clamp_(-1, 1)``, a manual step with ``p.grad.zero_()``, a scaled or
    partly zeroed gradient (a row, through a view), a kept ``g = p.grad`` seeing its own
    write, and ``p.grad.data = t``."""
    x = torch.tensor(np.linspace(-2, 2, 20, dtype=np.float32).reshape(5, 4))
    seen = []
    for _ in range(2):
        model(x).pow(2).sum().backward()
        for p in model.parameters():
            p.grad.data.clamp_(-1, 1)
        model[0].weight.grad.mul_(0.5)
        model[2].weight.grad[0].zero_()
        g = model[2].bias.grad
        g.add_(1.0)
        seen.append(g.numpy().copy())
        model[0].bias.grad.data = model[0].bias.grad * 3  # a new value for the gradient
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                seen.append(p.grad.numpy().copy())
                p.grad.zero_()
    seen += [p.grad.numpy().copy() for p in model.parameters()]
    return seen + [p.detach().numpy().copy() for p in model.parameters()]


def test_gradients_written_in_place_reach_the_workers(cluster):
    """``p.grad`` of a deployed parameter is a copy of its worker's gradient: a write into it
    in place is made here and sent there. Before, it raised (read-only memory)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    one = grad_writes(copy.deepcopy(net))
    model = cluster.deploy(copy.deepcopy(net), stages=2)
    two = grad_writes(model)
    for a, b in zip(one, two, strict=True):
        close(a, b)
    model.close()


class Flip(nn.Module):
    """An op of the client's forward on a kept value in either layout (transposed or not)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, flip):
        h = self.a(x)
        return self.b((h.t() if flip else h) * 2)


def flips(model):
    out = []
    for flip in (False, True, False, True):
        y = model(torch.full((4, 4), 0.5), flip)
        y.sum().backward()
        out.append(y.detach().numpy().copy())
    return out + [model.a.weight.grad.numpy().copy()]


def maml_first_order(net):
    """A first-order MAML step: inner steps through functional_call with new weights, the
    query gradients summed into the meta-parameters' .grad."""
    meta_opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    rng = np.random.RandomState(0)
    out = []
    for _ in range(2):
        meta_opt.zero_grad()
        for _task in range(2):
            xs = torch.tensor(rng.uniform(-3, 3, (5, 1)).astype(np.float32))
            xq = torch.tensor(rng.uniform(-3, 3, (5, 1)).astype(np.float32))
            params = dict(net.named_parameters())
            for _inner in range(2):
                loss = torch.func.functional_call(net, params, (xs,)).pow(2).mean()
                grads = torch.autograd.grad(loss, list(params.values()))
                params = {k: (v - 0.1 * g).detach().requires_grad_()
                          for (k, v), g in zip(params.items(), grads)}
            qloss = torch.func.functional_call(net, params, (xq,)).sin().mean()
            for p, g in zip(net.parameters(),
                            torch.autograd.grad(qloss, list(params.values()))):
                p.grad = g if p.grad is None else p.grad + g
            out.append(qloss.item())
        meta_opt.step()
    return out + [p.detach().numpy().copy() for p in net.parameters()]


def test_calls_that_go_on_tell_layouts_apart(cluster):
    """A call (or backward) that does not wait predicts its answer from an earlier one with
    the same key; the layout its inputs have on the worker (a transposed kept value, a
    tensor sent by value, which arrives contiguous) changes the strides of what it gives,
    so it is part of the key. Before, the second call's answer differed from the one
    predicted and the program failed (RuntimeError: the worker's answer differs)."""
    torch.manual_seed(0)
    flip = Flip()
    one = flips(copy.deepcopy(flip))
    model = cluster.deploy(copy.deepcopy(flip), placement={"a": 0, "b": 1})
    for a, b in zip(one, flips(model), strict=True):
        close(a, b)
    model.close()
    net = nn.Sequential(nn.Linear(1, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                        nn.Linear(16, 1))
    one = maml_first_order(copy.deepcopy(net))
    model = cluster.deploy(copy.deepcopy(net), stages=2)
    for a, b in zip(one, maml_first_order(model), strict=True):
        close(a, b, 1e-5)
    model.close()


def restore_and_step(model, opt):
    """An LR finder's restore: the model's and the optimizer's state dicts saved, a few
    steps tried, both loaded back, then training goes on."""
    x = torch.tensor(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))

    def step():
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    out = [step(), step()]
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    for lr in (1e-3, 1e-1):
        for group in opt.param_groups:
            group["lr"] = lr
        out.append(step())
    model.load_state_dict(saved_model)
    opt.load_state_dict(saved_opt)
    out += [step(), step()]
    return out + [p.detach().numpy().copy() for p in model.parameters()]


def test_an_optimizer_made_before_the_deploy_keeps_its_loaded_state(cluster):
    """An optimizer made over the model's parameters before the deploy steps them here,
    its state here too: load_state_dict keeps that state. Before, it sent it to workers
    that do not step them, and Adam's moments were lost (a silent difference)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 6), nn.ReLU(),
                        nn.Linear(6, 2))
    local = copy.deepcopy(net)
    one = restore_and_step(local, torch.optim.Adam(local.parameters(), lr=1e-2))
    placed = copy.deepcopy(net)
    opt = torch.optim.Adam(placed.parameters(), lr=1e-2)
    model = cluster.deploy(placed, stages=2)
    for a, b in zip(one, restore_and_step(model, opt), strict=True):
        close(a, b)
    model.close()


class SharpnessAware(torch.optim.Optimizer):
    """A SAM-style wrapper: it takes the optimizer class it wraps, climbs to the worst
    nearby weights in ``first_step`` and lets the inner optimizer step from there."""

    def __init__(self, params, inner, rho=0.05, **kwargs):
        super().__init__(params, {"rho": rho, **kwargs})
        self.inner = inner(self.param_groups, **kwargs)
        self.param_groups = self.inner.param_groups

    @torch.no_grad()
    def first_step(self):
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.norm(torch.stack([g.norm(p=2) for g in grads]), p=2)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["old_p"] = p.data.clone()
                    p.add_(p.grad * (group["rho"] / (norm + 1e-12)))
        self.zero_grad()

    @torch.no_grad()
    def second_step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]
        self.inner.step()
        self.zero_grad()


def own_optimizers(model):
    class SignSGD(torch.optim.Optimizer):  # a class of the training script's own
        def __init__(self, params, lr=0.01):
            super().__init__(params, {"lr": lr})

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.add_(p.grad.sign(), alpha=-group["lr"])

    x = torch.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    sam = SharpnessAware(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
    out = []
    for _ in range(2):
        model(x).pow(2).mean().backward()
        sam.first_step()
        loss = model(x).pow(2).mean()
        loss.backward()
        sam.second_step()
        out.append(loss.item())
    sign = SignSGD(model.parameters())
    for _ in range(2):
        loss = model(x).pow(2).mean()
        sign.zero_grad()
        loss.backward()
        sign.step()
        out.append(loss.item())
    return out + [p.detach().numpy().copy() for p in model.parameters()]


def test_optimizers_the_workers_cannot_make_step_here(cluster):
    """An optimizer class whose constructor takes more than the parameters and its defaults
    (SAM's, wrapping another optimizer) or one the workers cannot import (the script's own)
    steps here over the deployed parameters, as L-BFGS does. Before, each worker tried to
    make one and failed (TypeError: missing 'inner'; 'define it in a module')."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 6), nn.ReLU(),
                        nn.Linear(6, 2))
    one = own_optimizers(copy.deepcopy(net))
    model = cluster.deploy(copy.deepcopy(net), stages=2)
    for a, b in zip(one, own_optimizers(model), strict=True):
        close(a, b)
    model.close()


Encoded = namedtuple("Encoded", "summary hidden")


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        return Encoded(summary=h.mean(-1), hidden=h)


@dataclass
class Scored:
    logits: object = None
    scale: float = 1.0


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 3)

    def forward(self, h):
        return Scored(logits=self.lin(h), scale=2.0)


class EncodeThenClassify(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.head = Encoder(), Head()

    def forward(self, x):
        out = self.enc(x)
        scored = self.head(out.hidden)
        return (scored.logits * scored.scale + out.summary.unsqueeze(-1),
                type(out).__name__ + type(scored).__name__)


def classify_steps(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.tensor(np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4))
    out = []
    for _ in range(2):
        logits, kind = model(x)
        loss = logits.logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out += [loss.item(), kind]
    return out + [p.detach().numpy().copy() for p in model.parameters()]


def test_parts_that_return_a_namedtuple_or_a_dataclass(cluster):
    """A placed part's namedtuple or dataclass output comes back as one (``out.hidden``,
    ``scored.logits``). Before, a namedtuple came back a plain tuple (AttributeError: 'tuple'
    object has no attribute 'hidden') and a dataclass was refused on the worker."""
    torch.manual_seed(0)
    net = EncodeThenClassify()
    one = classify_steps(copy.deepcopy(net))
    model = cluster.deploy(copy.deepcopy(net), placement={"enc": 0, "head": 1})
    two = classify_steps(model)
    for a, b in zip(one, two, strict=True):
        if isinstance(a, str):
            assert a == b
        else:
            close(a, b)
    model.close()
