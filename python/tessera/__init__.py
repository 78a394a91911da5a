"""Tessera from Python: the engine's tensors, autograd, nn, optimizers, Trainer and benchmark.

Every op runs in the C++ engine with the GIL released; tensors share memory with NumPy
(``from_numpy``, ``Tensor.numpy``) and with PyTorch through DLPack (``from_dlpack``).
"""
from . import _C
from ._C import *  # noqa: F401,F403  Tensor, dtype, device, the ops and creation functions
from ._C import Tensor, device, dtype, Error, Generator, __version__  # noqa: F401
# The names above include _C's submodules; the Python packages of the same names replace them.
del nn, optim, amp, bench, distributed  # noqa: F821
from .autograd import no_grad, enable_grad, set_grad_enabled, is_grad_enabled  # noqa: F401
from . import autograd, nn, optim, amp, bench, distributed  # noqa: F401,E402


def is_tensor(obj):
    """True when ``obj`` is a tessera.Tensor."""
    return isinstance(obj, Tensor)


def save(state, path, metadata=None):
    """Writes a dict of tensors (a state_dict) as a safetensors file the C++ side reads."""
    _C.nn.save_safetensors(str(path), dict(state), dict(metadata or {}))


def load(path, device=None):
    """Reads a safetensors file into a dict of tensors (its metadata is dropped; see nn.load_safetensors)."""
    tensors, _ = _C.nn.load_safetensors(str(path), device)
    return tensors
