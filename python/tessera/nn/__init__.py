"""Modules, layers and losses. ``Module`` is subclassed in Python as in PyTorch: tensors that
require grad and sub-modules assigned as attributes register in the C++ module, so ``to()``,
``state_dict()``, optimizers and the Trainer see them."""
from .. import _C
from . import functional  # noqa: F401

_n = _C.nn
_Base = _n.Module


class _ModuleType(type(_Base)):
    # isinstance(nn.Linear(...), nn.Module) holds although the built-in layers derive from the C++ base.
    def __instancecheck__(cls, obj):
        if cls is Module:
            return isinstance(obj, _Base)
        return super().__instancecheck__(obj)


class Module(_Base, metaclass=_ModuleType):
    """Base class of Python-defined modules: define ``__init__`` (calling ``super().__init__()``) and ``forward``."""

    def __setattr__(self, name, value):
        if isinstance(value, _C.Tensor) and value.requires_grad and value.is_leaf:
            self._set_tensor(name, value, True)
        elif isinstance(value, _Base):
            self._set_child(name, value)
            object.__setattr__(self, name, value)  # keeps the Python object (and its forward) alive
        elif (value is None or isinstance(value, _C.Tensor)) and self._has_tensor(name):
            self._set_tensor(name, value, self._is_parameter(name))
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):  # only reached for names not found the usual way: registered tensors
        return self._get_tensor(name)

    def _has_tensor(self, name):
        try:
            self._get_tensor(name)
            return True
        except AttributeError:
            return False

    def _is_parameter(self, name):
        return any(n == name for n, _ in self.named_parameters())

    def register_parameter(self, name, param):
        self._set_tensor(name, param, True)

    def register_buffer(self, name, tensor):
        self._set_tensor(name, tensor, False)

    def add_module(self, name, module):
        self.__setattr__(name, module)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def modules(self):
        yield self
        for child in self.children():
            if hasattr(child, "modules"):
                yield from child.modules()
            else:
                yield child

    def cuda(self, index=0):
        return self.to(f"cuda:{index}")

    def cpu(self):
        return self.to("cpu")


def Parameter(tensor, requires_grad=True):
    """A leaf that requires grad, sharing ``tensor``'s memory; assigned to a Module it becomes a parameter."""
    return tensor.detach().requires_grad_(requires_grad)


class ModuleList(Module):
    """Sub-modules in a list, registered as "0", "1", ..."""

    def __init__(self, modules=()):
        super().__init__()
        object.__setattr__(self, "_items", [])
        for m in modules:
            self.append(m)

    def append(self, module):
        self.__setattr__(str(len(self._items)), module)
        self._items.append(module)
        return self

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def __getitem__(self, i):
        return self._items[i]


Linear, Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d = _n.Linear, _n.Conv2d, _n.MaxPool2d, _n.AvgPool2d, _n.AdaptiveAvgPool2d
BatchNorm1d, BatchNorm2d, LayerNorm, GroupNorm = _n.BatchNorm1d, _n.BatchNorm2d, _n.LayerNorm, _n.GroupNorm
Dropout, Flatten, Embedding, Sequential = _n.Dropout, _n.Flatten, _n.Embedding, _n.Sequential
ReLU, SiLU, Tanh, Sigmoid, GELU = _n.ReLU, _n.SiLU, _n.Tanh, _n.Sigmoid, _n.GELU
MultiHeadAttention, LSTM, GRU = _n.MultiHeadAttention, _n.LSTM, _n.GRU
Trainer, DataLoader, load_mnist = _n.Trainer, _n.DataLoader, _n.load_mnist
make_mlp, make_cnn = _n.make_mlp, _n.make_cnn
save_safetensors, load_safetensors = _n.save_safetensors, _n.load_safetensors


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction


class CrossEntropyLoss(_Loss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        self.weight, self.ignore_index, self.label_smoothing = weight, ignore_index, label_smoothing

    def forward(self, input, target):
        return functional.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing)


class NLLLoss(_Loss):
    def __init__(self, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return functional.nll_loss(input, target, self.ignore_index, self.reduction)


class MSELoss(_Loss):
    def forward(self, input, target):
        return functional.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return functional.l1_loss(input, target, self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self.pos_weight = pos_weight

    def forward(self, input, target):
        return functional.binary_cross_entropy_with_logits(input, target, self.reduction, self.pos_weight)
