"""``torch.version``: what a CPU-only torch build says about itself. ``cuda`` and ``hip`` are
None, so ``if torch.version.cuda:`` takes the CPU path, as it does there."""
from disthook.torch_version import TORCH_VERSION, TorchVersion

__version__ = TorchVersion(TORCH_VERSION)
cuda = None
hip = None
rocm = None
xpu = None
debug = False
