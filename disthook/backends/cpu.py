"""``torch.backends.cpu``: the CPU is disthook's only device."""


def get_cpu_capability() -> str:
    return "DEFAULT"
