"""Gradient mode switches: ``no_grad`` and ``enable_grad`` work as context managers and decorators."""
import functools

from . import _C

is_grad_enabled = _C.is_grad_enabled


class _GradModeBase:
    enabled = True

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        _C.set_grad_enabled(self.enabled)
        return self

    def __exit__(self, *exc):
        _C.set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradModeBase):
    """No graph is recorded inside (evaluation, in-place parameter updates)."""
    enabled = False


class enable_grad(_GradModeBase):
    """Recording back on inside a ``no_grad`` region."""
    enabled = True


class set_grad_enabled(_GradModeBase):
    """``with set_grad_enabled(training): ...``; calling it alone also sets the mode."""

    def __init__(self, mode):
        self.enabled = bool(mode)
        self._previous = _C.is_grad_enabled()
        _C.set_grad_enabled(self.enabled)

    def __enter__(self):
        return self
