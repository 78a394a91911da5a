"""Mixed precision: ``autocast`` (bf16 or f16 matmuls and convolutions, f32 elsewhere) and ``GradScaler``."""
from . import _C

GradScaler = _C.amp.GradScaler


def autocast(device_type="cpu", dtype=None, enabled=True):
    """``with tessera.amp.autocast(dtype=tessera.bfloat16): loss = model(x) ...``.

    ``device_type`` is accepted for PyTorch compatibility; autocast applies to every device.
    """
    del device_type
    return _C.amp.autocast(dtype, enabled)
