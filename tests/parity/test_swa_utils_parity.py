"""disthook.optim.swa_utils against torch 2.13's over a few training steps of the same model:
the averaged parameters and buffers (SWA, EMA, one-tensor and list rules, use_buffers),
n_averaged and the state dict keys, SWALR's learning rates, update_bn's statistics, and the
errors (type and text)."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

from torch.optim import swa_utils as t_swa

from disthook.optim import swa_utils as d_swa


def net(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))


def pair(lib_make=net):
    d, t = lib_make(disthook), lib_make(torch)
    rng = np.random.default_rng(0)
    for name, p in t.named_parameters():
        value = rng.standard_normal(tuple(p.shape)).astype(np.float32)
        p.data = torch.tensor(value)
        d.get_parameter(name).data = disthook.tensor(value)
    return d, t


def batches(n=5, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((8, 4)).astype(np.float32),
             rng.standard_normal((8, 2)).astype(np.float32)) for _ in range(n)]


def close(d_tensor, t_tensor, tol=2e-6):
    np.testing.assert_allclose(d_tensor.detach().numpy(), t_tensor.detach().numpy(),
                               rtol=tol, atol=tol)


def train_and_average(lib, model, averaged, data, lr=0.1):
    opt = lib.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for x, y in data:
        opt.zero_grad()
        lib.nn.functional.mse_loss(model(lib.tensor(x)), lib.tensor(y)).backward()
        opt.step()
        averaged.update_parameters(model)


RULES = {
    "swa default": lambda s: {},
    "ema multi": lambda s: {"multi_avg_fn": s.get_ema_multi_avg_fn(0.9)},
    "swa multi": lambda s: {"multi_avg_fn": s.get_swa_multi_avg_fn()},
    "ema one": lambda s: {"avg_fn": s.get_ema_avg_fn(0.8)},
    "swa one": lambda s: {"avg_fn": s.get_swa_avg_fn()},
    "own one": lambda s: {"avg_fn": lambda avg, cur, n: 0.5 * avg + 0.5 * cur + n * 0.01},
}


@pytest.mark.parametrize("use_buffers", [False, True], ids=["params", "buffers"])
@pytest.mark.parametrize("rule", list(RULES))
def test_averaged_model_follows_torch(rule, use_buffers):
    d, t = pair()
    d_avg = d_swa.AveragedModel(d, use_buffers=use_buffers, **RULES[rule](d_swa))
    t_avg = t_swa.AveragedModel(t, use_buffers=use_buffers, **RULES[rule](t_swa))
    data = batches()
    if rule == "swa multi" and use_buffers:  # the integer num_batches_tracked: torch refuses
        messages = []
        for lib, model, avg in ((disthook, d, d_avg), (torch, t, t_avg)):
            with pytest.raises(RuntimeError) as info:
                train_and_average(lib, model, avg, data)
            messages.append(str(info.value))
        assert messages[0] == messages[1]
        return
    train_and_average(disthook, d, d_avg, data)
    train_and_average(torch, t, t_avg, data)
    assert int(d_avg.n_averaged) == int(t_avg.n_averaged) == len(data)
    assert d_avg.n_averaged.dtype == disthook.long
    d_state, t_state = d_avg.state_dict(), t_avg.state_dict()
    assert list(d_state) == list(t_state)
    for key in t_state:
        close(d_state[key], t_state[key])
    # the copy is the model's own, not the model: the averages differ from the last weights
    assert not np.allclose(d_avg.module[0].weight.detach().numpy(), d[0].weight.detach().numpy())
    x = batches(1, seed=7)[0][0]
    d_avg.eval(), t_avg.eval()
    close(d_avg(disthook.tensor(x)), t_avg(torch.tensor(x)), tol=1e-5)


def test_averaged_model_loads_its_state_dict_and_forward_takes_kwargs():
    d, _ = pair()
    first = d_swa.AveragedModel(d)
    first.update_parameters(d)
    first.update_parameters(d)
    second = d_swa.AveragedModel(net(disthook))
    second.load_state_dict(first.state_dict())
    assert int(second.n_averaged) == 2
    x = disthook.randn(3, 4)
    second.eval(), first.eval()
    close(second(input=x), first(x))


def test_averaged_model_rejects_two_rules_as_torch():
    d, t = pair()
    for lib, s, m in ((disthook, d_swa, d), (torch, t_swa, t)):
        with pytest.raises(AssertionError, match="^Only one of avg_fn and multi_avg_fn should "
                                                 "be provided$"):
            s.AveragedModel(m, avg_fn=s.get_swa_avg_fn(), multi_avg_fn=s.get_swa_multi_avg_fn())


@pytest.mark.parametrize("decay", [-0.1, 1.5])
@pytest.mark.parametrize("name", ["get_ema_multi_avg_fn", "get_ema_avg_fn"])
def test_ema_decay_out_of_range_as_torch(name, decay):
    messages = []
    for s in (d_swa, t_swa):
        with pytest.raises(ValueError) as info:
            getattr(s, name)(decay)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("strategy", ["cos", "linear"])
@pytest.mark.parametrize("anneal_epochs", [0, 1, 4])
def test_swalr_learning_rates_follow_torch(strategy, anneal_epochs):
    def lrs(lib, s):
        a, b = lib.nn.Linear(2, 2), lib.nn.Linear(2, 1)
        opt = lib.optim.SGD([{"params": a.parameters()}, {"params": b.parameters(), "lr": 0.3}],
                            lr=1.0)
        sched = s.SWALR(opt, swa_lr=[0.05, 0.01], anneal_epochs=anneal_epochs,
                        anneal_strategy=strategy)
        seen = [sched.get_last_lr()]
        for _ in range(7):
            opt.step()
            sched.step()
            seen.append(sched.get_last_lr())
        return seen, opt.param_groups[1]["swa_lr"]
    d_seen, d_swa_lr = lrs(disthook, d_swa)
    t_seen, t_swa_lr = lrs(torch, t_swa)
    assert d_swa_lr == t_swa_lr == 0.01
    np.testing.assert_allclose(d_seen, t_seen, rtol=1e-12)


def test_swalr_after_another_schedule_and_its_state_dict():
    def run(lib, s):
        model = lib.nn.Linear(2, 2)
        opt = lib.optim.SGD(model.parameters(), lr=0.5)
        first = lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        swa = s.SWALR(opt, swa_lr=0.02, anneal_epochs=3)
        seen = []
        for epoch in range(8):
            opt.step()
            (first if epoch < 3 else swa).step()
            seen.append(opt.param_groups[0]["lr"])
        state = swa.state_dict()
        return seen, sorted(state), state["_anneal_strategy"]
    d_run, t_run = run(disthook, d_swa), run(torch, t_swa)
    np.testing.assert_allclose(d_run[0], t_run[0], rtol=1e-12)
    assert d_run[1:] == t_run[1:]


def test_swalr_state_dict_round_trip_keeps_the_annealing():
    model = disthook.nn.Linear(2, 2)
    opt = disthook.optim.SGD(model.parameters(), lr=0.5)
    sched = d_swa.SWALR(opt, swa_lr=0.1, anneal_strategy="linear", anneal_epochs=4)
    opt.step()
    sched.step()
    state = sched.state_dict()
    assert "anneal_func" not in state and "optimizer" not in state
    other = d_swa.SWALR(opt, swa_lr=0.1, anneal_strategy="cos")
    other.load_state_dict(state)
    assert other.anneal_func(0.25) == 0.25  # linear again


@pytest.mark.parametrize("bad", [
    {"anneal_strategy": "exp"}, {"anneal_epochs": -1}, {"anneal_epochs": 2.0},
    {"swa_lr": [0.1, 0.2, 0.3]}])
def test_swalr_errors_as_torch(bad):
    messages = []
    for lib, s in ((disthook, d_swa), (torch, t_swa)):
        opt = lib.optim.SGD([{"params": lib.nn.Linear(2, 2).parameters()},
                             {"params": lib.nn.Linear(2, 2).parameters()}], lr=0.1)
        kwargs = {"swa_lr": 0.05, **bad}
        with pytest.raises(ValueError) as info:
            s.SWALR(opt, **kwargs)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


class Packed:
    """A loader of the kinds torch's update_bn takes: tensors, lists, tuples."""

    def __init__(self, lib, data, kind):
        self.items = []
        for i, (x, y) in enumerate(data):
            x, y = lib.tensor(x), lib.tensor(y)
            shape = kind if kind != "mixed" else ("tensor", "list", "tuple")[i % 3]
            self.items.append({"tensor": x, "list": [x, y], "tuple": (x, y)}[shape])

    def __iter__(self):
        return iter(self.items)


@pytest.mark.parametrize("kind", ["tensor", "list", "tuple", "mixed"])
def test_update_bn_gives_torch_statistics_and_restores_the_model(kind):
    d, t = pair()
    data = batches(4, seed=3)
    for model in (d, t):
        model[1].momentum = 0.3
        model.eval()
    d_swa.update_bn(Packed(disthook, data, kind), d)
    t_swa.update_bn(Packed(torch, data, kind), t)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        close(getattr(d[1], name), getattr(t[1], name), tol=1e-5)
    assert d[1].momentum == 0.3 and not d.training and not d[1].training
    # the statistics are the loader's, whatever they were before (reset first)
    d[1].running_mean.fill_(100.0)
    d_swa.update_bn(Packed(disthook, data, kind), d)
    close(d[1].running_mean, t[1].running_mean, tol=1e-5)


def test_update_bn_on_an_averaged_model_and_without_batch_norm():
    d, t = pair()
    data = batches(3, seed=5)
    d_avg, t_avg = d_swa.AveragedModel(d), t_swa.AveragedModel(t)
    train_and_average(disthook, d, d_avg, data)
    train_and_average(torch, t, t_avg, data)
    d_swa.update_bn(Packed(disthook, data, "list"), d_avg)
    t_swa.update_bn(Packed(torch, data, "list"), t_avg)
    close(d_avg.module[1].running_var, t_avg.module[1].running_var, tol=1e-5)
    calls = []
    plain = disthook.nn.Linear(4, 2)
    plain.register_forward_hook(lambda *a: calls.append(1))
    d_swa.update_bn(Packed(disthook, data, "tensor"), plain)
    assert calls == []  # torch returns before the pass when there is no batch norm


def test_update_bn_restores_momentum_when_the_model_raises():
    d, _ = pair()
    d[1].momentum = 0.2
    d.eval()
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        d_swa.update_bn([disthook.randn(3, 5)], d)  # wrong width
    assert d[1].momentum == 0.2 and not d.training


def test_swa_utils_is_torch_optim_swa_utils():
    import disthook.optim

    assert disthook.optim.swa_utils is d_swa
    assert sorted(d_swa.__all__) == sorted(t_swa.__all__)
    from disthook._surface.refusal import is_refused
    assert not any(is_refused(getattr(d_swa, name)) for name in t_swa.__all__)


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "torch.device"])
def test_averaged_model_takes_a_device_as_modules_do(device):
    where = disthook.device("cpu") if device == "torch.device" else device
    averaged = d_swa.AveragedModel(net(disthook), device=where)
    assert averaged.n_averaged.device == disthook.device("cpu")
    assert all(p.device == disthook.device("cpu") for p in averaged.parameters())
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        d_swa.AveragedModel(net(disthook), device="cuda")  # as Module.to("cuda") says
