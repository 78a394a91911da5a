#!/usr/bin/env python3
"""PyTorch peer of `tessera train --model gpt`: the same GPT (pre-LayerNorm blocks, causal
self-attention, GELU MLP, weight-tied head, GPT-2 initialisation), the same corpus cleaning and
train/validation split, the same AdamW groups, warm-up + cosine schedule, clipping, batch,
context, steps and validation protocol. Prints the validation loss (nats/char) and tokens/s and
writes them as JSON, for docs/transformers.md and `tessera bench`'s attention suite.

    python3 perf/gpt_peer.py --steps 2000 --threads 2 --json /tmp/gpt_peer.json

With --bench-steps N it only times N train steps on fixed random tokens (after 3 warm-up
steps) and prints {"median_step_s": ..., "tokens_per_second": ...} as one JSON line: the
out-of-process peer of `tessera bench --suite attention` (case gpt_train_step_vs_python).
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def load_corpus(path, val_fraction=0.1):
    """Mirrors nn::load_text_corpus: extension-less regular files in name order, overstrikes
    ("x\\b") and control bytes dropped, "%" lines emptied, the last 10% for validation."""
    files = [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if os.path.isfile(os.path.join(path, f)) and not os.path.islink(os.path.join(path, f)) and "." not in f)
    text = bytearray()
    for f in files:
        out = bytearray()
        for b in open(f, "rb").read():
            if b == 8:
                if out and out[-1] != 10:
                    out.pop()
                continue
            if b < 32 and b not in (9, 10):
                continue
            out.append(b)
        for line in bytes(out).split(b"\n")[:-1] if out.endswith(b"\n") else bytes(out).split(b"\n"):
            text += (b"" if line == b"%" else line) + b"\n"
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    split = int(len(data) * (1 - val_fraction))
    return data[:split], data[split:], len(chars)


class Block(nn.Module):
    def __init__(self, dim, heads, layers):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.fc_out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        for lin, std in ((self.qkv, 0.02), (self.fc, 0.02), (self.proj, 0.02 / math.sqrt(2 * layers)), (self.fc_out, 0.02 / math.sqrt(2 * layers))):
            nn.init.normal_(lin.weight, 0.0, std)
            nn.init.zeros_(lin.bias)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, 2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, dim):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        nn.init.normal_(self.tok.weight, 0.0, 0.02)
        nn.init.normal_(self.pos.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, layers) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).triu(1))

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.ln_f(x) @ self.tok.weight.t()


def windows(data, batch, context, gen):
    starts = torch.randint(0, len(data) - context - 1, (batch,), generator=gen)
    x = torch.stack([data[s:s + context] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + context] for s in starts])
    return x, y


def bench(a):
    model = GPT(a.vocab, a.context, a.layers, a.heads, a.dim)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    x = torch.randint(0, a.vocab, (a.batch, a.context))
    y = torch.randint(0, a.vocab, (a.batch, a.context))
    times = []
    for i in range(3 + a.bench_steps):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).view(-1, a.vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    median = sorted(times)[len(times) // 2]
    print(json.dumps({"peer": "pytorch " + torch.__version__, "median_step_s": median,
                      "tokens_per_second": a.batch * a.context / median}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-batches", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    p.add_argument("--bench-steps", type=int, default=0, help="only time this many steps on random tokens")
    p.add_argument("--vocab", type=int, default=112, help="vocabulary size of --bench-steps' random tokens")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.bench_steps > 0:
        bench(a)
        return
    train, val, vocab = load_corpus(a.data)
    model = GPT(vocab, a.context, a.layers, a.heads, a.dim)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    warmup = min(a.warmup, a.steps)

    def factor(step):  # LinearWarmup(warmup, 0.01) x CosineLR(steps, 0.1), as nn::ChainedLR
        w = 0.01 + (1 - 0.01) * step / warmup if step < warmup else 1.0
        c = 0.1 + (1 - 0.1) * 0.5 * (1 + math.cos(math.pi * min(step, a.steps) / a.steps))
        return w * c

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    gen = torch.Generator().manual_seed(a.seed)
    history, t_train, tokens, start = [], 0.0, 0, time.time()
    losses = []
    for step in range(1, a.steps + 1):
        t0 = time.time()
        x, y = windows(train, a.batch, a.context, gen)
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        t_train += time.time() - t0
        tokens += a.batch * a.context
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            egen = torch.Generator().manual_seed(1234)
            with torch.no_grad():
                v = sum(F.cross_entropy(model(xv).view(-1, vocab), yv.view(-1)).item()
                        for xv, yv in (windows(val, a.batch, a.context, egen) for _ in range(a.eval_batches))) / a.eval_batches
            model.train()
            rec = {"step": step, "train_loss": sum(losses) / len(losses), "val_loss": v, "tokens_per_second": tokens / t_train,
                   "seconds": time.time() - start}
            history.append(rec)
            print(f"step {step}/{a.steps}  train_loss {rec['train_loss']:.4f}  val_loss {v:.4f} nats/char  "
                  f"{rec['tokens_per_second']:.0f} tokens/s  ({rec['seconds']:.1f} s)", flush=True)
            losses, t_train, tokens = [], 0.0, 0
    tps = sum(h["tokens_per_second"] for h in history) / len(history)
    print(f"result: pytorch {torch.__version__} gpt, validation loss {history[-1]['val_loss']:.4f} nats/char, {tps:.0f} tokens/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"peer": "pytorch " + torch.__version__, "threads": a.threads, "val_loss": history[-1]["val_loss"],
                       "tokens_per_second": tps, "history": history, "config": vars(a)}, f, indent=2)


if __name__ == "__main__":
    main()
