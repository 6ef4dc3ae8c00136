"""What ``disthook.save`` / ``disthook.load`` are built from.

``archive``: torch's zip layout (records, bounded reads, aligned writes); ``names``: torch's
global names and disthook's objects, both ways; ``unpickler``: the weights-only and the trusted
unpickler; ``pickler``: pickles in torch's layout; ``disthook_v1``: the format of disthook's
own that earlier versions wrote; ``safetensors``: the safetensors format.
"""
