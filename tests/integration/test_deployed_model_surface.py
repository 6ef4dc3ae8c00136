"""A deployed model's modules and parameters behave as the user's own (issue 29): truth,
``len()`` and indexing only where the module's class defines them; parameters that are
tensors for metadata and factory functions, values fetched when read, writes on the owner;
buffers, plain attributes and ``assign=True`` loads; modules held in dict and list
attributes. Each check is made against the same model in one process."""
import copy

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module", params=[2, 3])
def cluster(request, shared_clusters):
    with shared_clusters.lend(request.param) as c:
        c.stages = request.param
        yield c


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.relu = nn.ReLU()
        self.block = nn.Sequential(nn.Conv2d(2, 2, 3), nn.ReLU())
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.block(self.relu(self.conv(x))).flatten(1))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(4, 4)
        self.mlp = nn.ModuleDict({"up": nn.Linear(4, 8), "down": nn.Linear(8, 4)})

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp["down"](torch.relu(self.mlp["up"](x)))


class GPTLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList([Block(), Block(), Block()])
        self.head = nn.Linear(4, 10)

    def forward(self, idx):
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Stack(nn.Module):
    """A user's class with its own __len__, __iter__ and __getitem__."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 3)
        self.second = nn.Linear(3, 3)
        self.third = nn.Linear(3, 2)

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return [self.first, self.second, self.third][i]

    def __iter__(self):
        return iter([self.first, self.second, self.third])

    def forward(self, x):
        for layer in self:
            x = layer(x)
        return x


def made(kind):
    torch.manual_seed(0)
    return kind()


def surface(model):
    rows = []
    for name, m in model.named_modules():
        has_len = hasattr(type(m), "__len__")
        rows.append((name, type(m).__name__, bool(m), has_len, len(m) if has_len else None,
                     [type(c).__name__ for c in m.children()], any(m.children())))
    return rows


@pytest.mark.parametrize("kind, x", [
    (CNN, lambda: torch.randn(2, 1, 6, 6)),
    (GPTLike, lambda: torch.tensor([[1, 2, 3], [4, 5, 6]])),
    (Stack, lambda: torch.randn(2, 3)),
])
def test_truth_len_and_children_are_the_classes_own(cluster, kind, x):
    local, remote = made(kind), cluster.deploy(made(kind), stages=cluster.stages)
    try:
        assert surface(remote) == surface(local)
        with pytest.raises(TypeError):
            len(remote.get_submodule(next(n for n, m in local.named_modules()
                                          if not hasattr(type(m), "__len__"))))
        data = x()
        np.testing.assert_allclose(remote(data).detach().numpy(),
                                   local(data).detach().numpy(), rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


def test_containers_read_as_in_one_process(cluster):
    local, remote = made(GPTLike), cluster.deploy(made(GPTLike), stages=cluster.stages)
    try:
        blocks, mlp = remote.blocks, remote.blocks[1].mlp
        assert blocks[-1] is remote.get_submodule("blocks.2")
        assert isinstance(blocks[0:2], nn.ModuleList) and len(blocks[0:2]) == 2
        assert blocks[0:2][1] is blocks[1]
        assert list(mlp) == list(local.blocks[1].mlp) == ["up", "down"]  # a ModuleDict's keys
        assert "up" in mlp and mlp["up"] is remote.get_submodule("blocks.1.mlp.up")
        assert [k for k, _ in mlp.items()] == ["up", "down"]
    finally:
        remote.close()


# ---- parameters are tensors ------------------------------------------------------------------

def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))


def counted_reads(remote):
    """A counter of the model's state requests (each read of a value asks once)."""
    seen = [0]
    states = deployment_of(remote)._states

    def counting(names=None):
        seen[0] += 1
        return states(names)

    object.__setattr__(deployment_of(remote), "_states", counting)
    return seen


def same(a, b):
    a = a.detach() if isinstance(a, torch.Tensor) else a
    b = b.detach() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


METADATA = {
    "zeros_like": torch.zeros_like, "ones_like": torch.ones_like,
    "empty_like": lambda t: torch.empty_like(t).zero_(),
    "full_like": lambda t: torch.full_like(t, 2.5),
    "rand_like": lambda t: torch.rand_like(t).shape,
    "randn_like": lambda t: torch.randn_like(t).dtype,
    "new_zeros": lambda t: t.new_zeros(2, 3), "new_ones": lambda t: t.new_ones((4,)),
    "new_empty": lambda t: t.new_empty(3).shape, "new_full": lambda t: t.new_full((2,), 7.0),
    "new_tensor": lambda t: t.new_tensor([1, 2]),
    "meta": lambda t: (t.shape, t.size(), t.size(-1), t.numel(), t.dim(), t.ndim,
                       t.element_size(), str(t.dtype), str(t.device), t.requires_grad,
                       t.is_leaf, len(t)),
}


@pytest.mark.parametrize("op", sorted(METADATA))
def test_metadata_and_factories_need_no_round_trip(cluster, op):
    local, remote = mlp(), cluster.deploy(mlp(), stages=2)
    try:
        p, q = remote[2].weight, local[2].weight
        assert isinstance(p, torch.Tensor) and isinstance(p, nn.Parameter)
        reads = counted_reads(remote)
        got = METADATA[op](p)
        assert reads[0] == 0, f"{op} asked the worker {reads[0]} time(s)"
        want = METADATA[op](q)
        if isinstance(want, torch.Tensor):
            assert type(got) is type(want) and got.dtype == want.dtype
            same(got, want)
        else:
            assert got == want
    finally:
        remote.close()


READS = {
    "mul": lambda t, x: t * 2, "sum": lambda t, x: t.sum(), "matmul": lambda t, x: x @ t.T,
    "linear": lambda t, x: torch.nn.functional.linear(x, t),
    "numpy": lambda t, x: t.detach().numpy(), "clone": lambda t, x: t.detach().clone(),
    "repr": lambda t, x: repr(t), "index": lambda t, x: t[1], "mean": lambda t, x: t.mean(0),
}


@pytest.mark.parametrize("op", sorted(READS))
def test_reads_fetch_the_value_and_compute_here(cluster, op):
    local, remote = mlp(), cluster.deploy(mlp(), stages=2)
    try:
        x = torch.randn(2, 5)
        reads = counted_reads(remote)
        got, want = READS[op](remote[2].weight, x), READS[op](local[2].weight, x)
        assert 1 <= reads[0] <= 2
        if isinstance(want, str):
            assert got == want
        else:
            same(got, want)
    finally:
        remote.close()


def test_a_gradient_computed_here_accumulates_on_the_owner(cluster):
    local, remote = mlp(), cluster.deploy(mlp(), stages=2)
    try:
        x = torch.randn(2, 5)
        for model in (local, remote):
            w = model[2].weight
            assert w.grad is None
            torch.nn.functional.linear(x, w).sum().backward()
            (w * 3).pow(2).sum().backward()
        same(remote[2].weight.grad, local[2].weight.grad)
        out = remote(torch.randn(3, 4))  # the worker's own backward adds to the same .grad
        assert out.shape == (3, 3)
    finally:
        remote.close()


def test_a_new_tensor_made_like_a_placed_one_is_a_plain_one(cluster):
    """Library code makes a tensor like another with its type (``type(p)(data,
    requires_grad=...)``, ``type(buf)(data)``): as in one process, a plain parameter or
    tensor comes, nothing placed, and the placed one is untouched."""
    remote = cluster.deploy(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5),
                                          nn.Linear(5, 3)), stages=2)
    try:
        w, mean = remote[0].weight, remote[1].running_mean
        made = type(w)(torch.ones(2), requires_grad=False)
        assert type(made) is nn.Parameter and not made.requires_grad
        assert made.tolist() == [1.0, 1.0]
        again = w.__class__(torch.zeros(3))
        assert type(again) is nn.Parameter and again.requires_grad
        plain = type(mean)(torch.full((2,), 2.0))
        assert type(plain) is torch.Tensor and plain.tolist() == [2.0, 2.0]
        assert type(mean)([1.0, 2.0]).tolist() == [1.0, 2.0]
        assert tuple(w.shape) == (5, 4) and tuple(mean.shape) == (5,)
        assert mean.tolist() == [0.0] * 5
    finally:
        remote.close()


def test_writes_run_on_the_owner(cluster):
    local, remote = mlp(), cluster.deploy(mlp(), stages=2)
    try:
        for model in (local, remote):
            w, b = model[2].weight, model[2].bias
            with torch.no_grad():
                w.mul_(2)
                w += 1
                w[0] = 5.0
                b.copy_(torch.tensor([1.0, 2.0, 3.0]))
            w.data.add_(0.5)
            b.data = torch.tensor([4.0, 5.0, 6.0])
            w.grad = torch.ones(3, 5)
            b.requires_grad_(False)
        fresh = remote.to_local()  # what the workers hold
        for name in ("2.weight", "2.bias"):
            same(fresh.get_parameter(name), local.get_parameter(name))
        same(remote[2].weight.grad, local[2].weight.grad)
        assert remote[2].bias.requires_grad is False and fresh[2].bias.requires_grad is False
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            remote[2].weight.mul_(2)
        with pytest.raises(RuntimeError, match="read-only memory"):
            remote[2].weight.detach().zero_()  # a copy: writing it would change nothing there
        remote[2].weight.grad.zero_()  # a gradient's copy: its write goes to the worker
        assert not remote.to_local()[2].weight.grad.numpy().any()
    finally:
        remote.close()


# ---- writes that one process allows ------------------------------------------------------------

class Scaled(nn.Module):
    """Reads a plain attribute and an optional buffer in its forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = 1.0

    def forward(self, x):
        y = self.lin(x) * self.scale
        return y * self.mask if hasattr(self, "mask") else y


def scaled():
    torch.manual_seed(0)
    return nn.Sequential(Scaled(), nn.ReLU(), Scaled())


def test_register_buffer_goes_to_the_worker(cluster):
    local, remote = scaled(), cluster.deploy(scaled(), stages=2)
    try:
        x = torch.randn(2, 3)
        for model in (local, remote):
            model[2].register_buffer("mask", torch.tensor([1.0, 0.0, 2.0]))
            model[0].register_buffer("seen", torch.zeros(2), persistent=False)
        same(remote(x), local(x))  # the worker's forward sees it
        assert list(remote.state_dict()) == list(local.state_dict())
        assert [n for n, _ in remote.named_buffers()] == [n for n, _ in local.named_buffers()]
        same(remote.state_dict()["2.mask"], local.state_dict()["2.mask"])
        for model in (local, remote):
            model[2].mask = torch.tensor([0.5, 0.5, 0.5])  # assigning a buffer replaces it
        same(remote(x), local(x))
        with pytest.raises(KeyError, match="attribute 'scale' already exists"):
            remote[2].register_buffer("scale", torch.ones(1))
        with pytest.raises(KeyError, match='contain'):
            remote[2].register_buffer("a.b", torch.ones(1))
        for model in (local, remote):
            del model[2].mask
        same(remote(x), local(x))
        assert list(remote.state_dict()) == list(local.state_dict())
    finally:
        remote.close()


def test_plain_attributes_set_and_deleted(cluster):
    local, remote = scaled(), cluster.deploy(scaled(), stages=2)
    try:
        x = torch.randn(2, 3)
        for model in (local, remote):
            model[2].scale = 3.0  # the module had it: its forward on the worker reads it
            model[0].note = {"seen": 1}  # the client's own
        same(remote(x), local(x))
        assert remote[2].scale == 3.0 and remote[0].note == {"seen": 1}
        for model in (local, remote):
            del model[0].note  # what a hook library's clear_context does
            assert not hasattr(model[0], "note")
            del model[2].scale
            with pytest.raises(AttributeError):
                _ = model[2].scale
        with pytest.raises(AttributeError):
            del remote[0].never_set
        with pytest.raises(AttributeError):
            remote(x)  # the worker's forward reads self.scale, which is gone: as in one process
    finally:
        remote.close()


def test_load_state_dict_assign_lands_on_the_owner(cluster):
    local, remote = scaled(), cluster.deploy(scaled(), stages=2)
    try:
        torch.manual_seed(5)
        other = nn.Sequential(Scaled(), nn.ReLU(), Scaled())
        remote[2].lin.weight.requires_grad_(False)
        local[2].lin.weight.requires_grad_(False)
        for model in (local, remote):
            result = model.load_state_dict(other.state_dict(), assign=True)
            assert not result.missing_keys and not result.unexpected_keys
        fresh = remote.to_local()
        for name, value in other.state_dict().items():
            same(fresh.state_dict()[name], value)
        # torch's assign keeps each parameter's requires_grad
        assert [p.requires_grad for p in remote.parameters()] == \
            [p.requires_grad for p in local.parameters()]
        x = torch.randn(2, 3)
        same(remote(x), local(x))
        wide = {k: v.double() for k, v in other.state_dict().items()}
        with pytest.raises(RuntimeError, match="keeps its dtypes"):
            remote.load_state_dict(wide, assign=True)
    finally:
        remote.close()


# ---- modules held in plain attributes -----------------------------------------------------------

class Registry(nn.Module):
    """Its forward reaches its children through a dict and a tuple."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(4, 2)
        self.pair = (self.fc1, self.act)

    def forward(self, x):
        for layer in self.pair:
            x = layer(x)
        return self.mod_dict["b"](x) * 2  # not a plain chain: runs here, parts there


def registry():
    torch.manual_seed(0)
    model = Registry()
    model.mod_dict = {"a": model.fc1, "b": model.fc2}  # a hook library's, after construction
    return model


class Points(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 3)
        self.points = {"first": self.fc1, "second": [self.fc2]}

    def forward(self, x):
        return self.points["second"][0](torch.relu(self.points["first"](x)))


def points():
    torch.manual_seed(0)
    return nn.Sequential(Points(), nn.ReLU(), Points())


def test_a_dict_of_hook_points_on_the_root_reaches_the_deployed_children(cluster):
    local, remote = registry(), cluster.deploy(registry(), stages=2)
    try:
        assert remote.mod_dict["a"] is remote.fc1 and remote.mod_dict["b"] is remote.fc2
        assert remote.pair[0] is remote.fc1 and type(remote.pair) is tuple
        assert list(remote.children()) == [remote.fc1, remote.act, remote.fc2]
        seen = {"local": [], "remote": []}
        for key, model in (("local", local), ("remote", remote)):
            model.mod_dict["a"].register_forward_hook(
                lambda m, args, out, key=key: seen[key].append(out.detach().numpy().copy()))
        x = torch.randn(2, 3)
        same(remote(x), local(x))
        assert len(seen["remote"]) == len(seen["local"]) == 1
        same(seen["remote"][0], seen["local"][0])
    finally:
        remote.close()


@pytest.mark.parametrize("placement", [None, {"0.fc1": 0, "0.fc2": 1, "2": 1}])
def test_a_dict_attribute_of_a_part_reaches_the_deployed_modules(cluster, placement):
    local = points()
    remote = cluster.deploy(points(), stages=2, placement=placement)
    try:
        part = remote[0]
        assert part.points["first"] is remote.get_submodule("0.fc1")
        assert part.points["second"][0] is remote.get_submodule("0.fc2")
        x = torch.randn(2, 3)
        same(remote(x), local(x))
    finally:
        remote.close()


# ---- changes of a placed module's children: carried out, or refused, never lost -------------

class Looped(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_changing_a_placed_containers_children_runs_it_here_never_lost(cluster):
    stages = len(cluster.workers())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), *[nn.Sequential(nn.Linear(2, 2), nn.ReLU())
                                             for _ in range(stages - 1)])
    local = copy.deepcopy(model)
    remote = cluster.deploy(model, stages=stages)
    try:
        x = torch.randn(3, 2)
        for change in (lambda m: m[1].append(nn.Tanh()), lambda m: m[1].extend([nn.Tanh()]),
                       lambda m: m[1].insert(0, nn.Sigmoid()),
                       lambda m: m[1].__setitem__(1, nn.Tanh()), lambda m: m[1].__delitem__(0),
                       lambda m: m[1].pop(0), lambda m: m[1].add_module("extra", nn.Tanh()),
                       lambda m: m[1].register_parameter("w", nn.Parameter(torch.ones(1))),
                       lambda m: m.append(nn.Tanh())):  # the root: a chain of stages
            change(remote)
            change(local)
            assert [type(c).__name__ for c in remote.modules()] == \
                [type(c).__name__ for c in local.modules()]
            np.testing.assert_allclose(remote(x).detach().numpy(), local(x).detach().numpy(),
                                       rtol=1e-6)
        assert sorted(remote.state_dict()) == sorted(local.state_dict())
    finally:
        remote.close()


def test_a_container_whose_parts_are_on_several_workers_takes_changes_here(cluster):
    torch.manual_seed(0)
    model = Looped()
    remote = cluster.deploy(model, stages=len(cluster.workers()))
    try:
        extra = nn.Linear(2, 2)
        model.blocks.append(extra)
        remote.blocks.append(extra)  # runs here, as the loop over the blocks does
        x = torch.randn(3, 2)
        np.testing.assert_allclose(remote(x).detach().numpy(), model(x).detach().numpy(),
                                   rtol=1e-6)
    finally:
        remote.close()


def test_scalar_buffers_keep_their_shape_on_the_workers(cluster):
    """Batch norm's num_batches_tracked is 0-d in one process: so it is read back from its
    worker, in the state dict and once the deployment is closed (it was shape [1])."""
    local = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 3))
    remote = cluster.deploy(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5),
                                          nn.Linear(5, 3)), stages=2)
    try:
        remote(torch.randn(3, 4))
        local(torch.randn(3, 4))
        shapes = {k: tuple(v.shape) for k, v in local.state_dict().items()}
        assert {k: tuple(v.shape) for k, v in remote.state_dict().items()} == shapes
        assert remote[1].num_batches_tracked.detach().shape == ()
        assert remote[1].num_batches_tracked.item() == 1
    finally:
        remote.close()
    assert {k: tuple(v.shape) for k, v in remote.state_dict().items()} == shapes


def test_random_initialisation_after_the_deploy_draws_from_this_process(cluster):
    """nn.init on a deployed model's parameters, and random in-place methods on them and on
    its buffers, give one process's values under the same seed, and leave the random
    stream (or the generator given) where one process leaves it. They drew from the
    worker's stream before."""
    def init(model):
        torch.manual_seed(5)
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.trunc_normal_(m.bias, std=0.1)
        nn.init.kaiming_normal_(model[0].weight, nonlinearity="relu")
        nn.init.orthogonal_(model[2].weight)
        model[1].running_mean.normal_()
        model[2].bias.data.bernoulli_(0.5)
        gen = torch.Generator().manual_seed(3)
        model[0].bias.data.uniform_(-1, 1, generator=gen)
        return ({k: v.numpy().tolist() for k, v in model.state_dict().items()},
                torch.randn(3).tolist(), torch.rand(2, generator=gen).tolist())

    local = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 3))
    remote = cluster.deploy(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5),
                                          nn.Linear(5, 3)), stages=2)
    try:
        assert init(remote) == init(local)
    finally:
        remote.close()


def test_every_in_place_method_reaches_the_worker_or_says_why_not(cluster):
    """In-place methods of every kind on a deployed parameter (the mixins' too, which
    raised TypeError: cumsum_, fill_diagonal_, apply_ with a function, the random fills)
    give one process's values; a change of shape is refused, naming the tensor."""
    def run(model):
        w = model[0].weight
        torch.manual_seed(3)
        with torch.no_grad():
            w.cumsum_(0)
            w.data.fill_diagonal_(2.0)
            w.data.apply_(lambda v: v * 2)
            w.data.exponential_()
            w.data.cauchy_()
            model[0].bias.data.random_(0, 5)
            model[0].bias.data.log_normal_()
        return {k: v.numpy().tolist() for k, v in model.state_dict().items()}

    torch.manual_seed(0)
    local = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    torch.manual_seed(0)
    remote = cluster.deploy(nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2)), stages=2)
    try:
        assert run(remote) == run(local)
        with pytest.raises(RuntimeError, match=r"0.weight.data.t_\(\).*take a view"):
            remote[0].weight.data.t_()
        with torch.no_grad(), pytest.raises(RuntimeError, match="keeps its shape: 1.weight"):
            remote[1].weight.unsqueeze_(0)
        assert tuple(remote[1].weight.shape) == (2, 3)
    finally:
        remote.close()
