"""The default run's slice of a sweep (tests/sweeps.py): every combination is still there,
the slice takes every value of every axis, it is the same in every run, and the rest carries
the exhaustive mark."""
import itertools

from sweeps import EXHAUSTIVE, first, product, where


def _kept(params) -> list:
    return [p.values for p in params if EXHAUSTIVE not in p.marks]


def test_product_has_every_combination_and_its_slice_takes_every_value_of_every_axis():
    axes = (["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [True, False])
    params = product(*axes)
    assert [p.values for p in params] == list(itertools.product(*axes))
    kept = _kept(params)
    assert len(kept) == 3
    for n, axis in enumerate(axes):
        assert {values[n] for values in kept} == set(axis)
    assert _kept(product(*axes)) == kept  # the same slice in every run
    assert all(p.marks == (EXHAUSTIVE,) for p in params if p.values not in kept)


def test_product_takes_ids_and_one_axis_is_kept_whole():
    params = product([1, 2], ids=["one", "two"])
    assert [(p.id, p.values) for p in params] == [("one", (1,)), ("two", (2,))]
    assert _kept(params) == [(1,), (2,)]


def test_first_keeps_the_first_values_and_the_marks_a_value_had():
    import pytest

    xfail = pytest.mark.xfail(strict=True, reason="known")
    values = [(0, "a"), pytest.param(0, "b", marks=xfail), (1, "a"), pytest.param(1, "b", marks=xfail)]
    params = first(values, 2, names=2)
    assert params[:2] == values[:2]
    assert params[2].values == (1, "a") and params[2].marks == (EXHAUSTIVE,)
    assert params[3].values == (1, "b") and params[3].marks == (xfail, EXHAUSTIVE)
    assert [p.values for p in first([5, 6, 7], 1)[1:]] == [(6,), (7,)]


def test_where_keeps_the_values_its_rule_picks():
    params = where([(1, 1), (1, 2), (2, 1), (2, 2)], lambda n, pm: pm[0] == pm[1], names=2)
    assert params[0] == (1, 1) and params[3] == (2, 2)
    assert [(p.values, p.marks) for p in params[1:3]] == [((1, 2), (EXHAUSTIVE,)),
                                                          ((2, 1), (EXHAUSTIVE,))]
