"""``torch.utils.data``: datasets, samplers, collation and the DataLoader.

Loading happens in the calling process: ``num_workers > 0`` is accepted with a warning
and loads in-process (see ``DataLoader``).
"""
from disthook.utils.data.collate import default_collate, default_convert
from disthook.utils.data.dataloader import DataLoader, get_worker_info
from disthook.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from disthook.utils.data.distributed import DistributedSampler
from disthook.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset",
    "DistributedSampler",
    "IterableDataset", "RandomSampler", "Sampler", "SequentialSampler", "StackDataset",
    "Subset", "SubsetRandomSampler", "TensorDataset", "WeightedRandomSampler",
    "default_collate", "default_convert", "get_worker_info", "random_split",
]
