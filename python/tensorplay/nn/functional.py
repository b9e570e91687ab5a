"""tensorplay.nn.functional: the same module as tensorplay.functional
(tensorplay.nn puts it in sys.modules under this name too)."""
from tensorplay.functional import *  # noqa: F401,F403
from tensorplay.functional import __all__  # noqa: F401
