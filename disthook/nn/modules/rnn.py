"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` (stacked, ``batch_first``, bidirectional,
dropout between layers) and their one-step cells, with torch's parameter names, shapes,
initialisation (uniform in +-1/sqrt(hidden_size)), gate order and reprs. Each step is
written with disthook ops; the input's projections for all steps are one product."""
from __future__ import annotations

import math
import numbers
import warnings

from disthook.nn import functional as F
from disthook.nn import init
from disthook.nn.modules.module import Module
from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor, cat, empty, stack, zeros

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---- one step of each kind: (input projection, hidden state(s), weights) -> new state(s) ----

def _rnn_step(nonlinearity):
    def step(xw, h, w_hh, b_hh):
        pre = xw + F.linear(h, w_hh, b_hh)
        return pre.tanh() if nonlinearity == "tanh" else pre.relu()
    return step


def _lstm_step(xw, state, w_hh, b_hh):
    h, c = state
    i, f, g, o = (xw + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_step(xw, h, w_hh, b_hh):
    x_r, x_z, x_n = xw.chunk(3, -1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return (1 - z) * n + z * h


def _step_of(mode: str):
    if mode == "LSTM":
        return _lstm_step
    if mode == "GRU":
        return _gru_step
    return _rnn_step("tanh" if mode == "RNN_TANH" else "relu")


class RNNBase(Module):
    """What RNN, LSTM and GRU share: parameters ``weight_ih_l{k}``, ``weight_hh_l{k}``,
    ``bias_ih_l{k}``, ``bias_hh_l{k}`` (``_reverse`` for the backward direction)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None) -> None:
        super().__init__()
        if not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or \
                isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                          "non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", UserWarning,
                          stacklevel=3)
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError("hidden_size must be an integer greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size:
            raise NotImplementedError("LSTM(proj_size=...) is not supported by disthook")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        gate_size = GATES[mode] * hidden_size
        directions = 2 if bidirectional else 1
        factory = {"device": device, "dtype": dtype}
        self._flat_weights_names = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [("weight_ih", (gate_size, layer_input)),
                          ("weight_hh", (gate_size, hidden_size))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                for name, shape in shapes:
                    setattr(self, name + suffix, Parameter(empty(shape, **factory)))
                    self._flat_weights_names.append(name + suffix)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """torch packs the weights into one buffer for cuDNN; on the CPU it does nothing, and
        nor does disthook (programs call it after loading a model)."""

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    def _weights(self, layer: int, direction: int) -> tuple:
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        get = lambda name: getattr(self, name + suffix) if self.bias or "weight" in name \
            else None  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def _check_input(self, input: Tensor) -> bool:
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got "
                             f"{input.ndim}D input instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")
        return input.ndim == 3

    def _initial(self, hx, batch: int, like: Tensor, batched: bool):
        directions = 2 if self.bidirectional else 1
        shape = (self.num_layers * directions, batch, self.hidden_size)
        if hx is None:
            return zeros(shape, dtype=like.dtype)
        if not batched:
            if hx.ndim != 2:
                raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got "
                                   f"{hx.ndim}-D tensor")
            hx = hx.unsqueeze(1)
        elif hx.ndim != 3:
            raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got "
                               f"{hx.ndim}-D tensor")
        if tuple(hx.shape) != shape:
            raise RuntimeError(f"Expected hidden size {shape}, got {list(hx.shape)}")
        return hx

    def _run(self, x: Tensor, states: list) -> tuple:
        """``x`` (L, N, H_in); ``states`` one per layer and direction. Returns the last
        layer's outputs (L, N, D * H) and the final state of each layer and direction."""
        step = _step_of(self.mode)
        directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(directions):
                w_ih, w_hh, b_ih, b_hh = self._weights(layer, direction)
                projected = F.linear(x, w_ih, b_ih)  # every step's input part at once
                state = states[layer * directions + direction]
                order = range(x.shape[0] - 1, -1, -1) if direction else range(x.shape[0])
                seq = [None] * x.shape[0]
                for t in order:
                    state = step(projected[t], state, w_hh, b_hh)
                    seq[t] = state[0] if self.mode == "LSTM" else state
                outs.append(stack(seq))
                finals.append(state)
            x = outs[0] if directions == 1 else cat([outs[0], outs[1]], -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
        return x, finals

    def forward(self, input: Tensor, hx=None):
        from disthook.nn.utils.rnn import PackedSequence, run_packed

        if isinstance(input, PackedSequence):
            return run_packed(self, input, hx)
        batched = self._check_input(input)
        x = input if batched else input.unsqueeze(1)
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        batch = x.shape[1]
        if self.mode == "LSTM":
            h0, c0 = (None, None) if hx is None else hx
            h0 = self._initial(h0, batch, x, batched)
            c0 = self._initial(c0, batch, x, batched)
            states = list(zip(h0.unbind(0), c0.unbind(0)))
        else:
            states = list(self._initial(hx, batch, x, batched).unbind(0))
        out, finals = self._run(x, states)
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        if self.mode == "LSTM":
            h = stack([s[0] for s in finals])
            c = stack([s[1] for s in finals])
            if not batched:
                return out.squeeze(1), (h.squeeze(1), c.squeeze(1))
            return out, (h, c)
        h = stack(finals)
        if not batched:
            return out.squeeze(1), h.squeeze(1)
        return out, h


class RNN(RNNBase):
    """Elman RNN: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None) -> None:
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             "'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, device=device, dtype=dtype)


class LSTM(RNNBase):
    """Long short-term memory; gates in torch's order (input, forget, cell, output)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit; gates in torch's order (reset, update, new)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)


# ---- cells ------------------------------------------------------------------------------------

class RNNCellBase(Module):
    """One step: parameters ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``."""

    mode = ""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None, *, mode: str | None = None) -> None:
        super().__init__()
        self.mode = mode or type(self).mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        gate_size = GATES[self.mode] * hidden_size
        factory = {"device": device, "dtype": dtype}
        self.weight_ih = Parameter(empty((gate_size, input_size), **factory))
        self.weight_hh = Parameter(empty((gate_size, hidden_size), **factory))
        if bias:
            self.bias_ih = Parameter(empty(gate_size, **factory))
            self.bias_hh = Parameter(empty(gate_size, **factory))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    reset_parameters = RNNBase.reset_parameters

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _check(self, input: Tensor) -> bool:
        if input.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got "
                             f"{input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[-1]} "
                               f"expected {self.input_size}")
        return input.ndim == 2

    def _state(self, hx, input: Tensor, batched: bool) -> Tensor:
        if hx is None:
            return zeros((input.shape[0], self.hidden_size), dtype=input.dtype)
        return hx if batched else hx.unsqueeze(0)

    def forward(self, input: Tensor, hx=None):
        batched = self._check(input)
        x = input if batched else input.unsqueeze(0)
        if self.mode == "LSTM":
            h, c = (None, None) if hx is None else hx
            state = (self._state(h, x, batched), self._state(c, x, batched))
        else:
            state = self._state(hx, x, batched)
        new = _step_of(self.mode)(F.linear(x, self.weight_ih, self.bias_ih), state,
                                  self.weight_hh, self.bias_hh)
        if batched:
            return new
        return tuple(s.squeeze(0) for s in new) if self.mode == "LSTM" else new.squeeze(0)


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, device, dtype,
                         mode="RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU")
        self.nonlinearity = nonlinearity


class LSTMCell(RNNCellBase):
    mode = "LSTM"


class GRUCell(RNNCellBase):
    mode = "GRU"
