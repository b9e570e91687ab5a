"""nn.RNN, nn.LSTM, nn.GRU and their cells, with torch's parameters
(weight_ih_l{k}[_reverse] (G, in), weight_hh_l{k}[_reverse] (G, H_out),
bias_ih/bias_hh (G,), weight_hr_l{k} (proj, H) for a projected LSTM; G = 4H,
3H, H), init U(-1/sqrt(H), 1/sqrt(H)) and torch's cell formulas. A layer
is one matmul of the whole input with W_ih, then one step per time index
(matmul with W_hh and pointwise gates), so under tp.compile a sequence of
fixed length is an unrolled native graph. Packed sequences are refused
(NotImplementedError)."""
import math
import numbers
import warnings

import tensorplay as _tp
import tensorplay.functional as F
from tensorplay.nn.modules import Module, Parameter

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


# -- one time step of each cell, torch's formulas (ATen's *_cell)

def _lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr=None, igates=None):
    gates = (F.linear(x, w_ih, b_ih) if igates is None else igates) + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, 1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_cell(x, h, w_ih, w_hh, b_ih, b_hh, igates=None):
    gi = (F.linear(x, w_ih, b_ih) if igates is None else igates).chunk(3, 1)
    gh = F.linear(h, w_hh, b_hh).chunk(3, 1)
    reset = (gi[0] + gh[0]).sigmoid()
    update = (gi[1] + gh[1]).sigmoid()
    new = (gi[2] + reset * gh[2]).tanh()
    return (h - new) * update + new


def _rnn_cell(x, h, w_ih, w_hh, b_ih, b_hh, relu, igates=None):
    pre = (F.linear(x, w_ih, b_ih) if igates is None else igates) + F.linear(h, w_hh, b_hh)
    return pre.relu() if relu else pre.tanh()


def _is_packed(x):
    return type(x).__name__ == "PackedSequence"


class RNNBase(Module):
    """The shared machinery of RNN, LSTM and GRU (torch.nn.RNNBase)."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, "
                          "so non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}")
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: "
                            f"{type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: "
                            f"{type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: "
                            f"{type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        dirs = 2 if bidirectional else 1
        kw = {} if dtype is None else {"dtype": dtype}
        self._flat_weights_names = []
        for layer in range(num_layers):
            for d in range(dirs):
                in_size = input_size if layer == 0 else real_hidden * dirs
                sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
                params = [("weight_ih", (gate_size, in_size)),
                          ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    params += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    params.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in params:
                    setattr(self, name + sfx, Parameter(_tp.empty(*shape, **kw)))
                    self._flat_weights_names.append(name + sfx)
        self.reset_parameters()

    @property
    def all_weights(self):
        """[[w_ih, w_hh, b_ih, b_hh(, w_hr)] per layer and direction]."""
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional
                                                                     else 1))
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i:i + per]]
                for i in range(0, len(names), per)]

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    def flatten_parameters(self):
        """A no-op (torch compacts cuDNN weights here)."""

    def reset_parameters(self):
        """Every weight and bias U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        from tensorplay.nn import init
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def extra_repr(self):
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

    # -- the checks of torch's RNNBase.forward
    def _check_input(self, input):
        w = getattr(self, self._flat_weights_names[0])
        if input.dtype != w.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({w.dtype}). Convert input: input.to({w.dtype}), or convert "
                             f"model: model.to({input.dtype})")
        if input.dim() != 3:
            raise RuntimeError(f"input must have 3 dimensions, got {input.dim()}")
        if self.input_size != input.shape[-1]:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")

    def _expected_hidden(self, input, size):
        batch = input.shape[0] if self.batch_first else input.shape[1]
        return (self.num_layers * (2 if self.bidirectional else 1), batch, size)

    @staticmethod
    def _check_hidden(hx, expected, msg="Expected hidden size {}, got {}"):
        if tuple(hx.shape) != tuple(expected):
            raise RuntimeError(msg.format(tuple(expected), list(hx.shape)))

    def _prepare(self, input, hx, name):
        """(time-major batched input, hx list, unbatched?) after torch's
        rank checks; hx is a tuple of states (one, or LSTM's two)."""
        if _is_packed(input):
            raise NotImplementedError(f"{name}: packed sequences (PackedSequence) are not "
                                      "supported by tensorplay; pass a padded tensor")
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D "
                             + ("tensor instead" if name == "RNN" else "instead"))
        batched = input.dim() == 3
        if not batched:
            input = input.unsqueeze(1 if not self.batch_first else 0)
        return input, batched

    def _run(self, x, states):
        """x (L, N, in) time-major; states: a list per state kind of
        (layers*dirs, N, size) tensors. Returns (output (L, N, dirs*H_out),
        final states in the same layout)."""
        dirs = 2 if self.bidirectional else 1
        per = len(self._flat_weights_names) // (self.num_layers * dirs)
        names = self._flat_weights_names
        seq = x.shape[0]
        finals = [[] for _ in states]
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                ws = [getattr(self, n) for n in names[k * per:(k + 1) * per]]
                w_ih, w_hh = ws[0], ws[1]
                b_ih, b_hh = (ws[2], ws[3]) if self.bias else (None, None)
                w_hr = ws[-1] if self.proj_size > 0 else None
                # the input's gates for every time step: one matmul
                igates = F.linear(layer_in, w_ih, b_ih).unbind(0)
                st = [s[k] for s in states]
                ys = [None] * seq
                order = range(seq - 1, -1, -1) if d == 1 else range(seq)
                for t in order:
                    ig = igates[t]
                    if self.mode == "LSTM":
                        st = list(_lstm_cell(None, st[0], st[1], w_ih, w_hh, None, b_hh,
                                             w_hr, igates=ig))
                    elif self.mode == "GRU":
                        st = [_gru_cell(None, st[0], w_ih, w_hh, None, b_hh, igates=ig)]
                    else:
                        st = [_rnn_cell(None, st[0], w_ih, w_hh, None, b_hh,
                                        self.mode == "RNN_RELU", igates=ig)]
                    ys[t] = st[0]
                outs.append(_tp.stack(ys, 0))
                for f, s in zip(finals, st):
                    f.append(s)
            layer_in = outs[0] if dirs == 1 else _tp.cat(outs, 2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        return layer_in, [_tp.stack(f, 0) for f in finals]

    def _forward(self, input, hx, name, sizes, lstm_msgs=None):
        input, batched = self._prepare(input, hx, name)
        batch_dim = 0 if self.batch_first else 1
        n = input.shape[batch_dim]
        dirs = 2 if self.bidirectional else 1
        if hx is None:
            states = [_tp.zeros(self.num_layers * dirs, n, s, dtype=input.dtype)
                      for s in sizes]
            self._check_input(input)
        else:
            states = list(hx) if len(sizes) == 2 else [hx]
            dims = tuple(s.dim() for s in states)
            want = 3 if batched else 2
            if any(dm != want for dm in dims):
                kind = "batched 3-D" if batched else "unbatched 2-D"
                if len(sizes) == 2:
                    raise RuntimeError(f"For {kind} input, hx and cx should also be "
                                       f"{want}-D but got ({dims[0]}-D, {dims[1]}-D) tensors")
                raise RuntimeError(f"For {kind} input, hx should also be {want}-D but got "
                                   f"{dims[0]}-D tensor")
            if not batched:
                states = [s.unsqueeze(1) for s in states]
            self._check_input(input)
            for i, (s, size) in enumerate(zip(states, sizes)):
                msg = lstm_msgs[i] if lstm_msgs else "Expected hidden size {}, got {}"
                self._check_hidden(s, self._expected_hidden(input, size), msg)
        x = input.transpose(0, 1) if self.batch_first else input
        out, finals = self._run(x, states)
        if self.batch_first:
            out = out.transpose(0, 1)
        if not batched:
            out = out.squeeze(batch_dim)
            finals = [f.squeeze(1) for f in finals]
        return out, finals


class RNN(RNNBase):
    """torch.nn.RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh',
    bias=True, batch_first=False, dropout=0.0, bidirectional=False):
    h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh).
    forward(input (L, N, H_in) / (N, L, H_in) / (L, H_in), h0 (D*layers, N,
    H) or None) -> (output (L, N, D*H), h_n)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.__dict__["nonlinearity"] = args[3]
            args = args[:3] + args[4:]
        else:
            self.__dict__["nonlinearity"] = kwargs.pop("nonlinearity", "tanh")
        nl = self.__dict__["nonlinearity"]
        if nl == "tanh":
            mode = "RNN_TANH"
        elif nl == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nl}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, *args, **kwargs)
        self.nonlinearity = nl

    def forward(self, input, hx=None):
        out, (h,) = self._forward(input, hx, "RNN", [self.hidden_size])
        return out, h


class LSTM(RNNBase):
    """torch.nn.LSTM(input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, proj_size=0).
    forward(input, (h0, c0) or None) -> (output (L, N, D*H_out), (h_n, c_n));
    H_out = proj_size or hidden_size; c has hidden_size."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def forward(self, input, hx=None):
        real = self.proj_size if self.proj_size > 0 else self.hidden_size
        out, (h, c) = self._forward(input, hx, "LSTM", [real, self.hidden_size],
                                    ["Expected hidden[0] size {}, got {}",
                                     "Expected hidden[1] size {}, got {}"])
        return out, (h, c)


class GRU(RNNBase):
    """torch.nn.GRU(input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False).
    forward(input, h0 or None) -> (output (L, N, D*H), h_n)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):
        out, (h,) = self._forward(input, hx, "GRU", [self.hidden_size])
        return out, h


class RNNCellBase(Module):
    """The parameters of a single cell: weight_ih (G, in), weight_hh (G, H),
    bias_ih, bias_hh (G,) unless bias=False."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        kw = {} if dtype is None else {"dtype": dtype}
        self.weight_ih = Parameter(_tp.empty(num_chunks * hidden_size, input_size, **kw))
        self.weight_hh = Parameter(_tp.empty(num_chunks * hidden_size, hidden_size, **kw))
        if bias:
            self.bias_ih = Parameter(_tp.empty(num_chunks * hidden_size, **kw))
            self.bias_hh = Parameter(_tp.empty(num_chunks * hidden_size, **kw))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        from tensorplay.nn import init
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _check(self, x, states, name):
        """ATen's cell checks: input/hidden sizes, batch sizes."""
        if x.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[1]} "
                               f"expected {self.input_size}")
        for i, h in enumerate(states):
            if x.shape[0] != h.shape[0]:
                raise RuntimeError(f"Input batch size {x.shape[0]} doesn't match hidden{i} "
                                   f"batch size {h.shape[0]}")
            if h.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got "
                                   f"{h.shape[1]}, expected {self.hidden_size}")

    def _cell_args(self, input, hx, name, n_states):
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D "
                             "instead")
        if hx is not None:
            if n_states == 1:
                if hx.dim() not in (1, 2):
                    raise ValueError(f"{name}: Expected hidden to be 1D or 2D, got "
                                     f"{hx.dim()}D instead")
            else:
                for i, v in enumerate(hx):
                    if v.dim() not in (1, 2):
                        raise ValueError(f"{name}: Expected hx[{i}] to be 1D or 2D, got "
                                         f"{v.dim()}D instead")
        batched = input.dim() == 2
        if not batched:
            input = input.unsqueeze(0)
        if hx is None:
            z = _tp.zeros(input.shape[0], self.hidden_size, dtype=input.dtype)
            states = [z] * n_states
        else:
            states = [hx] if n_states == 1 else list(hx)
            if not batched:
                states = [s.unsqueeze(0) for s in states]
        self._check(input, states, name)
        return input, states, batched


class RNNCell(RNNCellBase):
    """torch.nn.RNNCell(input_size, hidden_size, bias=True, nonlinearity='tanh'):
    forward(input (N, in) or (in,), hx (N, H) or None) -> h' (N, H)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, (h,), batched = self._cell_args(input, hx, "RNNCell", 1)
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        h = _rnn_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh,
                      self.nonlinearity == "relu")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """torch.nn.LSTMCell(input_size, hidden_size, bias=True): forward(input,
    (h, c) or None) -> (h', c'), each (N, H) (or (H,) unbatched)."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        x, (h, c), batched = self._cell_args(input, hx, "LSTMCell", 2)
        h, c = _lstm_cell(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """torch.nn.GRUCell(input_size, hidden_size, bias=True): forward(input,
    hx or None) -> h' (N, H)."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        x, (h,), batched = self._cell_args(input, hx, "GRUCell", 1)
        h = _gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return h if batched else h.squeeze(0)
