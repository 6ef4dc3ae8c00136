from disthook.utils import hooks  # noqa: F401
