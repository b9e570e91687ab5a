"""DataLoader and the default collate (torch.utils.data.dataloader), in
process: ``num_workers`` > 0 is accepted but the batches are made by the
calling process, in the order torch's workers would deliver them.

A TensorDataset batch under the default collate is fetched as one
advanced index per tensor (``t[indices]``), the same values as stacking the
samples one by one, without a Python step per sample."""
import collections
import collections.abc
import itertools

import numpy as np

import tensorplay as _tp
from tensorplay.utils.data.dataset import IterableDataset, TensorDataset
from tensorplay.utils.data.sampler import (BatchSampler, RandomSampler, Sampler,
                                           SequentialSampler)

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]


def get_worker_info():
    """None: the loader runs in the calling process (as torch's does in the
    main process)."""
    return None


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(x, "_fields")


def default_convert(data):
    """One sample as the loader hands it out without batching: NumPy arrays
    and scalars become tensors; containers are converted element-wise."""
    if isinstance(data, _tp.Tensor):
        return data
    if isinstance(data, np.ndarray):
        if data.dtype.kind in "USO":
            return data
        return _tp.as_tensor(data)
    if isinstance(data, np.generic) and not isinstance(data, (np.str_, np.bytes_)):
        return _tp.as_tensor(data)
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        try:
            return type(data)({k: default_convert(v) for k, v in data.items()})
        except TypeError:
            return {k: default_convert(v) for k, v in data.items()}
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


_COLLATE_ERR = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                "lists; found {}")


def default_collate(batch):
    """Put a list of samples into one batch, as torch's default_collate:
    tensors are stacked along a new dim 0 (RuntimeError "stack expects each
    tensor to be equal size" when they differ), NumPy arrays likewise,
    Python floats become a float64 tensor, ints an int64 tensor, bools a
    bool tensor; strings stay a list; dicts, namedtuples, tuples and lists
    are collated field by field (a tuple sample gives a list).

    Raises TypeError for any other element type, RuntimeError when the
    sequences of a batch have different lengths."""
    elem = batch[0]
    if isinstance(elem, _tp.Tensor):
        return _tp.stack(list(batch), 0)
    if isinstance(elem, np.ndarray) and elem.dtype.kind not in "USO":
        return default_collate([_tp.as_tensor(b) for b in batch])
    if isinstance(elem, np.ndarray):
        raise TypeError(_COLLATE_ERR.format(elem.dtype))
    if isinstance(elem, np.generic) and not isinstance(elem, (np.str_, np.bytes_)):
        return _tp.as_tensor(np.asarray(batch))
    if isinstance(elem, bool):
        return _tp.tensor(batch, dtype=_tp.bool)
    if isinstance(elem, float):
        return _tp.tensor(batch, dtype=_tp.float64)
    if isinstance(elem, int):
        return _tp.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        out = {k: default_collate([d[k] for d in batch]) for k in elem}
        try:
            return type(elem)(out)
        except TypeError:
            return out
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        n = len(elem)
        if not all(len(e) == n for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [default_collate(s) for s in transposed]
        try:
            return type(elem)([default_collate(s) for s in transposed])
        except TypeError:
            return [default_collate(s) for s in transposed]
    raise TypeError(_COLLATE_ERR.format(type(elem)))


class DataLoader:
    """Batches of a dataset, as torch.utils.data.DataLoader.

    dataset: a map-style Dataset (``__getitem__``/``__len__``, e.g.
    TensorDataset) or an IterableDataset. batch_size (default 1; None: no
    batching, each sample through default_convert), shuffle (a fresh random
    order each epoch, drawn from ``generator`` or the global stream, so
    tp.manual_seed makes it reproducible), sampler / batch_sampler (custom
    index orders), drop_last, collate_fn (default: default_collate).
    num_workers, pin_memory, timeout, worker_init_fn, prefetch_factor and
    persistent_workers are accepted for torch's signature; loading runs in
    this process.

    Raises ValueError for the option combinations torch refuses (sampler
    with shuffle; batch_sampler with batch_size/shuffle/sampler/drop_last;
    batch_size=None with drop_last; shuffle/sampler with an
    IterableDataset; num_workers < 0)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True):
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
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (False, None):
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"sampler option, but got sampler={sampler}")
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
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)

    def __iter__(self):
        if self._iterable:
            return self._iter_stream()
        return self._iter_map()

    def _fetch(self, indices):
        ds = self.dataset
        if type(ds) is TensorDataset and self.collate_fn is default_collate:
            ix = _tp.tensor(indices, dtype=_tp.int64)
            return [t[ix] for t in ds.tensors]
        items = getattr(ds, "__getitems__", None)
        data = items(indices) if items is not None else [ds[i] for i in indices]
        return self.collate_fn(data)

    def _iter_map(self):
        if self._auto_collation:
            for indices in self.batch_sampler:
                yield self._fetch(list(indices))
        else:
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])

    def _iter_stream(self):
        it = iter(self.dataset)
        if not self._auto_collation:
            for x in it:
                yield self.collate_fn(x)
            return
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield self.collate_fn(batch)


class _InfiniteConstantSampler(Sampler):
    def __iter__(self):
        while True:
            yield None
