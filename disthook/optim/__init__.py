"""``torch.optim``: SGD, Adam, AdamW, Adadelta, Adafactor, Adagrad, Adamax, ASGD, RMSprop, Rprop,
NAdam, RAdam, LBFGS, Muon over disthook tensors, learning-rate schedules and weight averaging
(``swa_utils``)."""
from disthook.optim import lr_scheduler, swa_utils
from disthook.optim._adafactor import Adafactor  # (torch.optim._adafactor)
from disthook.optim._muon import Muon  # (torch.optim._muon)
from disthook.optim.adadelta import Adadelta
from disthook.optim.adagrad import Adagrad
from disthook.optim.adam import Adam
from disthook.optim.adamax import Adamax
from disthook.optim.adamw import AdamW
from disthook.optim.asgd import ASGD
from disthook.optim.lbfgs import LBFGS
from disthook.optim.nadam import NAdam
from disthook.optim.optimizer import Optimizer
from disthook.optim.radam import RAdam
from disthook.optim.rmsprop import RMSprop
from disthook.optim.rprop import Rprop
from disthook.optim.sgd import SGD

__all__ = ["ASGD", "LBFGS", "SGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax",
           "Muon", "NAdam", "Optimizer", "RAdam", "RMSprop", "Rprop", "lr_scheduler", "swa_utils"]
