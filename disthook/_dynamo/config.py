"""``torch._dynamo.config``: the settings scripts set before ``torch.compile``, at torch's
defaults. disthook compiles nothing, so they change nothing; a name torch does not have is
torch's AttributeError, so a misspelt setting still fails."""
from __future__ import annotations

import sys
import types


class KnownSettings(types.ModuleType):
    """A settings module: its own names can be set, others are refused in torch's words."""

    def __setattr__(self, name: str, value) -> None:
        if not name.startswith("__") and name not in self.__dict__:
            raise AttributeError(f"torch.{self.__name__.partition('.')[2]}.{name} does not "
                                 "exist")
        super().__setattr__(name, value)


suppress_errors = False
verbose = False
cache_size_limit = 8
recompile_limit = 8
accumulated_cache_size_limit = 256
capture_scalar_outputs = False
capture_dynamic_output_shape_ops = False
optimize_ddp = True
automatic_dynamic_shapes = True
assume_static_by_default = True

sys.modules[__name__].__class__ = KnownSettings
