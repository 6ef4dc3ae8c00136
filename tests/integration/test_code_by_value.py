"""A deploying client's modules reach their workers as objects, pickled by value with their
code: no constructor runs again, no script of the client is imported there. Modules whose
constructor comes from a mixin, that hold lambdas, closures, bound methods or partials, that
were copied or given callables after construction, or that hold their submodules in dicts,
deploy and give one process's numbers on 2 and 3 workers (issue 29, symptoms 5-7)."""
import copy
import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sweeps import EXHAUSTIVE

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster
from disthook.distributed.shipping import CodeError

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module", params=[2, 3], ids=["2-workers", "3-workers"])
def cluster(request, shared_clusters):
    with shared_clusters.lend(request.param) as c:
        yield c


# ---- modules that only travel as objects -----------------------------------------------------

class RecipeMixin:
    """An einops-style layer: the mixin's __init__ is the class's, and it keeps a recipe (a
    closure) made from its arguments."""

    def __init__(self, pattern: str, **sizes):
        super().__init__()
        self.pattern, self.sizes = pattern, sizes
        scale = float(sizes.get("scale", 1.0))
        self._recipe = lambda x: x * scale

    def _rearrange(self, x):
        h = self._recipe(x)
        return torch.cat([h[:, 2:], h[:, :2]], dim=1)


class Recipe(RecipeMixin, nn.Module):
    def forward(self, x):
        return self._rearrange(x)


class Gate(nn.Module):
    """Holds a bound method, a partial, a closure over a local and a dict of its own
    submodules, and calls them all in forward."""

    def __init__(self, n: int):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.out = nn.Linear(n, n)
        self.parts = {"first": self.fc, "then": self.out}  # aliases of its children
        self.squash = self._squash  # a bound method
        self.shift = functools.partial(torch.add, other=0.25)
        offset = 0.5
        self.bias_fn = lambda x: x - offset  # a closure over a local of __init__

    def _squash(self, x):
        return torch.tanh(x)

    def forward(self, x):
        h = self.squash(self.parts["first"](x))
        return self.bias_fn(self.shift(self.parts["then"](h)))


def models():
    torch.manual_seed(0)
    later = nn.Linear(4, 4)
    later.scale = lambda x: x * 3.0  # a callable given after construction
    later.forward = functools.partial(lambda self, x: self.scale(nn.Linear.forward(self, x)),
                                      later)
    copied = copy.deepcopy(Gate(4))  # a copy, never made by calling its class
    copied.parts = {"first": copied.out, "then": copied.fc}  # a dict set after construction
    return {
        "mixin": nn.Sequential(nn.Linear(4, 4), Recipe("b n -> b n", scale=2.0),
                               nn.Linear(4, 3)),
        "callables": nn.Sequential(Gate(4), nn.ReLU(), Gate(4)),
        "copied-and-set-later": nn.Sequential(copied, later, nn.Linear(4, 2)),
    }


def forward_backward(model, x):
    x = x.detach().clone().requires_grad_()
    out = model(x)
    (out * out).sum().backward()
    return out.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("name", list(models()))
def test_modules_that_only_travel_as_objects_deploy_and_give_one_process_results(cluster,
                                                                                 name):
    x = torch.randn(5, 4)
    local = models()[name]
    want_out, want_grad = forward_backward(local, x)
    want_params = {n: p.grad.numpy().copy() for n, p in local.named_parameters()}
    stages = len(cluster.workers())
    remote = cluster.deploy(models()[name], stages=stages)
    try:
        assert len({w for _, w, _ in remote.workers()}) == stages
        out, grad = forward_backward(remote, x)
        np.testing.assert_allclose(out, want_out, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-6, atol=1e-6)
        got = {n: g.numpy() for n, g in remote.named_gradients().items()}
        assert got.keys() == want_params.keys()
        for n, g in want_params.items():
            np.testing.assert_allclose(got[n], g, rtol=1e-5, atol=1e-6, err_msg=n)
    finally:
        remote.close()


class Counted(nn.Linear):
    """Notes each call of its constructor, in whichever process it runs."""

    log = None  # a file path, set by the test

    def __init__(self, *args):
        with open(Counted.log, "a") as f:
            f.write(f"{os.getpid()}\n")
        super().__init__(*args)


def test_a_deploy_calls_no_constructor_and_draws_nothing(cluster, tmp_path):
    Counted.log = str(tmp_path / "constructed.log")
    torch.manual_seed(1)
    model = nn.Sequential(Counted(3, 3), nn.Tanh(), Counted(3, 3))
    want = torch.randn(4)  # what the generator gives next in one process
    torch.manual_seed(1)
    model = nn.Sequential(Counted(3, 3), nn.Tanh(), Counted(3, 3))
    remote = cluster.deploy(copy.deepcopy(model), stages=len(cluster.workers()))
    try:
        assert np.array_equal(torch.randn(4).numpy(), want.numpy())
        out = remote(torch.ones(1, 3)).detach().numpy()
        np.testing.assert_allclose(out, model(torch.ones(1, 3)).detach().numpy(), rtol=1e-6)
        with open(Counted.log) as f:  # four calls, all here: none on a worker
            assert f.read().split() == [str(os.getpid())] * 4
    finally:
        remote.close()


def test_hooks_registered_before_the_deploy_fire_once_on_the_client(cluster):
    calls = []

    class Hooked(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.fc.register_forward_hook(lambda m, a, out: calls.append(os.getpid()))

        def forward(self, x):
            return self.fc(x)

    model = nn.Sequential(Hooked(), nn.ReLU(), Hooked())
    remote = cluster.deploy(model, stages=len(cluster.workers()))
    try:
        remote(torch.randn(2, 3))
        assert calls == [os.getpid(), os.getpid()]  # each fc once, here (client hooks)
    finally:
        remote.close()


class Peeks(nn.Module):
    """Holds a module that the deploy places on another worker."""

    def __init__(self, other: nn.Module):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.__dict__["other"] = other  # an attribute, not a child

    def forward(self, x):
        return self.fc(x) + self.other(x)


def test_a_stage_that_holds_another_stages_module_is_refused_at_deploy_naming_it(cluster):
    last = nn.Linear(3, 3)
    model = nn.Sequential(Peeks(last), nn.ReLU(), last)
    with pytest.raises(CodeError, match=r"the module '2' \(Linear\) is placed on another "
                                        r"worker, and a module of this stage holds it"):
        cluster.deploy(model, stages=len(cluster.workers()))
    # nothing was left loaded: the same workers take the next model
    ok = cluster.deploy(nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3)),
                        stages=len(cluster.workers()))
    ok.close()


# ---- a script whose imports the workers could not satisfy ------------------------------------

HELPER = '''
import notebook_only_widgets  # exists only on the client: its script made it

import disthook as torch


class Scale(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor
        self.widget = notebook_only_widgets.WIDGET

    def forward(self, x):
        return x * self.factor
'''

SCRIPT = '''
import sys
import types

stub = types.ModuleType("notebook_only_widgets")  # a module stubbed on the client only
stub.WIDGET = "progress bar"
sys.modules["notebook_only_widgets"] = stub

with open("imports.log", "a") as log:  # a side effect of importing this script
    log.write("imported\\n")

import copy

import disthook as torch
from disthook.distributed import local_cluster
from model_parts import Scale


class Twice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.note = stub.WIDGET

    def forward(self, x):
        return self.lin(x) * 2


torch.manual_seed(0)
net = torch.nn.Sequential(Twice(), Scale(0.5), torch.nn.Tanh())
x = torch.randn(2, 3)
want = net(x)
with local_cluster(workers=WORKERS) as cluster:  # no __main__ guard: workers never import it
    remote = cluster.deploy(copy.deepcopy(net), stages=WORKERS)
    out = remote(x)
    out.sum().backward()
    net(x).sum().backward()
    same = torch.allclose(remote[0].lin.weight.grad, net[0].lin.weight.grad)
    print("same output", torch.allclose(out, want), "same grad", same)
'''


# the script starts a cluster of its own: 3 workers in the default run, 2 as well exhaustively
@pytest.mark.parametrize("workers", [pytest.param(2, marks=EXHAUSTIVE), 3])
def test_a_script_whose_imports_the_workers_cannot_satisfy_deploys(tmp_path, workers):
    (tmp_path / "model_parts.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / "script.py").write_text(
        textwrap.dedent(SCRIPT).replace("WORKERS", str(workers)))
    proc = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=200, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "same output True same grad True"
    assert (tmp_path / "imports.log").read_text() == "imported\n"  # by the client alone


# ---- a model that holds code, described: checkpoints and published models -------------------

class Blocks(nn.Module):
    """minGPT's blocks (each holds a lambda over its MLP) looped over in forward."""

    def __init__(self):
        from test_shipping import Block, GPTConfig

        super().__init__()
        self.h = nn.ModuleList([Block(GPTConfig()) for _ in range(3)])
        self.ln_f = nn.LayerNorm(8)

    def forward(self, x):
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


def gpt():
    torch.manual_seed(3)
    return Blocks()


def test_a_checkpoint_keeps_code_only_when_asked_and_loads_it_only_when_trusted(cluster,
                                                                                tmp_path):
    from disthook.distributed.checkpoint import CheckpointError

    idx = torch.randn(2, 5, 8)
    stages = len(cluster.workers())
    remote = cluster.deploy(gpt(), stages=stages)
    try:
        with torch.no_grad():
            remote.ln_f.weight.mul_(1.5)  # weights no constructor gives
        want = remote(idx).detach().numpy()
        remote.save(str(tmp_path / "data"))  # the weights; no description of the code
        remote.save(str(tmp_path / "code"), code=True)
    finally:
        remote.close()
    with pytest.raises(CheckpointError, match=r"cannot make the model again: attribute "
                                              r"'mlpf' of h.0 \(Block\) is not "
                                              r"data.*save\(path, code=True\)"):
        cluster.load(str(tmp_path / "data"))
    again = cluster.deploy(gpt(), stages=stages)  # the weights load onto a deployed model
    try:
        again.load_checkpoint(str(tmp_path / "data"))
        np.testing.assert_allclose(again(idx).detach().numpy(), want, rtol=1e-6, atol=1e-6)
    finally:
        again.close()
    with pytest.raises(PermissionError, match=r"keeps its model \(test_code_by_value:Blocks\) "
                                              r"as code .* cluster.load\(path, "
                                              r"trust_code=True\)"):
        cluster.load(str(tmp_path / "code"))
    loaded = cluster.load(str(tmp_path / "code"), trust_code=True)
    try:
        np.testing.assert_allclose(loaded(idx).detach().numpy(), want, rtol=1e-6, atol=1e-6)
    finally:
        loaded.close()


def test_a_published_model_that_holds_code_attaches_only_with_trust(cluster):
    from disthook.distributed import connect

    idx = torch.randn(2, 5, 8)
    remote = cluster.deploy(gpt(), stages=len(cluster.workers()), name="code-gpt")
    try:
        want = remote(idx).detach().numpy()
        with connect(cluster.address) as other:
            with pytest.raises(PermissionError, match=r"came with its deployer's code .* "
                                                      r"attach\('code-gpt', trust_code=True\)"):
                other.attach("code-gpt")
            attached = other.attach("code-gpt", trust_code=True)
            np.testing.assert_allclose(attached(idx).detach().numpy(), want, rtol=1e-6,
                                       atol=1e-6)
            attached.close()
    finally:
        remote.close()


def test_workers_that_take_no_code_take_data_and_refuse_code_by_name():
    with local_cluster(workers=2, allow_code=False) as service:
        assert not any(w.code for w in service.workers())
        net = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
        remote = service.deploy(copy.deepcopy(net), stages=2)  # as data: classes by import path
        x = torch.randn(4, 3)
        np.testing.assert_allclose(remote(x).detach().numpy(), net(x).detach().numpy(),
                                   rtol=1e-6)
        remote.close()
        from disthook.distributed.spec import SpecError

        with pytest.raises(SpecError, match=r"attribute 'mlpf' of h.0 \(Block\) is not data"
                                            r".*This cluster's workers take no code"):
            service.deploy(gpt(), stages=2)


class HalfMSE(nn.Module):
    """A loss of this file's own: a served model's workers may not import it."""

    def forward(self, out, target):
        return 0.5 * nn.functional.mse_loss(out, target)


def test_a_training_steps_loss_follows_the_workers_allow_list():
    from disthook.distributed import RemoteError

    with local_cluster(workers=2, allow_code=False, allow_model_modules=[]) as service:
        remote = service.deploy(nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2)), stages=2)
        x, y = torch.randn(4, 3), torch.randn(4, 2)
        remote.train_step(x, y, nn.MSELoss())  # disthook's own: allowed
        with pytest.raises(RemoteError, match=r"importing 'test_code_by_value' is not "
                                              r"allowed here"):
            remote.train_step(x, y, HalfMSE())
        remote.close()
