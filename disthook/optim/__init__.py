"""``torch.optim``: SGD, Adam and AdamW over disthook tensors, and learning-rate schedules."""
from disthook.optim import lr_scheduler
from disthook.optim.adam import Adam
from disthook.optim.adamw import AdamW
from disthook.optim.optimizer import Optimizer
from disthook.optim.sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "lr_scheduler"]
