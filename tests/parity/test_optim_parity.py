"""disthook.optim against torch.optim: the same model from the same initial weights, trained
for 5 steps on the same batches, ends with the same parameters (float32, to 1e-5); the
state_dict has torch's structure; bad hyperparameters raise torch's errors; clip_grad_norm_
and the LR schedules give torch's numbers."""
import warnings

import numpy as np
import pytest
from test_optim import OPTIM_CASES

import disthook

torch = pytest.importorskip("torch")

STEPS = 5
TOLERANCE = 1e-5


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in OPTIM_CASES],
                         ids=[c[0] for c in OPTIM_CASES])
def test_torch_raises_the_same(fn, exc, message):
    with pytest.raises(Exception) as info:
        fn(torch)
    assert type(info.value) is exc
    assert str(info.value) == message


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 4))


def _cnn(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 4))


def _batches(input_shape, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(input_shape).astype(np.float32), rng.integers(0, 4, 8))
            for _ in range(STEPS)]


def _same_models(make):
    """A torch model and a disthook model with torch's initial weights."""
    torch.manual_seed(0)
    t_model = make(torch)
    d_model = make(disthook)
    d_model.load_state_dict({k: disthook.tensor(v.detach().numpy().copy())
                             for k, v in t_model.state_dict().items()})
    return t_model, d_model


def _train(lib, model, make_optimizer, batches):
    opt = make_optimizer(lib, model.parameters())
    loss_fn = lib.nn.CrossEntropyLoss()
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(model(lib.tensor(x)), lib.tensor(y))
        loss.backward()
        opt.step()
    return opt


OPTIMIZERS = {
    "asgd": lambda t, p: t.optim.ASGD(p, lr=0.05, weight_decay=0.01),
    "asgd_averaging": lambda t, p: t.optim.ASGD(p, lr=0.05, lambd=0.01, alpha=0.5, t0=2),
    "adamax": lambda t, p: t.optim.Adamax(p, lr=0.01, weight_decay=0.01),
    "adamax_maximize": lambda t, p: t.optim.Adamax(p, lr=0.02, betas=(0.8, 0.9),
                                                   maximize=True),
    "rprop": lambda t, p: t.optim.Rprop(p, lr=0.01),
    "rprop_etas": lambda t, p: t.optim.Rprop(p, lr=0.05, etas=(0.3, 1.5),
                                             step_sizes=(1e-3, 0.2)),
    "sgd": lambda t, p: t.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda t, p: t.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_nesterov": lambda t, p: t.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "sgd_weight_decay": lambda t, p: t.optim.SGD(p, lr=0.1, momentum=0.8, dampening=0.2,
                                                 weight_decay=0.01),
    "sgd_maximize": lambda t, p: t.optim.SGD(p, lr=0.01, maximize=True),
    "adam": lambda t, p: t.optim.Adam(p, lr=0.01),
    "adam_amsgrad_weight_decay": lambda t, p: t.optim.Adam(p, lr=0.01, weight_decay=0.01,
                                                           amsgrad=True),
    "adam_betas": lambda t, p: t.optim.Adam(p, lr=0.02, betas=(0.8, 0.95), eps=1e-6),
    "adamw": lambda t, p: t.optim.AdamW(p, lr=0.01),
    "adamw_amsgrad_maximize": lambda t, p: t.optim.AdamW(p, lr=0.01, weight_decay=0.1,
                                                         amsgrad=True, maximize=True),
}


def _assert_same_parameters(d_model, t_model):
    for (name, p), q in zip(d_model.named_parameters(), t_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=TOLERANCE,
                                   atol=TOLERANCE, err_msg=name)


@pytest.mark.parametrize("make_optimizer", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_mlp_trains_like_torch(make_optimizer):
    t_model, d_model = _same_models(_mlp)
    batches = _batches((8, 10))
    t_opt = _train(torch, t_model, make_optimizer, batches)
    d_opt = _train(disthook, d_model, make_optimizer, batches)
    _assert_same_parameters(d_model, t_model)
    _assert_same_state_dict(d_opt.state_dict(), t_opt.state_dict())


@pytest.mark.skipif(not hasattr(disthook.nn, "Conv2d") or not hasattr(disthook.nn, "MaxPool2d")
                    or not hasattr(disthook.nn, "Flatten"),
                    reason="disthook.nn has no Conv2d / MaxPool2d / Flatten yet")
@pytest.mark.parametrize("name", ["sgd_nesterov", "adamw"])
def test_cnn_trains_like_torch(name):
    t_model, d_model = _same_models(_cnn)
    batches = _batches((8, 1, 8, 8))
    _train(torch, t_model, OPTIMIZERS[name], batches)
    _train(disthook, d_model, OPTIMIZERS[name], batches)
    _assert_same_parameters(d_model, t_model)


def _assert_same_state_dict(got, want):
    assert list(got) == list(want) == ["state", "param_groups"]
    assert list(got["param_groups"][0]) == list(want["param_groups"][0])
    for g, w in zip(got["param_groups"], want["param_groups"]):
        assert g == w
    assert list(got["state"]) == list(want["state"])
    for key, state in want["state"].items():
        assert list(got["state"][key]) == list(state)
        for name, value in state.items():
            mine = got["state"][key][name]
            assert str(mine.dtype) == str(value.dtype) and tuple(mine.shape) == tuple(value.shape)
            np.testing.assert_allclose(mine.numpy(), value.numpy(), rtol=1e-4, atol=1e-6)


def test_state_dict_round_trip_with_torchs_state_dict():
    """A torch state_dict (its tensors converted) loads into disthook and training continues
    in step with torch."""
    t_model, d_model = _same_models(_mlp)
    batches = _batches((8, 10))
    t_opt = _train(torch, t_model, OPTIMIZERS["adam_amsgrad_weight_decay"], batches[:2])
    d_model.load_state_dict({k: disthook.tensor(v.detach().numpy().copy())
                             for k, v in t_model.state_dict().items()})
    d_opt = OPTIMIZERS["adam_amsgrad_weight_decay"](disthook, d_model.parameters())
    saved = t_opt.state_dict()
    d_opt.load_state_dict({
        "state": {k: {n: disthook.tensor(v.numpy().copy()) for n, v in s.items()}
                  for k, s in saved["state"].items()},
        "param_groups": saved["param_groups"]})
    for lib, model, opt in ((torch, t_model, t_opt), (disthook, d_model, d_opt)):
        for x, y in batches[2:]:
            opt.zero_grad()
            lib.nn.functional.cross_entropy(model(lib.tensor(x)), lib.tensor(y)).backward()
            opt.step()
    _assert_same_parameters(d_model, t_model)


def test_zero_grad_and_versions_like_torch():
    results = []
    for lib in (torch, disthook):
        w = lib.ones(3, requires_grad=True)
        opt = lib.optim.AdamW([w], lr=0.1)
        (w * w).sum().backward()
        v0 = w._version
        opt.step()
        v1 = w._version
        opt.zero_grad(set_to_none=False)
        zeroed = w.grad.tolist()
        opt.zero_grad()
        results.append((v1 - v0, zeroed, w.grad))
    assert results[0] == results[1]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 0.5, 3, float("inf")])
@pytest.mark.parametrize("max_norm", [0.1, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    rng = np.random.default_rng(4)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4,), (2, 2, 2)]]
    out = []
    for lib in (torch, disthook):
        params = [lib.zeros(g.shape, requires_grad=True) for g in grads]
        for p, g in zip(params, grads):
            p.grad = lib.tensor(g)
        total = lib.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
        out.append((total, [p.grad.numpy() for p in params]))
    (t_total, t_grads), (d_total, d_grads) = out
    assert str(d_total.dtype) == str(t_total.dtype) and d_total.shape == t_total.shape
    np.testing.assert_allclose(d_total.numpy(), t_total.numpy(), rtol=1e-6)
    for d, t in zip(d_grads, t_grads):
        np.testing.assert_allclose(d, t, rtol=1e-6, atol=1e-7)


def test_clip_grad_value_matches_torch():
    g = np.linspace(-2, 2, 9, dtype=np.float32)
    out = []
    for lib in (torch, disthook):
        p = lib.zeros(9, requires_grad=True)
        p.grad = lib.tensor(g)
        lib.nn.utils.clip_grad_value_([p], 0.75)
        out.append(p.grad.tolist())
    assert out[0] == out[1]


@pytest.mark.parametrize("make, epochs", [
    (lambda t, o: t.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.3), 10),
    (lambda t, o: t.optim.lr_scheduler.ExponentialLR(o, gamma=0.9), 6),
    (lambda t, o: t.optim.lr_scheduler.LambdaLR(o, lambda e: 0.5 ** e + 0.1), 6),
], ids=["step", "exponential", "lambda"])
def test_lr_schedules_match_torch(make, epochs):
    seen = []
    for lib in (torch, disthook):
        opt = lib.optim.SGD([{"params": [lib.ones(1, requires_grad=True)]},
                             {"params": [lib.ones(1, requires_grad=True)], "lr": 0.5}], lr=0.1)
        sched = make(lib, opt)
        lrs = []
        for _ in range(epochs):
            opt.step()
            sched.step()
            lrs.append(sched.get_last_lr())
        state = sched.state_dict()
        seen.append((lrs, sorted(k for k in state if not k.startswith("_")), state["last_epoch"]))
    assert seen[0] == seen[1]


def test_scheduler_order_warning_is_torchs():
    messages = []
    for lib in (torch, disthook):
        opt = lib.optim.SGD([lib.ones(1, requires_grad=True)], lr=0.1)
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sched.step()
        messages.append([(w.category, str(w.message)) for w in caught])
    assert messages[0] == messages[1] and len(messages[0]) == 1


def test_repr_is_torchs():
    for name, make in OPTIMIZERS.items():
        assert repr(make(disthook, [disthook.ones(1, requires_grad=True)])) == repr(
            make(torch, [torch.ones(1, requires_grad=True)])), name
