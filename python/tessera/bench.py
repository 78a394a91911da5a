"""``tessera.bench.run(...)``: the benchmark behind ``tessera bench``, records as dicts."""
from . import _C

suites = _C.bench.suites


def run(backends=None, suites=None, quick=False, threads=0, filters=None, json_path=""):
    """Runs the selected suites on the selected backends (every backend with a device when None).

    Each record has suite, name, backend, device, dtype, shape, median_s (and min/max),
    gflops, gbps, pct_of_peak, peer, peer_median_s, ratio (peer time / Tessera time, > 1:
    Tessera faster) and status ("ok", "wrong" or "unchecked").
    """
    return _C.bench.run(list(backends or []), list(suites or []), bool(quick), int(threads), list(filters or []), str(json_path))
