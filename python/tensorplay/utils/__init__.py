"""tensorplay.utils: ``tensorplay.utils.data`` (Dataset, DataLoader, ...)."""
from tensorplay.utils import data  # noqa: F401
