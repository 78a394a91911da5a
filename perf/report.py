#!/usr/bin/python3
"""Merge `tessera bench --json` files (one per machine/run) into a markdown table and one PNG
chart per suite, backends and machines side by side.

    perf/report.py docs/bench/*.json --markdown docs/bench/latest.md --charts docs/bench
    perf/report.py run1.json run2.json run3.json --median-out merged.json   (repeated runs of one
        machine and kernel set -> one record per case, each number the median over the runs)

Throughput is GFLOP/s for FLOP workloads, GB/s for bandwidth workloads and calls/s otherwise;
the table also shows % of peak and the ratio to the peer measured in the same run.
"""
import argparse
import json
import os
import sys
from collections import OrderedDict


def load(paths):
    records = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        # tessera-bench/1: {"schema", "system", "records"}; earlier files: the records alone.
        if isinstance(data, dict) and str(data.get("schema", "")).startswith("tessera-bench/"):
            data = data["records"]
        if not isinstance(data, list):
            sys.exit(f"report: {path}: expected tessera bench JSON (an object with records, or an array)")
        for r in data:
            if r.get("status") == "wrong":  # the correctness gate failed it: no timings to report
                print(f"report: {path}: {r['case']} {r['dtype']} on {r['backend']} is WRONG: {r.get('wrong', '')}", file=sys.stderr)
                continue
            for key in ("suite", "case", "backend", "device", "dtype", "shape", "median_s"):
                if key not in r:
                    sys.exit(f"report: {path}: record without '{key}': {r}")
            r["_source"] = os.path.basename(path)
            records.append(r)
    return records


def throughput(r):
    if r.get("gflops"):
        return r["gflops"], "GFLOP/s"
    if r.get("gbps"):
        return r["gbps"], "GB/s"
    return 1.0 / r["median_s"], "runs/s"


def shape_text(shape):
    return "x".join(str(s) for s in shape)


def case_label(r):
    return f'{r["case"]} {r["dtype"]} {shape_text(r["shape"])}'


def column(r):
    # CPU records name their kernel set: the avx2 and avx512 runs of one machine are two columns.
    kernels = f', {r["cpu_kernels"]}' if r.get("cpu_kernels") else ""
    return f'{r["backend"]} ({r["device"]}{kernels})'


def markdown(records):
    lines = ["| suite | case | dtype | shape | backend (device) | median ms | throughput | % peak | peer | ratio |",
             "|---|---|---|---|---|---:|---:|---:|---|---:|"]
    for r in records:
        value, unit = throughput(r)
        pct = f'{r["pct_of_peak"]:.0f}%' if r.get("pct_of_peak") is not None else ""
        peer = r.get("peer") or ""
        ratio = f'{r["ratio"]:.2f}' if r.get("ratio") is not None else ""
        lines.append(f'| {r["suite"]} | {r["case"]} | {r["dtype"]} | {shape_text(r["shape"])} | {column(r)} | '
                     f'{r["median_s"] * 1e3:.4g} | {value:.4g} {unit} | {pct} | {peer} | {ratio} |')
    return "\n".join(lines) + "\n"


def charts(records, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    suites = OrderedDict()
    for r in records:
        suites.setdefault(r["suite"], []).append(r)
    written = []
    for suite, rs in suites.items():
        cases = list(OrderedDict((case_label(r), None) for r in rs))
        cols = list(OrderedDict((column(r), None) for r in rs))
        peers = list(OrderedDict(((r["peer"], column(r)), None) for r in rs if r.get("peer")))
        series = [(c, {case_label(r): throughput(r)[0] for r in rs if column(r) == c}) for c in cols]
        for peer, col in peers:
            vals = {}
            for r in rs:
                if r.get("peer") == peer and column(r) == col and r.get("ratio"):
                    vals[case_label(r)] = throughput(r)[0] / r["ratio"]
            series.append((f"{peer} beside {col}", vals))
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(cases) * max(1, len(series)) * 0.45 + 2), 4.5))
        width = 0.8 / max(1, len(series))
        for i, (name, vals) in enumerate(series):
            xs = [j + i * width for j, c in enumerate(cases) if c in vals]
            ys = [vals[c] for c in cases if c in vals]
            ax.bar(xs, ys, width, label=name)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
        ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=7)
        units = sorted({throughput(r)[1] for r in rs})
        ax.set_ylabel(" / ".join(units))
        ax.set_yscale("log")
        ax.set_title(f"tessera bench: {suite}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{suite}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def median_of_runs(records):
    """One record per case; every numeric field is the median of that field over the runs."""
    import statistics
    groups = OrderedDict()
    for r in records:
        key = (r["suite"], r["case"], r["backend"], r["device"], r.get("cpu_kernels"), r["dtype"], tuple(r["shape"]), r.get("peer"))
        groups.setdefault(key, []).append(r)
    merged = []
    for rs in groups.values():
        out = {k: v for k, v in rs[0].items() if not k.startswith("_")}
        for k, v in rs[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "threads":
                vals = [r[k] for r in rs if isinstance(r.get(k), (int, float))]
                out[k] = statistics.median(vals)
        out["runs"] = len(rs)
        merged.append(out)
    return merged


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="tessera bench --json files")
    ap.add_argument("--markdown", help="write the table here (default: stdout)")
    ap.add_argument("--charts", help="write one PNG per suite into this directory")
    ap.add_argument("--median-out", help="write the median over the input runs of every case as one JSON file")
    args = ap.parse_args()
    records = load(args.json)
    if args.median_out:
        with open(args.median_out, "w") as f:
            json.dump(median_of_runs(records), f, indent=1)
        return
    table = markdown(records)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    else:
        sys.stdout.write(table)
    if args.charts:
        for path in charts(records, args.charts):
            print(f"report: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
