"""``torch.utils.data._utils``: the one part programs import, ``collate``."""
