"""tensorplay.optim: SGD, Adam, AdamW and lr_scheduler, with torch's update
rules (the same numbers as torch 2.13 step for step, up to float rounding)."""
from tensorplay.optim.optimizer import Optimizer
from tensorplay.optim.sgd import SGD
from tensorplay.optim.adam import Adam, AdamW
from tensorplay.optim import lr_scheduler

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
