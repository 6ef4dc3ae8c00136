"""Tokens sampled under ``inference_mode`` (an RL rollout) used as indices in a training
step: torch saves the index of gather, scatter, index_select, indexing by a tensor,
index_put/index_copy/index_fill, embedding and nll_loss for their backward, so an
inference tensor there refuses ("Inference tensors cannot be saved for backward") when
the op records a graph; index_add, scatter_add and take_along_dim, which do not save
theirs, take it. Before, disthook kept those indices as arrays and took them all: a
program that ran here failed under torch. Compared op by op with torch 2.13."""
import pytest

import disthook

torch = pytest.importorskip("torch")


def _cases(t, F):
    with t.inference_mode():
        tokens = t.tensor([[0, 2], [1, 0]])
        rows = t.tensor([0, 2])
        targets = t.tensor([1, 0])
        mask = t.tensor([[True, False, True], [False, True, False]])
    w = t.ones(2, 3, requires_grad=True)
    table = t.ones(4, 3, requires_grad=True)
    logits = t.ones(2, 3, 5, requires_grad=True)
    return {
        "gather": lambda: t.gather(w, 1, tokens),
        "logprobs": lambda: logits.log_softmax(-1).gather(-1, tokens[..., None]),
        "scatter": lambda: w.scatter(1, tokens, 0.5),
        "index_select": lambda: w.index_select(1, rows),
        "getitem": lambda: w[:, rows],
        "getitem_mask": lambda: w[mask],
        "masked_select": lambda: w.masked_select(mask),
        "take": lambda: w.take(rows),
        "setitem": lambda: w.clone().__setitem__((slice(None), rows), 1.0),
        "index_put": lambda: w.index_put((rows[:1],), t.ones(3)),
        "index_copy": lambda: w.index_copy(1, rows, t.ones(2, 2)),
        "index_fill": lambda: w.index_fill(1, rows, 0.0),
        "embedding": lambda: F.embedding(tokens, table),
        "cross_entropy": lambda: F.cross_entropy(w, targets),
        "nll_loss": lambda: F.nll_loss(w, targets),
        # these save no index in torch: the inference tensor is taken
        "index_add": lambda: w.index_add(1, rows, t.ones(2, 2)),
        "scatter_add": lambda: w.scatter_add(1, tokens, t.ones(2, 2)),
        "take_along_dim": lambda: t.take_along_dim(w, tokens, 1),
        "setitem_basic": lambda: w.clone().__setitem__((slice(None), 1), 1.0),
        # no graph recorded: nothing is saved
        "gather_no_grad": lambda: t.gather(w.detach(), 1, tokens),
        "embedding_frozen": lambda: F.embedding(tokens, table.detach()),
    }


def _outcome(fn) -> str:
    try:
        fn()
    except RuntimeError as e:
        assert "Inference tensors cannot be saved for backward" in str(e)
        return "refused"
    return "ran"


@pytest.mark.parametrize("name", list(_cases(torch, torch.nn.functional)))
def test_an_inference_index_is_refused_where_torch_saves_it(name):
    want = _outcome(_cases(torch, torch.nn.functional)[name])
    got = _outcome(_cases(disthook, disthook.nn.functional)[name])
    assert got == want, f"{name}: torch {want}, disthook {got}"


def test_inside_the_mode_and_under_no_grad_the_same_ops_run():
    cases = _cases(disthook, disthook.nn.functional)
    with disthook.no_grad():
        for fn in cases.values():
            fn()
    with disthook.inference_mode():
        for fn in cases.values():
            fn()
