"""Writes the GGUF seed corpus tests/fuzz/corpus/gguf/ from tests/gguf's
generator: one small valid llama model (1 layer, width 32, 20 KiB, under the
fuzzer's 64 KiB max_len) plus a few malformed variants of it, so the fuzzer
starts from inputs that reach every parser section and the model checks.
Run with build/venv's python (numpy):
    build/venv/bin/python tests/fuzz/make_gguf_seeds.py
Output is deterministic (fixed generator seed)."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gguf"))
from ggufgen import Model, T_F32, T_STR, T_U32  # noqa: E402
import variants  # noqa: E402

OUT = os.path.join(HERE, "corpus", "gguf")


def small():
    return Model(n_embd=32, n_head=2, n_head_kv=1, n_layer=1, n_ff=32)


def with_mutation(mutate=None, post=None):
    m = small()
    if mutate:
        mutate(m)
    b = m.build()
    return post(b) if post else b


SEEDS = {
    "valid_small.gguf": with_mutation(),
    "valid_two_layers.gguf": Model(n_embd=32, n_head=2, n_head_kv=2, n_layer=2, n_ff=32).build(),
    "header_only.gguf": with_mutation(post=lambda b: b[:24]),
    "version_2.gguf": with_mutation(post=lambda b: b[:4] + struct.pack("<I", 2) + b[8:]),
    "truncated_data.gguf": with_mutation(post=lambda b: b[:-100]),
    "alignment_64.gguf": with_mutation(lambda m: m.set_kv("general.alignment", T_U32, 64)),
    "arch_gemma3_name.gguf": with_mutation(lambda m: m.set_kv("general.architecture", T_STR, "gemma3")),
    "spm_tokenizer.gguf": with_mutation(lambda m: m.set_kv("tokenizer.ggml.model", T_STR, "llama")),
    "missing_tensor.gguf": with_mutation(lambda m: m.tensors.pop()),
    # the families' keys: experts, rope factors, windows, soft-caps
    "experts_small.gguf": Model(n_embd=32, n_head=2, n_head_kv=1, n_layer=1, n_ff=32, n_expert=4,
                                n_expert_used=2).build(),
    "rope_freqs.gguf": with_mutation(lambda m: m.add_tensor("rope_freqs.weight", [8])),
    "longrope.gguf": with_mutation(lambda m: variants.longrope(m)),
    "sliding_window.gguf": with_mutation(lambda m: m.set_kv("llama.attention.sliding_window", T_U32, 8)),
    "gemma2_softcap.gguf": with_mutation(lambda m: (m.set_arch("gemma2"),
                                                    m.set_kv("gemma2.attn_logit_softcapping", T_F32, 50.0))),
    "qwen3moe_name.gguf": with_mutation(lambda m: m.set_arch("qwen3moe")),
}

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print("%s: %d bytes" % (name, len(data)))
