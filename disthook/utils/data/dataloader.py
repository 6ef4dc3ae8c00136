"""``DataLoader``: samples from a dataset, in batches, in the calling process.

disthook loads data in the process that iterates. ``num_workers > 0`` is accepted so that
programs written for torch run unchanged, but it warns once per DataLoader and loads in
process as ``num_workers=0`` would; ``worker_init_fn`` is never called and ``pin_memory``
has no effect (tensors live in CPU memory). Batches are the same as with workers.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Generic

from disthook.utils.data.collate import default_collate, default_convert
from disthook.utils.data.dataset import IterableDataset, T_co
from disthook.utils.data.sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "get_worker_info"]

# torch's type aliases of the two callables (libraries import them: opacus's DPDataLoader)
_collate_fn_t = Callable[[list], Any]
_worker_init_fn_t = Callable[[int], None]

IN_PROCESS_WARNING = (
    "disthook's DataLoader loads data in the main process: num_workers={} is run as "
    "num_workers=0 (same batches, no worker processes, worker_init_fn not called)."
)


def get_worker_info():
    """None: disthook never runs loader workers, so code always sees the main process."""
    return None


class DataLoader(Generic[T_co]):
    """Iterate over ``dataset`` in batches of ``batch_size`` (``None``: one sample at a
    time), in order or shuffled (``generator`` picks the order), through ``collate_fn``."""

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler=None, batch_sampler=None, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True) -> None:
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 "
                             "to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if num_workers > 0:
            warnings.warn(IN_PROCESS_WARNING.format(num_workers), UserWarning, stacklevel=2)

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.in_order = in_order

        if isinstance(dataset, IterableDataset):
            if shuffle not in (False, None):
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                                 f"option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None and not isinstance(dataset, IterableDataset):
            sampler = (RandomSampler(dataset, generator=generator) if shuffle
                       else SequentialSampler(dataset))
        if batch_size is not None and batch_sampler is None and sampler is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation or (
                isinstance(dataset, IterableDataset) and batch_size is not None) \
                else default_convert
        self.collate_fn = collate_fn

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    def __iter__(self):
        if isinstance(self.dataset, IterableDataset):
            return self._iter_stream()
        return self._iter_map()

    def _iter_map(self):
        dataset = self.dataset
        if not self._auto_collation:
            for index in self.sampler:
                yield self.collate_fn(dataset[index])
            return
        getitems = getattr(dataset, "__getitems__", None)
        for indices in self.batch_sampler:
            samples = getitems(indices) if callable(getitems) else [dataset[i] for i in indices]
            yield self.collate_fn(samples)

    def _iter_stream(self):
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self.batch_sampler if self._auto_collation else self.sampler)
