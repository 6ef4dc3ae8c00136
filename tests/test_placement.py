"""Placement decisions as pure functions: stages' split points, worker choice, micro-batches."""
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from disthook import nn
from disthook.distributed.placement import (
    chains_its_children,
    check_options,
    choose_workers,
    micro_batch_sizes,
    partition,
    split_points,
    split_rows,
)


def stage_totals(sizes, cuts):
    bounds = [0, *cuts, len(sizes)]
    return [sum(sizes[a:b]) for a, b in zip(bounds, bounds[1:])]


def best_largest(sizes, stages):
    """The smallest possible largest stage, by trying every set of cuts."""
    return min(max(stage_totals(sizes, cuts))
               for cuts in itertools.combinations(range(1, len(sizes)), stages - 1))


@pytest.mark.parametrize("sizes, stages", [
    ([10, 10, 10, 10], 2), ([1, 1, 100], 2), ([100, 1, 1, 1], 3), ([5], 1),
    ([3, 1, 4, 1, 5, 9, 2, 6], 3), ([0, 0, 0, 7], 4), ([0, 0, 0], 2), ([7, 2, 2, 7], 4),
])
def test_partition_is_balanced_and_every_stage_gets_a_child(sizes, stages):
    cuts = partition(sizes, stages)
    assert len(cuts) == stages - 1 and cuts == sorted(set(cuts))
    assert all(0 < c < len(sizes) for c in cuts)  # no stage is empty
    assert max(stage_totals(sizes, cuts)) == best_largest(sizes, stages)


def test_partition_refuses_more_stages_than_children_or_none():
    with pytest.raises(ValueError, match="cannot cut 2 children into 3 stages"):
        partition([1, 2], 3)
    with pytest.raises(ValueError, match="need 1 <= stages <= 2"):
        partition([1, 2], 0)


def test_given_split_points_are_checked():
    assert split_points([1, 1, 1, 1], 3, (1, 3)) == [1, 3]
    assert split_points([1, 1, 1, 1], 2) == [2]  # balanced when none are given
    for bad in ([2], [3, 1], [1, 1], [0, 2], [1, 4]):
        with pytest.raises(ValueError, match="must be 2 increasing indices between 1 and 3"):
            split_points([1, 1, 1, 1], 3, bad)


def test_deploy_options_are_checked():
    check_options(2, "1f1b", "params", None, None)
    for kwargs, match in [({"chunks": 0}, "chunks must be a positive int"),
                          ({"chunks": True}, "chunks must be a positive int"),
                          ({"schedule": "zb"},
                           "schedule must be 'gpipe', '1f1b', 'zb-h1' or 'zb-batched'"),
                          ({"balance": "flops"}, "balance must be 'params' or 'time'"),
                          ({"balance": "time"}, "pass sample_input=")]:
        args = {"chunks": 1, "schedule": "gpipe", "balance": "params", "split_points": None,
                "sample_input": None, **kwargs}
        with pytest.raises(ValueError, match=match):
            check_options(**args)
    check_options(1, "gpipe", "time", [1], None)  # split points given: nothing to time


def worker(wid, *stages):
    return SimpleNamespace(id=wid, stages=list(stages))


def test_the_least_loaded_workers_are_chosen_in_registration_order():
    alive = [worker("a", "stage 0 of m"), worker("b"), worker("c"), worker("d", "stage 1 of m")]
    assert [w.id for w in choose_workers(alive, 2, {})] == ["b", "c"]
    # stages this client placed a moment ago count too, once even when also reported
    placed = {"b": {"stage 0 of n", "stage 1 of n"}, "a": {"stage 0 of m"}}
    assert [w.id for w in choose_workers(alive, 3, placed)] == ["c", "a", "d"]
    with pytest.raises(ValueError, match="3 stages need 3 workers; the cluster has 2"):
        choose_workers(alive[:2], 3, {})


@pytest.mark.parametrize("rows, chunks, sizes", [
    (8, 4, [2, 2, 2, 2]), (10, 4, [3, 3, 2, 2]), (3, 3, [1, 1, 1]), (5, 1, [5]),
])
def test_micro_batch_sizes_cut_as_tensor_split_does(rows, chunks, sizes):
    assert micro_batch_sizes(rows, chunks) == sizes
    assert [len(part) for part in np.array_split(np.arange(rows), chunks)] == sizes


def test_split_rows_gives_consecutive_views():
    arr = np.arange(20).reshape(10, 2)
    parts = split_rows(arr, [3, 3, 2, 2])
    assert [p.shape for p in parts] == [(3, 2), (3, 2), (2, 2), (2, 2)]
    np.testing.assert_array_equal(np.concatenate(parts), arr)
    assert all(np.shares_memory(p, arr) for p in parts)


class Skips(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x):
        return self.a(x) + self.b(x)


class Steps(nn.Sequential):
    """A Sequential subclass that keeps Sequential's forward."""

    def extra(self):
        return len(self)


class Shortcut(nn.Sequential):
    def forward(self, x):
        return super().forward(x) + x


def test_what_runs_where_follows_from_the_class_alone_nothing_is_run():
    ran = []

    class Loud(nn.Module):
        def forward(self, x):
            ran.append(x)
            return x

    assert chains_its_children(nn.Sequential(Loud(), nn.Tanh()))
    assert chains_its_children(Steps(nn.Linear(2, 2), Loud()))
    assert not chains_its_children(Shortcut(nn.Linear(2, 2), Loud()))
    assert not chains_its_children(Skips())
    patched = nn.Sequential(nn.Linear(2, 2), Loud())
    patched.forward = lambda x: x  # a forward set on the instance is the one that runs
    assert not chains_its_children(patched)
    assert ran == []


def test_tied_weights_across_stages_are_refused_naming_both():
    from disthook.distributed.placement import check_ties

    emb, head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    stages = [nn.Sequential(emb), nn.Sequential(nn.Tanh(), head)]
    with pytest.raises(ValueError, match=r"0.weight \(stage 0\) and 1.weight \(stage 1\) are "
                                         r"one tensor \(tied weights\)"):
        check_ties(stages)
    check_ties([nn.Sequential(emb, head)])  # in one stage they stay one tensor
