"""``F.rms_norm``/``nn.RMSNorm`` with ``eps=None`` (the default) on a bfloat16 or float16
input, as under ``torch.amp.autocast("cpu", dtype=torch.bfloat16)`` after a Linear: torch
adds float32's epsilon (the dtype it computes in), not the input dtype's (2**-7 for
bfloat16, which moved each output by a few bfloat16 steps)."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("weighted", [False, True], ids=["no-weight", "float32-weight"])
def test_default_eps_is_torchs(dtype, weighted):
    def run(T):
        x = T.linspace(-1, 1, 32).reshape(2, 16).to(getattr(T, dtype))
        weight = T.linspace(0.5, 1.5, 16) if weighted else None
        return T.nn.functional.rms_norm(x, (16,), weight).float().numpy()
    got, want = run(disthook), run(torch)
    if dtype == "bfloat16" or (dtype == "float16" and not weighted):
        np.testing.assert_array_equal(got, want)
    else:  # float32: torch's fused kernel sums in its own order; float16 times a float32
        # weight: torch rounds once more (left: one float16 step, not the eps)
        np.testing.assert_allclose(got, want, rtol=1e-3 if dtype == "float16" else 2e-6)


def test_rmsnorm_module_under_bfloat16_autocast():
    def run(T):
        lin, norm = T.nn.Linear(8, 16), T.nn.RMSNorm(16)
        with T.no_grad():
            lin.weight.copy_(T.linspace(-0.5, 0.5, 128).reshape(16, 8))
            lin.bias.zero_()
        with T.amp.autocast("cpu", dtype=T.bfloat16):
            return norm(lin(T.linspace(-1, 1, 24).reshape(3, 8))).float().detach().numpy()
    np.testing.assert_array_equal(run(disthook), run(torch))
