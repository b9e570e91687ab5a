"""parameters_to_vector / vector_to_parameters (torch.nn.utils)."""
import tensorplay as _tp

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters):
    """Concatenate the flattened ``parameters`` into one 1-d tensor (part of
    the autograd graph, as torch's). Raises TypeError for a lone Tensor's
    absence of an iterable only through iteration."""
    return _tp.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of the 1-d ``vec`` into ``parameters``
    (each replaced by a view's values, under no_grad). Raises TypeError when
    ``vec`` is not a Tensor."""
    if not isinstance(vec, _tp.Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    pointer = 0
    with _tp.no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[pointer:pointer + n].view_as(p))
            pointer += n
