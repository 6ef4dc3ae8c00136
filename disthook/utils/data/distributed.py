"""``DistributedSampler``: each of ``num_replicas`` data-parallel processes reads its own
share of the indices.

disthook has no torch.distributed process group (it splits a model by stages instead), so
``num_replicas`` and ``rank`` must be given; left out, they raise torch's error for an
uninitialised group. Given, the shares are torch's: padded (or cut, with ``drop_last``) to
a multiple of ``num_replicas`` and taken round-robin from one order, shuffled per epoch from
``seed + epoch`` (with disthook's generator, so the order is not torch's).
"""
from __future__ import annotations

import math
from collections.abc import Iterator

from disthook.utils.data.sampler import Sampler, T_co

__all__ = ["DistributedSampler"]

NO_PROCESS_GROUP_MSG = ("Default process group has not been initialized, please make sure "
                        "to call init_process_group.")


class DistributedSampler(Sampler[T_co]):
    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            raise ValueError(NO_PROCESS_GROUP_MSG)
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        from disthook.random import Generator, gen

        n = len(self.dataset)
        if self.shuffle:
            rng = gen(Generator().manual_seed(self.seed + self.epoch))
            indices = rng.permutation(n).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            padding = self.total_size - n
            indices += (indices * math.ceil(padding / n))[:padding] if padding else []
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Shuffle differently in the next epoch (the same order on every replica)."""
        self.epoch = epoch
