#!/usr/bin/env python3
"""Small random-weight GGUF models of every architecture family spindle runs.

Each family is written with its exact architecture name, metadata keys and
tensor layout (grouped-query attention, real head sizes, 8 experts with 2
used for mixture-of-experts families, a shared expert where the family has
one) and a real vocabulary borrowed from the tokenizer test vectors
($SP_TESTDATA/vocab, default build/testdata/vocab, which
`scripts/fetch-model testdata` unpacks; it is run when a file is missing).  Weights are random
(numpy's PCG64, fixed seeds), so the output is byte-for-byte the same on
every run with the same numpy and gguf versions (build/venv pins both);
the goldens record the sha256 of the files they were made from.

Three copies per family: f32 (2-D weights F32; a token embedding that is
only looked up, never multiplied, is F16, which both engines expand
exactly), q8_0 and q4_k (every matrix whose rows allow it; Q8_0 otherwise;
router weights, norms, biases and rope factors stay F32, as llama.cpp's
quantizer leaves them).

usage: families.py [--out DIR] [--family NAME ...] [--list] [--list-linear] [--list-chunked]
       families.py --bench NAME --out DIR   (one F16 copy of a benchmark shape)
       families.py --variant NAME --out DIR (one f32 copy of a family in another layout)
       families.py --list-variants FAMILY
Run with build/venv/bin/python (numpy, gguf).
"""
import argparse
import hashlib
import math
import os
import subprocess
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT, GGUFValueType as VT

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(ROOT, "build", "families")
TYPES = ("f32", "q8_0", "q4_k")


def testdata_dir():
    return os.environ.get("SP_TESTDATA") or os.path.join(ROOT, "build", "testdata")


def vocab_path(name):
    """The vocabulary test file ggml-vocab-NAME.gguf, fetched when missing."""
    path = os.path.join(testdata_dir(), "vocab", "ggml-vocab-%s.gguf" % name)
    if not os.path.isfile(path):
        fetch = os.path.join(ROOT, "scripts", "fetch-model")
        r = subprocess.run([fetch, "testdata"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0 or not os.path.isfile(path):
            last = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
            raise RuntimeError("%s missing and scripts/fetch-model testdata failed: %s" % (path, last))
    return path


def llama3_rope_freqs(n_rot, base, factor=8.0, low=1.0, high=4.0, orig=8192):
    """Per-frequency divisors of Llama 3.1's RoPE scaling (what its GGUF
    stores as rope_freqs.weight): long wavelengths are divided by `factor`,
    short ones kept, the band between interpolated."""
    out = []
    low_wl, high_wl = orig / low, orig / high
    for i in range(0, n_rot, 2):
        freq = 1.0 / (base ** (i / n_rot))
        wl = 2 * math.pi / freq
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (orig / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# Family definitions.  Keys: arch, vocab (file under testdata/vocab), pre
# (tokenizer.ggml.pre override), pad_vocab (extra control tokens up to this
# size), n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, ctx, rope_base,
# tied, and the features each family adds.
FAMILIES = {
    "llama3": dict(arch="llama", vocab="gpt-2", pre="llama-bpe", pad_vocab=128256, n_embd=256, n_layer=2,
                   n_head=4, n_head_kv=2, head_dim=128, n_ff=768, ctx=4096, rope_base=500000.0, tied=False,
                   rope_freqs=True),
    "mistral": dict(arch="llama", vocab="llama-spm", n_embd=256, n_layer=2, n_head=2, n_head_kv=1, head_dim=128,
                    n_ff=512, ctx=4096, rope_base=10000.0, tied=False, sliding_window=128),
    "qwen2": dict(arch="qwen2", vocab="gpt-2", pre="qwen2", n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
                  head_dim=64, n_ff=512, ctx=4096, rope_base=1000000.0, tied=True, qkv_bias=True),
    "qwen3": dict(arch="qwen3", vocab="gpt-2", pre="qwen2", n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
                  head_dim=128, n_ff=512, ctx=4096, rope_base=1000000.0, tied=True, qk_norm="head"),
    "phi3": dict(arch="phi3", vocab="phi-3", n_embd=768, n_layer=2, n_head=8, n_head_kv=2, head_dim=96, n_ff=512,
                 ctx=8192, orig_ctx=2048, rope_base=10000.0, tied=True, fused=True, longrope=True),
    "gemma2": dict(arch="gemma2", vocab="llama-spm", n_embd=256, n_layer=2, n_head=2, n_head_kv=1, head_dim=256,
                   n_ff=512, ctx=4096, rope_base=10000.0, tied=True, gemma2=True, sliding_window=32,
                   attn_softcap=4.0, final_softcap=6.0),
    "qwen2moe": dict(arch="qwen2moe", vocab="gpt-2", pre="qwen2", n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
                     head_dim=64, n_ff=1024, ctx=4096, rope_base=1000000.0, tied=False, qkv_bias=True,
                     experts=(8, 2, 256), shared_ff=512),
    "qwen3moe": dict(arch="qwen3moe", vocab="gpt-2", pre="qwen2", n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
                     head_dim=128, n_ff=1024, ctx=4096, rope_base=1000000.0, tied=True, qk_norm="head",
                     experts=(8, 2, 256)),
    "olmoe": dict(arch="olmoe", vocab="gpt-2", pre="olmo", n_embd=256, n_layer=2, n_head=4, n_head_kv=4,
                  head_dim=64, n_ff=256, ctx=4096, rope_base=10000.0, tied=False, qk_norm="full",
                  experts=(8, 2, None)),
    "mixtral": dict(arch="llama", vocab="llama-spm", n_embd=256, n_layer=2, n_head=2, n_head_kv=1, head_dim=128,
                    n_ff=256, ctx=4096, rope_base=1000000.0, tied=False, experts=(8, 2, None)),
    # Families with linear (recurrent) layers carry their own seed, so that
    # adding one leaves the seeds, and so the files, of the others alone.
    # mamba2: every layer a Mamba-2 mixer (no attention, no feed-forward):
    # ssm = (d_conv, d_inner, d_state, n_group, head_dim); two groups of
    # four heads, so the group of a head matters.
    "mamba2": dict(arch="mamba2", vocab="gpt-2", n_embd=256, n_layer=2, ctx=4096, tied=False,
                   ssm=(4, 512, 64, 2, 64), seed=1100),
    # lfm2: gated short convolutions (3 taps) on layers 0, 1 and 3, attention
    # (per-head QK-norm, RoPE halves) on layer 2; a SwiGLU feed-forward on
    # every layer; the layer kinds come from attention.head_count_kv per
    # layer (0: a convolution), as LFM2's converter writes them.
    "lfm2": dict(arch="lfm2", vocab="gpt-2", n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64,
                 n_ff=512, ctx=4096, rope_base=1000000.0, tied=True, conv_layers=(0, 1, 3), conv_taps=3,
                 seed=1101),
    # granitehybrid (Granite 4.0-H, dense): Mamba-2 layers with a SwiGLU
    # feed-forward, attention without RoPE (rope.scaling.finetuned false)
    # on layer 1, Granite's embedding, residual, attention and logit scales
    "granitehybrid": dict(arch="granitehybrid", vocab="gpt-2", n_embd=256, n_layer=3, n_head=4, n_head_kv=2,
                          head_dim=64, n_ff=512, ctx=4096, tied=False, ssm=(4, 512, 64, 2, 64), attn_layers=(1,),
                          scales=(0.5, 0.75, 0.125, 4.0), seed=1102),
    # granitehybrid-moe (Granite 4.0-H Tiny / Small): the same layers with
    # a mixture of experts in place of each dense feed-forward: 8 experts
    # of feed_forward_length (2 used, softmax router, weights renormalized)
    # and a shared expert without gate (expert_shared_feed_forward_length),
    # attention on layer 2, the output head tied to the embeddings
    "granitehybrid-moe": dict(arch="granitehybrid", vocab="gpt-2", n_embd=256, n_layer=4, n_head=4, n_head_kv=2,
                              head_dim=64, n_ff=256, ctx=4096, tied=True, ssm=(4, 512, 64, 2, 64), attn_layers=(2,),
                              scales=(2.0, 0.5, 0.0625, 3.0), experts=(8, 2, None), shared_ff=512, seed=1114),
    # nemotron_h (Nemotron-H, dense): layers "M-M*-": Mamba-2 (M), a
    # ReLU^2 feed-forward alone (-), attention without RoPE (*), each one
    # block with its norm and residual; kinds from head_count_kv and
    # feed_forward_length per layer
    "nemotron_h": dict(arch="nemotron_h", vocab="gpt-2", n_embd=256, n_layer=5, n_head=4, n_head_kv=2, head_dim=64,
                       n_ff=768, ctx=4096, tied=False, ssm=(4, 512, 64, 2, 64), pattern="M-M*-", seed=1103),
    # qwen35 (Qwen3.5, dense): gated DeltaNet on layers 0-2, gated attention
    # (each head's query then its gate, per-head QK-norm, RoPE halves over 64
    # of 128 dimensions as M-RoPE sections 11, 11, 10, 0) on layer 3 (full
    # attention every 4th layer); delta = (conv, key heads, value heads,
    # width): value head h reads key head h % 2
    "qwen35": dict(arch="qwen35", vocab="gpt-2", pre="qwen35", n_embd=256, n_layer=4, n_head=4, n_head_kv=2,
                   head_dim=128, n_rot=64, n_ff=512, ctx=4096, rope_base=10000000.0, tied=False,
                   delta=(4, 2, 4, 64), seed=1104),
    # qwen35moe (Qwen3.5 MoE): qwen35's layers with 8 experts (2 used,
    # weights renormalized) and a shared expert scaled by a sigmoid gate
    "qwen35moe": dict(arch="qwen35moe", vocab="gpt-2", pre="qwen35", n_embd=256, n_layer=4, n_head=4, n_head_kv=2,
                      head_dim=128, n_rot=64, n_ff=512, ctx=4096, rope_base=10000000.0, tied=False,
                      delta=(4, 2, 4, 64), experts=(8, 2, 128), shared_ff=256, seed=1110),
    # qwen3next (Qwen3-Next): as qwen35moe, but RoPE halves without M-RoPE
    # sections, value heads grouped by key head (value head h reads key
    # head h // 2) and beta and alpha fused in ssm_ba (per key head
    # its 2 betas then its 2 alphas), as its converter writes them
    "qwen3next": dict(arch="qwen3next", vocab="gpt-2", pre="qwen2", n_embd=256, n_layer=4, n_head=4, n_head_kv=2,
                      head_dim=128, n_rot=64, n_ff=512, ctx=4096, rope_base=10000000.0, tied=False,
                      delta=(4, 2, 4, 64), experts=(8, 2, 128), shared_ff=256, seed=1111),
    # smollm3 (SmolLM3): Llama's block, RoPE on adjacent pairs except every
    # 4th layer (llama.cpp's fixed step), here layer 3 of 4 (NoPE)
    "smollm3": dict(arch="smollm3", vocab="gpt-2", pre="llama-bpe", n_embd=256, n_layer=4, n_head=4, n_head_kv=2,
                    head_dim=64, n_ff=512, ctx=4096, rope_base=5000000.0, tied=True, seed=1105),
    # mistral3 (Ministral 3): Llama's block with YaRN RoPE scaling and
    # Llama 4's attention temperature, keys as the converter writes them,
    # and its BPE vocabulary's tekken split (tokenizer.ggml.pre);
    # yarn = (factor, original context, beta_fast, beta_slow, log multiplier
    # (0: the converter's apply_scale)), a short original context so the
    # prompts cross two temperature steps (positions 32 and 64)
    "mistral3": dict(arch="mistral3", vocab="gpt-2", pre="tekken", n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
                     head_dim=128, n_ff=512, ctx=4096, rope_base=1000000.0, tied=True,
                     yarn=(4.0, 32, 32.0, 1.0, 0.0), attn_temp=0.1, seed=1106),
    # glm4 (GLM-4-0414): q/k/v biases, norms after attention and after the
    # feed-forward as well as before, ffn_up holding gate then up, RoPE on
    # adjacent pairs of the first half of each head
    "glm4": dict(arch="glm4", vocab="gpt-2", pre="glm4", n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
                 head_dim=64, n_ff=512, ctx=4096, rope_base=10000.0, rope_dims=32, tied=False, qkv_bias=True,
                 post_norms=True, ffn_fused=True, seed=1110),
    # granite (Granite 3.x, dense): Llama's block with Granite's embedding,
    # residual, attention and logit scales,
    # RoPE on (rope.scaling.finetuned absent)
    "granite": dict(arch="granite", vocab="refact", n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
                    head_dim=64, n_ff=512, ctx=4096, rope_base=10000000.0, tied=True,
                    scales=(2.0, 0.5, 0.25, 4.0), seed=1107),
    # cohere2 (Command R7B): LayerNorm without bias, attention and
    # feed-forward in parallel on one normed input, 3 of every 4 layers
    # local (window 16) with RoPE, the 4th global without it, logits x 0.25
    "cohere2": dict(arch="cohere2", vocab="gpt-2", pre="command-r", n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64,
                    n_ff=512, ctx=4096, rope_base=50000.0, tied=True, norm="layer", parallel=True,
                    sliding_window=16, logit_scale=0.25, seed=1108),
    # exaone4 (EXAONE 4.0 1.2B): no pre-norms, post-norms on both blocks,
    # per-head QK-norm, RoPE halves; the sliding window the file gives is
    # not applied (llama.cpp applies it to 64-layer models only)
    "exaone4": dict(arch="exaone4", vocab="gpt-2", pre="exaone4", n_embd=256, n_layer=4, n_head=4, n_head_kv=2,
                    head_dim=64, n_ff=512, ctx=4096, rope_base=1000000.0, tied=True, qk_norm="head",
                    post_norms=True, no_pre_norm=True, sliding_window=16, seed=1109),
    # llama4 (Llama 4): 3 of every 4 layers attend within their chunk of
    # 8192 positions (llama.cpp's fixed size; the key is absent, as the
    # converter writes it) with RoPE and an L2 QK-norm, the 4th globally
    # without RoPE and with the temperature past position 8191; experts
    # (sigmoid router, top-1, the weight on the expert's input, a shared
    # expert without gate) on every 2nd layer (interleave_moe_layer_step),
    # dense feed-forwards on the others
    "llama4": dict(arch="llama4", vocab="gpt-2", pre="llama-bpe", n_embd=256, n_layer=4, n_head=2, n_head_kv=1,
                   head_dim=64, n_ff=512, ctx=16384, rope_base=500000.0, tied=False, experts=(8, 1, 256),
                   moe_step=2, shexp_plain=True, chunk=8192, seed=1110),
    # gpt-oss (llama.cpp's openai-moe): attention sinks, even layers local
    # (window 16) and odd ones global, YaRN RoPE halves, biases on q/k/v/o,
    # the router and every expert, a top-4 router whose softmax is over the
    # 4 chosen, the clamped SwiGLU (expert gate and up weights scaled so
    # many pre-activations pass its limit of 7), the feed-forward's norm as
    # post_attention_norm; a fourth copy with MXFP4 experts (the rest F32),
    # as the real model ships
    "gpt-oss": dict(arch="gpt-oss", vocab="gpt-2", pre="qwen2", n_embd=256, n_layer=4, n_head=8, n_head_kv=2,
                    head_dim=64, n_ff=256, ctx=4096, rope_base=150000.0, tied=False, qkv_bias=True,
                    sliding_window=16, yarn=(4.0, 32, 32.0, 1.0, None), experts=(8, 4, 256), gpt_oss=True,
                    extra_types=("mxfp4",), seed=1110),
    # gemma4 (Gemma 4, dense): the local layers named one by one
    # (attention.sliding_window_pattern, a bool per layer: here local,
    # local, global, local, global; window 16) with heads of their own
    # width, KV heads and RoPE dimensions (local: 2 KV heads of 32, global:
    # 1 of 64, as the released models' 256 and 512), the global layers'
    # RoPE factors (rope_freqs: a quarter of each head rotated, the rest by
    # 1e30, as the converter writes "proportional" RoPE), a RoPE base per
    # kind, attention scale 1 after the QK-norm, values RMS-normed without
    # a weight, layer 2's values its keys (no attn_v), the last 2 layers
    # reading the KV cache of the last layer of their kind before them
    # (shared_kv_layers; no attn_k, attn_v of their own) with feed-forwards
    # twice as wide (E2B's double-wide MLP: feed_forward_length per layer),
    # per-layer embeddings (32 wide: per_layer_token_embd, the model
    # projection, a gate and projection per layer), a scale per layer's
    # output and the final-logit soft-cap
    "gemma4": dict(arch="gemma4", vocab="llama-spm", n_embd=256, n_layer=5, n_head=4, n_head_kv=1, head_dim=64,
                   n_head_kv_swa=2, head_dim_swa=32, n_ff=512, ctx=4096, rope_base=1000000.0, rope_base_swa=10000.0,
                   tied=True, swa_layers=(0, 1, 3), sliding_window=16, shared_kv=2, no_v_layers=(2,), per_layer=32,
                   rope_partial=0.25, final_softcap=30.0, seed=1112),
    # gemma4-moe (Gemma 4 26B-A4B): gemma4's attention (without per-layer
    # embeddings or shared KV) and on every layer 8 experts (2 used, softmax
    # router, weights renormalized, each expert's output scaled by
    # ffn_down_exps.scale) beside the dense feed-forward: the router reads
    # rmsnorm(x) / sqrt(n_embd) * ffn_gate_inp.scale, the experts
    # pre_ffw_norm_2(x), the dense half ffn_norm(x); post_ffw_norm_1 and _2
    # on the halves, post_ffw_norm on their sum (variant gemma4-moe-fused:
    # gate and up experts as one ffn_gate_up_exps)
    "gemma4-moe": dict(arch="gemma4", vocab="llama-spm", n_embd=256, n_layer=4, n_head=4, n_head_kv=1, head_dim=64,
                       n_head_kv_swa=2, head_dim_swa=32, n_ff=256, ctx=4096, rope_base=1000000.0,
                       rope_base_swa=10000.0, tied=True, swa_layers=(0, 1, 2), sliding_window=16, shared_kv=0,
                       no_v_layers=(), per_layer=0, rope_partial=0.25, final_softcap=30.0, experts=(8, 2, 128),
                       seed=1113),
    # gemma3n (Gemma 3n, text): Gemma 3's attention (per-head QK-norm, values
    # RMS-normed, scale 1; local layers named one by one, window 16, every
    # 5th global as E2B's layer_types) with 4 AltUp streams (router weights
    # large enough that tanh of their outputs spreads over (-1, 1), predict
    # and correct coefficients small, as a trained model's), Laurel (rank
    # 64), per-layer embeddings 256 wide and the Gaussian top-k on the first
    # 10 layers' gates; 22 layers, so the last 2 (one local, one global)
    # read the KV of layers 18 and 19 (llama.cpp shares from layer 20 on;
    # its 256 per-layer width and rank 64 are fixed, hence the layer count
    # and the per-layer embedding table's 180M values).  The blocks' post-norm
    # weights are about 0.5 and the QK-norm's 0.2, so that 22 layers do not
    # amplify the engines' f16 rounding differences past test_families's f32
    # bound (with 1.0 and 0.4, llama.cpp's own f16 and f32 KV caches differ
    # by up to 5e-3 relative; with these by 3e-4)
    "gemma3n": dict(arch="gemma3n", vocab="llama-spm", n_embd=256, n_layer=22, n_head=4, n_head_kv=2, head_dim=64,
                    n_ff=512, ctx=4096, rope_base=1000000.0, rope_base_swa=10000.0, tied=True, sliding_window=16,
                    per_layer=256, laurel_rank=64, altup=4, shared_kv=2, sparse_layers=10, seed=1114),
    # deepseek2 (DeepSeek V3 shape at small widths): multi-head latent
    # attention as the current converter writes it (q through a rank-128
    # LoRA with its norm, one attn_kv_a_mqa to a 128-wide latent and 32 RoPE
    # dims on adjacent pairs, attn_k_b / attn_v_b per head; key_length =
    # latent + RoPE, head_count_kv 1), a dense leading layer, then 8 experts
    # in 4 groups (2 groups, then 2 experts used) routed by sigmoid with a
    # selection bias, weights renormalized and scaled, one ungated shared
    # expert; YaRN with DeepSeek's yarn_log_multiplier (0.1 mscale_all_dim)
    # mla = (q_lora, kv_lora, qk_nope, rope, v_head); moe = (groups, groups
    # used, shared count, weights scale, gating func, dense leading layers)
    "deepseek2": dict(arch="deepseek2", vocab="gpt-2", pre="qwen2", n_embd=256, n_layer=3, n_head=4, n_head_kv=1,
                      head_dim=160, n_ff=512, ctx=4096, rope_base=10000.0, tied=False,
                      yarn=(4.0, 32, 32.0, 1.0, 0.0707), experts=(8, 2, 128), mla=(128, 128, 64, 32, 64),
                      ds_moe=(4, 2, 1, 2.5, 2, 1), seed=1112),
}


# Benchmark shapes (bench/models): the sizes users run, written as F16 for
# llama.cpp's quantizer.
BENCH = {
    "llama3-8b": dict(arch="llama", vocab="gpt-2", pre="llama-bpe", pad_vocab=128256, n_embd=4096, n_layer=32,
                      n_head=32, n_head_kv=8, head_dim=128, n_ff=14336, ctx=8192, rope_base=500000.0, tied=False,
                      rope_freqs=True),
    "olmoe-1b-7b": dict(arch="olmoe", vocab="gpt-2", pre="olmo", pad_vocab=50304, n_embd=2048, n_layer=16,
                        n_head=16, n_head_kv=16, head_dim=128, n_ff=1024, ctx=4096, rope_base=10000.0, tied=False,
                        qk_norm="full", experts=(64, 8, None)),
    # Granite-4.0-H-Tiny's shape: 40 layers, attention (12 x 128, 4 KV
    # heads, no RoPE) on layers 5, 15, 25 and 35 (its config's layer_types),
    # Mamba-2 on the others (48 heads of 64, state 128, 1 group, 4 taps),
    # 64 experts of 512 (6 used) and a shared expert of 1024 on every layer,
    # the head tied to the embeddings, 100352 tokens, its multipliers
    "granite4-tiny": dict(arch="granitehybrid", vocab="gpt-2", pad_vocab=100352, n_embd=1536, n_layer=40, n_head=12,
                          n_head_kv=4, head_dim=128, n_ff=512, ctx=1 << 20, tied=True, ssm=(4, 3072, 128, 1, 64),
                          attn_layers=(5, 15, 25, 35), scales=(12.0, 0.22, 0.0078125, 6.0), experts=(64, 6, None),
                          shared_ff=1024, seed=2100),
}


_vocab_cache = {}


def read_vocab(name, pre=None, pad_to=None):
    """Tokenizer key/values of a vocabulary test file: [(key, value, vtype, subtype)].
    The file is parsed once per process (seconds for a 128k vocabulary);
    callers get their own lists."""
    if name not in _vocab_cache:
        r = gguf.GGUFReader(vocab_path(name))
        _vocab_cache[name] = [(key, f.contents(), f.types[0], f.types[1] if f.types[0] == VT.ARRAY else None)
                              for key, f in r.fields.items() if key.startswith("tokenizer.")]
    kvs = [list(k) for k in _vocab_cache[name]]
    d = {k[0]: k for k in kvs}
    if pre:
        d["tokenizer.ggml.pre"][1] = pre
    if pad_to:
        toks, types = d["tokenizer.ggml.tokens"], d["tokenizer.ggml.token_type"]
        extra = pad_to - len(toks[1])
        toks[1] = list(toks[1]) + ["<|reserved_special_token_%d|>" % i for i in range(extra)]
        types[1] = list(types[1]) + [3] * extra
    return kvs, len(d["tokenizer.ggml.tokens"][1])


# ---- quantizers (numpy; any valid encoding works: both engines read the same file) ----

def q8_0(x):
    return gguf.quants.quantize(x, QT.Q8_0)


def q4_k(x):
    """Rows of x (last dim a multiple of 256) as Q4_K blocks: per 32-value
    sub-block a 6-bit scale and min against two f16 super-block factors,
    values 4-bit."""
    shape = x.shape
    b = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(b.min(axis=2), 0.0)                     # [n, 8] (<= 0)
    span = b.max(axis=2) - lo
    scale = span / 15.0
    d = scale.max(axis=1) / 63.0                            # [n]
    dmin = (-lo).max(axis=1) / 63.0
    d16, dmin16 = d.astype(np.float16), dmin.astype(np.float16)
    df, dminf = d16.astype(np.float32), dmin16.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df[:, None] > 0, np.rint(scale / df[:, None]), 0).clip(0, 63).astype(np.uint8)
        mn = np.where(dminf[:, None] > 0, np.rint(-lo / dminf[:, None]), 0).clip(0, 63).astype(np.uint8)
        step = df[:, None] * sc.astype(np.float32)                        # [n, 8]
        off = dminf[:, None] * mn.astype(np.float32)
        q = np.where(step[:, :, None] > 0, np.rint((b + off[:, :, None]) / step[:, :, None]), 0)
    q = q.clip(0, 15).astype(np.uint8)                                  # [n, 8, 32]
    scales = np.zeros((b.shape[0], 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0xF) | ((mn[:, 4:8] & 0xF) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)
    out = np.concatenate([d16.view(np.uint8).reshape(-1, 2), dmin16.view(np.uint8).reshape(-1, 2), scales, qs],
                         axis=1)
    return out.reshape(*shape[:-1], shape[-1] // 256 * 144)


QTYPE_OF = {"q8_0": QT.Q8_0, "q4_k": QT.Q4_K}
QUANT_BYTES = {QT.Q8_0: (32, 34), QT.Q4_K: (256, 144), QT.MXFP4: (32, 17)}


def types_of(name):
    """The copies a family is written in: TYPES, then its extra ones."""
    spec = FAMILIES.get(name) or BENCH[name]
    return TYPES + tuple(spec.get("extra_types", ()))


def storage(shape, kind, qtype):
    """(numpy dtype, ggml type or None, bytes) one tensor is stored with in
    copy `qtype`.  kind: 'mat' (a weight matrix or expert stack), 'lookup'
    (an embedding only looked up, never multiplied), 'f32' (vectors,
    routers), 'exps' (expert stacks: 'mat', but MXFP4 in copy mxfp4, whose
    other tensors are as in copy f32)."""
    n = int(np.prod(shape))
    if qtype == "mxfp4":
        if kind == "exps":
            return np.float32, QT.MXFP4, n // 32 * 17
        qtype = "f32"
    kind = "mat" if kind == "exps" else kind
    if kind == "f32" or (qtype == "f32" and kind == "mat"):
        return np.float32, None, n * 4
    if qtype in ("f32", "f16"):
        return np.float16, None, n * 2
    qt = QTYPE_OF[qtype] if qtype == "q8_0" or shape[-1] % 256 == 0 else QT.Q8_0
    block, size = QUANT_BYTES[qt]
    return np.float32, qt, n // block * size


def encode(arr, kind, qtype):
    """The stored bytes (or array) of one tensor in copy `qtype`."""
    dtype, qt, _ = storage(arr.shape, kind, qtype)
    if qt is None:
        return arr.astype(dtype)
    if qt == QT.MXFP4:
        return gguf.quants.quantize(arr, QT.MXFP4)
    return q4_k(arr) if qt == QT.Q4_K else q8_0(arr)


class Builder:
    """A family's keys and tensors.  Tensor values are drawn when the file
    is written, in declaration order from a fresh generator of the family's
    seed, so every copy holds the same weights and only one tensor is in
    memory at a time (the benchmark models are several GB)."""

    def __init__(self, name, spec, seed):
        self.name, self.s, self.seed = name, spec, seed
        self.tensors = []  # (name, shape, kind, make(rng) -> array)
        self.kv = []       # (key, value, vtype, sub)

    def key(self, suffix, value, vtype, sub=None):
        self.kv.append(("%s.%s" % (self.s["arch"], suffix), value, vtype, sub))

    def mat(self, name, *shape, scale=1.0, kind="mat"):
        """Random matrix, numpy shape (..., rows, row length): entries ~ N(0, scale^2 / row length)."""
        f = np.float32(scale / math.sqrt(shape[-1]))
        self.tensors.append((name, shape, kind, lambda rng: rng.standard_normal(shape, dtype=np.float32) * f))

    def mats(self, name, parts, kind="mat"):
        """One tensor of several random matrices (as mat() draws them, one
        after another) joined along their rows: e.g. fused gate and up
        experts holding the same values as the two stacks mat() writes."""
        fs = [np.float32(1.0 / math.sqrt(shape[-1])) for shape in parts]
        shape = parts[0][:-2] + (sum(p[-2] for p in parts), parts[0][-1])
        self.tensors.append((name, shape, kind, lambda rng: np.concatenate(
            [rng.standard_normal(p, dtype=np.float32) * f for p, f in zip(parts, fs)], axis=-2)))

    def vec(self, name, n, mean=1.0, spread=0.1):
        self.tensors.append((name, (n,), "f32", lambda rng: (
            mean + spread * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)))

    def const(self, name, values):
        self.tensors.append((name, values.shape, "f32", lambda rng: values))

    def arr(self, name, shape, make):
        """An F32 array of any rank (numpy shape), never quantized: make(rng) -> values."""
        self.tensors.append((name, shape, "f32", lambda rng: make(rng).astype(np.float32).reshape(shape)))

    def mamba2_layer(self, p):
        """A Mamba-2 mixer as llama.cpp's converter writes it: ssm_in rows
        z, x, B, C, dt; a depth-wise causal convolution over x, B and C
        [channels][d_conv]; dt's bias; A = -exp(A_log) and D per head as
        [n_head][1]; the gated RMSNorm's weight per group [n_group][d_inner /
        n_group]; ssm_out."""
        E = self.s["n_embd"]
        dc, di, ds, ng, hd = self.s["ssm"]
        nh, conv = di // hd, di + 2 * ng * ds
        self.mat(p + "ssm_in.weight", 2 * di + 2 * ng * ds + nh, E)
        self.arr(p + "ssm_conv1d.weight", (conv, dc), lambda rng: rng.standard_normal((conv, dc)) * 0.5)
        self.arr(p + "ssm_conv1d.bias", (conv,), lambda rng: rng.standard_normal(conv) * 0.1)
        # dt = softplus(x + bias) around 0.1, A in [-4, -0.25]: decays from
        # a few positions to a few hundred, so the state carries across chunks
        self.arr(p + "ssm_dt.bias", (nh,), lambda rng: rng.uniform(-3.0, -1.5, nh))
        self.arr(p + "ssm_a", (nh, 1), lambda rng: -np.exp(rng.uniform(math.log(0.25), math.log(4.0), nh)))
        self.arr(p + "ssm_d", (nh, 1), lambda rng: 1.0 + 0.1 * rng.standard_normal(nh))
        self.arr(p + "ssm_norm.weight", (ng, di // ng), lambda rng: 1.0 + 0.1 * rng.standard_normal(di))
        self.mat(p + "ssm_out.weight", E, di)

    def build_lfm2(self, vocab_kv, n_vocab):
        """LFM2 as its converter writes it: head_count_kv per layer (0: a
        short convolution), shortconv.l_cache, the output norm stored as
        token_embd_norm, the convolution's taps [n_embd][taps]."""
        s = self.s
        E, H, HKV, D, F, L = s["n_embd"], s["n_head"], s["n_head_kv"], s["head_dim"], s["n_ff"], s["n_layer"]
        conv, taps = s["conv_layers"], s["conv_taps"]
        self.key("context_length", s["ctx"], VT.UINT32)
        self.key("embedding_length", E, VT.UINT32)
        self.key("block_count", L, VT.UINT32)
        self.key("feed_forward_length", F, VT.UINT32)
        self.key("attention.head_count", H, VT.UINT32)
        self.key("attention.head_count_kv", [0 if i in conv else HKV for i in range(L)], VT.ARRAY, VT.INT32)
        self.key("rope.freq_base", s["rope_base"], VT.FLOAT32)
        self.key("attention.layer_norm_rms_epsilon", 1e-5, VT.FLOAT32)
        self.key("shortconv.l_cache", taps, VT.UINT32)
        self.kv += [tuple(x) for x in vocab_kv]
        self.mat("token_embd.weight", n_vocab, E, scale=3.0)
        self.vec("token_embd_norm.weight", E)
        for i in range(L):
            p = "blk.%d." % i
            self.vec(p + "attn_norm.weight", E)
            if i in conv:
                self.mat(p + "shortconv.in_proj.weight", 3 * E, E)
                self.arr(p + "shortconv.conv.weight", (E, taps), lambda rng: rng.standard_normal((E, taps)) * 0.6)
                self.mat(p + "shortconv.out_proj.weight", E, E)
            else:
                self.mat(p + "attn_q.weight", H * D, E)
                self.mat(p + "attn_k.weight", HKV * D, E)
                self.mat(p + "attn_v.weight", HKV * D, E)
                self.vec(p + "attn_q_norm.weight", D)
                self.vec(p + "attn_k_norm.weight", D)
                self.mat(p + "attn_output.weight", E, H * D)
            self.vec(p + "ffn_norm.weight", E)
            self.mat(p + "ffn_gate.weight", F, E)
            self.mat(p + "ffn_up.weight", F, E)
            self.mat(p + "ffn_down.weight", E, F)

    def build_granitehybrid(self, vocab_kv, n_vocab):
        """Granite 4.0-H as its converter writes it: head_count_kv per layer
        (0: a Mamba-2 layer), the ssm.* keys, Granite's scales, RoPE off;
        with experts (Tiny, Small) expert_count, expert_used_count and
        expert_shared_feed_forward_length, each layer's router, its experts'
        gate and up (the converter splits input_linear in two), down, and
        the shared expert's gate, up and down (shared_mlp)."""
        s = self.s
        E, H, HKV, D, F, L = s["n_embd"], s["n_head"], s["n_head_kv"], s["head_dim"], s["n_ff"], s["n_layer"]
        dc, di, ds, ng, hd = s["ssm"]
        embd, resid, attn, logit = s["scales"]
        n_exp, n_used, _ = s.get("experts", (0, 0, None))
        self.key("context_length", s["ctx"], VT.UINT32)
        self.key("embedding_length", E, VT.UINT32)
        self.key("block_count", L, VT.UINT32)
        self.key("feed_forward_length", F, VT.UINT32)
        self.key("attention.head_count", H, VT.UINT32)
        self.key("attention.head_count_kv", [HKV if i in s["attn_layers"] else 0 for i in range(L)], VT.ARRAY,
                 VT.INT32)
        self.key("attention.layer_norm_rms_epsilon", 1e-5, VT.FLOAT32)
        self.key("attention.scale", attn, VT.FLOAT32)
        self.key("embedding_scale", embd, VT.FLOAT32)
        self.key("residual_scale", resid, VT.FLOAT32)
        self.key("logit_scale", logit, VT.FLOAT32)
        self.key("rope.scaling.finetuned", False, VT.BOOL)
        self.key("ssm.conv_kernel", dc, VT.UINT32)
        self.key("ssm.inner_size", di, VT.UINT32)
        self.key("ssm.state_size", ds, VT.UINT32)
        self.key("ssm.time_step_rank", di // hd, VT.UINT32)
        self.key("ssm.group_count", ng, VT.UINT32)
        if n_exp:
            self.key("expert_count", n_exp, VT.UINT32)
            self.key("expert_used_count", n_used, VT.UINT32)
            if s.get("shared_ff"):
                self.key("expert_shared_feed_forward_length", s["shared_ff"], VT.UINT32)
        self.kv += [tuple(x) for x in vocab_kv]
        self.mat("token_embd.weight", n_vocab, E, scale=3.0, kind="mat" if s["tied"] else "lookup")
        self.vec("output_norm.weight", E)
        if not s["tied"]:
            self.mat("output.weight", n_vocab, E, scale=3.0)
        for i in range(L):
            p = "blk.%d." % i
            self.vec(p + "attn_norm.weight", E)
            if i in s["attn_layers"]:
                self.mat(p + "attn_q.weight", H * D, E)
                self.mat(p + "attn_k.weight", HKV * D, E)
                self.mat(p + "attn_v.weight", HKV * D, E)
                self.mat(p + "attn_output.weight", E, H * D)
            else:
                self.mamba2_layer(p)
            self.vec(p + "ffn_norm.weight", E)
            if not n_exp:
                self.mat(p + "ffn_gate.weight", F, E)
                self.mat(p + "ffn_up.weight", F, E)
                self.mat(p + "ffn_down.weight", E, F)
                continue
            self.mat(p + "ffn_gate_inp.weight", n_exp, E, scale=2.0, kind="f32")
            self.mat(p + "ffn_gate_exps.weight", n_exp, F, E, kind="exps")
            self.mat(p + "ffn_up_exps.weight", n_exp, F, E, kind="exps")
            self.mat(p + "ffn_down_exps.weight", n_exp, E, F, kind="exps")
            if s.get("shared_ff"):
                sf = s["shared_ff"]
                self.mat(p + "ffn_gate_shexp.weight", sf, E)
                self.mat(p + "ffn_up_shexp.weight", sf, E)
                self.mat(p + "ffn_down_shexp.weight", E, sf)

    def build_nemotron_h(self, vocab_kv, n_vocab):
        """Nemotron-H as its converter writes it: feed_forward_length and
        head_count_kv per layer (both 0: Mamba-2), layer_norm_epsilon beside
        the RMS one, key and value lengths."""
        s = self.s
        E, H, HKV, D, F, L = s["n_embd"], s["n_head"], s["n_head_kv"], s["head_dim"], s["n_ff"], s["n_layer"]
        dc, di, ds, ng, hd = s["ssm"]
        pat = s["pattern"]
        self.key("context_length", s["ctx"], VT.UINT32)
        self.key("embedding_length", E, VT.UINT32)
        self.key("block_count", L, VT.UINT32)
        self.key("feed_forward_length", [F if c == "-" else 0 for c in pat], VT.ARRAY, VT.INT32)
        self.key("attention.head_count", H, VT.UINT32)
        self.key("attention.head_count_kv", [HKV if c == "*" else 0 for c in pat], VT.ARRAY, VT.INT32)
        self.key("attention.key_length", D, VT.UINT32)
        self.key("attention.value_length", D, VT.UINT32)
        self.key("attention.layer_norm_epsilon", 1e-5, VT.FLOAT32)
        self.key("attention.layer_norm_rms_epsilon", 1e-5, VT.FLOAT32)
        self.key("ssm.conv_kernel", dc, VT.UINT32)
        self.key("ssm.inner_size", di, VT.UINT32)
        self.key("ssm.state_size", ds, VT.UINT32)
        self.key("ssm.time_step_rank", di // hd, VT.UINT32)
        self.key("ssm.group_count", ng, VT.UINT32)
        self.kv += [tuple(x) for x in vocab_kv]
        self.mat("token_embd.weight", n_vocab, E, scale=3.0, kind="mat" if s["tied"] else "lookup")
        self.vec("output_norm.weight", E)
        if not s["tied"]:
            self.mat("output.weight", n_vocab, E, scale=3.0)
        for i, c in enumerate(pat):
            p = "blk.%d." % i
            self.vec(p + "attn_norm.weight", E)
            if c == "M":
                self.mamba2_layer(p)
            elif c == "*":
                self.mat(p + "attn_q.weight", H * D, E)
                self.mat(p + "attn_k.weight", HKV * D, E)
                self.mat(p + "attn_v.weight", HKV * D, E)
                self.mat(p + "attn_output.weight", E, H * D)
            else:
                self.mat(p + "ffn_up.weight", F, E)
                self.mat(p + "ffn_down.weight", E, F)

    def build_qwen35(self, vocab_kv, n_vocab):
        """Qwen3.5 (and Qwen3.5 MoE, Qwen3-Next) as its converter writes it:
        ssm.* for the delta rule (inner_size = value heads x width,
        state_size = width, time_step_rank = value heads, group_count = key
        heads), full_attention_interval, rope.dimension_sections (not
        Qwen3-Next's), the attention's query and gate in attn_q, the
        feed-forward's norm as post_attention_norm; the MoE families' experts
        and gated shared expert; Qwen3-Next's ssm_ba."""
        s = self.s
        E, H, HKV, D, F, L = s["n_embd"], s["n_head"], s["n_head_kv"], s["head_dim"], s["n_ff"], s["n_layer"]
        dc, nk, nv, w = s["delta"]
        KD, VD = nk * w, nv * w
        n_exp, n_used, ff_exp = s.get("experts", (0, 0, 0))
        self.key("context_length", s["ctx"], VT.UINT32)
        self.key("embedding_length", E, VT.UINT32)
        self.key("block_count", L, VT.UINT32)
        self.key("feed_forward_length", F, VT.UINT32)
        self.key("attention.head_count", H, VT.UINT32)
        self.key("attention.head_count_kv", HKV, VT.UINT32)
        self.key("attention.key_length", D, VT.UINT32)
        self.key("attention.value_length", D, VT.UINT32)
        self.key("rope.dimension_count", s["n_rot"], VT.UINT32)
        if s["arch"] != "qwen3next":
            self.key("rope.dimension_sections", [11, 11, 10, 0], VT.ARRAY, VT.INT32)
        self.key("rope.freq_base", s["rope_base"], VT.FLOAT32)
        self.key("attention.layer_norm_rms_epsilon", 1e-6, VT.FLOAT32)
        self.key("full_attention_interval", 4, VT.UINT32)
        self.key("ssm.conv_kernel", dc, VT.UINT32)
        self.key("ssm.inner_size", VD, VT.UINT32)
        self.key("ssm.state_size", w, VT.UINT32)
        self.key("ssm.time_step_rank", nv, VT.UINT32)
        self.key("ssm.group_count", nk, VT.UINT32)
        if n_exp:
            self.key("expert_count", n_exp, VT.UINT32)
            self.key("expert_used_count", n_used, VT.UINT32)
            self.key("expert_feed_forward_length", ff_exp, VT.UINT32)
            self.key("expert_shared_feed_forward_length", s["shared_ff"], VT.UINT32)
        self.kv += [tuple(x) for x in vocab_kv]
        self.mat("token_embd.weight", n_vocab, E, scale=3.0, kind="mat" if s["tied"] else "lookup")
        self.vec("output_norm.weight", E)
        if not s["tied"]:
            self.mat("output.weight", n_vocab, E, scale=3.0)
        for i in range(L):
            p = "blk.%d." % i
            self.vec(p + "attn_norm.weight", E)
            if (i + 1) % 4 == 0:
                self.mat(p + "attn_q.weight", 2 * H * D, E)
                self.mat(p + "attn_k.weight", HKV * D, E)
                self.mat(p + "attn_v.weight", HKV * D, E)
                self.vec(p + "attn_q_norm.weight", D)
                self.vec(p + "attn_k_norm.weight", D)
                self.mat(p + "attn_output.weight", E, H * D)
            else:
                conv = 2 * KD + VD
                self.mat(p + "attn_qkv.weight", conv, E)
                self.mat(p + "attn_gate.weight", VD, E)
                self.arr(p + "ssm_conv1d.weight", (conv, dc), lambda rng: rng.standard_normal((conv, dc)) * 0.5)
                self.arr(p + "ssm_dt.bias", (nv,), lambda rng: rng.uniform(-1.0, 1.0, nv))
                self.arr(p + "ssm_a", (nv,), lambda rng: -np.exp(rng.uniform(math.log(0.05), math.log(1.0), nv)))
                if s["arch"] == "qwen3next":
                    self.mat(p + "ssm_ba.weight", 2 * nv, E)
                else:
                    self.mat(p + "ssm_beta.weight", nv, E)
                    self.mat(p + "ssm_alpha.weight", nv, E)
                self.vec(p + "ssm_norm.weight", w)
                self.mat(p + "ssm_out.weight", E, VD)
            self.vec(p + "post_attention_norm.weight", E)
            if n_exp:
                sf = s["shared_ff"]
                self.mat(p + "ffn_gate_inp.weight", n_exp, E, scale=2.0, kind="f32")
                self.mat(p + "ffn_gate_exps.weight", n_exp, ff_exp, E)
                self.mat(p + "ffn_up_exps.weight", n_exp, ff_exp, E)
                self.mat(p + "ffn_down_exps.weight", n_exp, E, ff_exp)
                self.vec(p + "ffn_gate_inp_shexp.weight", E, mean=0.0, spread=0.2)
                self.mat(p + "ffn_gate_shexp.weight", sf, E)
                self.mat(p + "ffn_up_shexp.weight", sf, E)
                self.mat(p + "ffn_down_shexp.weight", E, sf)
            else:
                self.mat(p + "ffn_gate.weight", F, E)
                self.mat(p + "ffn_up.weight", F, E)
                self.mat(p + "ffn_down.weight", E, F)

    def build_deepseek2(self, vocab_kv, n_vocab):
        s = self.s
        E, H, F, L = s["n_embd"], s["n_head"], s["n_ff"], s["n_layer"]
        q_lora, kv_lora, nope, rope, v_head = s["mla"]
        groups, groups_used, n_shared, w_scale, gating, lead = s["ds_moe"]
        n_exp, n_used, ff_exp = s["experts"]
        factor, orig, fast, slow, log_mul = s["yarn"]
        nextn = s.get("nextn", 0)
        if nextn:
            self.key("nextn_predict_layers", nextn, VT.UINT32)
        for suffix, value, vt in (
                ("context_length", s["ctx"], VT.UINT32), ("embedding_length", E, VT.UINT32),
                ("block_count", L + nextn, VT.UINT32), ("feed_forward_length", F, VT.UINT32),
                ("leading_dense_block_count", lead, VT.UINT32),
                ("attention.head_count", H, VT.UINT32), ("attention.head_count_kv", 1, VT.UINT32),
                ("attention.q_lora_rank", q_lora, VT.UINT32), ("attention.kv_lora_rank", kv_lora, VT.UINT32),
                ("attention.key_length", kv_lora + rope, VT.UINT32), ("attention.value_length", kv_lora, VT.UINT32),
                ("attention.key_length_mla", nope + rope, VT.UINT32),
                ("attention.value_length_mla", v_head, VT.UINT32),
                ("attention.layer_norm_rms_epsilon", 1e-6, VT.FLOAT32),
                ("rope.dimension_count", rope, VT.UINT32), ("rope.freq_base", s["rope_base"], VT.FLOAT32),
                ("rope.scaling.type", "yarn", VT.STRING), ("rope.scaling.factor", factor, VT.FLOAT32),
                ("rope.scaling.original_context_length", orig, VT.UINT32),
                ("rope.scaling.yarn_beta_fast", fast, VT.FLOAT32), ("rope.scaling.yarn_beta_slow", slow, VT.FLOAT32),
                ("rope.scaling.yarn_log_multiplier", log_mul, VT.FLOAT32),
                ("expert_count", n_exp, VT.UINT32), ("expert_used_count", n_used, VT.UINT32),
                ("expert_feed_forward_length", ff_exp, VT.UINT32), ("expert_shared_count", n_shared, VT.UINT32),
                ("expert_group_count", groups, VT.UINT32), ("expert_group_used_count", groups_used, VT.UINT32),
                ("expert_weights_scale", w_scale, VT.FLOAT32), ("expert_weights_norm", True, VT.BOOL),
                ("expert_gating_func", gating, VT.UINT32)):
            self.key(suffix, value, vt)
        self.kv += [tuple(x) for x in vocab_kv]
        self.mat("token_embd.weight", n_vocab, E, scale=3.0, kind="lookup")
        self.vec("output_norm.weight", E)
        self.mat("output.weight", n_vocab, E, scale=3.0)
        for i in range(L + nextn):
            p = "blk.%d." % i
            self.vec(p + "attn_norm.weight", E)
            if i >= L:  # a multi-token-prediction layer, as the converter writes it (after the others)
                self.mat(p + "nextn.eh_proj.weight", E, 2 * E)
                self.vec(p + "nextn.enorm.weight", E)
                self.vec(p + "nextn.hnorm.weight", E)
                self.vec(p + "nextn.shared_head_norm.weight", E)
            if q_lora:
                self.mat(p + "attn_q_a.weight", q_lora, E)
                self.vec(p + "attn_q_a_norm.weight", q_lora)
                self.mat(p + "attn_q_b.weight", H * (nope + rope), q_lora)
            else:  # V2-Lite: one attn_q
                self.mat(p + "attn_q.weight", H * (nope + rope), E)
            self.mat(p + "attn_kv_a_mqa.weight", kv_lora + rope, E)
            self.vec(p + "attn_kv_a_norm.weight", kv_lora)
            self.mat(p + "attn_k_b.weight", H, kv_lora, nope)
            self.mat(p + "attn_v_b.weight", H, v_head, kv_lora)
            self.mat(p + "attn_output.weight", E, H * v_head)
            self.vec(p + "ffn_norm.weight", E)
            if i < lead:
                self.mat(p + "ffn_gate.weight", F, E)
                self.mat(p + "ffn_up.weight", F, E)
                self.mat(p + "ffn_down.weight", E, F)
                continue
            self.mat(p + "ffn_gate_inp.weight", n_exp, E, scale=2.0, kind="f32")
            self.vec(p + "exp_probs_b.bias", n_exp, mean=0.0, spread=1.0)
            self.mat(p + "ffn_gate_exps.weight", n_exp, ff_exp, E, kind="exps")
            self.mat(p + "ffn_up_exps.weight", n_exp, ff_exp, E, kind="exps")
            # the routed experts' outputs scaled down so that their weights (x 2.5) add
            # about what other families' do: a router near-tie between the engines then
            # moves the logits about as much as theirs (test_families's allowance)
            self.mat(p + "ffn_down_exps.weight", n_exp, E, ff_exp, scale=0.4, kind="exps")
            self.mat(p + "ffn_gate_shexp.weight", ff_exp * n_shared, E)
            self.mat(p + "ffn_up_shexp.weight", ff_exp * n_shared, E)
            self.mat(p + "ffn_down_shexp.weight", E, ff_exp * n_shared)

    def build_mamba2(self, vocab_kv, n_vocab):
        s = self.s
        E, L = s["n_embd"], s["n_layer"]
        dc, di, ds, ng, hd = s["ssm"]
        self.key("context_length", s["ctx"], VT.UINT32)
        self.key("embedding_length", E, VT.UINT32)
        self.key("feed_forward_length", 0, VT.UINT32)
        self.key("attention.head_count", 0, VT.UINT32)
        self.key("block_count", L, VT.UINT32)
        self.key("ssm.conv_kernel", dc, VT.UINT32)
        self.key("ssm.inner_size", di, VT.UINT32)
        self.key("ssm.state_size", ds, VT.UINT32)
        self.key("ssm.time_step_rank", di // hd, VT.UINT32)
        self.key("ssm.group_count", ng, VT.UINT32)
        self.key("attention.layer_norm_rms_epsilon", 1e-5, VT.FLOAT32)
        self.kv += [tuple(x) for x in vocab_kv]
        self.mat("token_embd.weight", n_vocab, E, scale=3.0, kind="mat" if s["tied"] else "lookup")
        self.vec("output_norm.weight", E)
        if not s["tied"]:
            self.mat("output.weight", n_vocab, E, scale=3.0)
        for i in range(L):
            p = "blk.%d." % i
            self.vec(p + "attn_norm.weight", E)
            self.mamba2_layer(p)

    def build_gemma4(self, vocab_kv, n_vocab):
        """Gemma 4 as its converter writes it: sliding_window_pattern one
        bool per layer, key and value lengths of both kinds, RoPE dimensions
        and bases of both kinds, rope_freqs for the global layers,
        shared_kv_layers, embedding_length_per_layer_input and the
        per-layer embedding tensors, layer_output_scale [1]."""
        s = self.s
        E, H, F, L = s["n_embd"], s["n_head"], s["n_ff"], s["n_layer"]
        P, swa = s["per_layer"], s["swa_layers"]
        first_shared = L - s["shared_kv"]
        DG, DS = s["head_dim"], s["head_dim_swa"]
        heads_kv = [s["n_head_kv_swa"] if i in swa else s["n_head_kv"] for i in range(L)]
        ffs = [F if i < first_shared else 2 * F for i in range(L)]
        n_exp, n_used, ff_exp = s.get("experts", (0, 0, 0))
        self.key("context_length", s["ctx"], VT.UINT32)
        self.key("embedding_length", E, VT.UINT32)
        self.key("block_count", L, VT.UINT32)
        self.key("feed_forward_length", ffs, VT.ARRAY, VT.INT32)
        self.key("attention.head_count", H, VT.UINT32)
        self.key("attention.head_count_kv", heads_kv, VT.ARRAY, VT.INT32)
        self.key("attention.key_length", DG, VT.UINT32)
        self.key("attention.value_length", DG, VT.UINT32)
        self.key("attention.key_length_swa", DS, VT.UINT32)
        self.key("attention.value_length_swa", DS, VT.UINT32)
        self.key("rope.dimension_count", DG, VT.UINT32)
        self.key("rope.dimension_count_swa", DS, VT.UINT32)
        self.key("rope.freq_base", s["rope_base"], VT.FLOAT32)
        self.key("rope.freq_base_swa", s["rope_base_swa"], VT.FLOAT32)
        self.key("attention.layer_norm_rms_epsilon", 1e-6, VT.FLOAT32)
        self.key("attention.sliding_window", s["sliding_window"], VT.UINT32)
        self.key("attention.sliding_window_pattern", [i in swa for i in range(L)], VT.ARRAY, VT.BOOL)
        self.key("attention.shared_kv_layers", s["shared_kv"], VT.UINT32)
        self.key("embedding_length_per_layer_input", P, VT.UINT32)
        self.key("final_logit_softcapping", s["final_softcap"], VT.FLOAT32)
        if n_exp:
            self.key("expert_count", n_exp, VT.UINT32)
            self.key("expert_used_count", n_used, VT.UINT32)
            self.key("expert_feed_forward_length", ff_exp, VT.UINT32)
        self.kv += [tuple(x) for x in vocab_kv]
        self.mat("token_embd.weight", n_vocab, E, scale=3.0)
        if P:
            self.mat("per_layer_token_embd.weight", n_vocab, L * P, scale=3.0, kind="lookup")
            self.mat("per_layer_model_proj.weight", L * P, E)
            self.vec("per_layer_proj_norm.weight", P)
        self.vec("output_norm.weight", E)
        n_rot = int(DG * s["rope_partial"] / 2)
        self.const("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (DG // 2 - n_rot), dtype=np.float32))
        for i in range(L):
            p = "blk.%d." % i
            own_kv = i < first_shared
            D, HKV, F = DS if i in swa else DG, heads_kv[i], ffs[i]
            self.vec(p + "attn_norm.weight", E)
            self.mat(p + "attn_q.weight", H * D, E)
            if own_kv:
                self.mat(p + "attn_k.weight", HKV * D, E)
                if i not in s["no_v_layers"]:
                    self.mat(p + "attn_v.weight", HKV * D, E)
            self.vec(p + "attn_q_norm.weight", D, mean=0.4)
            if own_kv:
                self.vec(p + "attn_k_norm.weight", D, mean=0.4)
            self.mat(p + "attn_output.weight", E, H * D)
            self.vec(p + "post_attention_norm.weight", E)
            self.vec(p + "ffn_norm.weight", E)
            self.mat(p + "ffn_gate.weight", F, E)
            self.mat(p + "ffn_up.weight", F, E)
            self.mat(p + "ffn_down.weight", E, F)
            if n_exp:
                self.vec(p + "post_ffw_norm_1.weight", E)
                self.vec(p + "pre_ffw_norm_2.weight", E)
                self.vec(p + "post_ffw_norm_2.weight", E)
                # the router reads rmsnorm(x) / sqrt(n_embd): weights large enough that
                # its logits (std ~2) rarely tie, as a trained router's
                self.mat(p + "ffn_gate_inp.weight", n_exp, E, scale=32.0, kind="f32")
                self.vec(p + "ffn_gate_inp.scale", E)
                if s.get("gate_up_fused"):  # as the converter writes gate_up_proj: the same values
                    self.mats(p + "ffn_gate_up_exps.weight", [(n_exp, ff_exp, E)] * 2, kind="exps")
                else:
                    self.mat(p + "ffn_gate_exps.weight", n_exp, ff_exp, E, kind="exps")
                    self.mat(p + "ffn_up_exps.weight", n_exp, ff_exp, E, kind="exps")
                self.mat(p + "ffn_down_exps.weight", n_exp, E, ff_exp, kind="exps")
                self.vec(p + "ffn_down_exps.scale", n_exp, mean=1.0, spread=0.3)
            self.vec(p + "post_ffw_norm.weight", E)
            if P:
                self.mat(p + "inp_gate.weight", P, E)
                self.mat(p + "proj.weight", E, P)
                self.vec(p + "post_norm.weight", E)
            self.vec(p + "layer_output_scale.weight", 1, mean=0.8)

    def build_gemma3n(self, vocab_kv, n_vocab):
        """Gemma 3n as its converter writes it: altup_active_idx,
        altup_num_inputs, embedding_length_per_layer_input, shared_kv_layers,
        activation_sparsity_scale (the normal quantile of 0.95 on the sparse
        layers, 0 after), sliding_window_pattern one bool per layer; the
        AltUp projections stacked [n_altup - 1][n_embd][n_embd]; every
        layer with its own attn_k / attn_v (also the sharing ones, whose
        keys and values llama.cpp does not compute); AltUp and Laurel
        tensors and per_layer_model_proj left unquantized, as llama.cpp's
        quantizer leaves them."""
        s = self.s
        E, H, HKV, D, F, L = s["n_embd"], s["n_head"], s["n_head_kv"], s["head_dim"], s["n_ff"], s["n_layer"]
        P, R, A = s["per_layer"], s["laurel_rank"], s["altup"]
        swa = [i % 5 != 4 and i != L - 1 for i in range(L)]
        for suffix, value, vt in (
                ("context_length", s["ctx"], VT.UINT32), ("embedding_length", E, VT.UINT32),
                ("block_count", L, VT.UINT32), ("feed_forward_length", F, VT.UINT32),
                ("attention.head_count", H, VT.UINT32), ("attention.head_count_kv", HKV, VT.UINT32),
                ("attention.key_length", D, VT.UINT32), ("attention.value_length", D, VT.UINT32),
                ("rope.freq_base", s["rope_base"], VT.FLOAT32), ("rope.freq_base_swa", s["rope_base_swa"], VT.FLOAT32),
                ("attention.layer_norm_rms_epsilon", 1e-6, VT.FLOAT32),
                ("attention.sliding_window", s["sliding_window"], VT.UINT32),
                ("altup_active_idx", 0, VT.UINT32), ("altup_num_inputs", A, VT.UINT32),
                ("embedding_length_per_layer_input", P, VT.UINT32),
                ("attention.shared_kv_layers", s["shared_kv"], VT.UINT32)):
            self.key(suffix, value, vt)
        sparse = [1.6448533535003662 if i < s["sparse_layers"] else 0.0 for i in range(L)]
        self.key("activation_sparsity_scale", sparse, VT.ARRAY, VT.FLOAT32)
        self.key("attention.sliding_window_pattern", swa, VT.ARRAY, VT.BOOL)
        self.kv += [tuple(x) for x in vocab_kv]
        self.mat("token_embd.weight", n_vocab, E, scale=3.0)
        self.mat("altup_proj.weight", A - 1, E, E, kind="f32")
        self.mat("altup_unembd_proj.weight", A - 1, E, E, kind="f32")
        self.mat("per_layer_token_embd.weight", n_vocab, L * P, scale=3.0, kind="lookup")
        self.mat("per_layer_model_proj.weight", L * P, E, kind="f32")
        self.vec("per_layer_proj_norm.weight", P)
        self.vec("output_norm.weight", E)
        for i in range(L):
            p = "blk.%d." % i
            self.vec(p + "attn_norm.weight", E)
            self.mat(p + "attn_q.weight", H * D, E)
            self.mat(p + "attn_k.weight", HKV * D, E)
            self.mat(p + "attn_v.weight", HKV * D, E)
            self.mat(p + "attn_output.weight", E, H * D)
            self.vec(p + "attn_q_norm.weight", D, mean=0.2)
            self.vec(p + "attn_k_norm.weight", D, mean=0.2)
            self.vec(p + "post_attention_norm.weight", E, mean=0.5)
            self.vec(p + "ffn_norm.weight", E)
            self.mat(p + "ffn_gate.weight", F, E)
            self.mat(p + "ffn_up.weight", F, E)
            self.mat(p + "ffn_down.weight", E, F)
            self.vec(p + "post_ffw_norm.weight", E, mean=0.5)
            self.mat(p + "inp_gate.weight", P, E)
            self.mat(p + "proj.weight", E, P)
            self.vec(p + "post_norm.weight", E)
            self.mat(p + "altup_correct_coef.weight", A, A, scale=0.1, kind="f32")
            self.vec(p + "altup_correct_scale.weight", E)
            self.mat(p + "altup_predict_coef.weight", A * A, A, scale=0.1, kind="f32")
            # the router reads rmsnorm(x) / n_embd: weights ~16 give outputs ~1
            self.mat(p + "altup_router.weight", A, E, scale=256.0, kind="f32")
            self.vec(p + "altup_router_norm.weight", E)
            self.mat(p + "laurel_l.weight", R, E, kind="f32")
            self.mat(p + "laurel_r.weight", E, R, kind="f32")
            self.vec(p + "laurel_post_norm.weight", E)

    def build(self):
        s, arch = self.s, self.s["arch"]
        vocab_kv, n_vocab = read_vocab(s["vocab"], s.get("pre"), s.get("pad_vocab"))
        if arch == "gemma4":
            return self.build_gemma4(vocab_kv, n_vocab)
        if arch == "gemma3n":
            return self.build_gemma3n(vocab_kv, n_vocab)
        if arch == "mamba2":
            return self.build_mamba2(vocab_kv, n_vocab)
        if arch == "lfm2":
            return self.build_lfm2(vocab_kv, n_vocab)
        if arch == "granitehybrid":
            return self.build_granitehybrid(vocab_kv, n_vocab)
        if arch == "nemotron_h":
            return self.build_nemotron_h(vocab_kv, n_vocab)
        if arch in ("qwen35", "qwen35moe", "qwen3next"):
            return self.build_qwen35(vocab_kv, n_vocab)
        if arch == "deepseek2":
            return self.build_deepseek2(vocab_kv, n_vocab)
        E, H, HKV, D, F, L = s["n_embd"], s["n_head"], s["n_head_kv"], s["head_dim"], s["n_ff"], s["n_layer"]
        Q, KV = H * D, HKV * D
        self.key("context_length", s["ctx"], VT.UINT32)
        self.key("embedding_length", E, VT.UINT32)
        self.key("block_count", L, VT.UINT32)
        self.key("feed_forward_length", F, VT.UINT32)
        self.key("attention.head_count", H, VT.UINT32)
        self.key("attention.head_count_kv", HKV, VT.UINT32)
        if Q != E:
            self.key("attention.key_length", D, VT.UINT32)
            self.key("attention.value_length", D, VT.UINT32)
        self.key("rope.dimension_count", s.get("rope_dims", D), VT.UINT32)
        self.key("rope.freq_base", s["rope_base"], VT.FLOAT32)
        if s.get("norm") == "layer":
            self.key("attention.layer_norm_epsilon", 1e-5, VT.FLOAT32)
        else:
            self.key("attention.layer_norm_rms_epsilon", 1e-6 if arch == "gemma2" else 1e-5, VT.FLOAT32)
        if "logit_scale" in s:
            self.key("logit_scale", s["logit_scale"], VT.FLOAT32)
        if "sliding_window" in s:
            self.key("attention.sliding_window", s["sliding_window"], VT.UINT32)
        if s.get("gemma2"):
            self.key("attn_logit_softcapping", s["attn_softcap"], VT.FLOAT32)
            self.key("final_logit_softcapping", s["final_softcap"], VT.FLOAT32)
        if "yarn" in s:
            factor, orig, fast, slow, log_mul = s["yarn"]
            self.key("rope.scaling.type", "yarn", VT.STRING)
            self.key("rope.scaling.factor", factor, VT.FLOAT32)
            self.key("rope.scaling.yarn_beta_fast", fast, VT.FLOAT32)
            self.key("rope.scaling.yarn_beta_slow", slow, VT.FLOAT32)
            if log_mul is not None:
                self.key("rope.scaling.yarn_log_multiplier", log_mul, VT.FLOAT32)
            self.key("rope.scaling.original_context_length", orig, VT.UINT32)
        if "scales" in s:
            embd, resid, attn, logit = s["scales"]
            self.key("embedding_scale", embd, VT.FLOAT32)
            self.key("residual_scale", resid, VT.FLOAT32)
            self.key("attention.scale", attn, VT.FLOAT32)
            self.key("logit_scale", logit, VT.FLOAT32)
        if "attn_temp" in s:
            self.key("attention.temperature_scale", s["attn_temp"], VT.FLOAT32)
        if s.get("longrope"):
            self.key("rope.scaling.original_context_length", s["orig_ctx"], VT.UINT32)
            factor = s["ctx"] / s["orig_ctx"]
            self.key("rope.scaling.attn_factor", math.sqrt(1 + math.log(factor) / math.log(s["orig_ctx"])),
                     VT.FLOAT32)
        n_exp = n_used = ff_exp = 0
        if "experts" in s:
            n_exp, n_used, ff_exp = s["experts"]
            self.key("expert_count", n_exp, VT.UINT32)
            self.key("expert_used_count", n_used, VT.UINT32)
            if ff_exp:
                self.key("expert_feed_forward_length", ff_exp, VT.UINT32)
            else:
                ff_exp = F
            if "shared_ff" in s:
                self.key("expert_shared_feed_forward_length", s["shared_ff"], VT.UINT32)
            if "moe_step" in s:
                self.key("interleave_moe_layer_step", s["moe_step"], VT.UINT32)
        self.kv += [tuple(x) for x in vocab_kv]

        # token embedding: only looked up when the head is separate
        self.mat("token_embd.weight", n_vocab, E, scale=3.0, kind="mat" if s["tied"] else "lookup")
        self.vec("output_norm.weight", E)
        if not s["tied"]:
            self.mat("output.weight", n_vocab, E, scale=3.0)
        if s.get("rope_freqs"):
            self.const("rope_freqs.weight", llama3_rope_freqs(D, s["rope_base"]))
        if s.get("longrope"):
            n = D // 2
            self.const("rope_factors_long.weight", (1.0 + np.arange(n, dtype=np.float32) * 0.5).astype(np.float32))
            self.const("rope_factors_short.weight", (1.0 + np.arange(n, dtype=np.float32) * 0.02).astype(np.float32))
        post_norms = s.get("gemma2") or s.get("post_norms")
        for i in range(L):
            p = "blk.%d." % i
            if not s.get("no_pre_norm"):
                self.vec(p + "attn_norm.weight", E)
            if s.get("fused"):
                self.mat(p + "attn_qkv.weight", Q + 2 * KV, E)
            else:
                self.mat(p + "attn_q.weight", Q, E)
                self.mat(p + "attn_k.weight", KV, E)
                self.mat(p + "attn_v.weight", KV, E)
            if s.get("qkv_bias"):
                self.vec(p + "attn_q.bias", Q, mean=0.0, spread=0.5)
                self.vec(p + "attn_k.bias", KV, mean=0.0, spread=0.5)
                self.vec(p + "attn_v.bias", KV, mean=0.0, spread=0.5)
            if s.get("qk_norm") == "head":
                self.vec(p + "attn_q_norm.weight", D)
                self.vec(p + "attn_k_norm.weight", D)
            elif s.get("qk_norm") == "full":
                self.vec(p + "attn_q_norm.weight", Q)
                self.vec(p + "attn_k_norm.weight", KV)
            self.mat(p + "attn_output.weight", E, Q)
            if s.get("gpt_oss"):
                self.vec(p + "attn_output.bias", E, mean=0.0, spread=0.5)
                self.vec(p + "attn_sinks.weight", H, mean=0.0, spread=2.0)
                self.vec(p + "post_attention_norm.weight", E)
            if post_norms:
                self.vec(p + "post_attention_norm.weight", E)
            if not (s.get("parallel") or s.get("no_pre_norm") or s.get("gpt_oss")):
                self.vec(p + "ffn_norm.weight", E)
            if n_exp and (i + 1) % s.get("moe_step", 1) == 0:
                self.mat(p + "ffn_gate_inp.weight", n_exp, E, scale=2.0, kind="f32")
                big = 5.0 if s.get("gpt_oss") else 1.0  # past the clamped SwiGLU's limit
                self.mat(p + "ffn_gate_exps.weight", n_exp, ff_exp, E, scale=big, kind="exps")
                self.mat(p + "ffn_up_exps.weight", n_exp, ff_exp, E, scale=big, kind="exps")
                self.mat(p + "ffn_down_exps.weight", n_exp, E, ff_exp, kind="exps")
                if s.get("gpt_oss"):
                    self.vec(p + "ffn_gate_inp.bias", n_exp, mean=0.0, spread=1.0)
                    self.arr(p + "ffn_gate_exps.bias", (n_exp, ff_exp), lambda r: r.standard_normal((n_exp, ff_exp)))
                    self.arr(p + "ffn_up_exps.bias", (n_exp, ff_exp), lambda r: r.standard_normal((n_exp, ff_exp)))
                    self.arr(p + "ffn_down_exps.bias", (n_exp, E), lambda r: 0.5 * r.standard_normal((n_exp, E)))
                if "shared_ff" in s:
                    sf = s["shared_ff"]
                    self.vec(p + "ffn_gate_inp_shexp.weight", E, mean=0.0, spread=0.2)
                    self.mat(p + "ffn_gate_shexp.weight", sf, E)
                    self.mat(p + "ffn_up_shexp.weight", sf, E)
                    self.mat(p + "ffn_down_shexp.weight", E, sf)
                elif s.get("shexp_plain"):  # Llama 4: the experts' width, no gate
                    self.mat(p + "ffn_gate_shexp.weight", ff_exp, E)
                    self.mat(p + "ffn_up_shexp.weight", ff_exp, E)
                    self.mat(p + "ffn_down_shexp.weight", E, ff_exp)
            elif s.get("fused") or s.get("ffn_fused"):
                self.mat(p + "ffn_up.weight", 2 * F, E)
                self.mat(p + "ffn_down.weight", E, F)
            else:
                self.mat(p + "ffn_gate.weight", F, E)
                self.mat(p + "ffn_up.weight", F, E)
                self.mat(p + "ffn_down.weight", E, F)
            if post_norms:
                self.vec(p + "post_ffw_norm.weight", E)

    def write(self, path, qtype):
        w = gguf.GGUFWriter(path, self.s["arch"])
        w.add_name("spindle-test-%s-%s" % (self.name, qtype))
        for key, value, vtype, sub in self.kv:
            w.add_key_value(key, value, vtype, sub_type=sub)
        for name, shape, kind, _ in self.tensors:
            dtype, qt, nbytes = storage(shape, kind, qtype)
            w.add_tensor_info(name, shape, np.dtype(dtype), nbytes, raw_dtype=qt)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        rng = np.random.default_rng(self.seed)
        for name, shape, kind, make in self.tensors:
            w.write_tensor_data(encode(make(rng), kind, qtype))
        w.close()


def write_vocab(name, pre, path):
    """The vocabulary test file ggml-vocab-NAME.gguf (keys only, no tensors)
    with tokenizer.ggml.pre set to pre: a tokenizer-only file of another
    split, for the tokenizer goldens."""
    r = gguf.GGUFReader(vocab_path(name))
    w = gguf.GGUFWriter(path + ".tmp", r.fields["general.architecture"].contents())
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = pre if key == "tokenizer.ggml.pre" else f.contents()
        w.add_key_value(key, value, f.types[0], sub_type=f.types[1] if f.types[0] == VT.ARRAY else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    os.replace(path + ".tmp", path)
    return path


def is_linear(name):
    """Whether the family has linear (recurrent) layers."""
    return any(k in FAMILIES[name] for k in ("ssm", "conv_layers", "delta"))  # Mamba-2, LFM2, DeltaNet


# Variants: a family's model written in another layout its converter
# produces, with the same values (so the family's goldens hold for it):
# name -> (family, spec changes).
VARIANTS = {
    # Gemma 4's experts as its converter writes them (gate_up_proj): one
    # [n_expert][2 * n_ff_exp][n_embd] stack, each expert's gate rows then its up rows
    "gemma4-moe-fused": ("gemma4-moe", dict(gate_up_fused=True)),
    # DeepSeek V3's multi-token-prediction layer after the others
    # (nextn_predict_layers 1: a whole layer plus nextn.eh_proj, enorm,
    # hnorm, shared_head_norm), which llama.cpp loads but does not run
    "deepseek2-nextn": ("deepseek2", dict(nextn=1)),
}


def build_variant(name, out_dir, qtype="f32"):
    """Writes variant NAME's copy NAME-QTYPE.gguf; returns its path."""
    family, change = VARIANTS[name]
    spec = dict(FAMILIES[family], **change)
    b = Builder(family, spec, seed=spec["seed"])
    b.build()
    path = os.path.join(out_dir, "%s-%s.gguf" % (name, qtype))
    tmp = "%s.%d.tmp" % (path, os.getpid())
    b.write(tmp, qtype)
    os.replace(tmp, path)
    return path


def build_family(name, out_dir, types=None):
    """Writes the family's copies NAME-TYPE.gguf."""
    if name in BENCH:
        spec = BENCH[name]
        seed = spec.get("seed") or 2000 + sorted(n for n in BENCH if "seed" not in BENCH[n]).index(name)
        b = Builder(name, spec, seed=seed)
    else:
        spec = FAMILIES[name]
        seed = spec.get("seed") or 1000 + sorted(n for n in FAMILIES if "seed" not in FAMILIES[n]).index(name)
        b = Builder(name, spec, seed=seed)
    b.build()
    paths = {}
    for t in types or types_of(name):
        path = os.path.join(out_dir, "%s-%s.gguf" % (name, t))
        tmp = "%s.%d.tmp" % (path, os.getpid())  # pytest workers may write the same (identical) file at once
        b.write(tmp, t)
        os.replace(tmp, path)
        paths[t] = path
    return paths


# GGUF value types by their fixed byte sizes (8: string, 9: array).
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def with_trailing_ones(src, dst):
    """Copies the GGUF file src to dst with every tensor's shape given one
    more dimension of 1 (vectors [n, 1], matrices [k, n, 1]; up to GGUF's
    4), as llama.cpp's converter records some tensors: the same model and
    bytes, other recorded ranks.  Only the header is parsed; the tensor
    data is copied as it is (offsets are relative to the data section)."""
    with open(src, "rb") as f:
        head = f.read(1 << 20)
        while True:
            try:
                return _rewrite_with_ones(f, head, dst)
            except IndexError:  # the header is longer than what was read
                more = f.read(len(head))
                if not more:
                    raise ValueError("%s: truncated GGUF header" % src)
                head += more


def _rewrite_with_ones(f, head, dst):
    import struct
    pos = 0

    def take(fmt):
        nonlocal pos
        n = struct.calcsize(fmt)
        if pos + n > len(head):
            raise IndexError
        v = struct.unpack_from(fmt, head, pos)
        pos += n
        return v[0] if len(v) == 1 else v

    def skip_string():
        nonlocal pos
        n = take("<Q")
        if pos + n > len(head):
            raise IndexError
        pos += n
        return head[pos - n:pos]

    def skip_value(t):
        nonlocal pos
        if t == 8:
            return skip_string()
        if t == 9:
            et, n = take("<IQ")
            for _ in range(n) if et in (8, 9) else ():
                skip_value(et)
            if et not in (8, 9):
                pos += n * _GGUF_SIZES[et]
            return None
        return take("<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[_GGUF_SIZES[t]])

    magic, version, n_tensors, n_kv = take("<4sIQQ")
    assert magic == b"GGUF" and version == 3, "not a GGUF v3 file"
    align = 32
    for _ in range(n_kv):
        key = skip_string()
        value = skip_value(take("<I"))
        if key == b"general.alignment":
            align = value
    infos_at = pos
    infos = []
    for _ in range(n_tensors):
        name = skip_string()
        n_dims = take("<I")
        dims = [take("<Q") for _ in range(n_dims)]
        qtype, offset = take("<IQ")
        infos.append((name, dims + [1] if n_dims < 4 else dims, qtype, offset))
    data_at = -(-pos // align) * align
    out = bytearray(head[:infos_at])
    for name, dims, qtype, offset in infos:
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
        out += struct.pack("<%dQ" % len(dims), *dims) + struct.pack("<IQ", qtype, offset)
    out += bytes(-len(out) % align)
    with open(dst, "wb") as g:
        g.write(out)
        f.seek(data_at)
        while True:
            block = f.read(1 << 22)
            if not block:
                break
            g.write(block)
    return dst


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--list-linear", action="store_true", help="the families with linear (recurrent) layers")
    ap.add_argument("--list-chunked", action="store_true", help="the families with chunked attention, and the chunk")
    ap.add_argument("--bench", choices=sorted(BENCH))
    ap.add_argument("--variant", choices=sorted(VARIANTS), help="one f32 copy of a family in another layout")
    ap.add_argument("--list-variants", metavar="NAME", help="family NAME's variants")
    ap.add_argument("--types", metavar="NAME", help="the copies family NAME is written in")
    args = ap.parse_args(argv[1:])
    if args.list:
        print("\n".join(sorted(FAMILIES)))
        return 0
    if args.list_chunked:
        print("\n".join("%s %d" % (n, FAMILIES[n]["chunk"]) for n in sorted(FAMILIES) if "chunk" in FAMILIES[n]))
        return 0
    if args.types:
        print("\n".join(types_of(args.types)))
        return 0
    if args.list_linear:
        print("\n".join(n for n in sorted(FAMILIES) if is_linear(n)))
        return 0
    os.makedirs(args.out, exist_ok=True)
    if args.bench:
        print(build_family(args.bench, args.out, types=("f16",))["f16"])
        return 0
    if args.list_variants:
        print("\n".join(v for v in sorted(VARIANTS) if VARIANTS[v][0] == args.list_variants))
        return 0
    if args.variant:
        print(build_variant(args.variant, args.out))
        return 0
    for name in args.family or sorted(FAMILIES):
        for t, path in build_family(name, args.out).items():
            print("%s %s %s" % (sha256_file(path), os.path.getsize(path), path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
