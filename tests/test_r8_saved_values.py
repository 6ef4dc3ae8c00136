"""The non-tensor values torch's built-in nodes keep, which graph tools read, for slice,
select, squeeze, expand, index, an unsqueeze by indexing and softmax / log_softmax: as torch
2.13 shows them. Indexing runs in torch item by item (one node per item), so the node a
result has is the last item's, on the dim the items before it left, over the tensor they
gave; a dim, start or index written negative reads as its 64-bit unsigned value, an open end
as 2**63 - 1. IndexBackward0 keeps the index tensors, None for a dim not indexed."""
import pytest

import disthook

torch = pytest.importorskip("torch")

# each an expression over T (the library), x (ones(2, 6, 4), requiring grad), t (tensor([0, 1]))
CASES = [
    "x[:, 1:5:2]", "x[:, -3:]", "x[:, :-1]", "x[:, 1:100]", "x[1, 2:4]", "x[None, 1:3]",
    "x[0:1, 2:4]", "x[..., 1:3]", "x.narrow(1, 1, 3)", "x.narrow(-1, -2, 1)",
    "x[:, 2]", "x[:, -1]", "x[None, ..., 2]", "x[:, 2:5, 1]", "x.select(-1, 1)",
    "x.select(-2, -1)", "x[:, None]", "x[..., None]", "x[1, None]", "x[:, 1:3, None]",
    "x[:, :1].squeeze(1)", "x[..., :1].squeeze(-1)", "x.squeeze(1)", "x[:, :1].squeeze()",
    "x[:1, :, :1].squeeze((-1, 0))", "x[:, :1].expand(2, 5, 4)", "x[:1].expand(3, -1, -1)",
    "T.softmax(x, dim=1)", "x.softmax(-1)", "T.nn.functional.softmax(x, dim=-2)",
    "T.log_softmax(x, dim=1)", "T.nn.functional.log_softmax(x, dim=-3)",
    # advanced indexing: IndexBackward0's _saved_indices
    "x[t]", "x[t, :]", "x[:, t, :]", "x[..., t]", "x[t, ..., t]", "x[[0, 1]]", "x[:, [1, 2]]",
    "x[t, t]", "x[t, 1:3]", "x[1, t]", "x[None, t]", "x[t, None]", "x[1, :, t]",
    "x[..., 1, t]", "x[0:1, t, 2]", "x[t[:, None], t]", "x[:, T.tensor([True, False] * 3)]",
    "x[:, T.ones(6, 4) > 0]", "x[x > 0]",
]

def _plain(v):
    if isinstance(v, (disthook.Tensor, torch.Tensor)):
        return (str(v.dtype).split(".")[-1], v.tolist())
    if isinstance(v, (list, tuple)):
        return type(v).__name__, [_plain(i) for i in v]
    return v


def _values(fn) -> tuple:
    """The node's name and its ``_saved_*`` values other than saved tensors of the op."""
    names = [n for n in dir(fn) if n.startswith("_saved_") and n not in ("_saved_result",)]
    return fn.name(), {n: _plain(getattr(fn, n)) for n in names}


@pytest.mark.parametrize("case", CASES)
def test_saved_values_are_torchs(case):
    def run(T):
        x = T.ones(2, 6, 4, requires_grad=True)
        return _values(eval(case, {"T": T, "x": x, "t": T.tensor([0, 1])}).grad_fn)
    assert run(disthook) == run(torch)


def test_softmax_keeps_its_result_too():
    x = disthook.ones(2, 3, requires_grad=True)
    fn = x.log_softmax(-1).grad_fn
    assert sorted(n for n in dir(fn) if n.startswith("_saved_")) == ["_saved_dim",
                                                                     "_saved_result"]
