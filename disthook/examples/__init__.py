"""Runnable examples; ``python -m disthook.examples.<name>``."""
