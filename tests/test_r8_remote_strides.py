"""A deployed model's parameter or buffer answers ``stride()`` as in one process (its value
is on a worker, contiguous; the array here is a one-element stand-in whose strides are 0)."""
import numpy as np
import pytest
from test_deployed_surface_units import FakeDeployment

import disthook as torch
from disthook import nn
from disthook.distributed.adopting import adopt


@pytest.mark.parametrize("shape", [(2, 3), (4,), (2, 0, 5), (3, 1, 2)], ids=str)
def test_a_placed_parameter_has_its_strides(shape):
    p = nn.Parameter(torch.zeros(shape))
    want = (p.stride(), [p.stride(d) for d in range(len(shape))], p.stride(-1))
    adopt(p, FakeDeployment({"w": np.zeros(shape, np.float32)}), "w")
    assert (p.stride(), [p.stride(d) for d in range(len(shape))], p.stride(-1)) == want
