#!/usr/bin/env python3
"""bench/hybrid_shapes.py: random-weight Q4_K files at the widths of two
hybrid models, for bench/compare (issue 33's speed benchmark).

  qwen35-4b-w8       Qwen3.5-4B's widths (hidden 2560, gated DeltaNet with
                     16 key heads and 32 value heads of 128, gated attention
                     16 x 256 with 4 KV heads, feed-forward 9216), 8 layers
                     (attention every 4th) instead of 32
  granite4-tiny-w10  Granite-4.0-H-Tiny's widths (hidden 1536, Mamba-2 with
                     48 heads of 64, state 128, 1 group; attention 12 x 128
                     with 4 KV heads), a dense feed-forward of 4096 in place
                     of its experts, 10 layers (attention on layer 4)

Both use the test vocabulary of tests/gguf/families.py (a few thousand
tokens), so the output layer is not the 150k-250k rows of the real models:
the numbers measure the layers.  Matrices are Q4_K (Q8_0 where a width is
not a multiple of 256), as families.py's q4_k copies.

usage: build/venv/bin/python bench/hybrid_shapes.py [--out build/bench-hybrid]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
import families  # noqa: E402

SHAPES = {
    "qwen35-4b-w8": dict(arch="qwen35", vocab="gpt-2", pre="qwen35", n_embd=2560, n_layer=8, n_head=16,
                         n_head_kv=4, head_dim=256, n_rot=64, n_ff=9216, ctx=32768, rope_base=10000000.0,
                         tied=False, delta=(4, 16, 32, 128), seed=3001),
    "granite4-tiny-w10": dict(arch="granitehybrid", vocab="gpt-2", n_embd=1536, n_layer=10, n_head=12,
                              n_head_kv=4, head_dim=128, n_ff=4096, ctx=32768, tied=False,
                              ssm=(4, 3072, 128, 1, 64), attn_layers=(4,), scales=(12.0, 0.22, 0.0078125, 6.0),
                              seed=3002),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-hybrid"))
    ap.add_argument("--shape", choices=sorted(SHAPES), action="append")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.shape or sorted(SHAPES):
        b = families.Builder(name, SHAPES[name], seed=SHAPES[name]["seed"])
        b.build()
        path = os.path.join(args.out, name + "-q4_k.gguf")
        b.write(path + ".tmp", "q4_k")
        os.replace(path + ".tmp", path)
        print(path)


if __name__ == "__main__":
    main()
