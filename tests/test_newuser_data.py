"""tensorplay.utils.data as a PyTorch user's input pipeline uses it:
TensorDataset + DataLoader batches (order, sizes, drop_last, shuffle
reproducible under manual_seed), default_collate's types against torch's,
random_split, samplers, IterableDataset batching, torch's option errors,
and Tensor.random_() on int64 (the shuffle's seed draw; it overflowed)."""
import collections

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset,
                                   IterableDataset, RandomSampler, SequentialSampler, Subset,
                                   TensorDataset, WeightedRandomSampler, default_collate,
                                   random_split)

X = tp.arange(20.0).reshape(10, 2)
Y = tp.arange(10)


def test_sequential_batches():
    dl = DataLoader(TensorDataset(X, Y), batch_size=4)
    assert len(dl) == 3
    got = list(dl)
    assert [b[1].tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert isinstance(got[0], list) and got[0][0].shape == (4, 2)
    np.testing.assert_array_equal(got[2][0].numpy(), X[8:].numpy())


def test_shuffle_is_a_permutation_and_reproducible():
    ds = TensorDataset(X, Y)
    tp.manual_seed(1)
    a = [b.tolist() for _, b in DataLoader(ds, batch_size=3, shuffle=True)]
    tp.manual_seed(1)
    b = [b.tolist() for _, b in DataLoader(ds, batch_size=3, shuffle=True)]
    assert a == b and sorted(sum(a, [])) == list(range(10)) and [len(x) for x in a] == [3, 3, 3, 1]
    dl = DataLoader(ds, batch_size=4, shuffle=True, drop_last=True)
    assert len(dl) == 2 and all(len(y) == 4 for _, y in dl)
    e1, e2 = [y.tolist() for _, y in dl], [y.tolist() for _, y in dl]
    assert e1 != e2 or True      # a new order each epoch (may coincide by chance)


def test_generator_controls_order():
    ds = TensorDataset(X, Y)
    o = [[y.tolist() for _, y in DataLoader(ds, batch_size=10, shuffle=True,
                                            generator=tp.Generator().manual_seed(5))]
         for _ in range(2)]
    assert o[0] == o[1]


class Samples(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"x": np.full(2, i, np.float32), "y": i, "f": float(i), "s": str(i),
                "t": (i, i + 1), "b": i % 2 == 0}


def test_default_collate_like_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate as tdc
    samples = [Samples()[i] for i in range(3)]
    got, want = default_collate(samples), tdc(samples)
    for k in ("x", "y", "f", "b"):
        assert str(got[k].dtype).split(".")[1] == str(want[k].dtype).split(".")[1]
        assert got[k].tolist() == want[k].tolist()
    assert got["s"] == want["s"]
    assert [t.tolist() for t in got["t"]] == [t.tolist() for t in want["t"]]
    P = collections.namedtuple("P", "a b")
    r = default_collate([P(1, 2.0), P(3, 4.0)])
    assert type(r) is P and r.a.tolist() == [1, 3] and r.b.dtype == tp.float64
    with pytest.raises(TypeError, match="default_collate: batch must contain"):
        default_collate([object()])
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])


def test_batch_size_none_converts_each_sample():
    s = next(iter(DataLoader(Samples(), batch_size=None)))
    assert isinstance(s["x"], tp.Tensor) and s["y"] == 0 and s["t"] == [0, 1]


def test_random_split_and_subsets():
    ds = TensorDataset(X, Y)
    tr, va = random_split(ds, [0.8, 0.2], generator=tp.Generator().manual_seed(0))
    assert isinstance(tr, Subset) and (len(tr), len(va)) == (8, 2)
    idx = sorted([int(tr[i][1]) for i in range(8)] + [int(va[i][1]) for i in range(2)])
    assert idx == list(range(10))
    a, b, c = random_split(range(10), [0.34, 0.33, 0.33])
    assert (len(a), len(b), len(c)) == (4, 3, 3)
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [3, 3])
    cat = ConcatDataset([ds, ds])
    assert len(cat) == 20 and int(cat[-1][1]) == 9 and int((ds + ds)[12][1]) == 2


def test_samplers():
    assert list(SequentialSampler(range(3))) == [0, 1, 2]
    assert sorted(RandomSampler(range(5))) == [0, 1, 2, 3, 4]
    assert len(list(RandomSampler(range(5), replacement=True, num_samples=40))) == 40
    assert list(BatchSampler(range(5), 2, drop_last=True)) == [[0, 1], [2, 3]]
    assert len(BatchSampler(range(5), 2, drop_last=False)) == 3
    assert list(WeightedRandomSampler([0.0, 0.0, 1.0], 4)) == [2, 2, 2, 2]
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        BatchSampler(range(5), 0, False)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(7))


def test_iterable_dataset():
    assert [t.tolist() for t in DataLoader(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [t.tolist() for t in DataLoader(Stream(), batch_size=3, drop_last=True)] == \
        [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        DataLoader(Stream(), shuffle=True)


def test_option_errors_like_torch():
    ds = TensorDataset(X, Y)
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        DataLoader(ds, sampler=SequentialSampler(ds), shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 2, False), batch_size=2)
    with pytest.raises(ValueError, match="mutually exclusive with drop_last"):
        DataLoader(ds, batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        DataLoader(ds, num_workers=-1)
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        TensorDataset(X, Y[:3])


def test_num_workers_accepted_same_batches():
    ds = TensorDataset(X, Y)
    assert [y.tolist() for _, y in DataLoader(ds, batch_size=4, num_workers=2)] == \
        [y.tolist() for _, y in DataLoader(ds, batch_size=4)]


def test_training_loop_over_loader():
    tp.manual_seed(0)
    x = tp.randn(64, 3)
    y = (x.sum(1) > 0).long()
    m = tp.nn.Linear(3, 2)
    opt = tp.optim.SGD(m.parameters(), lr=0.5)
    for _ in range(5):
        for xb, yb in DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True):
            opt.zero_grad()
            tp.nn.functional.cross_entropy(m(xb), yb).backward()
            opt.step()
    assert (m(x).argmax(1) == y).float().mean().item() > 0.9


def test_random_int64_full_range():
    t = tp.empty((), dtype=tp.int64).random_()
    assert 0 <= t.item() < 2 ** 63
    v = tp.empty(1000, dtype=tp.int32).random_()
    assert int(v.min()) >= 0 and int(v.max()) > 2 ** 24
