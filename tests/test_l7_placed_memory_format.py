"""A deployed model's parameter answers ``is_contiguous(memory_format=...)`` as in one
process: its value lies in C order on the worker, so channels_last is True only where C order
is also channels_last's (dimensions of size 1), as torch answers, and a rank that is not 4 is never
channels_last. It answered True to every format."""
import numpy as np
import pytest
from test_deployed_surface_units import FakeDeployment

import disthook
from disthook import nn
from disthook.distributed.adopting import adopt

torch = pytest.importorskip("torch")

FORMATS = ("contiguous_format", "channels_last", "channels_last_3d")


def answers(t, lib):
    return [t.is_contiguous()] + [t.is_contiguous(memory_format=getattr(lib, f)) for f in FORMATS]


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 1, 1), (2, 3), (2, 3, 4, 5, 6),
                                   (1, 3, 1, 1, 1), (0, 3, 2, 2)], ids=str)
def test_a_placed_parameter_answers_each_format(shape):
    p = nn.Parameter(disthook.zeros(shape))
    adopt(p, FakeDeployment({"w": np.zeros(shape, np.float32)}), "w")
    assert answers(p, disthook) == answers(torch.zeros(shape), torch)
