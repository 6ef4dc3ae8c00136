"""Complex tensors leave the process: their arrays cross the wire (the general form and the
pipe record's short form), and torch.save/torch.load write and read them in torch's format
(ComplexFloatStorage, ComplexDoubleStorage), both ways with real torch."""
from __future__ import annotations

import io

import numpy as np
import pytest

import disthook
from disthook import wire

try:
    import torch
except ImportError:
    torch = None

VALUES = np.array([[1 + 2j, -3.5 - 0.25j], [0j, 1e-8 + 7j]])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_arrays_cross_the_wire_in_both_forms(dtype):
    a = VALUES.astype(dtype)[:, ::-1]  # (not contiguous: sent as it is seen)
    general = wire.decode([bytes(f) for f in wire.encode("ok", {"result": a})])["result"]
    pipe = wire.decode([bytes(f) for f in wire.encode_pipe("m", "s", "act", 0, a)])["data"]
    for got in (general, pipe):
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, a)


def test_the_real_dtypes_keep_their_pipe_codes():
    # the complex ones come after: a code names the same real dtype as in version 14
    # (and bfloat16 after them: every earlier code names what it named)
    assert wire.PIPE_DTYPES[:9] == tuple(sorted(d for d in wire.DTYPES
                                                if d[1] != "c" and d != "bfloat16"))
    assert wire.PIPE_DTYPES[9:] == ("<c16", "<c8", "bfloat16")


def test_save_and_load_keep_complex_tensors_and_parameters():
    z = disthook.tensor(VALUES)
    p = disthook.nn.Parameter(disthook.tensor(VALUES, dtype=disthook.cfloat))
    buf = io.BytesIO()
    disthook.save({"z": z, "p": p}, buf)
    buf.seek(0)
    back = disthook.load(buf)
    assert back["z"].dtype == disthook.complex128 and back["p"].requires_grad
    np.testing.assert_array_equal(back["z"].numpy(), z.numpy())
    np.testing.assert_array_equal(back["p"].detach().numpy(), p.detach().numpy())


@pytest.mark.skipif(torch is None, reason="reads and writes real torch's files")
def test_files_go_both_ways_with_torch():
    buf = io.BytesIO()
    disthook.save({"z": disthook.tensor(VALUES, dtype=disthook.cdouble)}, buf)
    buf.seek(0)
    got = torch.load(buf, weights_only=True)["z"]
    assert got.dtype == torch.complex128
    np.testing.assert_array_equal(got.numpy(), VALUES)

    buf = io.BytesIO()
    torch.save({"w": torch.nn.Parameter(torch.tensor(VALUES, dtype=torch.cfloat))}, buf)
    buf.seek(0)
    w = disthook.load(buf)["w"]
    assert w.dtype == disthook.complex64 and isinstance(w, disthook.nn.Parameter)
    np.testing.assert_array_equal(w.detach().numpy(), VALUES.astype(np.complex64))
