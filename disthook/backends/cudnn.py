"""``torch.backends.cudnn``: not available; its flags are kept and ignored."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    return False


def version():
    return None
