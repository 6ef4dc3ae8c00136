"""Gradients of ``nn.Embedding(sparse=True)`` / ``EmbeddingBag(sparse=True)`` read as torch's
sparse ones (L1): Adam (and the others torch refuses a sparse gradient in) raised nothing here
and stepped every row; now they refuse with torch's RuntimeError, SGD and Adagrad step as
torch's, and clipping a sparse gradient raises NotImplementedError as in torch."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

REFUSING = ["Adam", "AdamW", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop", "RMSprop",
            "Adadelta", "Adafactor"]
STEPPING = [("SGD", {}), ("SGD", {"momentum": 0.9, "nesterov": True}), ("Adagrad", {}),
            ("Adagrad", {"lr_decay": 0.1}), ("SGD", {"weight_decay": 0.1}),
            ("Adagrad", {"weight_decay": 0.1})]


def _train(lib, name, kw, bag=False, clip=None, dense_too=False):
    """Two steps on a sparse table; (grad's layout, weights) or (error type, message)."""
    emb = (lib.nn.EmbeddingBag if bag else lib.nn.Embedding)(5, 3, sparse=True)
    with lib.no_grad():
        emb.weight.copy_(lib.tensor(np.arange(15.0).reshape(5, 3) / 7))
    opt = getattr(lib.optim, name)(emb.parameters(), lr=0.1, **kw)
    idx = lib.tensor([[1, 2, 1]]) if bag else lib.tensor([1, 2, 1])
    try:
        for _ in range(2):
            opt.zero_grad()
            (emb(idx) ** 2).sum().backward()
            if dense_too:
                (emb.weight.sum() * 0.5).backward()
            if clip is not None:
                clip(lib)(emb.parameters(), 0.1)
            layout = str(emb.weight.grad.layout)
            opt.step()
    except (RuntimeError, NotImplementedError) as e:
        return type(e).__name__, str(e)
    return layout, emb.weight.detach().numpy()


def _same(ours, theirs):
    assert ours[0] == theirs[0]
    if isinstance(theirs[1], str):
        assert ours[1] == theirs[1]
    else:
        np.testing.assert_allclose(ours[1], theirs[1], atol=1e-6)


@pytest.mark.parametrize("name", REFUSING)
@pytest.mark.parametrize("bag", [False, True])
def test_optimizers_refuse_a_sparse_gradient_as_torch(name, bag):
    ours, theirs = _train(disthook, name, {}, bag), _train(torch, name, {}, bag)
    _same(ours, theirs)
    assert ours[0] == "RuntimeError" and "does not support sparse gradients" in ours[1]
    # a dense gradient added makes .grad dense (torch's layout rule): they step again
    _same(_train(disthook, name, {}, bag, dense_too=True),
          _train(torch, name, {}, bag, dense_too=True))


@pytest.mark.parametrize("name,kw", STEPPING)
def test_sgd_and_adagrad_step_a_sparse_gradient_as_torch(name, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's sparse tensor invariant-check notice
        theirs = _train(torch, name, kw)
    _same(_train(disthook, name, kw), theirs)


@pytest.mark.parametrize("clip", [lambda lib: lib.nn.utils.clip_grad_norm_,
                                  lambda lib: lib.nn.utils.clip_grad_value_])
def test_clipping_a_sparse_gradient_is_refused_as_torch(clip):
    ours, theirs = _train(disthook, "SGD", {}, clip=clip), _train(torch, "SGD", {}, clip=clip)
    assert ours[0] == theirs[0] == "NotImplementedError"
    assert ours[1].split(" backend")[0] == theirs[1].split(" backend")[0]
