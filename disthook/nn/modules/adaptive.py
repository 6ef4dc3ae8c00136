"""``AdaptiveLogSoftmaxWithLoss`` (Grave et al., 2016): frequent classes in a head softmax,
rare ones in clusters reached through the head and projected down by ``div_value``."""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from disthook.nn import functional as F
from disthook.nn.modules.container import ModuleList, Sequential
from disthook.nn.modules.linear import Linear
from disthook.nn.modules.module import Module
from disthook.tensor import Tensor, cat

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    def __init__(self, in_features: int, n_classes: int, cutoffs, div_value: float = 4.0,
                 head_bias: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted "
                             "in an increasing order, where each value is between 1 and "
                             "n_classes-1")
        factory = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value = div_value
        self.head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, **factory)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hidden, bias=False, **factory),
                                        Linear(hidden, size, bias=False, **factory)))

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for down, up in self.tail:
            down.reset_parameters()
            up.reset_parameters()

    def forward(self, input_: Tensor, target_: Tensor) -> _ASMoutput:
        """The log-probability of each target and their negative mean (the loss)."""
        if target_.ndim == 1:
            if input_.shape[0] != target_.shape[0]:
                raise RuntimeError("Input and target should have the same size in the batch "
                                   "dimension.")
            if input_.ndim != 2:
                raise RuntimeError(f"1D target tensor expects 2D input tensors, but found "
                                   f"inputs with size {input_.shape}")
        elif target_.ndim == 0:
            if input_.ndim != 1:
                raise RuntimeError(f"0D target tensor expects 1D input tensors, but found "
                                   f"inputs with size {input_.shape}")
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = target_.ndim > 0
        input = input_ if batched else input_.unsqueeze(0)
        target = (target_ if batched else target_.unsqueeze(0))._data.astype(np.int64)
        if target.size and (target.min() < 0 or target.max() >= self.n_classes):
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but "
                               f"values in range [{target.min()}, {target.max()}] were found. ")
        # which head column each row reads: its class in the shortlist, else its cluster
        cluster = np.searchsorted(np.asarray(self.cutoffs), target, side="right")
        head_column = np.where(cluster == 0, target, self.shortlist_size + cluster - 1)
        head = F.log_softmax(self.head(input), dim=1)
        output = head.gather(1, _index(head_column[:, None])).squeeze(1)
        parts, rows = [], []
        for i in range(1, self.n_clusters + 1):
            chosen = np.nonzero(cluster == i)[0]
            if chosen.size == 0:
                continue
            local = target[chosen] - self.cutoffs[i - 1]
            logprob = F.log_softmax(self.tail[i - 1](input.index_select(0, _index(chosen))), 1)
            parts.append(logprob.gather(1, _index(local[:, None])).squeeze(1))
            rows.append(chosen)
        if parts:
            tail = output.new_zeros(output.shape).scatter(0, _index(np.concatenate(rows)),
                                                          cat(parts))
            output = output + tail
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _get_full_log_prob(self, input: Tensor, head_output: Tensor) -> Tensor:
        head = F.log_softmax(head_output, dim=1)
        pieces = [head[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster = F.log_softmax(self.tail[i](input), dim=1)
            pieces.append(cluster + head[:, self.shortlist_size + i].unsqueeze(1))
        return cat(pieces, dim=1)

    def log_prob(self, input: Tensor) -> Tensor:
        """Log-probabilities of every class, ``(N, n_classes)`` (or ``(n_classes,)``)."""
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        out = self._get_full_log_prob(x, self.head(x))
        return out if batched else out.squeeze(0)

    def predict(self, input: Tensor) -> Tensor:
        """The most likely class of each row."""
        return self.log_prob(input).argmax(dim=-1)


def _index(array: np.ndarray) -> Tensor:
    return Tensor._make(np.ascontiguousarray(array, dtype=np.int64), None, 0)
