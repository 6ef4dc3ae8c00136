"""The worker process of a disthook cluster (see ../shared/DESIGN.md).

A worker owns one stage of a model: its modules, their parameters and the autograd graph of
each open context. Tensor and module hooks registered on what it owns fire here; client
hooks cross to the client as ``hook_event`` messages of ``disthook.wire``.
"""
