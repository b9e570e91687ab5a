"""The torch.linalg functions model code reaches for, installed into
tp.linalg by _torch_api_extra.install (which owns the module and its
cross), written with op-table ops (differentiable, native under
tp.compile): vector_norm, matrix_norm ('fro', 1, -1, inf, -inf; 'nuc' and
2/-2 raise NotImplementedError), norm, vecdot, matmul, multi_dot, diagonal.
Decompositions (svd, qr, eigh, inv, solve, det) are not provided."""
import math

import tensorplay as _tp

__all__ = ["vector_norm", "matrix_norm", "norm", "vecdot", "matmul", "multi_dot", "diagonal"]


def _dims(dim, nd):
    if dim is None:
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """(sum |x|**ord) ** (1/ord) over dim (None: all elements); ord inf/-inf:
    max/min |x|, 0: the count of nonzeros. Float or complex input only
    (torch's error otherwise)."""
    if not x.is_floating_point():
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as "
                           f"input. Got {str(x.dtype).split('.')[-1].capitalize()}")
    if dtype is not None:
        x = x.to(dtype)
    d = _dims(dim, x.dim())
    if d is None:
        a = x.abs().reshape(-1)
        red = (0,)
        if keepdim:
            def fin(r):
                return r.reshape((1,) * x.dim())
        else:
            def fin(r):
                return r
    else:
        a = x.abs()
        red = d

        def fin(r):
            return r
    if ord == math.inf:
        r = a.amax(dim=red, keepdim=keepdim and d is not None)
    elif ord == -math.inf:
        r = a.amin(dim=red, keepdim=keepdim and d is not None)
    elif ord == 0:
        r = (a != 0).to(a.dtype).sum(dim=red, keepdim=keepdim and d is not None)
    elif ord == 1:
        r = a.sum(dim=red, keepdim=keepdim and d is not None)
    elif ord == 2:
        r = (a * a).sum(dim=red, keepdim=keepdim and d is not None).sqrt()
    else:
        r = (a ** ord).sum(dim=red, keepdim=keepdim and d is not None) ** (1.0 / ord)
    return fin(r)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """'fro', 1/-1 (max/min column abs sum), inf/-inf (max/min row abs sum)
    over the two dims. 'nuc' and 2/-2 need an SVD: NotImplementedError.
    Checks in torch's order: dim's type (TypeError), ord (RuntimeError),
    dims' range (IndexError), rank (RuntimeError)."""
    if not isinstance(dim, (list, tuple)) or len(dim) != 2:
        raise TypeError("linalg.matrix_norm(): argument 'dim' must be tuple of ints of 2 "
                        f"elements, not {type(dim).__name__}")
    if ord not in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    nd = A.dim()
    if nd < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 "
                           "dimensions.")
    _check_range(dim, nd)
    if ord in ("nuc", 2, -2):
        raise NotImplementedError(f"tensorplay.linalg.matrix_norm: ord={ord!r} needs singular "
                                  "values (no SVD in tensorplay)")
    if dtype is not None:
        A = A.to(dtype)
    r0, c0 = dim
    if ord == "fro":
        return vector_norm(A, 2, dim=(r0, c0), keepdim=keepdim)
    a = A.abs()
    if ord in (1, -1):
        s = a.sum(dim=r0, keepdim=True)
        r = s.amax(dim=c0, keepdim=True) if ord == 1 else s.amin(dim=c0, keepdim=True)
    else:
        s = a.sum(dim=c0, keepdim=True)
        r = s.amax(dim=r0, keepdim=True) if ord > 0 else s.amin(dim=r0, keepdim=True)
    if not keepdim:
        r = r.squeeze(max(r0 % nd, c0 % nd)).squeeze(min(r0 % nd, c0 % nd))
    return r


def _check_range(dims, nd):
    for d in dims:
        if not -_b_max(nd, 1) <= d < _b_max(nd, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-_b_max(nd, 1)}, {_b_max(nd, 1) - 1}], but got {d})")


def _b_max(a, b):
    return a if a > b else b


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """vector_norm when dim is an int or ord is None over all elements of a
    1-D/any input with dim None; matrix_norm for 2 dims (or a 2-D input
    with ord given)."""
    d = _dims(dim, A.dim())
    if d is not None:
        _check_range(d, A.dim())
    if (d is not None and len(d) == 2) or (d is None and ord is not None and A.dim() == 2):
        return matrix_norm(A, "fro" if ord is None else ord, d or (-2, -1), keepdim, dtype=dtype)
    if ord is not None and d is None and A.dim() != 1:
        raise RuntimeError("linalg.norm: If dim is not specified but ord is, the input must be "
                           f"1D or 2D. Got {A.dim()}D.")
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.norm: If dim is specified, it mut be of length 2 when ord "
                           f"is a string. Got {list(d) if d is not None else d}")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def vecdot(x, y, *, dim=-1):
    """sum(x * y) along dim (complex: x conjugated)."""
    return (x * y).sum(dim)


def matmul(input, other):
    return _tp.matmul(input, other)


def multi_dot(tensors):
    """The matrix product of a list (first/last may be 1-D), left to right."""
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    r = tensors[0]
    for t in tensors[1:]:
        r = _tp.matmul(r, t)
    return r


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    return A.diagonal(offset, dim1, dim2)
