"""disthook.nn layers against torch 2.13 with the same weights and inputs: outputs,
gradients, running statistics, return_indices, reprs and error messages; and two small
models (a CNN, a transformer block) forward and backward."""
import re
import warnings

import numpy as np
import pytest
from test_nn_layers import ERRORS, REPRS

import disthook

torch = pytest.importorskip("torch")

RTOL = ATOL = 2e-5  # float32


def copy_to_torch(dh_module, t_module) -> None:
    """Load ``dh_module``'s parameters and buffers into ``t_module``."""
    state = {k: torch.tensor(v.detach().numpy()) for k, v in dh_module.state_dict().items()}
    t_module.load_state_dict(state)


def assert_close(dh, t, what: str = "") -> None:
    np.testing.assert_allclose(dh.detach().numpy(), t.detach().numpy(), rtol=RTOL, atol=ATOL,
                               err_msg=what)


def run_both(make, x: np.ndarray, steps: int = 1, train: bool = True, indices: bool = False):
    """Build the module in both libraries (disthook's weights copied to torch), run
    ``steps`` forward/backward passes on ``x`` (scaled per step), compare everything."""
    dh_m, t_m = make(disthook.nn), make(torch.nn)
    copy_to_torch(dh_m, t_m)
    dh_m.train(train)
    t_m.train(train)
    rng = np.random.default_rng(1)
    for step in range(steps):
        a = x * (step + 1) + step
        if indices:
            dh_x, t_x = disthook.tensor(a), torch.tensor(a)
        else:
            dh_x = disthook.tensor(a.astype(np.float32), requires_grad=True)
            t_x = torch.tensor(a.astype(np.float32), requires_grad=True)
        dh_y, t_y = dh_m(dh_x), t_m(t_x)
        assert dh_y.grad_fn.name() == t_y.grad_fn.name() if t_y.grad_fn is not None else True
        assert_close(dh_y, t_y, "output")
        w = rng.standard_normal(tuple(t_y.shape)).astype(np.float32)
        (dh_y * disthook.tensor(w)).sum().backward()
        (t_y * torch.tensor(w)).sum().backward()
        if not indices:
            assert_close(dh_x.grad, t_x.grad, "input grad")
        for (name, p), (_, q) in zip(dh_m.named_parameters(), t_m.named_parameters()):
            assert_close(p.grad, q.grad, f"grad of {name}")
        for (name, b), (_, c) in zip(dh_m.named_buffers(), t_m.named_buffers()):
            assert_close(b, c, f"buffer {name}")
    return dh_m, t_m


RNG = np.random.default_rng(0)
IMAGES = RNG.standard_normal((2, 4, 7, 6))
SEQUENCES = RNG.standard_normal((3, 4, 9))

MODULES = [
    ("conv2d", lambda nn: nn.Conv2d(4, 6, 3), IMAGES),
    ("conv2d_strided", lambda nn: nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, dilation=(2, 1),
                                            bias=False), IMAGES),
    ("conv2d_groups", lambda nn: nn.Conv2d(4, 6, 3, groups=2, padding="same"), IMAGES),
    ("conv2d_depthwise", lambda nn: nn.Conv2d(4, 4, 3, groups=4, stride=2), IMAGES),
    ("conv2d_reflect", lambda nn: nn.Conv2d(4, 2, 3, padding=1, padding_mode="reflect"),
     IMAGES),
    ("conv2d_replicate", lambda nn: nn.Conv2d(4, 2, 3, padding=(2, 1),
                                              padding_mode="replicate"), IMAGES),
    ("conv2d_circular", lambda nn: nn.Conv2d(4, 2, 3, padding=1, padding_mode="circular"),
     IMAGES),
    ("conv2d_unbatched", lambda nn: nn.Conv2d(4, 2, 3), IMAGES[0]),
    ("conv1d", lambda nn: nn.Conv1d(4, 6, 3, stride=2, padding=2), SEQUENCES),
    ("conv1d_same", lambda nn: nn.Conv1d(4, 4, 4, padding="same", groups=2), SEQUENCES),
    ("max_pool2d", lambda nn: nn.MaxPool2d(2), IMAGES),
    ("max_pool2d_ceil", lambda nn: nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), IMAGES),
    ("max_pool2d_dilated", lambda nn: nn.MaxPool2d((2, 3), 1, padding=1, dilation=2), IMAGES),
    ("max_pool1d", lambda nn: nn.MaxPool1d(3, 2, ceil_mode=True), SEQUENCES),
    ("avg_pool2d", lambda nn: nn.AvgPool2d(2), IMAGES),
    ("avg_pool2d_pad", lambda nn: nn.AvgPool2d(3, 2, padding=1, ceil_mode=True,
                                               count_include_pad=False), IMAGES),
    ("avg_pool2d_divisor", lambda nn: nn.AvgPool2d(3, 2, padding=1, divisor_override=5),
     IMAGES),
    ("avg_pool1d", lambda nn: nn.AvgPool1d(4, 2, padding=2), SEQUENCES),
    ("adaptive_avg_pool2d", lambda nn: nn.AdaptiveAvgPool2d((3, 4)), IMAGES),
    ("adaptive_avg_pool2d_1", lambda nn: nn.AdaptiveAvgPool2d(1), IMAGES),
    ("adaptive_avg_pool1d", lambda nn: nn.AdaptiveAvgPool1d(5), SEQUENCES),
    ("layer_norm", lambda nn: nn.LayerNorm(9), SEQUENCES),
    ("layer_norm_2d", lambda nn: nn.LayerNorm((4, 9), eps=1e-3, bias=False), SEQUENCES),
    ("layer_norm_plain", lambda nn: nn.LayerNorm(9, elementwise_affine=False), SEQUENCES),
    ("leaky_relu", lambda nn: nn.LeakyReLU(0.2), SEQUENCES),
    ("gelu", lambda nn: nn.GELU(), SEQUENCES),
    ("gelu_tanh", lambda nn: nn.GELU("tanh"), SEQUENCES),
    ("silu", lambda nn: nn.SiLU(), SEQUENCES),
    ("softmax", lambda nn: nn.Softmax(dim=1), SEQUENCES),
    ("log_softmax", lambda nn: nn.LogSoftmax(dim=-1), SEQUENCES),
    ("flatten", lambda nn: nn.Flatten(), IMAGES),
    ("unflatten", lambda nn: nn.Unflatten(2, (3, 3)), SEQUENCES),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("make, x", [c[1:] for c in MODULES], ids=[c[0] for c in MODULES])
def test_module_matches_torch(make, x):
    run_both(make, x)


@pytest.mark.parametrize("make, x", [
    (lambda nn: nn.BatchNorm2d(4), IMAGES),
    (lambda nn: nn.BatchNorm2d(4, momentum=None), IMAGES),
    (lambda nn: nn.BatchNorm2d(4, affine=False, momentum=0.3), IMAGES),
    (lambda nn: nn.BatchNorm2d(4, bias=False, eps=1e-2), IMAGES),
    (lambda nn: nn.BatchNorm1d(4), SEQUENCES),
    (lambda nn: nn.BatchNorm1d(4), np.ascontiguousarray(SEQUENCES[0].T)),
    (lambda nn: nn.BatchNorm1d(4, track_running_stats=False), SEQUENCES),
], ids=["2d", "momentum_none", "no_affine", "no_bias", "1d_3d_input", "1d_2d_input",
        "untracked"])
def test_batch_norm_train_steps_then_eval(make, x):
    dh_m, t_m = run_both(make, x, steps=3)
    assert int(dh_m.num_batches_tracked or 0) == int(t_m.num_batches_tracked or 0)
    dh_m.eval()
    t_m.eval()
    a = (x * 0.5 - 1).astype(np.float32)
    assert_close(dh_m(disthook.tensor(a)), t_m(torch.tensor(a)), "eval output")


@pytest.mark.parametrize("kwargs", [{}, {"padding_idx": 2}, {"padding_idx": -1},
                                    {"scale_grad_by_freq": True},
                                    {"padding_idx": 0, "scale_grad_by_freq": True},
                                    {"max_norm": 1.5}, {"max_norm": 2.0, "norm_type": 1.0}])
def test_embedding_matches_torch(kwargs):
    idx = np.array([[1, 2, 2, 0], [4, 1, 3, 3]])
    dh_m, t_m = run_both(lambda nn: nn.Embedding(6, 3, **kwargs), idx, indices=True)
    assert_close(dh_m.weight, t_m.weight, "weight after max_norm")


@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": (2, 3), "stride": 1, "padding": 1, "dilation": 2},
])
def test_max_pool_indices_match_torch(kwargs):
    a = np.round(RNG.standard_normal((2, 3, 7, 8)), 1)  # rounding makes ties
    _, dh_idx = disthook.nn.functional.max_pool2d(disthook.tensor(a), **kwargs,
                                                  return_indices=True)
    _, t_idx = torch.nn.functional.max_pool2d(torch.tensor(a), **kwargs, return_indices=True)
    np.testing.assert_array_equal(dh_idx.numpy(), t_idx.numpy())
    _, dh_idx = disthook.nn.functional.max_pool1d(disthook.tensor(a[0]), 3, return_indices=True)
    _, t_idx = torch.nn.functional.max_pool1d(torch.tensor(a[0]), 3, return_indices=True)
    np.testing.assert_array_equal(dh_idx.numpy(), t_idx.numpy())


@pytest.mark.parametrize("make, text", REPRS, ids=[str(i) for i in range(len(REPRS))])
def test_repr_is_torchs(make, text):
    assert repr(make(torch.nn)) == text


@pytest.mark.parametrize("make, exc, message", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_torch_raises_the_same(make, exc, message):
    with pytest.raises(Exception) as info:
        make(torch)
    assert type(info.value) is exc
    assert re.search(re.escape(message), str(info.value))


@pytest.mark.parametrize("make", [
    lambda nn: nn.Conv2d(3, 2, 3), lambda nn: nn.Conv2d(3, 2, 3, bias=False),
    lambda nn: nn.BatchNorm2d(3), lambda nn: nn.BatchNorm2d(3, affine=False),
    lambda nn: nn.LayerNorm(5, bias=False), lambda nn: nn.MaxPool2d(2),
], ids=["conv", "conv_no_bias", "bn", "bn_no_affine", "ln_no_bias", "max_pool"])
def test_legacy_backward_hook_sees_torchs_grad_input(make):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    modules = {disthook: make(disthook.nn), torch: make(torch.nn)}
    copy_to_torch(modules[disthook], modules[torch])
    seen = {disthook: [], torch: []}
    for lib, module in modules.items():
        module.register_backward_hook(lambda m, gi, go, lib=lib: seen[lib].extend(gi))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that legacy hooks are deprecated
            module(lib.tensor(x, requires_grad=True)).square().sum().backward()
    assert [g is None for g in seen[disthook]] == [g is None for g in seen[torch]]
    for a, b in zip(seen[disthook], seen[torch]):
        if a is not None:
            assert_close(a, b)


# ---- small models ---------------------------------------------------------------------------

def small_cnn(nn):
    return nn.Sequential(
        nn.Conv2d(1, 8, 3), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2), nn.Dropout(0.0), nn.Flatten(),
        nn.Linear(16 * 5 * 5, 10),
    )


def test_small_cnn_forward_backward_matches_torch():
    dh_m, t_m = small_cnn(disthook.nn), small_cnn(torch.nn)
    copy_to_torch(dh_m, t_m)
    x = RNG.standard_normal((8, 1, 12, 12)).astype(np.float32)
    y = RNG.integers(0, 10, 8)
    dh_loss = disthook.nn.CrossEntropyLoss()(dh_m(disthook.tensor(x)), disthook.tensor(y))
    t_loss = torch.nn.CrossEntropyLoss()(t_m(torch.tensor(x)), torch.tensor(y))
    assert_close(dh_loss, t_loss, "loss")
    dh_loss.backward()
    t_loss.backward()
    for (name, p), (_, q) in zip(dh_m.named_parameters(), t_m.named_parameters()):
        assert_close(p.grad, q.grad, f"grad of {name}")
    for (name, b), (_, c) in zip(dh_m.named_buffers(), t_m.named_buffers()):
        assert_close(b, c, f"buffer {name}")


def transformer_block(lib):
    """Embedding, pre-norm single-head self-attention and an MLP, each with a residual."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self, vocab=11, dim=8):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim, padding_idx=0)
            self.norm1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.head = nn.Linear(dim, vocab)
            self.dim = dim

        def forward(self, tokens):
            x = self.embed(tokens)
            q, k, v = self.qkv(self.norm1(x)).split(self.dim, dim=-1)
            scores = q @ k.transpose(-2, -1) / self.dim ** 0.5
            n = tokens.shape[1]
            future = lib.tensor(np.triu(np.ones((n, n), dtype=bool), 1))  # causal mask
            scores = scores.masked_fill(future, float("-inf"))
            x = x + self.proj(scores.softmax(dim=-1) @ v)
            x = x + self.mlp(self.norm2(x))
            return self.head(x)

    return Block()


def test_transformer_block_forward_backward_matches_torch():
    dh_m, t_m = transformer_block(disthook), transformer_block(torch)
    copy_to_torch(dh_m, t_m)
    tokens = RNG.integers(0, 11, (3, 6))
    target = RNG.integers(0, 11, (3, 6))
    dh_out = dh_m(disthook.tensor(tokens))
    t_out = t_m(torch.tensor(tokens))
    assert_close(dh_out, t_out, "logits")
    dh_loss = disthook.nn.functional.cross_entropy(dh_out.reshape(-1, 11),
                                                   disthook.tensor(target.reshape(-1)))
    t_loss = torch.nn.functional.cross_entropy(t_out.reshape(-1, 11),
                                               torch.tensor(target.reshape(-1)))
    assert_close(dh_loss, t_loss, "loss")
    dh_loss.backward()
    t_loss.backward()
    for (name, p), (_, q) in zip(dh_m.named_parameters(), t_m.named_parameters()):
        assert_close(p.grad, q.grad, f"grad of {name}")
