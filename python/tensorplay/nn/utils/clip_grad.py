"""Gradient clipping, torch.nn.utils.clip_grad's functions and numbers.

The total norm is the norm of the per-tensor norms (so the same as the norm
of all gradients concatenated); gradients are scaled in place by
min(1, max_norm / (total_norm + 1e-6)), computed as a tensor so that no
Python float is read (the call stays traceable and never syncs a device)."""
import math

import tensorplay as _tp

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm",
           "clip_grads_with_norm_"]


def _as_list(tensors):
    if isinstance(tensors, _tp.Tensor):
        return [tensors]
    return list(tensors)


def _norm_type(norm_type):
    if isinstance(norm_type, str):
        if norm_type.lower() in ("inf", "infinity"):
            return math.inf
        raise ValueError(f"norm_type must be a number or 'inf', got {norm_type!r}")
    return float(norm_type)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The norm of the norms of ``tensors`` (a Tensor or an iterable of them,
    usually gradients; None entries are skipped).

    Returns a 0-d float tensor (``tensor(0.)`` when there are none).
    Raises RuntimeError when ``error_if_nonfinite`` and the norm is nan/inf."""
    ts = [t for t in _as_list(tensors) if t is not None]
    p = _norm_type(norm_type)
    if not ts:
        return _tp.tensor(0.0)
    with _tp.no_grad():
        norms = [t.norm(p) for t in ts]
        dev = ts[0].device
        total = (_tp.stack([n.to(dev) for n in norms]).norm(p) if len(norms) > 1
                 else norms[0].clone())
    if error_if_nonfinite and bool(_tp.logical_or(total.isnan(), total.isinf())):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the ``.grad`` of ``parameters`` in place by
    min(1, max_norm / (total_norm + 1e-6)); ``total_norm`` a 0-d tensor
    (get_total_norm's result). Returns None."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    with _tp.no_grad():
        coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype) if g.dtype != coef.dtype else coef)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Clip the gradient norm of ``parameters`` (a Tensor or an iterable of
    tensors whose ``.grad`` is set) to at most ``max_norm``, in place.

    ``norm_type``: a float p or 'inf'. Returns the total norm of the
    gradients before clipping, a 0-d float tensor. Raises RuntimeError when
    ``error_if_nonfinite`` and that norm is nan or inf."""
    params = _as_list(parameters)
    total = get_total_norm([p.grad for p in params], norm_type, error_if_nonfinite)
    clip_grads_with_norm_(params, max_norm, total)
    return total


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                   foreach=None):
    """Deprecated alias of clip_grad_norm_ (torch warns the same way)."""
    import warnings
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
                  "`torch.nn.utils.clip_grad_norm_`.", FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every ``.grad`` of ``parameters`` to [-clip_value, clip_value]
    in place. Returns None."""
    v = float(clip_value)
    with _tp.no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-v, max=v)
