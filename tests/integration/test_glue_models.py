"""Models whose forward does more than chain their children deploy with no change: the
root's forward runs on the client as written (functional ops, residuals, loops over a
ModuleList, several inputs) and each child runs on its worker when the forward calls it.
Training equals one process's; micro-batches, which need a chain, are refused at deploy."""
import copy

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn
from disthook.distributed import deployment_of

pytestmark = pytest.mark.timeout(180)


class Net(nn.Module):
    """The PyTorch MNIST example's network (smaller): functional ops between children."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(16 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


class Residual(nn.Module):
    """Residual blocks in a ModuleList, looped over; a head; two inputs."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(6, 6), nn.Tanh())
                                     for _ in range(3)])
        self.head = nn.Linear(6, 3)
        self.scale = 0.5

    @property
    def width(self):
        return self.head.in_features

    @staticmethod
    def shifted(x, shift):
        return x + shift

    def forward(self, x, shift):
        assert x.shape[-1] == self.width  # a property of the root, read in its forward
        for block in self.blocks:
            x = x + self.scale * block(x)
        return self.head(self.shifted(x, shift))


def train(model, make_input, steps=3):
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    torch.manual_seed(1)
    losses = []
    for _ in range(steps):
        args, y = make_input()
        opt.zero_grad()
        out = model(*args)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(loss.item())
    return losses, {n: v.detach().numpy() for n, v in model.state_dict().items()}


def mnist_input():
    return (torch.randn(4, 1, 14, 14),), torch.randint(0, 10, (4,))


def residual_input():
    return (torch.randn(5, 6), torch.randn(6)), torch.randint(0, 3, (5,))


def made(cls):
    torch.manual_seed(0)
    model = cls()
    model.eval()  # dropout draws from each process's own generator: off for the comparison
    return model


@pytest.mark.parametrize("cls,make_input", [(Net, mnist_input), (Residual, residual_input)],
                         ids=["mnist-net", "residual-loop-two-inputs"])
def test_a_model_with_code_between_its_children_trains_like_one_process(cluster, cls,
                                                                        make_input):
    expected = train(made(cls), make_input)
    remote = cluster.deploy(made(cls), stages=2)
    try:
        seen = []
        remote.get_submodule(list(made(cls)._modules)[1]).register_forward_hook(
            lambda m, args, out: seen.append(out.shape))
        got = train(remote, make_input)
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-5)
        for name, value in expected[1].items():
            np.testing.assert_allclose(got[1][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
        assert seen  # the child's hook fired on its worker, for the client
    finally:
        remote.close()


def test_train_step_and_run_until_take_one_process_steps(cluster):
    """train_step runs the forward here, the loss and backward (one micro-batch); run_until
    ends the forward after the part."""
    from disthook import hooks

    local = made(Net)
    remote = cluster.deploy(made(Net), stages=2)
    try:
        x, y = mnist_input()
        loss = remote.train_step(x[0], y, nn.CrossEntropyLoss())
        want = nn.CrossEntropyLoss()(local(x[0]), y)
        want.backward()
        np.testing.assert_allclose(loss.numpy(), [want.item()], rtol=1e-5)
        grads = remote.named_gradients()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=name)
        np.testing.assert_allclose(hooks.run_until(remote, x[0], "fc1").detach().numpy(),
                                   hooks.run_until(local, x[0], "fc1").detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


class BiasedResidual(Residual):
    """A root holding a parameter and a buffer of its own, used in its forward."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1, 1, 3))
        self.register_buffer("offset", torch.full((6,), 0.25))

    def forward(self, x, shift):
        return super().forward(x + self.offset, shift) + self.bias


def test_a_root_with_parameters_of_its_own_keeps_them_on_the_client(cluster):
    expected = train(made(BiasedResidual), residual_input)
    remote = cluster.deploy(made(BiasedResidual), stages=2)
    try:
        assert type(remote.bias) is nn.Parameter  # the root's own: here, not a proxy
        assert isinstance(remote, BiasedResidual)
        assert [n for n, _ in remote.named_parameters()] == \
            [n for n, _ in made(BiasedResidual).named_parameters()]
        got = train(remote, residual_input)
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-5)
        assert list(got[1]) == list(expected[1])  # state_dict in the model's own order
        for name, value in expected[1].items():
            np.testing.assert_allclose(got[1][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
        with pytest.raises(ValueError, match="own.*split_points cannot place"):
            cluster.deploy(made(BiasedResidual), stages=2, split_points=[1])
    finally:
        remote.close()


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Tanh()
        self.c = nn.Linear(4, 3)

    def forward(self, x):
        for layer in self.children():  # walks the children: each runs on its worker
            x = layer(x) * 0.5
        return x


class Derived(Base):
    def forward(self, x):
        assert isinstance(self, Base)
        return super().forward(x) + 1.0


def test_a_forward_may_walk_its_children_and_call_super(cluster):
    torch.manual_seed(0)
    local = Derived()
    x = torch.randn(3, 4)
    remote = cluster.deploy(copy.deepcopy(local), stages=2)
    try:
        out = remote(x)
        np.testing.assert_allclose(out.detach().numpy(), local(x).detach().numpy(),
                                   rtol=1e-6, atol=1e-6)
        out.sum().backward()
        local(x).sum().backward()
        grads = remote.named_gradients()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-6,
                                       atol=1e-7)
    finally:
        remote.close()


class TwoArgs(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.similarity = nn.CosineSimilarity(dim=1)

    def forward(self, x):
        return self.similarity(self.proj(x), x)


def test_a_child_called_with_two_tensors_runs_on_its_worker(cluster):
    torch.manual_seed(0)
    local = TwoArgs()
    remote = cluster.deploy(copy.deepcopy(local), stages=2)
    try:
        assert remote.workers()[1][2] == ["similarity"]
        x = torch.randn(4, 3, requires_grad=True)
        rx = x.detach().clone().requires_grad_(True)
        out, rout = local(x), remote(rx)
        np.testing.assert_allclose(rout.detach().numpy(), out.detach().numpy(), rtol=1e-6)
        out.pow(2).sum().backward()
        rout.pow(2).sum().backward()
        np.testing.assert_allclose(rx.grad.numpy(), x.grad.numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(remote.proj.weight.grad.numpy(),
                                   local.proj.weight.grad.numpy(), rtol=1e-5, atol=1e-7)
    finally:
        remote.close()


class Boundary(nn.Module):
    """A forward with code of its own (so it runs here, each part on its worker): the output
    of act1 and the input of fc2 are one tensor in one process, and two calls here."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(self.act1(self.fc1(x))) + 0.5


def boundary_hooks(model, x):
    """DeepLift's pattern: a hook on a module's output records its gradient; a hook on the
    next module's input (registered later) replaces that gradient."""
    log = []

    def record(m, args, out):
        out.register_hook(lambda g: log.append(("act1 out", g.numpy())))

    model.act1.register_forward_hook(record)

    def pre(m, args):
        args[0].register_hook(lambda g: (log.append(("fc2 in", g.numpy())), g * 3)[1])
        return args[0].clone()

    model.fc2.register_forward_pre_hook(pre)
    xin = x.clone().requires_grad_(True)
    model(xin).square().sum().backward()
    return log, xin.grad.numpy()


def test_tensor_hooks_on_a_tensor_between_two_parts_fire_in_registration_order(cluster):
    torch.manual_seed(0)
    local = Boundary()
    remote = cluster.deploy(copy.deepcopy(local), stages=2)
    try:
        x = torch.randn(5, 4)
        (got, got_grad), (want, want_grad) = boundary_hooks(remote, x), boundary_hooks(local, x)
        assert deployment_of(remote)._glue  # the forward ran here, each part on its worker
        assert [name for name, _ in got] == [name for name, _ in want] == ["act1 out",
                                                                            "fc2 in"]
        for (_, g), (_, w) in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-5, atol=1e-7)
    finally:
        remote.close()


class Checked(nn.Module):
    """A Linear that refuses an input with NaN in it."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(6, 3)

    def forward(self, x):
        if bool(torch.isnan(x).any()):
            raise ValueError("NaN in the input")
        return self.inner(x)


class TwoParts(nn.Module):
    """Code between two children: each runs on its worker when the forward calls it."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 6)
        self.head = Checked()

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)) * 2)


def test_optimizer_calls_ride_with_each_parts_call_and_run_once(cluster):
    """After an optimizer's first step, its steps and zero_grads ride with the first call
    of a part on each worker (no request of their own); a part's call that fails after its
    worker ran them does not run them twice (momentum shows a step run twice)."""
    torch.manual_seed(0)
    local = TwoParts()
    remote = cluster.deploy(copy.deepcopy(local), stages=2)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (local, remote)]
    torch.manual_seed(1)
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    hub = deployment_of(remote)._hub
    sent = []
    send = hub.send
    hub.send = lambda address, msg_type, fields, **kw: (sent.append(msg_type),
                                                        send(address, msg_type, fields, **kw))
    try:
        for step in range(3):
            for opt, model in zip(opts, (local, remote)):
                opt.zero_grad()
                sent.clear()
                F.cross_entropy(model(x), y).backward()
                if model is remote and step > 0:  # the optimizer's calls rode with them
                    assert "step" not in sent and "forward" in sent, sent
                opt.step()
        assert len(hub.pending_optimizer) == 1  # the last step
        F.cross_entropy(remote(x), y).backward()
        F.cross_entropy(local(x), y).backward()
        for opt in opts:
            opt.step()
        out = remote(torch.full((5, 6), float("nan")))  # body ran its step, head ran it too
        with pytest.raises(ValueError, match="NaN in the input"):
            out.sum().item()  # the call did not wait: its failure comes at the next wait
        for name, p in local.named_parameters():
            np.testing.assert_allclose(remote.get_parameter(name).detach().numpy(),
                                       p.detach().numpy(), rtol=1e-6, atol=1e-7,
                                       err_msg=name)
        assert not deployment_of(remote)._hub.pending_optimizer
    finally:
        remote.close()
