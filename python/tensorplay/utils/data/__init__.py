"""tensorplay.utils.data: torch.utils.data's datasets, samplers and
DataLoader for in-process loading (``num_workers`` is accepted and the
batches are still made in the calling process, in the same order).

Names: Dataset, IterableDataset, TensorDataset, Subset, ConcatDataset,
StackDataset, random_split, Sampler, SequentialSampler, RandomSampler,
SubsetRandomSampler, WeightedRandomSampler, BatchSampler, DataLoader,
default_collate, default_convert, get_worker_info."""
from tensorplay.utils.data.dataset import (Dataset, IterableDataset, TensorDataset, Subset,
                                           ConcatDataset, StackDataset, random_split)
from tensorplay.utils.data.sampler import (Sampler, SequentialSampler, RandomSampler,
                                           SubsetRandomSampler, WeightedRandomSampler,
                                           BatchSampler)
from tensorplay.utils.data.dataloader import (DataLoader, default_collate, default_convert,
                                              get_worker_info)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "StackDataset", "random_split", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "DataLoader",
           "default_collate", "default_convert", "get_worker_info"]
