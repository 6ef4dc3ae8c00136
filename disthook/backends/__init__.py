"""``torch.backends``: what a CPU-only build reports. Flags that tune GPU kernels
(``cudnn.benchmark``, ``cuda.matmul.allow_tf32`` ...) can be set and read back, and have no
effect: disthook computes with numpy on the CPU."""
from disthook.backends import cpu, cuda, cudnn, mkldnn, mps, openmp, opt_einsum

__all__ = ["cpu", "cuda", "cudnn", "mkldnn", "mps", "openmp", "opt_einsum"]
