#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/<target>/): small valid and nearly valid
inputs from which libFuzzer mutates. Run from tests/fuzz; the output is committed."""
import gzip
import json
import os
import struct


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b''.join(struct.pack('>I', d) for d in dims) + bytes(data)


def safetensors(tensors, meta=None):
    header, data = {}, b''
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    return struct.pack('<Q', len(h)) + h + data


def f32(*v):
    return struct.pack('<%df' % len(v), *v)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


write('corpus/idx/labels3', idx([3], [1, 2, 9]))
write('corpus/idx/images2x2x2', idx([2, 2, 2], range(8)))
write('corpus/idx/images.gz', gzip.compress(idx([2, 3, 3], range(18)), mtime=0))
write('corpus/idx/empty', idx([0, 4], []))
write('corpus/idx/truncated', idx([4, 4], [1, 2, 3]))

write('corpus/safetensors/mixed', safetensors({
    "a": ("F32", [2, 2], f32(1, 2, 3, 4)), "b": ("I64", [2], struct.pack('<2q', 5, -6)),
    "c": ("BF16", [1], b'\x80\x3f'), "d": ("BOOL", [3], b'\x01\x00\x01'), "e": ("U8", [0, 5], b'')}, {"k": "v"}))
write('corpus/safetensors/scalar', safetensors({"s": ("F64", [], struct.pack('<d', 2.5))}))

# A checkpoint of fuzz_checkpoint's model (Linear(2,3), ReLU, Linear(3,2)) with Adam state.
shapes = [[3, 2], [3], [2, 3], [2]]
tensors = {
    "model.0.weight": ("F32", [3, 2], f32(*[0.1 * i for i in range(6)])), "model.0.bias": ("F32", [3], f32(0, 0, 0)),
    "model.2.weight": ("F32", [2, 3], f32(*[-0.1 * i for i in range(6)])), "model.2.bias": ("F32", [2], f32(0, 0)),
    "optimizer.steps": ("I64", [], struct.pack('<q', 4)), "optimizer.group.0.lr": ("F64", [], struct.pack('<d', 1e-3))}
for p, s in enumerate(shapes):
    n = 1
    for d in s:
        n *= d
    tensors["optimizer.state.0.%d.exp_avg" % p] = ("F32", s, f32(*([0.0] * n)))
    tensors["optimizer.state.0.%d.exp_avg_sq" % p] = ("F32", s, f32(*([0.0] * n)))
meta = {"format": "tessera-checkpoint-1", "epoch": "2", "step": "4", "scheduler_step": "4", "rng_seed": "7",
        "rng_offset": "128", "config": json.dumps({"model": "mlp", "optimizer": "adam", "lr": 0.001}), "optimizer": "adam"}
write('corpus/checkpoint/adam', safetensors(tensors, meta))
write('corpus/checkpoint/bad_epoch', safetensors(tensors, dict(meta, epoch="-3")))

write('corpus/cli/basic', "--model\nmlp\n--epochs\n2\n--lr\n0.01\n--seed\n3")
write('corpus/cli/resume', "--checkpoint\n/tmp/x.safetensors\n--resume\n--reset-optimizer\n--json\n/tmp/y.json")
write('corpus/cli/config', json.dumps({"model": "cnn", "optimizer": "sgd", "lr": 0.5, "epochs": 3, "batch_size": 64,
                                       "seed": 1, "limit": -1, "test_limit": -1, "schedule": "none", "precision": "bf16",
                                       "param_dtype": "f32", "graph": False, "weight_decay": 0.0}))
write('corpus/cli/bad', "--lr\nnan\n--batch-size\n9223372036854775807\n--precision\nf8")
