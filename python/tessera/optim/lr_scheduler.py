"""Learning-rate schedules with PyTorch's names; ``step()`` once per optimizer step (or epoch).

Each scales the learning rates the optimizer was built with by the schedule's factor.
"""
from .. import _C

_o = _C.optim
LRScheduler = _o.LRScheduler


def StepLR(optimizer, step_size, gamma=0.1):
    return _o.LRScheduler(optimizer, _o.StepSchedule(step_size, gamma))


def MultiStepLR(optimizer, milestones, gamma=0.1):
    return _o.LRScheduler(optimizer, _o.MultiStepSchedule(list(milestones), gamma))


def CosineAnnealingLR(optimizer, T_max, eta_min=0.0):
    base = optimizer.param_groups[0]["lr"]
    return _o.LRScheduler(optimizer, _o.CosineSchedule(T_max, eta_min / base if base else 0.0))


def OneCycleLR(optimizer, total_steps, pct_start=0.3, div_factor=25.0, final_div_factor=1e4):
    return _o.LRScheduler(optimizer, _o.OneCycleSchedule(total_steps, pct_start, div_factor, final_div_factor))


def LinearWarmup(optimizer, warmup_steps, start_factor=0.0):
    return _o.LRScheduler(optimizer, _o.WarmupSchedule(warmup_steps, start_factor))


def chain(optimizer, *schedules):
    """Product of schedules: ``chain(opt, _C.optim.WarmupSchedule(100), _C.optim.CosineSchedule(1000))``."""
    return _o.LRScheduler(optimizer, _o.ChainedSchedule(list(schedules)))
