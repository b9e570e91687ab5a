"""tensorplay.nn: Module, Parameter, Linear, LayerNorm, BatchNorm1d, ...

``tensorplay.nn.functional`` is the module ``tensorplay.functional``."""
import sys

import tensorplay.functional as functional

sys.modules[__name__ + ".functional"] = functional

from tensorplay.nn.modules import *  # noqa: E402,F401,F403
from tensorplay.nn.container import *  # noqa: E402,F401,F403
from tensorplay.nn.padding import *  # noqa: E402,F401,F403
from tensorplay.nn.conv import *  # noqa: E402,F401,F403
from tensorplay.nn.instancenorm import *  # noqa: E402,F401,F403
from tensorplay.nn.upsampling import *  # noqa: E402,F401,F403
from tensorplay.nn.rnn import *  # noqa: E402,F401,F403
from tensorplay.nn.transformer import *  # noqa: E402,F401,F403
from tensorplay.nn import init  # noqa: E402,F401
from tensorplay.nn import utils  # noqa: E402,F401
from tensorplay.nn import (container as _container, padding as _padding,  # noqa: E402
                           conv as _conv, instancenorm as _inorm, upsampling as _ups,
                           rnn as _rnn, transformer as _transformer)
from tensorplay.nn.modules import __all__ as _mods  # noqa: E402

__all__ = (["functional", "init", "utils"] + list(_mods) + list(_container.__all__)
           + list(_padding.__all__) + list(_conv.__all__) + list(_inorm.__all__)
           + list(_ups.__all__) + list(_rnn.__all__) + list(_transformer.__all__))
