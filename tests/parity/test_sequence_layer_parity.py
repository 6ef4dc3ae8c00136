"""MultiheadAttention, the Transformer layers and the recurrent layers against torch 2.13
with the same weights (disthook's state_dict loaded into torch): every output, the
gradients of every input and parameter; reprs and errors."""
import warnings

import numpy as np
import pytest

import disthook
from parity.test_layer_parity import copy_to_torch

torch = pytest.importorskip("torch")

TOL = 3e-5  # float32
RNG = np.random.default_rng(0)


def _flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [] if out is None else [out]


def run_both(make, inputs, train: bool = False, **kwargs):
    """Build the module in both libraries, run it on ``inputs`` (arrays: float ones require
    grad; tensors of each library built from them), backpropagate a fixed random weighting
    of every float output; compare outputs and all gradients. Returns the largest
    difference seen."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dh_m, t_m = make(disthook.nn), make(torch.nn)
    copy_to_torch(dh_m, t_m)
    dh_m.train(train)
    t_m.train(train)
    worst = 0.0
    sides = []
    for lib, m in ((disthook, dh_m), (torch, t_m)):
        xs = [None if a is None else lib.tensor(a, requires_grad=a.dtype.kind == "f")
              for a in inputs]
        kw = {k: lib.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        outs = [o for o in _flat(m(*xs, **kw)) if o.dtype.is_floating_point]
        rng = np.random.default_rng(1)
        loss = sum((o * lib.tensor(rng.standard_normal(tuple(o.shape)).astype(np.float32))).sum()
                   for o in outs)
        loss.backward()
        grads = [x.grad for x in xs if x is not None and x.requires_grad]
        grads += [p.grad for _, p in m.named_parameters()]
        sides.append((outs, grads, [n for n, _ in m.named_parameters()]))
    (dh_outs, dh_grads, dh_names), (t_outs, t_grads, t_names) = sides
    assert dh_names == t_names
    assert len(dh_outs) == len(t_outs)
    for k, (a, b) in enumerate(zip(dh_outs + dh_grads, t_outs + t_grads)):
        if a is None or b is None:
            assert a is None and b is None, f"item {k}: one side has no gradient"
            continue
        a, b = a.detach().numpy(), b.detach().numpy()
        assert a.shape == b.shape, f"item {k}: {a.shape} != {b.shape}"
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL, err_msg=f"item {k}")
        worst = max(worst, float(np.abs(a - b).max(initial=0)))
    return worst


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


SEQ = f32(5, 2, 8)  # (L, N, E)
MEM = f32(6, 2, 8)
BOOL_MASK = np.triu(np.ones((5, 5), bool), 1)
FLOAT_MASK = np.where(BOOL_MASK, -np.inf, 0).astype(np.float32)
PADDING = np.array([[False] * 5, [False, False, False, True, True]])

MHA = [
    ("self", lambda nn: nn.MultiheadAttention(8, 2), [SEQ, SEQ, SEQ], {}),
    ("cross_kdim_vdim", lambda nn: nn.MultiheadAttention(8, 2, kdim=5, vdim=3),
     [SEQ, f32(6, 2, 5), f32(6, 2, 3)], {}),
    ("batch_first", lambda nn: nn.MultiheadAttention(8, 4, batch_first=True),
     [f32(2, 5, 8), f32(2, 6, 8), f32(2, 6, 8)], {}),
    ("masks", lambda nn: nn.MultiheadAttention(8, 2), [SEQ, SEQ, SEQ],
     {"attn_mask": BOOL_MASK, "key_padding_mask": PADDING}),
    ("float_mask_no_weights", lambda nn: nn.MultiheadAttention(8, 2), [SEQ, SEQ, SEQ],
     {"attn_mask": FLOAT_MASK, "need_weights": False}),
    ("causal_hint", lambda nn: nn.MultiheadAttention(8, 2), [SEQ, SEQ, SEQ],
     {"attn_mask": FLOAT_MASK, "need_weights": False, "is_causal": True}),
    ("per_head_weights", lambda nn: nn.MultiheadAttention(8, 2, bias=False), [SEQ, MEM, MEM],
     {"average_attn_weights": False}),
    ("bias_kv_zero_attn", lambda nn: nn.MultiheadAttention(8, 2, add_bias_kv=True,
                                                          add_zero_attn=True),
     [SEQ, MEM, MEM], {"key_padding_mask": np.zeros((2, 6), bool)}),
    ("unbatched", lambda nn: nn.MultiheadAttention(8, 2), [SEQ[:, 0], MEM[:, 0], MEM[:, 0]], {}),
    ("mask_3d", lambda nn: nn.MultiheadAttention(8, 2), [SEQ, MEM, MEM],
     {"attn_mask": f32(4, 5, 6)}),
]


@pytest.mark.parametrize("make, inputs, kwargs", [c[1:] for c in MHA], ids=[c[0] for c in MHA])
def test_multihead_attention(make, inputs, kwargs):
    run_both(make, inputs, **kwargs)


TRANSFORMERS = [
    ("encoder_layer", lambda nn: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), [SEQ], {}),
    ("encoder_layer_norm_first_gelu", lambda nn: nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, activation="gelu", norm_first=True, batch_first=True),
     [f32(2, 5, 8)], {"src_key_padding_mask": PADDING}),
    ("encoder_layer_mask", lambda nn: nn.TransformerEncoderLayer(8, 4, 16, dropout=0.0),
     [SEQ], {"src_mask": FLOAT_MASK, "is_causal": True}),
    ("decoder_layer", lambda nn: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0),
     [SEQ, MEM], {"tgt_mask": FLOAT_MASK}),
    ("decoder_layer_norm_first", lambda nn: nn.TransformerDecoderLayer(
        8, 2, 16, dropout=0.0, norm_first=True, bias=False), [SEQ, MEM],
     {"memory_key_padding_mask": np.zeros((2, 6), bool)}),
    ("encoder", lambda nn: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2, nn.LayerNorm(8)), [SEQ],
     {"mask": FLOAT_MASK}),
    ("transformer", lambda nn: nn.Transformer(8, 2, 2, 1, 16, dropout=0.0), [MEM, SEQ],
     {"tgt_mask": FLOAT_MASK}),
    ("transformer_batch_first", lambda nn: nn.Transformer(8, 2, 1, 2, 16, dropout=0.0,
                                                           batch_first=True),
     [f32(2, 6, 8), f32(2, 5, 8)], {"src_key_padding_mask": np.zeros((2, 6), bool)}),
]


@pytest.mark.parametrize("make, inputs, kwargs", [c[1:] for c in TRANSFORMERS],
                         ids=[c[0] for c in TRANSFORMERS])
def test_transformer_layers(make, inputs, kwargs):
    run_both(make, inputs, train=True, **kwargs)


def test_generate_square_subsequent_mask():
    a = disthook.nn.Transformer.generate_square_subsequent_mask(4)
    b = torch.nn.Transformer.generate_square_subsequent_mask(4)
    assert a.dtype == disthook.float32 and np.array_equal(a.numpy(), b.numpy())


H0 = f32(2, 2, 6)  # (layers * directions, N, H)
RECURRENT = [
    ("rnn", lambda nn: nn.RNN(4, 6), [f32(5, 2, 4)]),
    ("rnn_relu_2_layers_h0", lambda nn: nn.RNN(4, 6, 2, nonlinearity="relu"), [f32(5, 2, 4),
                                                                               H0]),
    ("rnn_bidirectional_batch_first", lambda nn: nn.RNN(4, 6, batch_first=True,
                                                        bidirectional=True), [f32(2, 5, 4)]),
    ("lstm", lambda nn: nn.LSTM(4, 6), [f32(5, 2, 4)]),
    ("lstm_2_layers_bidirectional", lambda nn: nn.LSTM(4, 6, 2, bidirectional=True),
     [f32(5, 3, 4)]),
    ("lstm_batch_first_no_bias", lambda nn: nn.LSTM(4, 6, 2, bias=False, batch_first=True),
     [f32(3, 5, 4), (f32(2, 3, 6), f32(2, 3, 6))]),
    ("lstm_unbatched", lambda nn: nn.LSTM(4, 6), [f32(5, 4)]),
    ("gru", lambda nn: nn.GRU(4, 6), [f32(5, 2, 4)]),
    ("gru_2_layers_bidirectional_batch_first", lambda nn: nn.GRU(
        4, 6, 2, batch_first=True, bidirectional=True), [f32(2, 5, 4)]),
    ("gru_h0", lambda nn: nn.GRU(4, 6, 2), [f32(5, 2, 4), H0]),
]


@pytest.mark.parametrize("make, inputs", [c[1:] for c in RECURRENT],
                         ids=[c[0] for c in RECURRENT])
def test_recurrent_layers(make, inputs):
    if len(inputs) == 2 and isinstance(inputs[1], tuple):
        h0, c0 = inputs[1]
        m_make = make

        def make(nn):  # noqa: F811  (the pair goes in as one argument)
            return _with_pair(m_make(nn), nn)
        inputs = [inputs[0], h0, c0]
    run_both(make, inputs)


def _with_pair(module, nn):
    """A module calling an LSTM or LSTMCell with its (h, c) pair given as two arguments."""
    class WithPair(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, x, h, c):
            return self.inner(x, (h, c))
    return WithPair()


CELLS = [
    ("rnn_cell", lambda nn: nn.RNNCell(4, 6), [f32(3, 4), f32(3, 6)]),
    ("rnn_cell_relu_unbatched", lambda nn: nn.RNNCell(4, 6, nonlinearity="relu"), [f32(4)]),
    ("gru_cell", lambda nn: nn.GRUCell(4, 6, bias=False), [f32(3, 4), f32(3, 6)]),
    ("lstm_cell", lambda nn: nn.LSTMCell(4, 6), [f32(3, 4)]),
]


@pytest.mark.parametrize("make, inputs", [c[1:] for c in CELLS], ids=[c[0] for c in CELLS])
def test_cells(make, inputs):
    run_both(make, inputs)


def test_lstm_cell_with_state():
    run_both(lambda nn: _with_pair(nn.LSTMCell(4, 6), nn), [f32(3, 4), f32(3, 6),
                                                                  f32(3, 6)])


REPRS = [
    lambda nn: nn.MultiheadAttention(8, 2),
    lambda nn: nn.TransformerEncoderLayer(8, 2, 16),
    lambda nn: nn.TransformerDecoderLayer(8, 2, 16, norm_first=True),
    lambda nn: nn.Transformer(8, 2, 1, 1, 16),
    lambda nn: nn.LSTM(10, 20, num_layers=2, batch_first=True, bidirectional=True),
    lambda nn: nn.RNN(3, 4, nonlinearity="relu", bias=False, dropout=0.5, num_layers=2),
    lambda nn: nn.GRU(3, 4),
    lambda nn: nn.RNNCell(3, 4, nonlinearity="relu"),
    lambda nn: nn.LSTMCell(3, 4, bias=False),
    lambda nn: nn.GRUCell(3, 4),
]


@pytest.mark.parametrize("make", REPRS)
def test_reprs_and_parameter_names_are_torchs(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = make(disthook.nn), make(torch.nn)
    assert repr(a) == repr(b)
    assert [(n, tuple(p.shape)) for n, p in a.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in b.named_parameters()]


ERRORS = [
    (lambda nn: nn.MultiheadAttention(8, 3), AssertionError,
     "embed_dim must be divisible by num_heads"),
    (lambda nn: nn.MultiheadAttention(8, 2)(nn_t(nn, SEQ), nn_t(nn, SEQ), nn_t(nn, SEQ),
                                            attn_mask=nn_t(nn, FLOAT_MASK), is_causal=False,
                                            key_padding_mask=nn_t(nn, PADDING.astype(np.int64))),
     AssertionError, "only bool and floating types of key_padding_mask are supported"),
    (lambda nn: nn.MultiheadAttention(8, 2)(nn_t(nn, SEQ), nn_t(nn, SEQ), nn_t(nn, SEQ),
                                            is_causal=True), RuntimeError,
     "Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
     "method `generate_square_subsequent_mask` to create this mask."),
    (lambda nn: nn.MultiheadAttention(8, 2)(nn_t(nn, SEQ[..., :7]), nn_t(nn, SEQ),
                                            nn_t(nn, SEQ)), AssertionError,
     "was expecting embedding dimension of 8, but got 7"),
    (lambda nn: nn.LSTM(3, 4)(nn_t(nn, f32(5, 2, 4))), RuntimeError,
     "input.size(-1) must be equal to input_size. Expected 3, got 4"),
    (lambda nn: nn.GRU(3, 4)(nn_t(nn, f32(5, 2, 3)), nn_t(nn, f32(2, 2, 4))), RuntimeError,
     "Expected hidden size (1, 2, 4), got [2, 2, 4]"),
    (lambda nn: nn.GRUCell(3, 4)(nn_t(nn, f32(5, 4))), RuntimeError,
     "input has inconsistent input_size: got 4 expected 3"),
    (lambda nn: nn.RNN(3, 4, nonlinearity="foo"), ValueError,
     "Unknown nonlinearity 'foo'. Select from 'tanh' or 'relu'."),
]


def nn_t(nn, a):
    return (disthook if nn is disthook.nn else torch).tensor(a)


@pytest.mark.parametrize("fn, exc, message", ERRORS)
def test_errors_are_torchs(fn, exc, message):
    for nn in (disthook.nn, torch.nn):
        with pytest.raises(exc) as info:
            fn(nn)
        assert type(info.value) is exc and str(info.value) == message


def test_warnings_are_torchs():
    for nn in (disthook.nn, torch.nn):
        with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater "
                                             "than 1, but got dropout=0.5 and num_layers=1"):
            nn.RNN(3, 4, dropout=0.5)
        with pytest.warns(UserWarning, match="self.use_nested_tensor is False because "
                                             "encoder_layer.norm_first was True"):
            nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, norm_first=True), 2)
