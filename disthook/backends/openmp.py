"""``torch.backends.openmp``: disthook runs no OpenMP kernels of its own."""


def is_available() -> bool:
    return False
