"""``torch.layout``: how a tensor's elements are laid out. disthook tensors are dense and
strided; the other layouts exist as names so programs can compare against them."""
from __future__ import annotations


class layout:
    """A tensor layout, printed as torch prints it (``torch.strided``)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


def _by_name(name: str) -> layout:
    return LAYOUTS[name]


LAYOUTS = {name: layout(name) for name in (
    "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn",
    "jagged")}
strided = LAYOUTS["strided"]
