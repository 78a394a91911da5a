#!/usr/bin/env python3
"""Loss and throughput curves from `tessera train --metrics run.jsonl` files, as one PNG.

    perf/plot_metrics.py run.jsonl [other.jsonl ...] --out curves.png

Each file is one curve (labelled by its name): the loss per optimizer step on the left, the
throughput (samples/s or tokens/s) on the right. Steps whose loss was not finite are gaps.
"""
import argparse
import json
import os
import sys


def load(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON line ({e})")
    if not rows:
        sys.exit(f"{path}: no steps")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", nargs="+", help="--metrics JSON Lines files")
    ap.add_argument("--out", required=True, help="the PNG to write")
    args = ap.parse_args()
    runs = [(os.path.basename(p), load(p)) for p in args.metrics]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (loss_ax, speed_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for label, rows in runs:
        steps = [r["step"] for r in rows]
        loss_ax.plot(steps, [r["loss"] if r["loss"] is not None else float("nan") for r in rows], label=label)
        key = next((k for k in rows[0] if k.endswith("_per_s")), None)
        if key:
            speed_ax.plot(steps, [r[key] for r in rows], label=label)
            speed_ax.set_ylabel(key.replace("_per_s", "/s"))
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("training loss")
    loss_ax.grid(alpha=0.3)
    speed_ax.set_xlabel("step")
    speed_ax.grid(alpha=0.3)
    loss_ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: {len(runs)} run(s), {sum(len(r) for _, r in runs)} steps")


if __name__ == "__main__":
    main()
