"""The coordinator process of a disthook cluster (see ../shared/DESIGN.md).

It keeps the registry of workers, places contiguous stages of a model on them, watches
heartbeats and orchestrates checkpoints and recovery; it never carries activations or
gradients. It speaks only the messages of ``disthook.wire``.
"""
