"""The device modules and flags that device-picking and attention code reads, answered as a
CPU-only torch build answers: ``torch.version.cuda`` is None, ``torch.cpu`` and ``torch.xpu``
say what they have, and the attention-kernel flags (``torch.backends.cuda.enable_flash_sdp``,
``sdp_kernel``, ``torch.nn.attention.sdpa_kernel``) can be set, read and scoped while
``scaled_dot_product_attention`` computes the same. Runs under disthook and, when installed,
torch."""
from __future__ import annotations

import importlib
import importlib.util

import numpy as np
import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


@pytest.fixture(params=["disthook", pytest.param("torch", marks=needs_torch)])
def T(request):
    return importlib.import_module(request.param)


def pick_device(T) -> str:
    """A device picker as libraries write it."""
    if T.version.cuda and T.cuda.is_available():
        return "cuda"
    if T.xpu.is_available():
        return "xpu"
    if T.backends.mps.is_available():
        return "mps"
    return "cpu"


def test_device_pickers_land_on_the_cpu(T):
    assert T.version.cuda is None and T.version.hip is None
    assert pick_device(T) == "cpu"
    device_module = getattr(T, T.device(pick_device(T)).type)
    assert device_module is T.cpu
    assert device_module.synchronize() is None
    assert (T.cpu.is_available(), T.cpu.device_count(), T.cpu.current_device()) == (
        True, 1, "cpu")
    assert (T.xpu.is_available(), T.xpu.device_count(), T.xpu.is_initialized()) == (
        False, 0, False)
    assert T.xpu.empty_cache() is None
    with pytest.raises(AssertionError, match="^Torch not compiled with XPU enabled$"):
        T.xpu.synchronize()


def attention(T):
    q = T.linspace(-1, 1, 24).reshape(1, 2, 3, 4)
    return T.nn.functional.scaled_dot_product_attention(q, q.flip(-1), q * 2).numpy()


def test_attention_kernel_flags_are_kept_and_scoped(T):
    cuda = T.backends.cuda
    want = attention(T)
    assert (cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled(),
            cuda.math_sdp_enabled(), cuda.cudnn_sdp_enabled()) == (True, True, True, True)
    cuda.enable_flash_sdp(False)
    try:
        assert cuda.flash_sdp_enabled() is False
    finally:
        cuda.enable_flash_sdp(True)
    with pytest.warns(FutureWarning, match="torch.backends.cuda.sdp_kernel\\(\\)` is deprecated"):
        region = cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False)
    with region:
        assert (cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled(),
                cuda.math_sdp_enabled()) == (False, False, True)
        np.testing.assert_allclose(attention(T), want, atol=1e-6)
    assert cuda.flash_sdp_enabled() is True
    attn = importlib.import_module(T.__name__ + ".nn.attention")
    with attn.sdpa_kernel([attn.SDPBackend.MATH]):
        assert cuda.flash_sdp_enabled() is False and cuda.math_sdp_enabled() is True
        np.testing.assert_allclose(attention(T), want, atol=1e-6)
    with attn.sdpa_kernel(attn.SDPBackend.FLASH_ATTENTION):
        assert cuda.flash_sdp_enabled() is True and cuda.math_sdp_enabled() is False
    assert cuda.math_sdp_enabled() is True and int(attn.SDPBackend.MATH) == 0
    with pytest.raises(AssertionError, match="got str$"), attn.sdpa_kernel("math"):
        pass


def test_opt_einsum_flags_read_as_in_torch(T):
    opt_einsum = importlib.import_module(T.__name__ + ".backends.opt_einsum")
    assert (opt_einsum.enabled, opt_einsum.strategy, opt_einsum.is_available()) == (
        False, None, False)
    if opt_einsum.enabled:  # torch without the opt_einsum package skips this
        raise AssertionError("opt_einsum read as enabled")


def test_a_refused_name_of_an_unlisted_module_does_not_read_as_true():
    """A flag of a torch module disthook has no list of names for came back as a refusal that
    ``if`` took as True, silently; reading it in a condition now raises, naming it."""
    import disthook

    flag = importlib.import_module("disthook.backends.mha").get_fastpath_enabled
    with pytest.raises(NotImplementedError, match="torch.backends.mha.get_fastpath_enabled"):
        bool(flag)
    with pytest.raises(NotImplementedError, match="torch.float8_e4m3fn"):
        bool(disthook.float8_e4m3fn)
