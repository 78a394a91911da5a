#!/usr/bin/env python3
"""Per-op overhead from Python: a 1-element add (tensor + tensor) in Tessera beside PyTorch, in
one run. Prints the median time per call of each and their ratio; --json writes a record.

    PYTHONPATH=build/all/python /usr/bin/python3 python/bench_overhead.py
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

# This script sits beside the package's sources (python/tessera, without the built extension):
# import the built package from PYTHONPATH instead.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import tessera as ts  # noqa: E402


def per_call(fn, calls, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    a, b = ts.ones(1), ts.ones(1)
    cases = {"tessera add": lambda: a + b, "tessera ts.add": lambda: ts.add(a, b), "tessera add scalar": lambda: a + 1.0}
    if torch is not None:
        ta, tb = torch.ones(1), torch.ones(1)
        cases.update({"torch add": lambda: ta + tb, "torch torch.add": lambda: torch.add(ta, tb), "torch add scalar": lambda: ta + 1.0})
    # Interleaved rounds so that both see the same machine state; medians over the rounds.
    times = {name: [] for name in cases}
    for _ in range(3):
        for name, fn in cases.items():
            fn()
            times[name].append(per_call(fn, args.calls, args.repeats))
    medians = {name: statistics.median(v) for name, v in times.items()}
    for name, t in medians.items():
        print(f"{name:20s} {t * 1e6:8.3f} us/call")
    record = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
              "us_per_call": {k: v * 1e6 for k, v in medians.items()}}
    if torch is not None:
        for suffix in ("add", "ts.add|torch.add", "add scalar"):
            mine, theirs = (f"tessera {suffix.split('|')[0]}", f"torch {suffix.split('|')[-1]}")
            ratio = medians[mine] / medians[theirs]
            record[f"ratio {mine} / {theirs}"] = ratio
            print(f"{mine} / {theirs}: {ratio:.2f}x (target <= 2x)")
        record["torch"] = torch.__version__
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()
