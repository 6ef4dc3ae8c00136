"""``take_along_dim`` broadcasts its input and indices in every dimension but ``dim``, where
each keeps its own size (a policy's log-probabilities of the sampled tokens,
``take_along_dim(logp, tokens, dim=-1)`` with several tokens per row). Before, the sizes
along ``dim`` were broadcast too, and indices of another length there than the input's
raised numpy's ValueError. Ranks that differ, and other sizes that do not broadcast, are
torch's RuntimeErrors."""
import numpy as np
import pytest
from helpers import check_op, lib

import disthook

torch = pytest.importorskip("torch")

TOKENS = np.array([[0, 2], [1, 0], [2, 2]])


@pytest.mark.parametrize("shape, index, dim", [
    ((3, 4), TOKENS, 1),                       # fewer indices than the input along dim
    ((3, 2), np.array([[0, 1, 1, 0, 1]]), 1),  # more, broadcast over the rows
    ((1, 4), TOKENS, 1),                        # the input broadcast over the indices' rows
    ((2, 3, 4), np.array([[[3, 0, 1, 2, 2]]]), -1),
])
def test_indices_of_another_length_along_dim(shape, index, dim):
    check_op(lambda x: x.take_along_dim(lib(x).tensor(index), dim), shape)
    check_op(lambda x: lib(x).take_along_dim(x, lib(x).tensor(index), dim=dim), shape)


@pytest.mark.parametrize("index, words", [
    (np.array([0, 1]), ("should have the same number of dimensions, but got 2 dimensions "
                        "for input, and 1 dimensions for indices")),
    (np.array([[0, 1]] * 3), ("The size of tensor a (2) must match the size of tensor b (3) "
                              "at non-singleton dimension 0")),
])
def test_what_does_not_broadcast_is_torch_s_error(index, words):
    for mod in (torch, disthook):
        with pytest.raises(RuntimeError) as err:
            mod.take_along_dim(mod.arange(6.0).view(2, 3), mod.tensor(index), 1)
        assert words in str(err.value)
