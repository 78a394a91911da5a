#!/usr/bin/env python3
"""The same model on every backend of this build: identical weights moved with .to(device),
the outputs compared with the CPU's, and the time of a training step on each.

    PYTHONPATH=build/all/python /usr/bin/python3 examples/python/compare_backends.py
"""
import argparse
import statistics
import time

import tessera as ts


def step_time(model, x, y, steps):
    opt = ts.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        loss = ts.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ts.synchronize(x.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])  # the first step warms the allocator and kernels


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--devices", nargs="*", help="default: every device of this build")
    args = p.parse_args()

    ts.manual_seed(0)
    make = ts.nn.make_mlp if args.model == "mlp" else ts.nn.make_cnn
    reference = make()
    state = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    x, y = ts.rand(args.batch, 1, 28, 28), ts.randint(0, 10, (args.batch,))
    reference.eval()
    with ts.no_grad():
        want = reference(x)
    print(f"{args.model}, batch {args.batch}: median step time over {args.steps} steps")
    for device in args.devices or ts.info()["devices"]:
        model = make()
        model.load_state_dict(state)
        model.to(device)
        model.eval()
        with ts.no_grad():
            diff = (model(x.to(device)).cpu() - want).abs().amax().item()
        model.train()
        ms = step_time(model, x.to(device), y.to(device), args.steps) * 1e3
        print(f"  {device:12s} {ms:9.2f} ms/step   max |output - cpu output| = {diff:.2e}")


if __name__ == "__main__":
    main()
