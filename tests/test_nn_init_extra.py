"""The rest of ``torch.nn.init``: kaiming_normal_, trunc_normal_, orthogonal_, sparse_, eye_,
dirac_ and the deprecated names. Draws come from disthook's generator, so distributions (not
numbers) are compared with torch's."""
from __future__ import annotations

import numpy as np
import pytest

import disthook
from disthook import nn
from disthook.nn import functional as F
from disthook.nn import init

torch = pytest.importorskip("torch")


def test_kaiming_normal_std():
    w = disthook.empty(400, 300)
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(w.numpy().std() - np.sqrt(2 / 400)) < 0.002
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_normal_(w, mode="fan_avg")


def test_trunc_normal_matches_torchs_distribution():
    ours = init.trunc_normal_(disthook.empty(200000), mean=0.5, std=2.0, a=-1.0, b=3.0).numpy()
    theirs = torch.nn.init.trunc_normal_(torch.empty(200000), 0.5, 2.0, -1.0, 3.0).numpy()
    assert ours.min() >= -1.0 and ours.max() <= 3.0
    assert abs(ours.mean() - theirs.mean()) < 0.02 and abs(ours.std() - theirs.std()) < 0.02


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 2, 3)])
def test_orthogonal(shape):
    w = init.orthogonal_(disthook.empty(shape, dtype=disthook.float64), gain=2.0).numpy()
    flat = w.reshape(shape[0], -1)
    gram = flat @ flat.T if flat.shape[0] <= flat.shape[1] else flat.T @ flat
    np.testing.assert_allclose(gram, 4 * np.eye(gram.shape[0]), atol=1e-10)
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
        init.orthogonal_(disthook.empty(3))


def test_sparse_zeroes_a_fraction_of_each_column():
    w = init.sparse_(disthook.empty(10, 6), 0.3, std=0.5).numpy()
    np.testing.assert_array_equal((w == 0).sum(0), [3] * 6)


def test_eye_and_dirac():
    np.testing.assert_array_equal(init.eye_(disthook.empty(2, 3)).numpy(), np.eye(2, 3))
    w = init.dirac_(disthook.empty(6, 3, 3, 3), groups=2)
    np.testing.assert_array_equal(w.numpy(), torch.nn.init.dirac_(torch.empty(6, 3, 3, 3), 2))
    x = disthook.randn(1, 3, 5, 5)
    np.testing.assert_allclose(F.conv2d(x, init.dirac_(disthook.empty(3, 3, 3, 3)),
                                        padding=1).numpy(), x.numpy())
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        init.dirac_(disthook.empty(5, 3, 3), groups=2)


@pytest.mark.parametrize("name", ["uniform", "normal", "xavier_uniform", "kaiming_normal",
                                  "orthogonal", "eye"])
def test_deprecated_names_warn_and_work(name):
    w = disthook.zeros(4, 4)
    with pytest.warns(FutureWarning, match=f"`nn.init.{name}` is now deprecated in favor of "
                                           f"`nn.init.{name}_`"):
        getattr(init, name)(w)
    assert np.abs(w.numpy()).sum() > 0


def test_every_torch_init_function_exists():
    names = [n for n in dir(torch.nn.init) if not n.startswith("_") and n[0].islower()
             and callable(getattr(torch.nn.init, n)) and n != "Callable"]
    assert [n for n in names if not hasattr(nn.init, n)] == []
