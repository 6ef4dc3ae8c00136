"""``torch.backends.cuda``: not built; the matmul and attention-kernel flags are kept and
ignored."""
import contextlib
import warnings

from disthook import _settings


class _Matmul:
    allow_fp16_reduced_precision_reduction = True
    allow_bf16_reduced_precision_reduction = True

    # torch keeps allow_tf32 as a view of the float32 matmul precision: set_float32_matmul_
    # precision("high") reads back True here, and allow_tf32 = True sets "high"
    @property
    def allow_tf32(self) -> bool:
        return _settings.get_float32_matmul_precision() != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        _settings.set_float32_matmul_precision("high" if value else "highest")


matmul = _Matmul()


def is_built() -> bool:
    return False


# ---- scaled_dot_product_attention's kernels: flags as torch keeps them, all on by default.
# disthook has one kernel (the math one), and what it computes does not depend on them.
_sdp_enabled = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def flash_sdp_enabled() -> bool:
    return _sdp_enabled["flash"]


def mem_efficient_sdp_enabled() -> bool:
    return _sdp_enabled["mem_efficient"]


def math_sdp_enabled() -> bool:
    return _sdp_enabled["math"]


def cudnn_sdp_enabled() -> bool:
    return _sdp_enabled["cudnn"]


def enable_flash_sdp(enabled: bool) -> None:
    _sdp_enabled["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp_enabled["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled: bool) -> None:
    _sdp_enabled["math"] = bool(enabled)


def enable_cudnn_sdp(enabled: bool) -> None:
    _sdp_enabled["cudnn"] = bool(enabled)


@contextlib.contextmanager
def sdp_kernels(**enabled: bool):
    """The flags set for a region (``flash=False`` ...), and as they were after it."""
    before = dict(_sdp_enabled)
    _sdp_enabled.update({name: bool(on) for name, on in enabled.items()})
    try:
        yield
    finally:
        _sdp_enabled.update(before)


def sdp_kernel(enable_flash: bool = True, enable_math: bool = True,
               enable_mem_efficient: bool = True, enable_cudnn: bool = True):
    """torch's deprecated spelling of ``torch.nn.attention.sdpa_kernel``, with its warning."""
    warnings.warn("`torch.backends.cuda.sdp_kernel()` is deprecated. In the future, this "
                  "context manager will be removed. Please see "
                  "`torch.nn.attention.sdpa_kernel()` for the new context manager, with "
                  "updated signature", FutureWarning, stacklevel=2)
    return sdp_kernels(flash=enable_flash, math=enable_math,
                       mem_efficient=enable_mem_efficient, cudnn=enable_cudnn)
