"""An attached client of a writable model may change its weights' values, never their shapes
or dtypes, which every client's copy of the model mirrors. The client library refuses a
``set_`` of another shape, but the worker ran any in-place method a raw ``param_op`` named:
``bias.set_(<1 element>)`` left the deployer's model computing with a broadcast bias while
its copy said ``[2]`` (a silent wrong result), a ``set_`` of float64 data made every
client's forward fail, and ``resize_`` of a buffer changed its shape. Now the worker puts the
tensor back as it was and refuses, saying so."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, connect, deployment_of
from disthook.service.values import pack

pytestmark = pytest.mark.timeout(180)

CLUSTER_WORKERS = 1


@pytest.mark.parametrize("name, op, args, made", [
    ("0.bias", "set_", (torch.full((1,), 5.0),), r"\[1\] float32"),
    ("0.weight", "set_", (torch.ones(2, 3, dtype=torch.float64),), r"\[2, 3\] float64"),
    ("0.bias", "set_", (), r"\[0\] float32"),
    ("1.running_mean", "resize_", ((5,),), r"\[5\] float32"),
])
def test_a_raw_in_place_method_keeps_shape_and_dtype(cluster, name, op, args, made):
    torch.manual_seed(0)
    remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).eval(),
                            stages=1, name=f"s6-{name}-{op}-{made}", writable=True)
    x = torch.ones(4, 3)
    expected = remote(x).detach().numpy()
    before = {k: v.numpy().copy() for k, v in remote.state_dict().items()}  # (as fetched)
    with connect(cluster.address) as other:
        attached = deployment_of(other.attach(f"s6-{name}-{op}-{made}"))
        (address,) = attached._addresses
        with pytest.raises(RemoteError, match=f"a deployed tensor keeps its shape and dtype: "
                                              f"{name} is .* {op} made it {made}"):
            attached._hub.request(address, "param_op", {
                "name": name, "op": op, "args": pack(args), "kwargs": pack({})}, what="raw")
    np.testing.assert_array_equal(remote(x).detach().numpy(), expected)
    after = remote.state_dict()
    for key, value in before.items():
        assert after[key].numpy().dtype == value.dtype
        np.testing.assert_array_equal(after[key].numpy(), value)
    remote.close()
