"""``torch.utils.tensorboard``, as torch's behaves where the ``tensorboard`` package is
missing: importing it raises ``ModuleNotFoundError: No module named 'tensorboard'`` (torch's
first line is ``import tensorboard``), which programs catch to run without logging.

disthook has no ``SummaryWriter`` of its own, so where the package is installed the import
still fails, with an ImportError that says so, rather than give a writer that does not write.
"""
import tensorboard  # noqa: F401  # without the package: torch's own ModuleNotFoundError

raise ImportError("disthook does not provide torch.utils.tensorboard's SummaryWriter (the "
                  "tensorboard package is installed, but disthook has no writer for it); log "
                  "with tensorboard's own API from tensor.numpy() values, or leave logging out")
