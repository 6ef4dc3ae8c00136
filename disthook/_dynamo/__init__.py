"""``torch._dynamo``: what compiled programs call on it (its settings, ``reset()``, shape
markers). disthook compiles nothing (``torch.compile`` runs eagerly), so each does nothing."""
from disthook._dynamo import config, eval_frame  # noqa: F401  (torch._dynamo.eval_frame.X)
from disthook.compiler import allow_in_graph, assume_constant_result, disable, is_compiling, reset

__all__ = ["allow_in_graph", "assume_constant_result", "config", "disable", "graph_break",
           "is_compiling", "mark_dynamic", "mark_static", "maybe_mark_dynamic", "reset"]


def mark_dynamic(t, index, *, min=None, max=None) -> None:
    """Nothing is traced, so no dimension needs marking."""


def maybe_mark_dynamic(t, index) -> None:
    """Nothing is traced, so no dimension needs marking."""


def mark_static(t, index=None) -> None:
    """Nothing is traced, so no dimension needs marking."""


def graph_break() -> None:
    """There is no graph to break."""
