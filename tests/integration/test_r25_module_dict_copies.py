"""A module made by copying a deployed module's ``__dict__`` entry by entry is another module,
which lives here, as the copy does in one process. higher's ``innerloop_ctx`` makes such a
copy of the whole model (MAML with a differentiable optimizer): a new class per module, the
attributes copied but for the tensors and children, fast weights put in ``_parameters``
before each forward. The copy took the deployed module's placement with the attributes, so
calling it ran the deployed module on its worker with the worker's weights: the inner
loop's losses and the meta-gradients were silently those of the unchanged model."""
import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2

COPIED_AROUND = {"_parameters", "_buffers", "_modules", "_forward_hooks", "_backward_hooks",
                 "_forward_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks"}


def functional_copy(module: nn.Module, weights: list) -> nn.Module:
    """higher's pattern, in short: a subclass instance made afresh, every attribute but the
    tensors, children and hooks copied from ``module``, each parameter's place taken by the
    next of ``weights`` (a list it consumes), each child copied the same way."""
    names = [n for n, p in module._parameters.items() if p is not None]

    class Functional(type(module)):
        def __init__(self):
            nn.Module.__init__(self)

    copy = Functional()
    for name, value in module.__dict__.items():
        if name not in COPIED_AROUND:
            copy.__dict__[name] = value  # (higher sets them with object.__setattr__)
    for name in names:
        copy._parameters[name] = weights.pop(0)
    for name, buf in module._buffers.items():
        copy._buffers[name] = None if buf is None else buf.detach().clone()
    for name, child in module._modules.items():
        copy._modules[name] = functional_copy(child, weights)
    return copy


def chain() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 1))


class Net(nn.Module):
    """A model whose own forward runs on the client, with a buffer in a part."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.BatchNorm1d(8))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.body(x) * 0.5)


def maml(model) -> list:
    """Two tasks of two inner steps each, by functional copies of the model; meta-gradients
    into the model's parameters; an SGD meta step; the model unchanged by the copies."""
    torch.manual_seed(1)
    meta = torch.optim.SGD(model.parameters(), lr=0.1)
    log = []
    for task in range(2):
        xs, ys, xq, yq = (torch.randn(5, 3), torch.randn(5, 1), torch.randn(5, 3),
                          torch.randn(5, 1))
        fast = list(model.parameters())
        for _ in range(2):
            fnet = functional_copy(model, list(fast))
            loss = nn.functional.mse_loss(fnet(xs), ys)
            grads = torch.autograd.grad(loss, fast, create_graph=True)
            fast = [w - 0.1 * g for w, g in zip(fast, grads)]
            log.append(loss.detach().numpy())
        fnet = functional_copy(model, list(fast))
        query = nn.functional.mse_loss(fnet(xq), yq)
        query.backward()
        log += [query.detach().numpy(), [w.detach().numpy() for w in fast],
                [b.numpy() for b in fnet.buffers()], deployment_of(fnet) is None]
    log.append([p.grad.numpy() for p in model.parameters()])
    meta.step()
    log.append([(k, v.numpy()) for k, v in model.state_dict().items()])
    return log


@pytest.mark.parametrize("make", [chain, Net], ids=["chain", "own-forward"])
def test_a_functional_copy_of_a_deployed_model_computes_with_its_own_weights(cluster, make):
    got, want = deployed_run(cluster, make, maml)
    same_logs(got, want, where="maml")


def test_a_dict_copy_of_a_placed_part_is_a_module_of_this_process(cluster):
    """``new.__dict__.update(part.__dict__)`` gives a module sharing the part's tensors and
    children, as in one process: it computes what the part computes, and it is no part of
    the deployment; the part itself stays placed."""
    def run(model):
        part = model[2]
        twin = object.__new__(type(part))
        twin.__dict__.update(part.__dict__)
        x = torch.linspace(-1, 1, 16).reshape(2, 8)
        twin.scale_note = "twin"  # its own attribute, not the part's
        return [twin(x).detach().numpy(), part(x).detach().numpy(),
                deployment_of(twin) is None, hasattr(part, "scale_note"),
                np.asarray(model(torch.ones(2, 3)).detach().numpy())]

    got, want = deployed_run(cluster, chain, run)
    same_logs(got, want, where="dict copy")
    remote = cluster.deploy(chain(), stages=2)
    try:
        assert deployment_of(remote[2]) is not None
    finally:
        remote.close()

