#!/usr/bin/env python3
"""A CNN on Fashion-MNIST in a custom training loop: a Module defined in Python, the engine's
DataLoader, AdamW with a cosine schedule, evaluation under no_grad, a safetensors checkpoint.

    PYTHONPATH=build/all/python /usr/bin/python3 examples/python/fashion_cnn.py --epochs 2
"""
import argparse
import time

import tessera as ts
import tessera.nn.functional as F


class Net(ts.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = ts.nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = ts.nn.BatchNorm2d(32)
        self.conv2 = ts.nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = ts.nn.BatchNorm2d(64)
        self.fc1 = ts.nn.Linear(64 * 7 * 7, 128)
        self.fc2 = ts.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(ts.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(ts.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(ts.relu(self.fc1(x.flatten(1))))


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with ts.no_grad():
        for x, y in loader.epoch(0):
            correct += (model(x).argmax(-1) == y).sum().item()
            total += y.shape[0]
    return correct / total


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--device", default="cpu")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--limit", type=int, default=-1, help="use only the first N training images")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--checkpoint", default="", help="write the trained weights here (safetensors)")
    args = p.parse_args()

    ts.manual_seed(0)
    train_x, train_y = ts.nn.load_mnist(args.data, "train", args.limit)
    test_x, test_y = ts.nn.load_mnist(args.data, "test", -1 if args.limit < 0 else max(1000, args.limit // 6))
    train = ts.nn.DataLoader(train_x, train_y, batch_size=args.batch_size, seed=1, device=args.device)
    test = ts.nn.DataLoader(test_x, test_y, batch_size=1000, shuffle=False, device=args.device)
    model = Net().to(args.device)
    opt = ts.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = ts.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(train))
    for epoch in range(args.epochs):
        model.train()
        start, losses = time.perf_counter(), []
        for x, y in train.epoch(epoch):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss)
        mean_loss = ts.stack(losses).mean().item()  # one host sync per epoch, not per step
        seconds = time.perf_counter() - start
        print(f"epoch {epoch + 1}: loss {mean_loss:.4f}, test accuracy {evaluate(model, test):.4f}, "
              f"{len(losses) * args.batch_size / seconds:.0f} images/s on {args.device}")
    if args.checkpoint:
        ts.save(model.state_dict(), args.checkpoint, {"model": "fashion_cnn"})
        print(f"wrote {args.checkpoint}")


if __name__ == "__main__":
    main()
