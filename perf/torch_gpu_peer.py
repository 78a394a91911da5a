#!/usr/bin/env python3
"""PyTorch on the same GPU beside a `tessera bench --json` file: each record whose case has a
PyTorch equivalent here is timed with torch (CUDA events, median of 20 after 5 warm-ups, the
same shapes and dtypes) and printed with the ratio torch_time / tessera_time (above 1: Tessera
is faster), the convention of the bench's own peer column.
  python3 torch_gpu_peer.py bench.json [out.json]
Cases without an equivalent are listed as such, not dropped silently."""
import json
import statistics
import sys

import torch
import torch.nn.functional as F


def timed(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def body(case, dtype, shape):
    """A zero-argument callable doing what the Tessera case does, or None."""
    dev, dt = "cuda", DT.get(dtype, torch.float32)
    r = lambda *s: torch.randn(*s, device=dev, dtype=dt)
    if case == "matmul":
        m, n, k = shape
        a, b = r(m, k), r(k, n)
        return lambda: a @ b
    if case == "mlp_linear_relu":
        b, o, i = shape
        x, w, bias = r(b, i), r(o, i), r(o)
        return lambda: F.relu(F.linear(x, w, bias))
    unary = {"exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "gelu": F.gelu}
    if case in ("add", "mul") or case in unary:
        x, y = r(shape[0]), r(shape[0])
        if case == "add":
            return lambda: x + y
        if case == "mul":
            return lambda: x * y
        f = unary[case]
        return lambda: f(x)
    if case == "add_broadcast_row":
        x, row = r(*shape), r(shape[1])
        return lambda: x + row
    if case in ("bias_gelu", "bias_gelu_two_ops"):
        x, row = r(*shape), r(shape[1])
        return lambda: F.gelu(x + row)
    if case == "sum_all":
        x = r(shape[0])
        return lambda: x.sum()
    if case == "sum_rows":
        x = r(*shape)
        return lambda: x.sum(-1)
    if case == "amax_rows":
        x = r(*shape)
        return lambda: x.amax(-1)
    if case == "softmax":
        x = r(*shape)
        return lambda: torch.softmax(x, -1)
    if case == "layer_norm":
        x, w, b = r(*shape), r(shape[1]), r(shape[1])
        return lambda: F.layer_norm(x, (shape[1],), w, b)
    if case.startswith("conv2d_fwd"):
        b, c, h, w_, o = shape
        x, w = r(b, c, h, w_), r(o, c, 3, 3)
        if case == "conv2d_fwd":
            return lambda: F.conv2d(x, w, padding=1)
        x.requires_grad_(case in ("conv2d_fwd_bwd", "conv2d_fwd_dx"))
        w.requires_grad_(case in ("conv2d_fwd_bwd", "conv2d_fwd_dw"))
        return lambda: F.conv2d(x, w, padding=1).sum().backward()
    if case in ("max_pool2d", "max_pool2d_fwd_bwd"):
        x = r(*shape)
        if case == "max_pool2d":
            return lambda: F.max_pool2d(x, 2)
        x.requires_grad_(True)
        return lambda: F.max_pool2d(x, 2).sum().backward()
    if case == "cross_entropy_fwd_bwd":
        rows, classes = shape
        x = r(rows, classes).requires_grad_(True)
        t = torch.randint(0, classes, (rows,), device=dev)
        return lambda: F.cross_entropy(x, t).backward()
    if case == "dropout_add_fwd_bwd":
        x, res, g = r(shape[0]).requires_grad_(True), r(shape[0]), r(shape[0])
        return lambda: (F.dropout(x, 0.1, True) + res).backward(g)
    if case == "linear_gelu_fwd_bwd":
        t, dm, dff = shape
        x, w, b = r(t, dm).requires_grad_(True), (r(dff, dm) * 0.05).requires_grad_(True), r(dff).requires_grad_(True)
        g = r(t, dff)
        return lambda: F.gelu(F.linear(x, w, b)).backward(g)
    if case == "sdpa_causal_fwd_bwd":
        b, h, t, d = shape
        q, k, v = (r(b, h, t, d).requires_grad_(True) for _ in range(3))
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    return None


def main():
    records = json.load(open(sys.argv[1]))
    records = records.get("records", records) if isinstance(records, dict) else records
    torch.backends.cuda.matmul.allow_tf32 = False  # Tessera's f32 GEMM is full f32
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}; ratio = torch / tessera (above 1: Tessera faster)")
    for rec in records:
        if rec.get("median_s") is None:
            continue
        case, dtype, shape = rec["case"], rec["dtype"], rec["shape"]
        fn = body(case, dtype, shape)
        label = f"{rec['suite']:<11} {case:<22} {dtype:<5} {'x'.join(map(str, shape)):<22}"
        if fn is None:
            print(f"{label} no torch equivalent")
            continue
        ms = timed(fn)
        ours = rec["median_s"] * 1e3
        rows.append({"suite": rec["suite"], "case": case, "dtype": dtype, "shape": shape, "tessera_ms": ours, "torch_ms": ms, "ratio": ms / ours})
        print(f"{label} tessera {ours:9.4f} ms  torch {ms:9.4f} ms  x{ms / ours:.2f}", flush=True)
    if rows:
        ratios = sorted(r["ratio"] for r in rows)
        print(f"# {len(rows)} cases; median ratio x{statistics.median(ratios):.2f}, worst x{ratios[0]:.2f}, best x{ratios[-1]:.2f}")
    if len(sys.argv) > 2:
        json.dump(rows, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()
