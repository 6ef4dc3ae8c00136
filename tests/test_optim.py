"""disthook.optim without torch: SGD and Adam against numpy transcriptions of their update
rules, parameter groups, state_dict round trips, zero_grad, closures, step hooks, version
counters, hyperparameter errors and the LR schedules; gradient clipping utilities.

OPTIM_CASES (bad hyperparameters -> torch's exception and message) is shared with
tests/parity/test_optim_parity.py, which checks that torch raises the same.
"""
import copy
import re
import warnings

import numpy as np
import pytest

import disthook
from disthook import nn
from disthook.nn.utils import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value_,
    parameters_to_vector,
    vector_to_parameters,
)
from disthook.optim import SGD, Adam, AdamW, Optimizer
from disthook.optim.lr_scheduler import ExponentialLR, LambdaLR, StepLR

TARGET = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
START = np.array([[0.1, 0.2, -0.3], [0.4, -0.5, 0.6]])


def _grad_fn(w):
    """Gradient of the test loss sum((w - T)**2 * (1 + w**2)) (not quadratic on purpose)."""
    d = w - TARGET
    return 2 * d * (1 + w * w) + 2 * w * d * d


def _loss(w):
    return ((w - disthook.tensor(TARGET)) ** 2 * (1 + w * w)).sum()


def _run(make_optimizer, steps=5):
    w = disthook.tensor(START.copy(), requires_grad=True)
    opt = make_optimizer([w])
    for _ in range(steps):
        opt.zero_grad()
        _loss(w).backward()
        opt.step()
    return w.detach().numpy(), opt


def np_sgd(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False,
           steps=5):
    w, buf = START.copy(), None
    for _ in range(steps):
        g = _grad_fn(w) * (-1 if maximize else 1)
        g = g + weight_decay * w
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
    return w


def np_adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
            maximize=False, decoupled=False, steps=5):
    w = START.copy()
    m, v, vmax = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for t in range(1, steps + 1):
        g = _grad_fn(w) * (-1 if maximize else 1)
        if decoupled:
            w = w * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * w
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        vmax = np.maximum(vmax, v)
        denom = np.sqrt(vmax if amsgrad else v) / np.sqrt(1 - betas[1] ** t) + eps
        w = w - lr / (1 - betas[0] ** t) * m / denom
    return w


SGD_CONFIGS = [
    {"lr": 0.05},
    {"lr": 0.05, "momentum": 0.9},
    {"lr": 0.05, "momentum": 0.9, "dampening": 0.3},
    {"lr": 0.05, "momentum": 0.9, "nesterov": True},
    {"lr": 0.05, "momentum": 0.5, "weight_decay": 0.1},
    {"lr": 0.01, "maximize": True},
]


@pytest.mark.parametrize("config", SGD_CONFIGS, ids=lambda c: ",".join(c))
def test_sgd_follows_its_update_rule(config):
    got, _ = _run(lambda p: SGD(p, **config))
    np.testing.assert_allclose(got, np_sgd(**config), rtol=1e-12, atol=1e-12)


ADAM_CONFIGS = [
    {"lr": 0.05},
    {"lr": 0.05, "betas": (0.8, 0.99), "eps": 1e-6},
    {"lr": 0.05, "weight_decay": 0.1},
    {"lr": 0.05, "amsgrad": True},
    {"lr": 0.05, "maximize": True},
]


@pytest.mark.parametrize("config", ADAM_CONFIGS, ids=lambda c: ",".join(c))
def test_adam_follows_its_update_rule(config):
    got, opt = _run(lambda p: Adam(p, **config))
    np.testing.assert_allclose(got, np_adam(**config), rtol=1e-12, atol=1e-12)
    (state,) = opt.state.values()
    assert state["step"].item() == 5.0 and state["step"].dtype == disthook.float32
    assert sorted(state) == sorted(["step", "exp_avg", "exp_avg_sq"] + (
        ["max_exp_avg_sq"] if config.get("amsgrad") else []))


@pytest.mark.parametrize("config", [
    {"lr": 0.05}, {"lr": 0.05, "weight_decay": 0.3, "amsgrad": True}])
def test_adamw_decouples_weight_decay(config):
    got, opt = _run(lambda p: AdamW(p, **config))
    want = np_adam(**{"weight_decay": 1e-2, **config}, decoupled=True)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert opt.param_groups[0]["decoupled_weight_decay"] is True


def test_params_without_grad_are_skipped_and_get_no_state():
    a = disthook.ones(2, requires_grad=True)
    b = disthook.ones(2, requires_grad=True)
    opt = Adam([a, b], lr=0.1)
    (a * 2).sum().backward()
    opt.step()
    assert b.tolist() == [1.0, 1.0] and list(opt.state) == [a]
    sgd = SGD([a, b], lr=0.1)
    sgd.step()
    assert len(sgd.state) == 0  # no momentum: no state at all, as in torch


def test_step_updates_in_place_and_bumps_the_version_once():
    w = disthook.ones(3, requires_grad=True)
    storage = w.data
    for opt, bumps in ((SGD([w], lr=0.1, momentum=0.9), 1), (Adam([w]), 1),
                       (AdamW([w], weight_decay=0.1), 2)):
        (w * w).sum().backward()
        before = w._version
        opt.step()
        assert w._version == before + bumps
        assert w.grad_fn is None and w.requires_grad
        opt.zero_grad()
    assert np.shares_memory(storage.numpy(), w.detach().numpy())


def test_step_runs_under_no_grad_and_closure_under_grad():
    w = disthook.ones(2, requires_grad=True)
    seen = []

    def closure():
        seen.append(disthook.is_grad_enabled())
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    opt = SGD([w], lr=0.25)
    with disthook.no_grad():
        loss = opt.step(closure)
    assert seen == [True] and loss.item() == 2.0
    assert w.tolist() == [0.5, 0.5]


def test_zero_grad():
    w = disthook.ones(2, requires_grad=True)
    opt = SGD([w], lr=0.1)
    (w * 3).sum().backward()
    grad = w.grad
    opt.zero_grad(set_to_none=False)
    assert w.grad is grad and w.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


def test_param_groups_take_defaults_and_their_own_values():
    a, b = disthook.ones(1, requires_grad=True), disthook.ones(1, requires_grad=True)
    opt = SGD([{"params": [a]}, {"params": b, "lr": 0.5, "momentum": 0.9}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["params"] == [b] and opt.param_groups[1]["momentum"] == 0.9
    a.grad, b.grad = disthook.ones(1), disthook.ones(1)
    opt.step()
    assert a.item() == pytest.approx(0.9) and b.item() == pytest.approx(0.5)
    c = disthook.ones(1, requires_grad=True)
    opt.add_param_group({"params": [c], "weight_decay": 0.2})
    assert opt.param_groups[2]["lr"] == 0.1 and opt.param_groups[2]["weight_decay"] == 0.2


def test_named_parameters_are_kept_as_param_names():
    model = nn.Linear(2, 1)
    opt = SGD(model.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]


def test_duplicate_parameters_warn():
    w = disthook.ones(1, requires_grad=True)
    with pytest.warns(UserWarning, match=re.escape(
            "optimizer contains a parameter group with duplicate parameters; in future, this "
            "will cause an error; see github.com/pytorch/pytorch/issues/40967 for more "
            "information")):
        SGD([w, w], lr=0.1)


def test_repr():
    opt = Adam([disthook.ones(1, requires_grad=True)], lr=0.01)
    assert repr(opt) == (
        "Adam (\nParameter Group 0\n    amsgrad: False\n    betas: (0.9, 0.999)\n"
        "    capturable: False\n    decoupled_weight_decay: False\n    differentiable: False\n"
        "    eps: 1e-08\n    foreach: None\n    fused: None\n    lr: 0.01\n"
        "    maximize: False\n    weight_decay: 0\n)")


def test_step_hooks_run_around_step_and_can_be_removed():
    w = disthook.ones(1, requires_grad=True)
    w.grad = disthook.ones(1)
    opt = SGD([w], lr=0.5)
    log = []
    pre = opt.register_step_pre_hook(lambda o, args, kwargs: log.append(("pre", w.item())))
    opt.register_step_post_hook(lambda o, args, kwargs: log.append(("post", w.item())))
    opt.step()
    pre.remove()
    opt.step()
    assert log == [("pre", 1.0), ("post", 0.5), ("post", 0.0)]


def test_a_custom_optimizer_subclass():
    class Halve(Optimizer):
        def __init__(self, params):
            super().__init__(params, {})

        def step(self, closure=None):
            with disthook.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        p.mul_(0.5)

    w = disthook.ones(2, requires_grad=True)
    opt = Halve([w])
    calls = []
    opt.register_step_post_hook(lambda *args: calls.append(1))
    opt.step()
    assert w.tolist() == [0.5, 0.5] and calls == [1]


# ---- state_dict -------------------------------------------------------------------------------

def _mlp(seed=0):
    disthook.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _train(model, opt, steps, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = disthook.tensor(rng.standard_normal((5, 3)).astype(np.float32))
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()


@pytest.mark.parametrize("make", [
    lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    lambda p: Adam(p, lr=0.01, amsgrad=True),
    lambda p: AdamW(p, lr=0.01),
], ids=["sgd", "adam", "adamw"])
def test_state_dict_round_trip_continues_identically(make):
    model = _mlp()
    opt = make(model.parameters())
    _train(model, opt, 2)
    saved = copy.deepcopy(opt.state_dict())
    clone = copy.deepcopy(model)
    clone_opt = make(clone.parameters())
    clone_opt.load_state_dict(saved)
    _train(model, opt, 3, seed=2)
    _train(clone, clone_opt, 3, seed=2)
    for p, q in zip(model.parameters(), clone.parameters()):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy())


def test_state_dict_format():
    model = _mlp()
    opt = SGD([{"params": [model[0].weight, model[0].bias]},
               {"params": [model[2].weight], "lr": 0.5}], lr=0.1, momentum=0.9)
    _train(model, opt, 1)
    sd = opt.state_dict()
    assert sorted(sd) == ["param_groups", "state"]
    assert sorted(sd["state"]) == [0, 1, 2]
    assert sorted(sd["state"][2]) == ["momentum_buffer"]
    assert sd["state"][0]["momentum_buffer"] is opt.state[model[0].weight]["momentum_buffer"]
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert list(sd["param_groups"][1]) == ["lr", "momentum", "dampening", "weight_decay",
                                           "nesterov", "maximize", "foreach", "differentiable",
                                           "fused", "params"]


def test_load_state_dict_casts_state_and_restores_hyperparameters():
    w = disthook.ones(2, dtype=disthook.float64, requires_grad=True)
    opt = Adam([w], lr=0.1)
    state = {"state": {0: {"step": disthook.tensor(3.0), "exp_avg": disthook.ones(2),
                           "exp_avg_sq": disthook.ones(2)}},
             "param_groups": [dict(opt.state_dict()["param_groups"][0], lr=0.5)]}
    opt.load_state_dict(state)
    assert opt.param_groups[0]["lr"] == 0.5 and opt.param_groups[0]["params"] == [w]
    assert opt.state[w]["exp_avg"].dtype == disthook.float64
    assert opt.state[w]["step"].dtype == disthook.float32


@pytest.mark.parametrize("groups, message", [
    ([], "loaded state dict has a different number of parameter groups"),
    ([{"params": [0, 1]}], ("loaded state dict contains a parameter group that doesn't match "
                            "the size of optimizer's group")),
])
def test_load_state_dict_errors(groups, message):
    opt = SGD([disthook.ones(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match=re.escape(message)):
        opt.load_state_dict({"state": {}, "param_groups": groups})


# ---- errors -------------------------------------------------------------------------------------

def _p(t):
    return [t.ones(2, requires_grad=True)]


def _same_param_twice(t):
    w = t.ones(1, requires_grad=True)
    return t.optim.SGD([{"params": [w]}, {"params": [w]}], lr=0.1)


# (id, fn of the torch-like module, exception type, torch's message)
OPTIM_CASES = [
    ("adamax_beta", lambda t: t.optim.Adamax(_p(t), betas=(0.9, 1.0)), ValueError,
     "Invalid beta parameter at index 1: 1.0"),
    ("rprop_etas", lambda t: t.optim.Rprop(_p(t), etas=(1.1, 1.2)), ValueError,
     "Invalid eta values: 1.1, 1.2"),
    ("sgd_lr", lambda t: t.optim.SGD(_p(t), lr=-1.0), ValueError, "Invalid learning rate: -1.0"),
    ("sgd_momentum", lambda t: t.optim.SGD(_p(t), lr=0.1, momentum=-0.5), ValueError,
     "Invalid momentum value: -0.5"),
    ("sgd_weight_decay", lambda t: t.optim.SGD(_p(t), lr=0.1, weight_decay=-1e-4), ValueError,
     "Invalid weight_decay value: -0.0001"),
    ("sgd_nesterov", lambda t: t.optim.SGD(_p(t), lr=0.1, nesterov=True), ValueError,
     "Nesterov momentum requires a momentum and zero dampening"),
    ("sgd_nesterov_dampening", lambda t: t.optim.SGD(_p(t), lr=0.1, momentum=0.9,
                                                     dampening=0.1, nesterov=True), ValueError,
     "Nesterov momentum requires a momentum and zero dampening"),
    ("adam_lr", lambda t: t.optim.Adam(_p(t), lr=-0.01), ValueError,
     "Invalid learning rate: -0.01"),
    ("adam_eps", lambda t: t.optim.Adam(_p(t), eps=-1.0), ValueError, "Invalid epsilon value: -1.0"),
    ("adam_beta0", lambda t: t.optim.Adam(_p(t), betas=(1.0, 0.999)), ValueError,
     "Invalid beta parameter at index 0: 1.0"),
    ("adam_beta1", lambda t: t.optim.Adam(_p(t), betas=(0.9, -0.1)), ValueError,
     "Invalid beta parameter at index 1: -0.1"),
    ("adam_weight_decay", lambda t: t.optim.Adam(_p(t), weight_decay=-1.0), ValueError,
     "Invalid weight_decay value: -1.0"),
    ("adamw_lr", lambda t: t.optim.AdamW(_p(t), lr=-1.0), ValueError,
     "Invalid learning rate: -1.0"),
    ("params_tensor", lambda t: t.optim.SGD(t.ones(2, requires_grad=True), lr=0.1), TypeError,
     ("params argument given to the optimizer should be an iterable of Tensors or dicts, but "
      "got torch.FloatTensor")),
    ("params_empty", lambda t: t.optim.Adam([]), ValueError,
     "optimizer got an empty parameter list"),
    ("params_not_tensor", lambda t: t.optim.SGD([1.0], lr=0.1), TypeError,
     "optimizer can only optimize Tensors, but one of the params is float"),
    ("params_non_leaf", lambda t: t.optim.SGD([t.ones(2, requires_grad=True) * 2], lr=0.1),
     ValueError, "can't optimize a non-leaf Tensor"),
    ("params_set", lambda t: t.optim.SGD([{"params": {t.ones(2, requires_grad=True)}}], lr=0.1),
     TypeError,
     ("optimizer parameters need to be organized in ordered collections, but the ordering of "
      "tensors in sets will change between runs. Please use a list instead.")),
    ("params_in_two_groups", _same_param_twice, ValueError, "some parameters appear in more than one parameter group"),
    ("param_group_not_dict", lambda t: t.optim.SGD(_p(t), lr=0.1).add_param_group([1]),
     TypeError, "param_group must be a dict, but got <class 'list'>"),
    ("scheduler_not_optimizer", lambda t: t.optim.lr_scheduler.StepLR(object(), 2), TypeError,
     "object is not an Optimizer"),
]


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in OPTIM_CASES],
                         ids=[c[0] for c in OPTIM_CASES])
def test_optimizer_errors(fn, exc, message):
    with pytest.raises(exc) as info:
        fn(disthook)
    assert type(info.value) is exc
    assert str(info.value) == message


# ---- learning-rate schedules ------------------------------------------------------------------

def _lrs(scheduler, opt, epochs):
    seen = []
    for _ in range(epochs):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return seen


def test_step_lr():
    opt = SGD([disthook.ones(1, requires_grad=True)], lr=1.0)
    sched = StepLR(opt, step_size=2, gamma=0.5)
    assert _lrs(sched, opt, 6) == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    assert sched.get_last_lr() == [0.125] and sched.last_epoch == 6
    assert opt.param_groups[0]["initial_lr"] == 1.0
    resumed = StepLR(opt, step_size=2, gamma=0.5)
    resumed.load_state_dict(sched.state_dict())
    assert resumed.last_epoch == 6 and resumed.base_lrs == [1.0]


def test_exponential_and_lambda_lr():
    opt = SGD([disthook.ones(1, requires_grad=True)], lr=2.0)
    assert _lrs(ExponentialLR(opt, gamma=0.5), opt, 3) == [2.0, 1.0, 0.5]
    opt = SGD([disthook.ones(1, requires_grad=True)], lr=2.0)
    assert _lrs(LambdaLR(opt, lambda epoch: 1 / (epoch + 1)), opt, 3) == [2.0, 1.0, 2 / 3]


def test_scheduler_before_optimizer_warns():
    opt = SGD([disthook.ones(1, requires_grad=True)], lr=1.0)
    sched = StepLR(opt, step_size=1)
    with pytest.warns(UserWarning, match=re.escape(
            "Detected call of `lr_scheduler.step()` before `optimizer.step()`.")):
        sched.step()


def test_scheduler_after_optimizer_does_not_warn(no_warnings):
    opt = SGD([disthook.ones(1, requires_grad=True)], lr=1.0)
    sched = StepLR(opt, step_size=1)
    opt.step()
    sched.step()


# ---- gradient clipping and parameter vectors ------------------------------------------------

def _with_grads(*grads):
    params = []
    for g in grads:
        p = disthook.zeros(len(g), requires_grad=True)
        p.grad = disthook.tensor(g)
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.0, float("inf")])
def test_clip_grad_norm(norm_type):
    grads = [[3.0, -4.0], [12.0]]
    params = _with_grads(*grads)
    flat = np.concatenate([np.array(g) for g in grads])
    total = np.linalg.norm(flat, ord=norm_type)
    got = clip_grad_norm_(params, max_norm=2.0, norm_type=norm_type)
    assert got.shape == () and got.dtype == disthook.float32 and not got.requires_grad
    assert got.item() == pytest.approx(total, rel=1e-6)
    scale = 2.0 / (total + 1e-6)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), np.array(g) * scale, rtol=1e-6)


def test_clip_grad_norm_leaves_small_gradients_and_skips_missing_ones():
    params = _with_grads([0.3, 0.4]) + [disthook.ones(2, requires_grad=True)]
    grad = params[0].grad
    assert clip_grad_norm_(params, 1.0).item() == pytest.approx(0.5)
    assert params[0].grad is grad and grad.tolist() == pytest.approx([0.3, 0.4])
    assert params[1].grad is None
    assert clip_grad_norm_(params[1], 1.0).item() == 0.0  # a single tensor, no grads at all


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_clip_grad_norm_nonfinite():
    params = _with_grads([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match=re.escape(
            "The total norm of order 2.0 for gradients from `parameters` is non-finite, so it "
            "cannot be clipped.")):
        clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert np.isinf(clip_grad_norm_(params, 1.0).item())


def test_clip_grad_norm_deprecated_alias_and_empty_generator():
    with pytest.warns(FutureWarning, match="clip_grad_norm` is now deprecated"):
        clip_grad_norm(_with_grads([3.0, 4.0]), 1.0)
    with pytest.warns(UserWarning, match="`parameters` is an empty generator"):
        clip_grad_norm_((p for p in []), 1.0)


def test_clip_grad_value():
    params = _with_grads([3.0, -4.0, 0.5])
    assert clip_grad_value_(params, 1) is None
    assert params[0].grad.tolist() == [1.0, -1.0, 0.5]


def test_parameters_vector_round_trip():
    model = nn.Linear(3, 2)
    vec = parameters_to_vector(model.parameters())
    assert vec.shape == (8,) and vec.grad_fn.name() == "CatBackward0"
    new = disthook.arange(8, dtype=disthook.float32)
    vector_to_parameters(new, model.parameters())
    assert model.weight.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert model.bias.tolist() == [6.0, 7.0]
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        vector_to_parameters([1.0], model.parameters())


def test_disthook_optim_is_importable_as_torch_optim():
    from disthook import optim

    assert disthook.optim is optim and optim.lr_scheduler.StepLR is StepLR
    assert disthook.nn.utils.clip_grad_norm_ is clip_grad_norm_
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)


# ---- an optimizer that wraps another without Optimizer.__init__ (opacus' DPOptimizer) ------

def _wrapping_optimizer_class(lib):
    class Wrapping(lib.optim.Optimizer):
        def __init__(self, inner):  # never calls Optimizer.__init__
            self.original_optimizer = inner

        @property
        def param_groups(self):
            return self.original_optimizer.param_groups

        @property
        def state(self):
            return self.original_optimizer.state

        def zero_grad(self, set_to_none=True):
            self.original_optimizer.zero_grad(set_to_none)

        def step(self, closure=None):
            return self.original_optimizer.step(closure)

    return Wrapping


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_a_wrapping_optimizer_that_skips_optimizer_init_steps_as_written(lib_name):
    lib = pytest.importorskip(lib_name)
    w = lib.nn.Parameter(lib.ones(2))
    inner = lib.optim.SGD([w], lr=0.1)
    fired = []
    inner.register_step_pre_hook(lambda opt, args, kwargs: fired.append("inner"))
    (w * w).sum().backward()
    wrapper = _wrapping_optimizer_class(lib)(inner)
    assert wrapper.step() is None
    np.testing.assert_allclose(w.detach().numpy(), [0.8, 0.8])
    assert fired == ["inner"]  # the inner optimizer's hooks fire once; the wrapper has none
    wrapper.zero_grad()
    assert w.grad is None
