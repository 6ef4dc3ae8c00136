"""``torch.utils.model_zoo``: the older name of hub's checkpoint download."""
from disthook.hub import load_state_dict_from_url as load_url

__all__ = ["load_url"]
__disthook_partial__ = True  # its other public torch names refuse at use
