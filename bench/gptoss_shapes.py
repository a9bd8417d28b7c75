#!/usr/bin/env python3
"""bench/gptoss_shapes.py: a random-weight gpt-oss file at gpt-oss-20b's
widths, for bench/compare (issue 36's speed benchmark).

  gpt-oss-20b-w6  gpt-oss-20b's per-layer widths (hidden 2880, attention
                  64 query heads and 8 KV heads of 64 with sinks and q/k/v/o
                  biases, sliding window 128 on alternate layers, YaRN; 32
                  experts of 2880 with 4 used, biased router and experts)
                  and 6 of its 24 layers

Tensors are stored as llama.cpp's MXFP4_MOE quantization writes them: the
expert stacks MXFP4, every other matrix (attention, token embedding,
output) Q8_0, the router and the vectors F32.  The expert blocks are drawn
directly as MXFP4 (uniform 4-bit codes under one E8M0 exponent per stack,
sized like families.py's random weights): quantizing 0.8 G random floats a
layer in numpy would take most of the run.  The vocabulary is the test
vocabulary of tests/gguf/families.py (gpt-2's 50,257 tokens, padded to
50,272 so the head's rows come in 16s as o200k's 201,088 do), not o200k:
a quarter of the real head beside a quarter of the layers, so the numbers
measure the layers, not the real 201k-row output head.

Prints the file's path and the bytes a decoded token reads at their stored
sizes: attention, router, 4 of 32 experts, biases and norms (the output
head and the looked-up embedding row apart).

usage: build/venv/bin/python bench/gptoss_shapes.py [--out build/bench-gptoss] [--layers 6]
"""
import argparse
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
import families  # noqa: E402
from families import gguf, QT  # noqa: E402

SHAPE = dict(arch="gpt-oss", vocab="gpt-2", pre="qwen2", pad_vocab=50272, n_embd=2880, n_head=64, n_head_kv=8, head_dim=64,
             n_ff=2880, ctx=131072, rope_base=150000.0, tied=False, qkv_bias=True, sliding_window=128,
             yarn=(32.0, 4096, 32.0, 1.0, None), experts=(32, 4, 2880), gpt_oss=True, seed=3601)
# E2M1 codes' values (doubled) and E8M0's half scale: a uniform code has
# RMS sqrt(34.25); exponent e scales it by 2^(e - 128)
KVALUE_RMS = math.sqrt(34.25)


def storage(shape, kind):
    """(numpy dtype, ggml type or None, bytes) as MXFP4_MOE stores it."""
    n = int(np.prod(shape))
    if kind == "exps":
        return np.float32, QT.MXFP4, n // 32 * 17
    if kind == "f32":
        return np.float32, None, n * 4
    return np.float32, QT.Q8_0, n // 32 * 34


def mxfp4_random(rng, shape, scale):
    """Uniform E2M1 codes, one exponent for the stack: entries of RMS about
    scale / sqrt(row length), as Builder.mat draws them."""
    rms = scale / math.sqrt(shape[-1])
    e = int(round(128 + math.log2(rms / KVALUE_RMS)))
    blocks = rng.integers(0, 256, size=(*shape[:-1], shape[-1] // 32, 17), dtype=np.uint8)
    blocks[..., 0] = e
    return blocks.reshape(*shape[:-1], shape[-1] // 32 * 17)


def active_bytes(b):
    """Bytes one decoded token reads at their stored sizes: every layer's
    tensors, the expert stacks and their biases at n_used / n_expert."""
    n_exp, n_used, _ = b.s["experts"]
    total = 0
    for name, shape, kind, _ in b.tensors:
        if not name.startswith("blk."):
            continue
        nbytes = storage(shape, kind)[2]
        total += nbytes * n_used // n_exp if "_exps." in name else nbytes
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-gptoss"))
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    name = "gpt-oss-20b-w%d" % args.layers
    b = families.Builder(name, dict(SHAPE, n_layer=args.layers), seed=SHAPE["seed"])
    b.build()
    path = os.path.join(args.out, name + "-mxfp4_moe.gguf")
    w = gguf.GGUFWriter(path + ".tmp", SHAPE["arch"])
    w.add_name("spindle-bench-" + name)
    for key, value, vtype, sub in b.kv:
        w.add_key_value(key, value, vtype, sub_type=sub)
    for tname, shape, kind, _ in b.tensors:
        dtype, qt, nbytes = storage(shape, kind)
        w.add_tensor_info(tname, shape, np.dtype(dtype), nbytes, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(SHAPE["seed"])
    for tname, shape, kind, make in b.tensors:
        if kind == "exps":
            # gate and up past the clamped SwiGLU's limit, as families.py's gpt-oss
            data = mxfp4_random(rng, shape, 1.0 if "down" in tname else 5.0)
        elif kind == "f32":
            data = make(rng).astype(np.float32)
        else:
            data = gguf.quants.quantize(make(rng), QT.Q8_0)
        w.write_tensor_data(data)
    w.close()
    os.replace(path + ".tmp", path)
    print(path)
    print("active bytes per token (layers, stored sizes): %d (%.1f MB)" % (active_bytes(b), active_bytes(b) / 1e6))


if __name__ == "__main__":
    main()
