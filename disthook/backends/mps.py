"""``torch.backends.mps``: Apple's GPU backend, neither built nor available."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
