"""``torch.backends.opt_einsum``: the opt_einsum package is not used (numpy's einsum plans
the contraction), as in a torch without it."""

enabled = False
strategy = None


def is_available() -> bool:
    return False
