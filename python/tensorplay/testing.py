"""tensorplay.testing.assert_close: torch.testing.assert_close's checks,
tolerances and failure messages.

Inputs are tensors (NumPy arrays are taken as tensors), Python numbers,
and sequences / mappings of them, compared element by element (the
message then names the failing item, ``[1]`` or ``['a']``). Tensors must
agree in shape, and unless ``check_dtype=False`` / ``check_device=False`` in
dtype and device; values are close when ``|actual - expected| <= atol +
rtol * |expected|`` (inf equal to the same inf; NaN only with
``equal_nan=True``). Default (rtol, atol) by dtype, the larger of the two
inputs': float16 (1e-3, 1e-5), bfloat16 (1.6e-2, 1e-5), float32 (1.3e-6,
1e-5), float64 (1e-7, 1e-7), integers and bool (0, 0); a Python float
counts as float64, an int as int64."""
import collections.abc

import numpy as np

import tensorplay as _tp

__all__ = ["assert_close"]

_TOLS = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}


def _tol(dt):
    return _TOLS.get(str(dt).split(".")[-1], (0.0, 0.0))


class _Fail(Exception):
    def __init__(self, exc_type, msg):
        super().__init__(msg)
        self.exc_type, self.msg = exc_type, msg


def _diff_line(kind, diff, idx, tol, equality):
    s = f"{kind.title()} difference: {diff}" if idx is None else \
        f"Greatest {kind} difference: {diff} at index {idx}"
    return s + ("" if equality else f" (up to {tol} allowed)") + "\n"


def _mismatch_msg(identifier, extra, abs_diff, abs_idx, rel_diff, rel_idx, rtol, atol):
    equality = rtol == 0 and atol == 0
    msg = f"{identifier} are not {'equal' if equality else 'close'}!\n\n"
    if extra:
        msg += extra.strip() + "\n"
    msg += _diff_line("absolute", abs_diff, abs_idx, atol, equality)
    msg += _diff_line("relative", rel_diff, rel_idx, rtol, equality)
    return msg.strip()


def _scalar_msg(actual, expected, rtol, atol):
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return _mismatch_msg("Scalars", f"Expected {expected} but got {actual}.",
                         abs_diff, None, rel_diff, None, rtol, atol)


def _close_mask(a, e, rtol, atol, equal_nan):
    with np.errstate(invalid="ignore", over="ignore"):
        if a.dtype.kind in "fc":
            ok = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
        elif rtol == 0 and atol == 0:
            ok = a == e
        else:
            ok = np.abs(a.astype(np.float64) - e.astype(np.float64)) <= atol + rtol * np.abs(
                e.astype(np.float64))
    return ok


def _np(t):
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == _tp.bfloat16:
        t = t.float()
    return t.numpy()


def _compare_tensors(actual, expected, rtol, atol, equal_nan, check_device, check_dtype):
    if actual.shape != expected.shape:
        raise _Fail(AssertionError, "The values for attribute 'shape' do not match: "
                    f"{actual.shape} != {expected.shape}.")
    if check_device and actual.device != expected.device:
        raise _Fail(AssertionError, "The values for attribute 'device' do not match: "
                    f"{actual.device} != {expected.device}.")
    if check_dtype and actual.dtype != expected.dtype:
        raise _Fail(AssertionError, "The values for attribute 'dtype' do not match: "
                    f"{actual.dtype} != {expected.dtype}.")
    if rtol is None:
        rtol = max(_tol(actual.dtype)[0], _tol(expected.dtype)[0])
        atol = max(_tol(actual.dtype)[1], _tol(expected.dtype)[1])
    dt = _tp.promote_types(actual.dtype, expected.dtype)
    if dt == _tp.bfloat16:
        dt = _tp.float32
    a, e = _np(actual.to(dt)), _np(expected.to(dt))
    ok = _close_mask(a, e, rtol, atol, equal_nan)
    if ok.all():
        return
    if actual.dim() == 0:
        raise _Fail(AssertionError, _scalar_msg(a.item(), e.item(), rtol, atol))
    af, ef, okf = a.reshape(-1), e.reshape(-1), ok.reshape(-1)
    floating = a.dtype.kind in "fc"
    if not floating:
        af, ef = af.astype(np.int64), ef.astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        abs_diff = np.abs(af - ef)
        abs_diff[okf] = 0
        # torch divides in the floating type (the default dtype for integers)
        rel_diff = (abs_diff / np.abs(ef)) if floating else \
            (abs_diff.astype(np.float32) / np.abs(ef).astype(np.float32))
        rel_diff[okf] = 0
    ia, ir = int(np.argmax(abs_diff)), int(np.argmax(rel_diff))
    shape = tuple(a.shape)
    n = ok.size
    bad = n - int(ok.sum())
    extra = f"Mismatched elements: {bad} / {n} ({bad / n:.1%})"
    raise _Fail(AssertionError, _mismatch_msg(
        "Tensor-likes", extra, abs_diff[ia].item(), tuple(int(i) for i in np.unravel_index(ia, shape)),
        rel_diff[ir].item(), tuple(int(i) for i in np.unravel_index(ir, shape)), rtol, atol))


def _is_number(x):
    return isinstance(x, (bool, int, float, np.number, np.bool_))


def _number_tol(x):
    if isinstance(x, (bool, np.bool_)) or isinstance(x, (int, np.integer)):
        return (0.0, 0.0)
    return _TOLS["float64"]


def _compare(actual, expected, path, kw):
    if isinstance(actual, np.ndarray):
        actual = _tp.as_tensor(actual)
    if isinstance(expected, np.ndarray):
        expected = _tp.as_tensor(expected)
    ta, te = isinstance(actual, _tp.Tensor), isinstance(expected, _tp.Tensor)
    if ta and te:
        try:
            _compare_tensors(actual, expected, kw["rtol"], kw["atol"], kw["equal_nan"],
                             kw["check_device"], kw["check_dtype"])
        except _Fail as f:
            f.path = path
            raise
        return
    if _is_number(actual) and _is_number(expected) and not (ta or te):
        if kw["check_dtype"] and type(actual) is not type(expected) and not (
                isinstance(actual, np.number) or isinstance(expected, np.number)):
            f = _Fail(AssertionError, "The (d)types do not match: "
                      f"{type(actual)} != {type(expected)}.")
            f.path = path
            raise f
        rtol, atol = kw["rtol"], kw["atol"]
        if rtol is None:
            ra, aa = _number_tol(actual)
            re_, ae = _number_tol(expected)
            rtol, atol = max(ra, re_), max(aa, ae)
        a, e = float(actual), float(expected)
        if a == e or (kw["equal_nan"] and a != a and e != e):
            return
        if abs(a - e) <= atol + rtol * abs(e):
            return
        f = _Fail(AssertionError, _scalar_msg(actual, expected, rtol, atol))
        f.path = path
        raise f
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected, collections.abc.Mapping):
        ka, ke = list(actual.keys()), list(expected.keys())
        if set(ka) != set(ke):
            f = _Fail(AssertionError, "The keys of the mappings do not match:\n"
                      f"Missing keys in the actual mapping: {sorted(set(ke) - set(ka), key=str)}\n"
                      f"Additional keys in the actual mapping: {sorted(set(ka) - set(ke), key=str)}")
            f.path = path
            raise f
        for k in ke:
            _compare(actual[k], expected[k], path + [k], kw)
        return
    if (isinstance(actual, collections.abc.Sequence) and not isinstance(actual, str)
            and isinstance(expected, collections.abc.Sequence) and not isinstance(expected, str)
            and not ta and not te):
        if len(actual) != len(expected):
            f = _Fail(AssertionError, "The length of the sequences mismatch: "
                      f"{len(actual)} != {len(expected)}")
            f.path = path
            raise f
        for i, (x, y) in enumerate(zip(actual, expected)):
            _compare(x, y, path + [i], kw)
        return
    f = _Fail(TypeError, "No comparison pair was able to handle inputs of type "
              f"{type(actual)} and {type(expected)}.")
    f.path = path
    raise f


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None,
                 equal_nan=False, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False, msg=None):
    """Raise unless ``actual`` and ``expected`` are close (see the module
    docstring for what is compared and the default tolerances).

    rtol, atol: both or neither (ValueError otherwise). msg: a string that
    replaces the failure message, or a callable given the message and
    returning the new one. check_layout / check_stride / allow_subclasses are
    accepted for torch's signature (tensors here have one layout; strides
    are not compared).

    Raises AssertionError when the values, shapes, dtypes or devices differ;
    TypeError when the inputs are of kinds that cannot be compared."""
    if (rtol is None) != (atol is None):
        raise ValueError("Both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {'rtol' if rtol is None else 'atol'}.")
    kw = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=check_device,
              check_dtype=check_dtype)
    try:
        _compare(actual, expected, [], kw)
    except _Fail as f:
        text = f.msg
        if f.path and f.exc_type is AssertionError:
            text += "\n\nThe failure occurred for item " + "".join(f"[{k!r}]" for k in f.path)
        if msg is not None and f.exc_type is AssertionError:
            text = msg(text) if callable(msg) else msg
        raise f.exc_type(text) from None
