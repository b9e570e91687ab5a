"""tensorplay.nn.utils: gradient clipping and flat parameter vectors, as
torch.nn.utils has them (clip_grad_norm_, clip_grad_value_, get_total_norm,
clip_grads_with_norm_, parameters_to_vector, vector_to_parameters)."""
from tensorplay.nn.utils.clip_grad import (clip_grad_norm_, clip_grad_norm, clip_grad_value_,
                                           get_total_norm, clip_grads_with_norm_)
from tensorplay.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm",
           "clip_grads_with_norm_", "parameters_to_vector", "vector_to_parameters"]
