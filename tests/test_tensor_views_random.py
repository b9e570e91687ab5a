"""Randomized view chains vs PyTorch: shapes, strides, offsets, values and
which reshapes must copy / which views must fail."""
import random

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def factorizations(n, k, rng):
    dims = []
    for _ in range(k - 1):
        divs = [d for d in range(1, n + 1) if n % d == 0]
        d = rng.choice(divs)
        dims.append(d)
        n //= d
    dims.append(n)
    rng.shuffle(dims)
    return dims


def pick(rng, x):
    """A random view op valid or not for x's metadata, as f(t) for either library."""
    nd = x.dim()
    op = rng.choice(["permute", "transpose", "slice", "select", "unsqueeze", "squeeze",
                     "expand", "view", "reshape", "flatten", "narrow", "diagonal", "t",
                     "unflatten", "movedim"])
    if op == "permute" and nd:
        p = list(range(nd))
        rng.shuffle(p)
        return lambda t: t.permute(p)
    if op == "transpose" and nd:
        a, b = rng.randrange(-nd, nd), rng.randrange(-nd, nd)
        return lambda t: t.transpose(a, b)
    if op == "slice" and nd:
        d = rng.randrange(nd)
        n = x.shape[d]
        s, e, st = rng.randint(-n - 1, n + 1), rng.randint(-n - 1, n + 1), rng.randint(1, 3)
        key = (slice(None),) * d + (slice(s, e, st),)
        return lambda t: t[key]
    if op == "select" and nd and x.shape[0] > 0:
        i = rng.randrange(-x.shape[0], x.shape[0])
        return lambda t: t[i]
    if op == "unsqueeze" and nd < 6:
        d = rng.randint(-nd - 1, nd)
        return lambda t: t.unsqueeze(d)
    if op == "squeeze":
        if nd and rng.random() < 0.5:
            d = rng.randrange(nd)
            return lambda t: t.squeeze(d)
        return lambda t: t.squeeze()
    if op == "expand" and nd:
        sz = [rng.choice([1, 2, 3]) if s == 1 else s for s in x.shape]
        return lambda t: t.expand(*sz)
    if op in ("view", "reshape") and nd and x.numel():
        shape = factorizations(x.numel(), rng.randint(1, 4), rng)
        if rng.random() < 0.3:
            shape[rng.randrange(len(shape))] = -1
        return lambda t: getattr(t, op)(shape)
    if op == "flatten" and nd:
        a = rng.randrange(nd)
        b = rng.randrange(a, nd)
        return lambda t: t.flatten(a, b)
    if op == "narrow" and nd:
        d = rng.randrange(nd)
        n = x.shape[d]
        s = rng.randint(0, n)
        ln = rng.randint(0, n - s)
        return lambda t: t.narrow(d, s, ln)
    if op == "diagonal" and nd >= 2:
        off = rng.randint(-2, 2)
        return lambda t: t.diagonal(off, 0, -1)
    if op == "t" and nd <= 2:
        return lambda t: t.t()
    if op == "unflatten" and nd and x.shape[-1] % 2 == 0:
        return lambda t: t.unflatten(-1, (2, -1))
    if op == "movedim" and nd:
        a, b = rng.randrange(nd), rng.randrange(nd)
        return lambda t: t.movedim(a, b)
    return None


@pytest.mark.parametrize("seed", range(150))
def test_random_view_chains(seed):
    rng = random.Random(seed)
    shape = [rng.randint(0 if rng.random() < 0.1 else 1, 4) for _ in range(rng.randint(0, 4))]
    n = int(np.prod(shape))
    x, y = tp.arange(n).reshape(shape), torch.arange(n).reshape(shape)
    for _ in range(8):
        f = pick(rng, x)
        if f is None:
            continue
        ex = ey = None
        try:
            nx = f(x)
        except Exception as e:  # noqa: BLE001
            ex = e
        try:
            ny = f(y)
        except Exception as e:  # noqa: BLE001
            ey = e
        assert (ex is None) == (ey is None), (ex, ey)
        if ex is not None:
            assert type(ex) is type(ey), (ex, ey)
            continue
        x, y = nx, ny
        assert tuple(x.shape) == tuple(y.shape)
        assert x.stride() == y.stride(), (x.shape, x.stride(), y.stride())
        assert x.storage_offset() == y.storage_offset()
        assert x.tolist() == y.tolist()
        assert x.is_contiguous() == y.is_contiguous()
