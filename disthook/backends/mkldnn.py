"""``torch.backends.mkldnn``: not used (numpy's BLAS does the work)."""

enabled = False


def is_available() -> bool:
    return False
