"""torch.utils.data's classes are generic as torch's (``Sampler[int]`` as a base class and an
annotation), and ``torch.utils.data._utils.collate`` imports, with ``collate`` and its
``collate_fn_map``; each program runs the same under torch."""
from __future__ import annotations

import importlib

import pytest


def _program(lib_name):
    lib = pytest.importorskip(lib_name)
    data = importlib.import_module(lib_name + ".utils.data")
    collate_mod = importlib.import_module(lib_name + ".utils.data._utils.collate")

    class EvenIndices(data.Sampler[int]):
        def __init__(self, n: int) -> None:
            self.n = n

        def __iter__(self):
            return iter(range(0, self.n, 2))

        def __len__(self) -> int:
            return (self.n + 1) // 2

    class Squares(data.Dataset[tuple]):
        def __len__(self) -> int:
            return 6

        def __getitem__(self, i):
            return {"x": lib.tensor([float(i)]), "y": i * i}

    def annotated(loader: data.DataLoader[dict], sampler: data.Sampler[int]) -> int:
        return len(sampler)

    loader = data.DataLoader(Squares(), batch_size=2, sampler=EvenIndices(6))
    batches = [(b["x"].numpy().ravel().tolist(), b["y"].tolist()) for b in loader]

    class Point:
        def __init__(self, v) -> None:
            self.v = v

    fn_map = {**collate_mod.default_collate_fn_map,
              Point: lambda batch, *, collate_fn_map=None: [p.v for p in batch]}
    mixed = collate_mod.collate([(Point(1), 2.0), (Point(3), 4.0)], collate_fn_map=fn_map)
    return (batches, annotated(loader, EvenIndices(5)), mixed[0], mixed[1].tolist(),
            collate_mod.default_collate([1, 2]).tolist(),
            issubclass(data.RandomSampler, data.Sampler))


def test_generic_classes_and_collate_map():
    ours = _program("disthook")
    assert ours == ([([0.0, 2.0], [0, 4]), ([4.0], [16])], 3, [1, 3], [2.0, 4.0], [1, 2], True)


def test_same_under_torch():
    assert _program("torch") == _program("disthook")
