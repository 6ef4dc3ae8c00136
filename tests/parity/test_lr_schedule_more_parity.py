"""MultiStepLR, MultiplicativeLR, PolynomialLR and CosineAnnealingWarmRestarts give torch's
learning rates epoch by epoch (and CosineAnnealingWarmRestarts with fractional epochs), and
torch's state dict keys."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

SCHEDULES = {
    "multistep": lambda t, o: t.optim.lr_scheduler.MultiStepLR(o, [2, 5, 5, 9], gamma=0.5),
    "multiplicative": lambda t, o: t.optim.lr_scheduler.MultiplicativeLR(
        o, lambda e: 0.9 if e % 2 else 0.95),
    "polynomial": lambda t, o: t.optim.lr_scheduler.PolynomialLR(o, total_iters=7, power=2.0),
    "warm restarts": lambda t, o: t.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        o, T_0=3, T_mult=2, eta_min=0.01),
    "warm restarts mult 1": lambda t, o: t.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        o, T_0=4),
    "chained": lambda t, o: t.optim.lr_scheduler.ChainedScheduler(
        [t.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=3),
         t.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)]),
    "cyclic triangular": lambda t, o: t.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=3, step_size_down=2),
    "cyclic triangular2": lambda t, o: t.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=2, mode="triangular2"),
    "cyclic exp_range": lambda t, o: t.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=4, mode="exp_range", gamma=0.95),
}


def _optimizer(lib):
    return lib.optim.SGD([{"params": [lib.ones(1, requires_grad=True)]},
                          {"params": [lib.ones(1, requires_grad=True)], "lr": 0.5}], lr=0.1,
                         momentum=0.9)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_learning_rates_match_torch(name):
    seen = []
    for lib in (torch, disthook):
        opt = _optimizer(lib)
        sched = SCHEDULES[name](lib, opt)
        lrs = [sched.get_last_lr() + [g["momentum"] for g in opt.param_groups]]
        for _ in range(15):
            opt.step()
            sched.step()
            lrs.append(sched.get_last_lr() + [g["momentum"] for g in opt.param_groups])
        state = sched.state_dict()
        seen.append((lrs, sorted(k for k in state if not k.startswith("_")),
                     state.get("last_epoch")))
    np.testing.assert_allclose(seen[0][0], seen[1][0], rtol=1e-12)
    assert seen[0][1:] == seen[1][1:]


def test_warm_restarts_with_fractional_epochs_match_torch():
    seen = []
    for lib in (torch, disthook):
        opt = _optimizer(lib)
        sched = SCHEDULES["warm restarts"](lib, opt)
        lrs = []
        for epoch in range(12):
            for i in range(4):
                opt.step()
                sched.step(epoch + i / 4)
                lrs.append(sched.get_last_lr())
        seen.append((lrs, sched.T_i, sched.last_epoch))
    np.testing.assert_allclose(seen[0][0], seen[1][0], rtol=1e-12)
    assert seen[0][1:] == seen[1][1:]


@pytest.mark.parametrize("lib", [torch, disthook], ids=["torch", "disthook"])
def test_errors_are_torchs(lib):
    with pytest.raises(ValueError, match="Expected positive integer T_0, but got 0"):
        lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(_optimizer(lib), T_0=0)
    with pytest.raises(ValueError, match="Expected integer T_mult >= 1, but got 0"):
        lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(_optimizer(lib), T_0=2, T_mult=0)


def test_cyclic_momentum_on_adams_beta1_matches_torch():
    seen = []
    for lib in (torch, disthook):
        opt = lib.optim.Adam([lib.ones(1, requires_grad=True)], lr=0.1)
        sched = lib.optim.lr_scheduler.CyclicLR(opt, 0.001, 0.01, step_size_up=3,
                                                base_momentum=0.85, max_momentum=0.95)
        betas = []
        for _ in range(8):
            opt.step()
            sched.step()
            betas.append((sched.get_last_lr()[0], opt.param_groups[0]["betas"][0]))
        seen.append(betas)
    np.testing.assert_allclose(seen[0], seen[1], rtol=1e-12)
