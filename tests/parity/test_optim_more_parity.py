"""Adadelta, Adafactor, Adagrad, RMSprop, NAdam, RAdam and the schedules ConstantLR, LinearLR,
CosineAnnealingLR, OneCycleLR, SequentialLR, ReduceLROnPlateau against torch: the same MLP
from the same weights, 20 steps on the same batches, ends with the same parameters and
optimizer state; schedules give the same learning rates (and momenta) epoch by epoch."""
import warnings

import numpy as np
import pytest

import disthook
from parity.test_optim_parity import (
    _assert_same_parameters,
    _assert_same_state_dict,
    _mlp,
    _same_models,
    _train,
)

torch = pytest.importorskip("torch")

STEPS = 20

OPTIMIZERS = {
    "adadelta": lambda t, p: t.optim.Adadelta(p),
    "adadelta_wd_max": lambda t, p: t.optim.Adadelta(p, lr=0.5, rho=0.8, weight_decay=0.01,
                                                     maximize=True),
    "adafactor": lambda t, p: t.optim.Adafactor(p),
    "adafactor_wd_max": lambda t, p: t.optim.Adafactor(p, lr=0.05, beta2_decay=-0.5,
                                                       eps=(1e-6, 1e-2), d=1.5,
                                                       weight_decay=0.01, maximize=True),
    "adagrad": lambda t, p: t.optim.Adagrad(p, lr=0.05),
    "adagrad_decay": lambda t, p: t.optim.Adagrad(p, lr=0.05, lr_decay=0.01, weight_decay=0.01,
                                                  initial_accumulator_value=0.1),
    "rmsprop": lambda t, p: t.optim.RMSprop(p, lr=0.005),
    "rmsprop_centered_momentum": lambda t, p: t.optim.RMSprop(
        p, lr=0.005, alpha=0.9, momentum=0.8, centered=True, weight_decay=0.01),
    "nadam": lambda t, p: t.optim.NAdam(p, lr=0.01),
    "nadam_decoupled": lambda t, p: t.optim.NAdam(p, lr=0.01, weight_decay=0.05,
                                                  decoupled_weight_decay=True),
    "nadam_wd": lambda t, p: t.optim.NAdam(p, lr=0.01, weight_decay=0.05,
                                           momentum_decay=0.01),
    "radam": lambda t, p: t.optim.RAdam(p, lr=0.01),
    "radam_decoupled_max": lambda t, p: t.optim.RAdam(p, lr=0.01, weight_decay=0.05,
                                                      decoupled_weight_decay=True,
                                                      maximize=True),
}


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((8, 10)).astype(np.float32), rng.integers(0, 4, 8))
            for _ in range(STEPS)]


@pytest.mark.parametrize("make_optimizer", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_mlp_trains_like_torch_for_20_steps(make_optimizer):
    t_model, d_model = _same_models(_mlp)
    batches = _batches()
    t_opt = _train(torch, t_model, make_optimizer, batches)
    d_opt = _train(disthook, d_model, make_optimizer, batches)
    _assert_same_parameters(d_model, t_model)
    _assert_same_state_dict(d_opt.state_dict(), t_opt.state_dict())


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_repr_and_defaults_are_torchs(name):
    make = OPTIMIZERS[name]
    d = make(disthook, [disthook.ones(1, requires_grad=True)])
    t = make(torch, [torch.ones(1, requires_grad=True)])
    assert repr(d) == repr(t)
    assert d.defaults == t.defaults


@pytest.mark.parametrize("make", [
    lambda t, p: t.optim.Adadelta(p, rho=1.5),
    lambda t, p: t.optim.Adadelta(p, lr=-1),
    lambda t, p: t.optim.Adafactor(p, beta2_decay=0.5),
    lambda t, p: t.optim.Adafactor(p, eps=(-1.0, 1e-3)),
    lambda t, p: t.optim.Adafactor(p, d=0.5),
    lambda t, p: t.optim.Adagrad(p, lr_decay=-1),
    lambda t, p: t.optim.Adagrad(p, initial_accumulator_value=-1),
    lambda t, p: t.optim.Adagrad(p, eps=-1),
    lambda t, p: t.optim.RMSprop(p, alpha=-1),
    lambda t, p: t.optim.RMSprop(p, momentum=-1),
    lambda t, p: t.optim.NAdam(p, momentum_decay=-1),
    lambda t, p: t.optim.NAdam(p, betas=(0.9, 1.0)),
    lambda t, p: t.optim.RAdam(p, weight_decay=-1),
    lambda t, p: t.optim.RAdam(p, betas=(-0.1, 0.9)),
])
def test_bad_hyperparameters_raise_torchs_error(make):
    errors = []
    for lib in (torch, disthook):
        with pytest.raises(Exception) as info:
            make(lib, [lib.ones(1, requires_grad=True)])
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


def test_adafactor_factors_a_3d_parameter_over_its_last_two_dimensions():
    """A conv kernel's second moment: one row and one column factor per leading index."""
    start = np.random.default_rng(3).standard_normal((2, 3, 4))
    results = []
    for lib in (torch, disthook):
        w = lib.tensor(start, requires_grad=True)
        opt = lib.optim.Adafactor([w], lr=0.1)
        for k in range(4):
            opt.zero_grad()
            ((w * w).sum(-1) * (k + 1) - w.mean()).pow(2).sum().backward()
            opt.step()
        state = opt.state_dict()["state"][0]
        results.append((w.detach().numpy().copy(),
                        {n: np.asarray(v.tolist()) for n, v in state.items()}))
    (t_w, t_state), (d_w, d_state) = results
    np.testing.assert_allclose(d_w, t_w, rtol=1e-12, atol=1e-14)
    assert sorted(d_state) == sorted(t_state) == ["col_var", "row_var", "step"]
    assert d_state["row_var"].shape == (2, 3, 1) and d_state["col_var"].shape == (2, 1, 4)
    for name in t_state:
        np.testing.assert_allclose(d_state[name], t_state[name], rtol=1e-12, atol=1e-14)


def test_adagrad_state_exists_from_construction():
    states = []
    for lib in (torch, disthook):
        opt = lib.optim.Adagrad([lib.ones(2, requires_grad=True)],
                                initial_accumulator_value=0.5)
        state = opt.state_dict()["state"]
        states.append({k: {n: v.tolist() for n, v in s.items()} for k, s in state.items()})
    assert states[0] == states[1]


# ---- schedules ------------------------------------------------------------------------------

def _two_groups(lib, optimizer="SGD", **kwargs):
    return getattr(lib.optim, optimizer)(
        [{"params": [lib.ones(1, requires_grad=True)]},
         {"params": [lib.ones(1, requires_grad=True)], "lr": 0.5}], lr=0.1, **kwargs)


SCHEDULES = {
    "constant": (lambda t, o: t.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=4), 8),
    "linear": (lambda t, o: t.optim.lr_scheduler.LinearLR(o, start_factor=0.2, total_iters=6),
               9),
    "linear_down": (lambda t, o: t.optim.lr_scheduler.LinearLR(o, start_factor=1.0,
                                                               end_factor=0.1, total_iters=5),
                    8),
    "cosine": (lambda t, o: t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01),
               17),
    "sequential": (lambda t, o: t.optim.lr_scheduler.SequentialLR(
        o, [t.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=3),
            t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=6)], milestones=[3]), 12),
    "sequential_three": (lambda t, o: t.optim.lr_scheduler.SequentialLR(
        o, [t.optim.lr_scheduler.ConstantLR(o, factor=0.3, total_iters=2),
            t.optim.lr_scheduler.ExponentialLR(o, gamma=0.8),
            t.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)], milestones=[2, 5]), 10),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_schedules_match_torch(name):
    make, epochs = SCHEDULES[name]
    seen = []
    for lib in (torch, disthook):
        opt = _two_groups(lib)
        sched = make(lib, opt)
        lrs = [sched.get_last_lr()]
        for _ in range(epochs):
            opt.step()
            sched.step()
            lrs.append(sched.get_last_lr())
        seen.append((lrs, sched.state_dict()["last_epoch"]))
    np.testing.assert_allclose(np.array(seen[1][0]), np.array(seen[0][0]), rtol=1e-12)
    assert seen[0][1] == seen[1][1]


def test_cosine_with_an_epoch_uses_the_closed_form():
    seen = []
    for lib in (torch, disthook):
        opt = _two_groups(lib)
        sched = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        opt.step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sched.step(7)
        seen.append(sched.get_last_lr())
    np.testing.assert_allclose(seen[1], seen[0], rtol=1e-12)


@pytest.mark.parametrize("kwargs, optimizer", [
    ({"max_lr": 0.5, "total_steps": 20}, "SGD"),
    ({"max_lr": [0.5, 1.0], "epochs": 3, "steps_per_epoch": 5, "anneal_strategy": "linear"},
     "SGD"),
    ({"max_lr": 0.3, "total_steps": 16, "three_phase": True, "pct_start": 0.25}, "SGD"),
    ({"max_lr": 0.01, "total_steps": 12}, "Adam"),
    ({"max_lr": 0.01, "total_steps": 12, "cycle_momentum": False}, "Adagrad"),
])
def test_one_cycle_matches_torch(kwargs, optimizer):
    seen = []
    for lib in (torch, disthook):
        extra = {"momentum": 0.9} if optimizer == "SGD" else {}
        opt = _two_groups(lib, optimizer, **extra)
        sched = lib.optim.lr_scheduler.OneCycleLR(opt, **kwargs)
        log = []
        total = sched.total_steps
        for _ in range(total - 1):
            log.append((sched.get_last_lr(),
                        [g.get("momentum", g.get("betas", (None,))[0])
                         for g in opt.param_groups]))
            opt.step()
            sched.step()
        seen.append(log)
    for (t_lr, t_m), (d_lr, d_m) in zip(seen[0], seen[1]):
        np.testing.assert_allclose(d_lr, t_lr, rtol=1e-12)
        assert [m is None for m in d_m] == [m is None for m in t_m]
        assert [m for m in d_m if m is not None] == pytest.approx(
            [m for m in t_m if m is not None], rel=1e-12)


def test_one_cycle_errors_are_torchs():
    cases = [
        lambda t, o: t.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1),
        lambda t, o: t.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=0),
        lambda t, o: t.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=5,
                                                     pct_start=1),
        lambda t, o: t.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=5,
                                                     anneal_strategy="step"),
        lambda t, o: t.optim.lr_scheduler.OneCycleLR(o, max_lr=[0.1], total_steps=5),
        lambda t, o: t.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=5),
    ]
    for i, make in enumerate(cases):
        errors = []
        for lib in (torch, disthook):
            opt = _two_groups(lib, "Adagrad" if i == 5 else "SGD")
            with pytest.raises(Exception) as info:
                make(lib, opt)
            errors.append((type(info.value), str(info.value)))
        assert errors[0] == errors[1], i
    errors = []
    for lib in (torch, disthook):
        opt = _two_groups(lib, momentum=0.9)
        sched = lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=2)
        with pytest.raises(ValueError) as info:
            for _ in range(3):
                opt.step()
                sched.step()
        errors.append(str(info.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("kwargs", [
    {},
    {"mode": "max", "factor": 0.5, "patience": 1, "threshold_mode": "abs", "threshold": 0.1},
    {"patience": 2, "cooldown": 2, "min_lr": [0.02, 0.1]},
    {"patience": 0, "factor": 0.3, "eps": 0.05},
])
def test_reduce_on_plateau_matches_torch(kwargs):
    metrics = [1.0, 0.9, 0.95, 0.95, 0.96, 0.89, 0.9, 0.91, 0.92, 0.93, 0.5, 0.6, 0.6, 0.6,
               0.7, 0.8, 0.9, 1.2, 1.3, 1.0]
    seen = []
    for lib in (torch, disthook):
        opt = _two_groups(lib)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kwargs)
        log = []
        for m in metrics:
            opt.step()
            sched.step(lib.tensor(m) if len(log) % 2 else m)
            log.append((sched.get_last_lr(), sched.num_bad_epochs, sched.best,
                        sched.cooldown_counter))
        state = sched.state_dict()
        seen.append((log, sorted(state)))
    assert seen[0] == seen[1]


def test_scheduler_errors_are_torchs():
    cases = [
        lambda t, o: t.optim.lr_scheduler.LinearLR(o, start_factor=0),
        lambda t, o: t.optim.lr_scheduler.LinearLR(o, end_factor=2),
        lambda t, o: t.optim.lr_scheduler.ConstantLR(o, factor=2),
        lambda t, o: t.optim.lr_scheduler.ReduceLROnPlateau(o, factor=1.0),
        lambda t, o: t.optim.lr_scheduler.ReduceLROnPlateau(o, mode="up"),
        lambda t, o: t.optim.lr_scheduler.ReduceLROnPlateau(o, min_lr=[0.1]),
        lambda t, o: t.optim.lr_scheduler.SequentialLR(o, [], milestones=[]),
        lambda t, o: t.optim.lr_scheduler.SequentialLR(
            o, [t.optim.lr_scheduler.ConstantLR(o)], milestones=[1]),
        lambda t, o: t.optim.lr_scheduler.SequentialLR(
            o, [t.optim.lr_scheduler.ConstantLR(o),
                t.optim.lr_scheduler.ReduceLROnPlateau(o)], milestones=[1]),
    ]
    for i, make in enumerate(cases):
        errors = []
        for lib in (torch, disthook):
            with pytest.raises(Exception) as info:
                make(lib, _two_groups(lib))
            errors.append((type(info.value), str(info.value)))
        assert errors[0] == errors[1], i


def test_sequential_state_dict_round_trip():
    opt = _two_groups(disthook)
    sched_lib = disthook.optim.lr_scheduler

    def make(o):
        return sched_lib.SequentialLR(o, [sched_lib.LinearLR(o, start_factor=0.1,
                                                             total_iters=3),
                                          sched_lib.ExponentialLR(o, gamma=0.5)], [3])

    sched = make(opt)
    for _ in range(4):
        opt.step()
        sched.step()
    other_opt = _two_groups(disthook)
    other = make(other_opt)
    other.load_state_dict(sched.state_dict())
    assert other.last_epoch == sched.last_epoch == 4
    assert other._schedulers[1].last_epoch == sched._schedulers[1].last_epoch
