"""Map-style and iterable datasets (torch.utils.data.dataset)."""
import bisect
import math
import warnings

import tensorplay as _tp

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "StackDataset", "random_split"]


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__(index)`` and
    usually ``__len__``. ``a + b`` is ConcatDataset([a, b])."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: subclasses define ``__iter__``."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other):
        raise TypeError("ConcatDataset does not support IterableDataset")


class TensorDataset(Dataset):
    """Samples are ``tuple(t[i] for t in tensors)``; every tensor has the
    same size in dim 0 (AssertionError "Size mismatch between tensors"
    otherwise, as torch)."""

    def __init__(self, *tensors):
        assert all(tensors[0].size(0) == t.size(0) for t in tensors), \
            "Size mismatch between tensors"
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


class StackDataset(Dataset):
    """Samples are tuples (positional datasets) or dicts (keyword datasets)
    of the datasets' samples at the same index; lengths must agree
    (ValueError otherwise)."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or``dict``- (via "
                             "``kwargs``) like input/output, but both types are given.")
        ds = args or tuple(kwargs.values())
        if not ds:
            raise ValueError("At least one dataset should be passed")
        self._length = len(ds[0])
        if any(self._length != len(d) for d in ds):
            raise ValueError("Size mismatch between datasets")
        self.datasets = args if args else dict(kwargs)

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self):
        return self._length


class ConcatDataset(Dataset):
    """The datasets one after the other (negative indices count from the
    end; ValueError for an index past either end)."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        assert len(self.datasets) > 0, "datasets should not be an empty iterable"
        for d in self.datasets:
            assert not isinstance(d, IterableDataset), \
                "ConcatDataset does not support IterableDataset"
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        di = bisect.bisect_right(self.cumulative_sizes, idx)
        si = idx if di == 0 else idx - self.cumulative_sizes[di - 1]
        return self.datasets[di][si]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices`` (a sequence of ints)."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping random Subsets of the given
    lengths (ints summing to len(dataset), or fractions summing to 1; the
    remainder of the fractions goes round-robin to the first subsets).

    Raises ValueError when the lengths do not add up. ``generator``: a
    tp.Generator (default: the global one)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            sizes.append(int(math.floor(n * frac)))
        rest = n - sum(sizes)
        for i in range(rest):
            sizes[i % len(sizes)] += 1
        for i, s in enumerate(sizes):
            if s == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an "
                              "empty dataset.")
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _tp.randperm(sum(lengths), generator=generator).tolist()
    out, off = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[off:off + length]))
        off += length
    return out
