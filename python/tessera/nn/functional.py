"""torch.nn.functional's names over the engine's fused kernels."""
from .. import _C

_f = _C.nn.functional
globals().update({k: getattr(_f, k) for k in dir(_f) if not k.startswith("_")})
relu, gelu, silu, sigmoid, tanh, softmax, log_softmax = _C.relu, _C.gelu, _C.silu, _C.sigmoid, _C.tanh, _C.softmax, _C.log_softmax
leaky_relu, elu, softplus, selu, mish, hardswish, hardsigmoid = (_C.leaky_relu, _C.elu, _C.softplus, _C.selu, _C.mish,
                                                                 _C.hardswish, _C.hardsigmoid)
