"""Differentiable ops by family; each op is one class with forward and backward together."""


def __getattr__(name: str):
    """``torch.ops.<namespace>``: the operators ``torch.library.custom_op`` made there."""
    from disthook.library import _op_namespace

    return _op_namespace(name)
