"""Parameter sweeps with a representative slice in the default run: the rest of a sweep
carries the ``exhaustive`` mark (``pytest -m exhaustive`` runs it; see README, "Tests and
parity"). The slice is chosen from the values alone, so it is the same in every run, and it
takes every value of every axis at least once, so that no value loses its only test."""
import itertools

import pytest

EXHAUSTIVE = pytest.mark.exhaustive


def product(*axes, ids=None) -> list:
    """Every combination of the axes' values (as ``parametrize`` takes them, the first axis
    first); the default run keeps combination ``i`` for ``i < len(longest axis)`` of the
    diagonal (value ``i % len(axis)`` of each axis), which takes every value of every axis."""
    keep = {tuple(i % len(axis) for axis in axes) for i in range(max(map(len, axes)))}
    made = []
    for n, at in enumerate(itertools.product(*(range(len(axis)) for axis in axes))):
        values = tuple(axis[i] for axis, i in zip(axes, at))
        marks = () if at in keep else (EXHAUSTIVE,)
        made.append(pytest.param(*values, marks=marks, id=None if ids is None else ids[n]))
    return made


def first(values, keep: int, *, names: int = 1) -> list:
    """The first ``keep`` values in the default run, the rest exhaustive (fuzz seeds, rounds);
    ``names``: how many argument names ``parametrize`` is given (a value is then a tuple of
    that many). A value that is already a ``pytest.param`` keeps its own marks."""
    return where(values, lambda n, value: n < keep, names=names)


def where(values, keep, *, names: int = 1) -> list:
    """The values for which ``keep(index, value)`` holds in the default run (the edges of a
    range of sizes, say), the rest exhaustive; ``names`` as for ``first``."""
    made = []
    for n, value in enumerate(values):
        if isinstance(value, type(pytest.param(None))):
            if not keep(n, value.values if names > 1 else value.values[0]):
                value = pytest.param(*value.values, marks=(*value.marks, EXHAUSTIVE),
                                     id=value.id)
        elif not keep(n, value):
            value = pytest.param(*(value if names > 1 else (value,)), marks=EXHAUSTIVE)
        made.append(value)
    return made
