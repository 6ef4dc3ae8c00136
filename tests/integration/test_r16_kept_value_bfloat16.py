"""A deployed part's output kept on its worker (the second call on: its answer's form is
known), converted to bfloat16 there (``h.to(torch.bfloat16)``, or an autocast region's cast
of it): the op's numpy dtype travelled as ``"<V2"``, which the worker read as a plain void,
so the cast made bytes of no dtype and its answer could not be sent (WireError). It reads
as bfloat16 now, and the values are one process's."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.service import op_calls

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2
X = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)


def test_a_numpy_bfloat16_dtype_parameter_decodes_as_bfloat16():
    dt = torch.bfloat16.np
    back = op_calls.decode_params(op_calls.encode_params({"dtype": dt}))
    assert back["dtype"] == dt and back["dtype"].name == "bfloat16"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def test_a_kept_output_converted_to_bfloat16_is_one_process_s(cluster):
    m = torch.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2))

    def run(model):
        h = model.a(torch.tensor(X))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            y = h @ m
        return h.to(torch.bfloat16) * 2, y

    want = run(Net())
    model = cluster.deploy(Net(), stages=2)
    try:
        for _ in range(2):  # the second call's output is kept on the worker
            for a, b in zip(run(model), want):
                assert a.dtype == b.dtype == torch.bfloat16
                np.testing.assert_array_equal(a.float().detach().numpy(),
                                              b.float().detach().numpy())
    finally:
        model.close()
