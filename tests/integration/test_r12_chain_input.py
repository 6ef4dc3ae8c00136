"""A chain of stages (an ``nn.Sequential`` root cut into stages) passes one tensor from stage
to stage; called with anything else (a ``PackedSequence`` for its LSTM) it raises a TypeError
that names the ``placement=`` deploying the same model part by part, and that deploy gives
one process's numbers."""
import ast
import re

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.nn.utils.rnn import pack_sequence, pad_packed_sequence

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


def test_a_packed_sequence_into_a_chain_names_the_placement_that_takes_it(cluster):
    torch.manual_seed(0)
    model = nn.Sequential(nn.LSTM(3, 4))
    xs = [torch.randn(n, 3) for n in (4, 2, 3)]
    want = pad_packed_sequence(model(pack_sequence(xs, enforce_sorted=False))[0])[0]
    deployed = cluster.deploy(model, stages=1)
    try:
        with pytest.raises(TypeError, match="takes one Tensor, got PackedSequence") as info:
            deployed(pack_sequence(xs, enforce_sorted=False))
    finally:
        deployed.close()
    placement = ast.literal_eval(re.search(r"placement=(\{.*?\})", str(info.value)).group(1))
    assert placement == {"0": 0}
    deployed = cluster.deploy(model, stages=1, placement=placement)
    try:
        out, _ = deployed(pack_sequence(xs, enforce_sorted=False))
        np.testing.assert_allclose(pad_packed_sequence(out)[0].detach().numpy(),
                                   want.detach().numpy(), rtol=1e-6)
    finally:
        deployed.close()
