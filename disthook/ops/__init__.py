"""Differentiable ops by family; each op is one class with forward and backward together."""
