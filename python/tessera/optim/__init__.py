"""Optimizers over the engine's fused update kernels: SGD, Adam, AdamW, RMSprop."""
from .. import _C

Optimizer = _C.optim.Optimizer
SGD = _C.optim.SGD
Adam = _C.optim.Adam
AdamW = _C.optim.AdamW
RMSprop = _C.optim.RMSprop
clip_grad_norm_ = _C.optim.clip_grad_norm_

from . import lr_scheduler  # noqa: E402,F401
