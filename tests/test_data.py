"""torch.utils.data: datasets, samplers, collation, DataLoader, random_split.

Tests taking ``lib`` run under disthook and torch with the same asserts; shuffled orders
differ between the two (different random streams), so those tests check the properties.
"""
from __future__ import annotations

import importlib
from collections import namedtuple

import numpy as np
import pytest
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch


def data_of(lib):
    return importlib.import_module(lib.name + ".utils.data")


def numbers(lib, n=10):
    torch = lib.torch
    return data_of(lib).TensorDataset(torch.arange(n * 2.0).reshape(n, 2), torch.arange(n))


def test_tensor_dataset_and_sequential_batches(lib):
    data = data_of(lib)
    ds = numbers(lib)
    assert len(ds) == 10 and ds[3][1].item() == 3 and ds[3][0].tolist() == [6.0, 7.0]
    loader = data.DataLoader(ds, batch_size=4)
    batches = [(x.shape, y.tolist()) for x, y in loader]
    assert [b[1] for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert tuple(batches[0][0]) == (4, 2) and len(loader) == 3
    loader = data.DataLoader(ds, batch_size=4, drop_last=True)
    assert [y.tolist() for _, y in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]] and len(loader) == 2
    with pytest.raises(AssertionError, match="^Size mismatch between tensors$"):
        data.TensorDataset(lib.torch.ones(3), lib.torch.ones(4))


def test_shuffle_is_a_permutation_and_follows_the_seed(lib):
    torch, data = lib.torch, data_of(lib)
    ds = numbers(lib, 20)

    def epoch(**kwargs):
        return [i for _, y in data.DataLoader(ds, batch_size=6, shuffle=True, **kwargs)
                for i in y.tolist()]

    torch.manual_seed(3)
    first = epoch()
    assert sorted(first) == list(range(20)) and first != list(range(20))
    torch.manual_seed(3)
    assert epoch() == first
    g = torch.Generator()
    g.manual_seed(7)
    with_gen = epoch(generator=g)
    g.manual_seed(7)
    assert epoch(generator=g) == with_gen


def test_batch_size_none_gives_samples_unbatched(lib):
    data = data_of(lib)
    loader = data.DataLoader(numbers(lib, 3), batch_size=None)
    items = list(loader)
    assert len(items) == 3 and items[1][1].item() == 1 and len(loader) == 3


def test_samplers(lib):
    torch, data = lib.torch, data_of(lib)
    ds = numbers(lib, 5)
    assert list(data.SequentialSampler(ds)) == [0, 1, 2, 3, 4]
    assert sorted(data.RandomSampler(ds)) == [0, 1, 2, 3, 4]
    assert len(list(data.RandomSampler(ds, replacement=True, num_samples=12))) == 12
    assert list(data.BatchSampler(range(7), 3, False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(data.BatchSampler(range(7), 3, True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(data.BatchSampler(range(7), 3, False)) == 3
    assert sorted(data.SubsetRandomSampler([4, 2, 9])) == [2, 4, 9]
    picks = list(data.WeightedRandomSampler([0.0, 1.0, 0.0], 5))
    assert picks == [1] * 5
    loader = data.DataLoader(ds, batch_sampler=data.BatchSampler(range(5), 2, False))
    assert [y.tolist() for _, y in loader] == [[0, 1], [2, 3], [4]]
    loader = data.DataLoader(ds, sampler=[4, 3], batch_size=2)
    assert [y.tolist() for _, y in loader] == [[4, 3]]
    with pytest.raises(ValueError, match="^batch_size should be a positive integer value, but "
                       "got batch_size=0$"):
        data.BatchSampler(range(3), 0, False)
    with pytest.raises(ValueError, match="^num_samples should be a positive integer value, "
                       "but got num_samples=0$"):
        data.RandomSampler(ds, num_samples=0)
    assert torch is lib.torch


@pytest.mark.parametrize("kwargs, message", [
    ({"sampler": [0], "shuffle": True}, "sampler option is mutually exclusive with shuffle"),
    ({"batch_sampler": [[0]], "batch_size": 2}, "batch_sampler option is mutually exclusive "
     "with batch_size, shuffle, sampler, and drop_last"),
    ({"batch_size": None, "drop_last": True}, "batch_size=None option disables auto-batching "
     "and is mutually exclusive with drop_last"),
    ({"num_workers": -1}, "num_workers option should be non-negative; use num_workers=0 to "
     "disable multiprocessing."),
    ({"persistent_workers": True}, "persistent_workers option needs num_workers > 0"),
])
def test_dataloader_argument_errors(lib, kwargs, message):
    with pytest.raises(ValueError) as info:
        data_of(lib).DataLoader(numbers(lib), **kwargs)
    assert str(info.value) == message


def test_collate_structures(lib):
    torch, data = lib.torch, data_of(lib)
    collate = data.default_collate
    Point = namedtuple("Point", "x y")
    batch = collate([{"a": torch.ones(2), "n": 1, "f": 0.5, "s": "u", "p": Point(1, 2.0)},
                     {"a": torch.zeros(2), "n": 2, "f": 1.5, "s": "v", "p": Point(3, 4.0)}])
    assert batch["a"].shape == (2, 2) and batch["n"].tolist() == [1, 2]
    assert batch["n"].dtype == torch.int64 and batch["f"].dtype == torch.float64
    assert batch["s"] == ["u", "v"]
    assert type(batch["p"]).__name__ == "Point" and batch["p"].x.tolist() == [1, 3]
    out = collate([np.ones((2, 3), dtype=np.float32), np.zeros((2, 3), dtype=np.float32)])
    assert isinstance(out, torch.Tensor) and out.shape == (2, 2, 3) and out.dtype == torch.float32
    pairs = collate([(torch.ones(1), 0), (torch.ones(1), 1)])
    assert isinstance(pairs, list) and pairs[1].tolist() == [0, 1]
    with pytest.raises(RuntimeError, match="^each element in list of batch should be of equal "
                       "size$"):
        collate([[1, 2], [1]])


def test_iterable_dataset_batches_the_stream(lib):
    data = data_of(lib)

    class Stream(data.IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert [b.tolist() for b in data.DataLoader(Stream(), batch_size=3)] == [[0, 1, 2],
                                                                          [3, 4, 5], [6]]
    assert [b.tolist() for b in data.DataLoader(Stream(), batch_size=3, drop_last=True)] == [
        [0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="^DataLoader with IterableDataset: expected "
                       "unspecified shuffle option, but got shuffle=True$"):
        data.DataLoader(Stream(), shuffle=True)


def test_random_split_and_subset(lib):
    torch, data = lib.torch, data_of(lib)
    ds = numbers(lib, 10)
    a, b = data.random_split(ds, [7, 3], generator=torch.Generator().manual_seed(0))
    assert len(a) == 7 and len(b) == 3
    seen = sorted([a[i][1].item() for i in range(7)] + [b[i][1].item() for i in range(3)])
    assert seen == list(range(10))
    parts = data.random_split(range(10), [0.5, 0.25, 0.25])
    assert [len(p) for p in parts] == [6, 2, 2]  # floor(2.5) twice, the rest to the first
    with pytest.raises(ValueError, match="^Sum of input lengths does not equal the length of "
                       "the input dataset!$"):
        data.random_split(ds, [3, 3])
    sub = data.Subset(ds, [9, 0])
    assert len(sub) == 2 and sub[0][1].item() == 9
    both = ds + sub
    assert len(both) == 12 and both[10][1].item() == 9 and both[-1][1].item() == 0


def test_num_workers_loads_in_process_with_a_warning():
    import disthook
    from disthook.utils.data import DataLoader, get_worker_info

    ds = disthook.utils.data.TensorDataset(disthook.arange(6))
    with pytest.warns(UserWarning, match="^disthook's DataLoader loads data in the main "
                      "process: num_workers=2 is run as num_workers=0"):
        loader = DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True,
                            persistent_workers=True, prefetch_factor=2)
    assert [b.tolist() for (b,) in loader] == [[0, 1, 2, 3], [4, 5]]
    assert get_worker_info() is None


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True),
                                                    (2, 4, False), (12, 4, True)])
def test_distributed_sampler_shares_are_torchs(lib, n, replicas, drop_last):
    module = importlib.import_module(lib.name + ".utils.data.distributed")
    shares = [list(module.DistributedSampler(range(n), num_replicas=replicas, rank=r,
                                             shuffle=False, drop_last=drop_last))
              for r in range(replicas)]
    expected = {(10, 3, False): [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]],
                (10, 3, True): [[0, 3, 6], [1, 4, 7], [2, 5, 8]],
                (2, 4, False): [[0], [1], [0], [1]],
                (12, 4, True): [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]}
    assert shares == expected[(n, replicas, drop_last)]
    shuffled = [module.DistributedSampler(range(12), num_replicas=3, rank=r, seed=5)
                for r in range(3)]
    first = [list(s) for s in shuffled]
    assert sorted(i for share in first for i in share) == list(range(12))
    for s in shuffled:
        s.set_epoch(1)
    assert [list(s) for s in shuffled] != first and len(shuffled[0]) == 4


def test_distributed_sampler_needs_replicas_and_rank(lib):
    module = importlib.import_module(lib.name + ".utils.data.distributed")
    with pytest.raises(ValueError, match="^Default process group has not been initialized"):
        module.DistributedSampler(range(4))
    with pytest.raises(ValueError, match=r"^Invalid rank 3, rank should be in the interval "
                       r"\[0, 2\]$"):
        module.DistributedSampler(range(4), num_replicas=3, rank=3)
