"""Samplers: which dataset indices, in which order, and grouped into batches."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import Generic, TypeVar

__all__ = ["BatchSampler", "RandomSampler", "Sampler", "SequentialSampler",
           "SubsetRandomSampler", "WeightedRandomSampler"]

REPLACEMENT_CHUNK = 32  # indices RandomSampler(replacement=True) draws at a time, as torch


def _fresh_generator():
    """A generator seeded from the default one, as torch's samplers make when given none:
    each epoch draws a new order, reproducible under manual_seed."""
    from disthook.random import Generator, gen

    return Generator().manual_seed(int(gen().integers(0, 2**63 - 1)))


T_co = TypeVar("T_co", covariant=True)


class Sampler(Generic[T_co]):
    """Iterates over dataset indices (or lists of them, for a batch sampler). Generic, as
    torch's: ``Sampler[int]`` is an annotation and a base class."""

    def __init__(self, data_source: Sized | None = None) -> None:
        pass

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SequentialSampler(Sampler[int]):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """A random permutation of the indices (or ``num_samples`` drawn with replacement)."""

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: int | None = None, generator=None) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError("replacement should be a boolean value, but got replacement="
                            f"{self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        from disthook.random import gen

        n = len(self.data_source)
        rng = gen(self.generator if self.generator is not None else _fresh_generator())
        if self.replacement:
            # drawn lazily, REPLACEMENT_CHUNK at a time as torch does: num_samples may be far
            # more than memory holds (minGPT's Trainer asks for 1e10)
            for _ in range(self.num_samples // REPLACEMENT_CHUNK):
                yield from rng.integers(0, n, size=REPLACEMENT_CHUNK).tolist()
            yield from rng.integers(0, n, size=self.num_samples % REPLACEMENT_CHUNK).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from rng.permutation(n).tolist()
        yield from rng.permutation(n).tolist()[:self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices in a random order."""

    def __init__(self, indices, generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        from disthook.random import gen

        rng = gen(self.generator if self.generator is not None else _fresh_generator())
        for i in rng.permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights, num_samples: int, replacement: bool = True,
                 generator=None) -> None:
        import numpy as np

        if not isinstance(num_samples, int) or isinstance(num_samples, bool) \
                or num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError("replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        self.weights = np.asarray(weights, dtype=np.float64).reshape(-1)
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        from disthook.random import gen

        rng = gen(self.generator if self.generator is not None else _fresh_generator())
        p = self.weights / self.weights.sum()
        yield from rng.choice(len(p), size=self.num_samples, replace=self.replacement,
                              p=p).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list]):
    """Groups the indices of ``sampler`` into lists of ``batch_size``."""

    def __init__(self, sampler: Sampler | Iterable, batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError("batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError("drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
