"""``torch._inductor.config``: the code generator's settings at torch's defaults; they change
nothing here (disthook compiles nothing), and a name torch lacks is its AttributeError."""
import sys
import types

from disthook._dynamo.config import KnownSettings

coordinate_descent_tuning = False
fx_graph_cache = True
freezing = False
max_autotune = False
epilogue_fusion = True
triton = types.SimpleNamespace(unique_kernel_names=True, cudagraphs=False)

sys.modules[__name__].__class__ = KnownSettings
