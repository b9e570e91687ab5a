"""Names that typical PyTorch scripts touch in their first lines and that
tensorplay lacked (users helper, session 6): the constants tp.inf / nan /
pi / e; set_float32_matmul_precision (nanoGPT's first call) and the
tp.backends flags; meshgrid, tensordot, kron, cross, isin, tril_indices /
triu_indices; tp.special's common aliases; nn.utils.rnn.pad_sequence;
tp.utils.checkpoint; and torch's module paths tensorplay.nn.parameter,
tensorplay.nn.modules.module / .loss for `from torch.nn.parameter import
Parameter`.

The tensor functions are composites of op-table ops (views, expand,
reshape, matmul, comparisons): eager on the ops' kernels, native and
differentiable when traced."""
import math
import sys
import types
import warnings

from tensorplay import _C


def _tp():
    import tensorplay
    return tensorplay


# ------------------------------------------------------------ matmul precision, backends

_MATMUL_PRECISION = ["highest"]


def set_float32_matmul_precision(precision):
    """torch's setting ("highest", "high", "medium"): recorded and returned
    by get_float32_matmul_precision. Float32 matmuls here always compute in
    float32 ("highest"), which every setting allows. Another string warns
    and changes nothing, as torch."""
    if precision not in ("highest", "high", "medium"):
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      f"setFloat32MatmulPrecision call has no effect.", UserWarning,
                      stacklevel=2)
        return
    _MATMUL_PRECISION[0] = precision


def get_float32_matmul_precision():
    return _MATMUL_PRECISION[0]


def _backends():
    b = types.ModuleType("tensorplay.backends",
                         "torch.backends' flags, accepted and recorded (no cuDNN, MPS or "
                         "TF32 here).")
    cudnn = types.ModuleType("tensorplay.backends.cudnn")
    cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = True, False, False, True
    cudnn.is_available = lambda: False
    cudnn.version = lambda: None
    cuda = types.ModuleType("tensorplay.backends.cuda")
    cuda.matmul = types.SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                                        allow_bf16_reduced_precision_reduction=True)
    cuda.is_built = lambda: True
    mps = types.ModuleType("tensorplay.backends.mps")
    mps.is_available = lambda: False
    mps.is_built = lambda: False
    b.cudnn, b.cuda, b.mps = cudnn, cuda, mps
    return b


# ------------------------------------------------------------ tensor functions

def meshgrid(*tensors, indexing=None):
    """Coordinate grids of 0/1-D tensors: each input viewed along its own dim
    and expanded to the grid (views, as torch). indexing "ij" (the default,
    with torch's warning when not given) or "xy" (the first two dims
    swapped)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the "
                      "indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but "
                           f"received: {indexing}")
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.dim() > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but "
                               f"got: {t}")
    if any(t.dtype != tensors[0].dtype for t in tensors):
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    ts = [t.reshape(-1) for t in tensors]
    swap = indexing == "xy" and len(ts) >= 2
    order = list(range(len(ts)))
    if swap:
        order[0], order[1] = 1, 0
    shape = [int(ts[i].shape[0]) for i in order]
    out = []
    for i, t in enumerate(ts):
        pos = order.index(i)
        view = [1] * len(ts)
        view[pos] = shape[pos]
        out.append(t.reshape(view).expand(shape))
    return tuple(out)


def tensordot(a, b, dims=2, out=None):
    """Contraction of a's last / b's first `dims` dims (an int) or of the
    dims listed ([dims_a, dims_b]), as one matmul of the permuted,
    flattened operands."""
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da = list(range(a.dim() - dims, a.dim()))
        db = list(range(dims))
    else:
        da, db = dims
        if hasattr(da, "tolist"):
            da, db = da.tolist(), db.tolist()
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    da = [d % max(a.dim(), 1) for d in da]
    db = [d % max(b.dim(), 1) for d in db]
    for x, y in zip(da, db):
        if int(a.shape[x]) != int(b.shape[y]):
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{int(a.shape[x])} in dim {x} and second has size "
                               f"{int(b.shape[y])} in dim {y}")
    fa = [d for d in range(a.dim()) if d not in da]
    fb = [d for d in range(b.dim()) if d not in db]
    k = 1
    for d in da:
        k *= int(a.shape[d])
    m = 1
    for d in fa:
        m *= int(a.shape[d])
    n = 1
    for d in fb:
        n *= int(b.shape[d])
    r = a.permute(fa + da).reshape(m, k) @ b.permute(db + fb).reshape(k, n)
    r = r.reshape([int(a.shape[d]) for d in fa] + [int(b.shape[d]) for d in fb])
    if out is not None:
        from tensorplay._ops import _out_copy
        return _out_copy(out, r, "tensordot")
    return r


def kron(input, other):
    """The Kronecker product: result[i * other.shape + j] = input[i] *
    other[j] over every dim (the fewer dims padded with leading 1s)."""
    nd = max(input.dim(), other.dim())
    a = input.reshape((1,) * (nd - input.dim()) + tuple(int(s) for s in input.shape))
    b = other.reshape((1,) * (nd - other.dim()) + tuple(int(s) for s in other.shape))
    sa, sb = [int(s) for s in a.shape], [int(s) for s in b.shape]
    va, vb = [], []
    for x, y in zip(sa, sb):
        va += [x, 1]
        vb += [1, y]
    return (a.reshape(va) * b.reshape(vb)).reshape([x * y for x, y in zip(sa, sb)])


def cross(input, other, dim=None):
    """The cross product of 3-vectors along dim (None: the first dim of
    size 3, with torch's warning; linalg.cross: -1). Inputs of the same
    number of dims broadcast (different numbers: RuntimeError, as torch)."""
    tp = _tp()
    if input.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    a, b = tp.broadcast_tensors(input, other)
    nd = a.dim()
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\n"
                      "Please either pass the dim explicitly or simply use torch.linalg.cross.\n"
                      "The default value of dim will change to agree with that of "
                      "linalg.cross in a future release.", UserWarning, stacklevel=2)
        dim = next((d for d in range(nd) if int(a.shape[d]) == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    d = dim % max(nd, 1)
    if int(a.shape[d]) != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{int(input.shape[d]) if input.dim() == nd else 1} and "
                           f"{int(other.shape[d]) if other.dim() == nd else 1}")
    a1, a2, a3 = (a.narrow(d, i, 1) for i in range(3))
    b1, b2, b3 = (b.narrow(d, i, 1) for i in range(3))
    return tp.cat([a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1], d)


def linalg_cross(input, other, *, dim=-1):
    return cross(input, other, dim)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element of `elements` is in `test_elements` (either may
    be a scalar): a comparison against every test element, any() over
    them (O(n m))."""
    tp = _tp()
    e = elements if hasattr(elements, "shape") else tp.tensor(elements)
    t = test_elements if hasattr(test_elements, "shape") else tp.tensor(test_elements)
    r = (e.unsqueeze(-1) == t.reshape(-1)).any(-1)
    return r.logical_not() if invert else r


def _tri_indices(row, col, offset, lower, dtype, device):
    import numpy as np
    tp = _tp()
    rows, cols = (np.tril_indices if lower else np.triu_indices)(int(row), int(offset), int(col))
    kw = {"dtype": dtype if dtype is not None else tp.int64}
    if device is not None:
        kw["device"] = device
    return tp.tensor(np.stack([rows, cols]).astype(np.int64).reshape(2, -1), **kw)


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """(2, N) row/column indices of the lower triangle (offset: the diagonal
    above which nothing is taken), in row-major order."""
    return _tri_indices(row, col, offset, True, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(row, col, offset, False, dtype, device)


# ------------------------------------------------------------ nn.utils.rnn, utils.checkpoint

def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """A list of (L_i, *) tensors padded to the longest into (L, B, *)
    ((B, L, *) when batch_first), padding_value at the end ("right") or
    the start ("left") of each."""
    tp = _tp()
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got "
                         f"{padding_side}.")
    seqs = list(sequences)
    if not seqs:
        raise RuntimeError("received an empty list of sequences")
    n = max(int(s.shape[0]) for s in seqs)
    out = []
    for s in seqs:
        k = n - int(s.shape[0])
        if k:
            fill = tp.full((k,) + tuple(int(v) for v in s.shape[1:]), padding_value,
                           dtype=s.dtype, device=s.device)
            s = tp.cat([s, fill] if padding_side == "right" else [fill, s], 0)
        out.append(s)
    return tp.stack(out, 0 if batch_first else 1)


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default",
               debug=False, preserve_rng_state=True, **kwargs):
    """torch.utils.checkpoint.checkpoint: function(*args, **kwargs). Torch
    frees the activations and recomputes them in backward (a memory
    saving); the values and gradients are those of the plain call, which
    is what this computes."""
    return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """The modules (or a Sequential) applied in order to input."""
    mods = list(functions.children()) if hasattr(functions, "children") else list(functions)
    for f in mods:
        input = f(input)
    return input


# ------------------------------------------------------------ installation

def _special(tp):
    s = types.ModuleType("tensorplay.special", "torch.special's common names (aliases).")
    F = tp.functional
    for name, target in (("expit", tp.sigmoid), ("logit", getattr(tp, "logit", None)),
                         ("erf", tp.erf), ("erfc", tp.erfc), ("erfinv", tp.erfinv),
                         ("gammaln", tp.lgamma), ("digamma", tp.digamma),
                         ("psi", tp.digamma), ("polygamma", tp.polygamma),
                         ("xlogy", getattr(tp, "xlogy", None)), ("log1p", tp.log1p),
                         ("expm1", tp.expm1), ("exp2", getattr(tp, "exp2", None)),
                         ("sinc", getattr(tp, "sinc", None)), ("round", tp.round),
                         ("softmax", F.softmax), ("log_softmax", F.log_softmax),
                         ("logsumexp", tp.logsumexp)):
        if target is not None:
            setattr(s, name, target)

    def entr(input):
        """-x log x for x > 0, 0 at 0, -inf below."""
        z = tp.zeros((), dtype=input.dtype)
        safe = tp.where(input > 0, input, tp.ones((), dtype=input.dtype))
        r = tp.where(input > 0, -input * safe.log(), z)
        return tp.where(input < 0, tp.full((), -math.inf, dtype=input.dtype), r)
    s.entr = entr
    return s


def install(tp):
    for name, v in (("inf", math.inf), ("nan", math.nan), ("pi", math.pi), ("e", math.e)):
        if not hasattr(tp, name):
            setattr(tp, name, v)
    for name, fn in (("set_float32_matmul_precision", set_float32_matmul_precision),
                     ("get_float32_matmul_precision", get_float32_matmul_precision),
                     ("meshgrid", meshgrid), ("tensordot", tensordot), ("kron", kron),
                     ("cross", cross), ("isin", isin), ("tril_indices", tril_indices),
                     ("triu_indices", triu_indices)):
        if not hasattr(tp, name):
            setattr(tp, name, fn)
    for name, fn in (("kron", kron), ("cross", cross)):
        if not hasattr(_C.Tensor, name):
            _C._tensor_install(name, fn)
            _C._set_trace_decomposition(name, fn)
    if not hasattr(tp, "backends"):
        tp.backends = _backends()
        sys.modules["tensorplay.backends"] = tp.backends
        for sub in ("cudnn", "cuda", "mps"):
            sys.modules["tensorplay.backends." + sub] = getattr(tp.backends, sub)
    if not hasattr(tp, "special"):
        tp.special = _special(tp)
        sys.modules["tensorplay.special"] = tp.special
    if not hasattr(tp, "linalg"):
        from tensorplay import _linalg_norms
        la = types.ModuleType("tensorplay.linalg", "torch.linalg's cross, vector_norm, "
                              "matrix_norm, norm, vecdot, matmul, multi_dot, diagonal "
                              "(no decompositions).")
        la.cross = linalg_cross
        for name in _linalg_norms.__all__:
            setattr(la, name, getattr(_linalg_norms, name))
        tp.linalg = la
        sys.modules["tensorplay.linalg"] = la
    # nn paths
    nn = tp.nn
    rnn = types.ModuleType("tensorplay.nn.utils.rnn", "torch.nn.utils.rnn's pad_sequence.")
    rnn.pad_sequence = pad_sequence
    nn.utils.rnn = rnn
    sys.modules["tensorplay.nn.utils.rnn"] = rnn
    param = types.ModuleType("tensorplay.nn.parameter", "torch.nn.parameter's Parameter.")
    param.Parameter = nn.Parameter
    nn.parameter = param
    sys.modules["tensorplay.nn.parameter"] = param
    mods = sys.modules["tensorplay.nn.modules"]
    mm = types.ModuleType("tensorplay.nn.modules.module", "torch.nn.modules.module's Module.")
    mm.Module = nn.Module
    loss = types.ModuleType("tensorplay.nn.modules.loss", "torch.nn.modules.loss's classes.")
    for name in dir(nn):
        if name.endswith("Loss") or name == "_Loss":
            setattr(loss, name, getattr(nn, name))
    loss._Loss = mods._Loss
    mods.module, mods.loss = mm, loss
    sys.modules["tensorplay.nn.modules.module"] = mm
    sys.modules["tensorplay.nn.modules.loss"] = loss
    ck = types.ModuleType("tensorplay.utils.checkpoint", checkpoint.__doc__)
    ck.checkpoint, ck.checkpoint_sequential = checkpoint, checkpoint_sequential
    tp.utils.checkpoint = ck
    sys.modules["tensorplay.utils.checkpoint"] = ck
