"""Malformed variants of the tiny model: (name, mutate(model), expected text
in the one-line error).  Each mutation changes one thing."""
import struct

from ggufgen import Model, T_ARR, T_F32, T_I32, T_STR, T_U32, T_U8, T_BOOL, GGML_Q8_0, GGML_F32

HEAD_DIM = 16  # the tiny model's: 64 wide, 4 heads


def raw_kv(m, key_bytes, vtype, value_bytes):
    """Appends a key/value written byte for byte (for malformed entries)."""
    m.kv.append((key_bytes, vtype, value_bytes))


def swap_offsets(m):
    """Tensors 1 and 2 (same size) trade places in the data: no overlap, out of order."""
    m.build()
    a = m.offsets[1]
    b = m.offsets[2]
    m.tensors[1].update(offset=b)
    m.tensors[2].update(offset=a)


def to_moe(m, n_expert=4, n_used=2, n_ff=128):
    """The tiny model with Mixtral-style experts instead of its dense
    feed-forward (llama.expert_count / expert_used_count, router, 3-D stacks)."""
    m.tensors = [t for t in m.tensors if not any(k in t["name"] for k in ("ffn_gate.", "ffn_up.", "ffn_down."))]
    m.set_kv("llama.expert_count", T_U32, n_expert)
    m.set_kv("llama.expert_used_count", T_U32, n_used)
    for i in range(2):
        m.add_tensor("blk.%d.ffn_gate_inp.weight" % i, [64, n_expert])
        m.add_tensor("blk.%d.ffn_gate_exps.weight" % i, [64, n_ff, n_expert], GGML_Q8_0)
        m.add_tensor("blk.%d.ffn_up_exps.weight" % i, [64, n_ff, n_expert], GGML_Q8_0)
        m.add_tensor("blk.%d.ffn_down_exps.weight" % i, [n_ff, 64, n_expert], GGML_Q8_0)
    return m


def to_llama4(m, n_expert=4, n_ff=128):
    """The tiny model as Llama 4: layer 1 with experts (top-1) and an
    ungated shared expert of the experts' width, layer 0 dense
    (interleave_moe_layer_step 2); the attention chunk is the fixed 8192."""
    m.set_arch("llama4")
    m.tensors = [t for t in m.tensors if not any(k in t["name"] for k in ("blk.1.ffn_gate.", "blk.1.ffn_up.",
                                                                         "blk.1.ffn_down."))]
    m.set_kv("llama4.expert_count", T_U32, n_expert)
    m.set_kv("llama4.expert_used_count", T_U32, 1)
    m.set_kv("llama4.expert_feed_forward_length", T_U32, n_ff)
    m.set_kv("llama4.interleave_moe_layer_step", T_U32, 2)
    m.add_tensor("blk.1.ffn_gate_inp.weight", [64, n_expert])
    for k in ("gate", "up", "down"):
        dims = [n_ff, 64] if k == "down" else [64, n_ff]
        m.add_tensor("blk.1.ffn_%s_exps.weight" % k, dims + [n_expert], GGML_Q8_0)
        m.add_tensor("blk.1.ffn_%s_shexp.weight" % k, dims, GGML_Q8_0)
    return m


def to_gemma4(m, per_layer=0):
    """The tiny model as Gemma 4: layer 0 local (window 4), layer 1 global
    (sliding_window_pattern, a bool per layer), QK-norms, post-norms, the
    global layers' rope_freqs; per_layer > 0: per-layer embeddings that wide."""
    m.set_arch("gemma4")
    m.set_kv("gemma4.attention.sliding_window", T_U32, 4)
    m.set_kv("gemma4.attention.sliding_window_pattern", T_ARR, (T_BOOL, [1, 0]))
    m.set_kv("gemma4.embedding_length_per_layer_input", T_U32, per_layer)
    m.add_tensor("rope_freqs.weight", [HEAD_DIM // 2], values=[1.0] * 2 + [1e30] * (HEAD_DIM // 2 - 2))
    for i in range(2):
        m.add_tensor("blk.%d.attn_q_norm.weight" % i, [HEAD_DIM])
        m.add_tensor("blk.%d.attn_k_norm.weight" % i, [HEAD_DIM])
        for n in ("post_attention_norm", "post_ffw_norm"):
            m.add_tensor("blk.%d.%s.weight" % (i, n), [64])
        if per_layer:
            m.add_tensor("blk.%d.inp_gate.weight" % i, [64, per_layer])
            m.add_tensor("blk.%d.proj.weight" % i, [per_layer, 64])
            m.add_tensor("blk.%d.post_norm.weight" % i, [64])
    if per_layer:
        m.add_tensor("per_layer_token_embd.weight", [2 * per_layer, m.tensor("token_embd.weight")["dims"][1]])
        m.add_tensor("per_layer_model_proj.weight", [64, 2 * per_layer])
        m.add_tensor("per_layer_proj_norm.weight", [per_layer])
    return m


def longrope(m, long_len=HEAD_DIM // 2, short=True):
    m.set_kv("llama.rope.scaling.type", T_STR, "longrope")
    m.add_tensor("rope_factors_long.weight", [long_len], values=[1.0 + i for i in range(long_len)])
    if short:
        m.add_tensor("rope_factors_short.weight", [HEAD_DIM // 2], values=[1.0] * (HEAD_DIM // 2))


def yarn(m):
    """The tiny model as mistral3 with YaRN scaling (factor 4 over 1024 positions)."""
    m.set_arch("mistral3")
    m.set_kv("mistral3.rope.scaling.type", T_STR, "yarn")
    m.set_kv("mistral3.rope.scaling.factor", T_F32, 4.0)
    m.set_kv("mistral3.rope.scaling.original_context_length", T_U32, 1024)


def cohere2_no_logit_scale(m):
    """The tiny model as cohere2 (LayerNorm epsilon, a window, no ffn_norm) but no logit_scale."""
    m.set_arch("cohere2")
    m.set_kv("cohere2.attention.layer_norm_epsilon", T_F32, 1e-5)
    m.set_kv("cohere2.attention.sliding_window", T_U32, 4)
    m.tensors = [t for t in m.tensors if "ffn_norm" not in t["name"]]


def variant_list():
    out = []

    def add(name, expect, mutate=None, post=None):
        out.append((name, expect, mutate, post))

    # header
    add("bad_magic", "bad magic", post=lambda b: b"GGUX" + b[4:])
    add("version_0", "version 0", post=lambda b: b[:4] + struct.pack("<I", 0) + b[8:])
    add("version_1", "version 1", post=lambda b: b[:4] + struct.pack("<I", 1) + b[8:])
    add("version_future", "version 99", post=lambda b: b[:4] + struct.pack("<I", 99) + b[8:])
    add("huge_tensor_count", "tensor count", post=lambda b: b[:8] + struct.pack("<Q", 1 << 60) + b[16:])
    add("huge_kv_count", "key count", post=lambda b: b[:16] + struct.pack("<Q", (1 << 64) - 1) + b[24:])
    add("truncated_header", "past the end", post=lambda b: b[:12])
    add("empty_file", "bad magic", post=lambda b: b"")
    # key/values
    add("key_len_past_end", "past the end", lambda m: raw_kv(m, struct.pack("<Q", 1 << 40) + b"x", T_U32, b""))
    add("key_len_wraps", "past the end", lambda m: raw_kv(m, struct.pack("<Q", (1 << 64) - 2) + b"x", T_U32, b""))
    add("string_len_past_end", "string length past the end",
        lambda m: raw_kv(m, struct.pack("<Q", 3) + b"abc", T_STR, struct.pack("<Q", 1 << 40)))
    add("array_len_past_end", "past the end",
        lambda m: raw_kv(m, struct.pack("<Q", 3) + b"arr", T_ARR, struct.pack("<IQ", T_U32, 1 << 40)))
    add("array_len_wraps", "past the end",
        lambda m: raw_kv(m, struct.pack("<Q", 3) + b"arr", T_ARR, struct.pack("<IQ", T_U32, (1 << 62) + 1)))
    add("string_array_huge", "strings past the end",
        lambda m: raw_kv(m, struct.pack("<Q", 3) + b"arr", T_ARR, struct.pack("<IQ", T_STR, 1 << 50)))
    add("empty_key", "empty key", lambda m: raw_kv(m, struct.pack("<Q", 0), T_U32, struct.pack("<I", 1)))
    add("duplicate_key", "duplicate key", lambda m: m.kv.append(("llama.block_count", T_U32, 2)))
    add("unknown_value_type", "unknown value type 13",
        lambda m: raw_kv(m, struct.pack("<Q", 3) + b"odd", 13, struct.pack("<I", 1)))
    add("unknown_array_type", "unknown array element type 77",
        lambda m: raw_kv(m, struct.pack("<Q", 3) + b"arr", T_ARR, struct.pack("<IQ", 77, 0)))
    add("nested_array", "nested arrays",
        lambda m: raw_kv(m, struct.pack("<Q", 3) + b"arr", T_ARR, struct.pack("<IQ", T_ARR, 1)))
    add("bool_not_0_1", "not 0 or 1", lambda m: raw_kv(m, struct.pack("<Q", 4) + b"flag", T_BOOL, b"\x07"))
    # alignment
    add("alignment_0", "general.alignment", lambda m: m.set_kv("general.alignment", T_U32, 0))
    add("alignment_3", "not a power of two", lambda m: m.set_kv("general.alignment", T_U32, 3))
    add("alignment_48", "not a power of two", lambda m: m.set_kv("general.alignment", T_U32, 48))
    add("alignment_wrong_type", "general.alignment", lambda m: m.set_kv("general.alignment", T_STR, "32"))
    # tensor infos
    add("tensor_name_empty", "empty name", lambda m: m.tensors[1].update(name=""))
    add("tensor_name_too_long", "name length", lambda m: m.tensors[1].update(name="x" * 200))
    add("tensor_name_duplicate", "duplicate tensor name", lambda m: m.tensors[2].update(name=m.tensors[1]["name"]))
    add("tensor_rank_5", "rank 5", lambda m: m.tensors[1].update(dims=[64, 1, 1, 1, 1]))
    add("tensor_rank_0", "rank 0", lambda m: m.tensors[1].update(dims=[]))
    add("tensor_dim_zero", "dimension 0 is 0", lambda m: m.tensors[1].update(dims=[0]))
    add("tensor_dims_overflow", "overflows", lambda m: m.tensors[2].update(dims=[1 << 40, 1 << 40]))
    add("tensor_row_not_block_multiple", "not a multiple of the Q8_0 block size",
        lambda m: m.tensor("blk.0.attn_q.weight").update(dims=[48, 64]))
    add("tensor_unknown_type", "unknown or unsupported type id 99", lambda m: m.tensors[1].update(type=99))
    add("tensor_offset_past_end", "past the end of the data section", lambda m: m.tensors[-1].update(offset=1 << 40))
    add("tensor_offset_misaligned", "not a multiple of the alignment", lambda m: m.tensors[1].update(offset=8))
    add("tensor_offset_overlap", "before the end of the previous tensor", lambda m: m.tensors[2].update(offset=0))
    add("tensor_offsets_out_of_order", "before the end of the previous tensor", swap_offsets)
    # truncation inside each section
    add("truncated_in_kv", "past the end", post=lambda b: b[:SECTIONS["kv_start"] + 2000])
    add("truncated_in_tensor_infos", "past the end", post=lambda b: b[:SECTIONS["infos_start"] + 100])
    add("truncated_in_data", "past the end of the data section", post=lambda b: b[:-100])
    # hyper-parameters against tensors
    add("heads_do_not_divide_width", "does not divide embedding_length",
        lambda m: m.set_kv("llama.attention.head_count", T_U32, 6))
    add("kv_heads_do_not_divide_heads", "head_count_kv",
        lambda m: m.set_kv("llama.attention.head_count_kv", T_U32, 3))
    add("block_count_too_large", "tensor 'blk.2.attn_norm.weight': missing",
        lambda m: m.set_kv("llama.block_count", T_U32, 3))
    add("vocab_larger_than_embeddings", "token_embd.weight",
        lambda m: (m.kv.__setitem__(12, ("tokenizer.ggml.tokens", T_ARR, (T_STR, m.kv[12][2][1] + ["extra"]))),
                   m.kv.__setitem__(13, ("tokenizer.ggml.token_type", T_ARR, (T_I32, m.kv[13][2][1] + [1])))))
    add("token_type_length_differs", "tokenizer.ggml.token_type",
        lambda m: m.kv.__setitem__(13, ("tokenizer.ggml.token_type", T_ARR, (T_I32, m.kv[13][2][1][:-1]))))
    add("token_type_wrong_element_type", "tokenizer.ggml.token_type",
        lambda m: m.kv.__setitem__(13, ("tokenizer.ggml.token_type", T_ARR, (T_F32, [1.0] * 259))))
    add("missing_embedding_length", "missing key 'llama.embedding_length'",
        lambda m: m.del_kv("llama.embedding_length"))
    add("embedding_length_wrong_type", "llama.embedding_length", lambda m: m.set_kv("llama.embedding_length", T_STR, "64"))
    add("unsupported_architecture", "not supported", lambda m: m.set_kv("general.architecture", T_STR, "gptj"))
    add("mrope_sections", "M-RoPE sections (a vision model's RoPE) are not supported in llama",
        lambda m: m.set_kv("llama.rope.dimension_sections", T_ARR, (T_I32, [8, 8, 8, 0])))
    add("nextn_layers_all", "nextn_predict_layers': 2 of 2 layers, expected fewer",
        lambda m: m.set_kv("llama.nextn_predict_layers", T_U32, 2))
    add("tensor_wrong_shape", "tensor 'blk.0.attn_q.weight': shape",
        lambda m: m.tensor("blk.0.attn_q.weight").update(dims=[32, 128]))
    add("tensor_missing", "tensor 'blk.1.ffn_down.weight': missing",
        lambda m: m.tensors.remove(m.tensor("blk.1.ffn_down.weight")))
    # architecture families: refusals name the key, tensor or layout, and what runs
    # (the list's head: each new family would otherwise edit this line)
    add("unsupported_architecture_lists_families", "(supported: llama, gemma3, gemma2, qwen2, qwen3, phi3, ",
        lambda m: m.set_kv("general.architecture", T_STR, "mamba"))
    add("gemma4_local_values_of_another_width", "key 'gemma4.attention.value_length_swa': 16, key_length_swa 32",
        lambda m: (to_gemma4(m), m.set_kv("gemma4.attention.key_length_swa", T_U32, 32)))
    add("gemma4_kv_heads_not_dividing", "key 'gemma4.attention.head_count_kv': 3 does not divide head_count 4",
        lambda m: (to_gemma4(m), m.set_kv("gemma4.attention.head_count_kv", T_ARR, (T_I32, [2, 3]))))
    add("gemma4_pattern_of_another_length", "key 'gemma4.attention.sliding_window_pattern': 3 values, expected one "
        "per layer (2)", lambda m: (to_gemma4(m), m.set_kv("gemma4.attention.sliding_window_pattern", T_ARR,
                                                          (T_BOOL, [1, 0, 1]))))
    add("gemma4_without_rope_freqs", "tensor 'rope_freqs.weight': missing",
        lambda m: (to_gemma4(m), m.tensors.remove(m.tensor("rope_freqs.weight"))))
    add("gemma4_every_layer_shares_kv", "key 'gemma4.attention.shared_kv_layers': 1 of 2 layers, expected at most 0",
        lambda m: (to_gemma4(m), m.set_kv("gemma4.attention.shared_kv_layers", T_U32, 1)))
    add("gemma4_per_layer_embeddings_missing", "tensor 'per_layer_token_embd.weight': missing",
        lambda m: (to_gemma4(m, 8), m.tensors.remove(m.tensor("per_layer_token_embd.weight"))))
    add("llama4_chunk_other_than_8192", "key 'llama4.attention.sliding_window': 16, but the attention chunk is 8192",
        lambda m: (to_llama4(m), m.set_kv("llama4.attention.sliding_window", T_U32, 16)))
    add("llama4_without_interleave_step", "missing key 'llama4.interleave_moe_layer_step'",
        lambda m: (to_llama4(m), m.kv.remove(next(kv for kv in m.kv if kv[0] == "llama4.interleave_moe_layer_step"))))
    add("llama4_experts_on_the_wrong_layer", "tensor 'blk.0.ffn_gate_inp.weight': missing",
        lambda m: (to_llama4(m), m.set_kv("llama4.interleave_moe_layer_step", T_U32, 1)))
    add("rope_scaling_yarn", "rope scaling 'yarn' is not supported (supported: none, linear, longrope)",
        lambda m: m.set_kv("llama.rope.scaling.type", T_STR, "yarn"))
    add("yarn_without_factor", "missing key 'mistral3.rope.scaling.factor'",
        lambda m: (m.set_arch("mistral3"), m.set_kv("mistral3.rope.scaling.type", T_STR, "yarn")))
    add("yarn_log_multiplier_negative", "key 'mistral3.rope.scaling.yarn_log_multiplier': -1, expected 0..100",
        lambda m: (yarn(m), m.set_kv("mistral3.rope.scaling.yarn_log_multiplier", T_F32, -1.0)))
    add("yarn_beta_zero", "key 'mistral3.rope.scaling.yarn_beta_fast': 0, expected a finite value > 0",
        lambda m: (yarn(m), m.set_kv("mistral3.rope.scaling.yarn_beta_fast", T_F32, 0.0)))
    add("attention_temperature_infinite", "key 'mistral3.attention.temperature_scale': inf, expected a finite value",
        lambda m: (yarn(m), m.set_kv("mistral3.attention.temperature_scale", T_F32, float("inf"))))
    add("cohere2_without_logit_scale", "missing key 'cohere2.logit_scale'", cohere2_no_logit_scale)
    add("rope_scaling_longrope_wrong_family", "rope scaling 'longrope' is not supported for qwen2",
        lambda m: (m.set_arch("qwen2"), m.set_kv("qwen2.rope.scaling.type", T_STR, "longrope")))
    add("rope_freqs_wrong_length", "tensor 'rope_freqs.weight': shape [9] (rank 1), expected [8]",
        lambda m: m.add_tensor("rope_freqs.weight", [HEAD_DIM // 2 + 1]))
    add("rope_freqs_zero", "tensor 'rope_freqs.weight': factor 3 is 0",
        lambda m: m.add_tensor("rope_freqs.weight", [8], values=[1, 1, 1, 0, 1, 1, 1, 1]))
    add("rope_freqs_wrong_family", "tensor 'rope_freqs.weight': not part of a qwen2 model",
        lambda m: (m.set_arch("qwen2"), [m.add_tensor("blk.%d.attn_%s.bias" % (i, x), [64 if x == "q" else 32])
                                        for i in range(2) for x in "qkv"],
                   m.add_tensor("rope_freqs.weight", [8])))
    add("longrope_short_factors_missing", "LongRoPE needs both the long and the short factors",
        lambda m: longrope(m, short=False))
    add("longrope_factors_wrong_length", "tensor 'rope_factors_long.weight': shape [7]",
        lambda m: longrope(m, long_len=7))
    add("expert_count_without_used_count", "missing key 'llama.expert_used_count'",
        lambda m: m.set_kv("llama.expert_count", T_U32, 4))
    add("expert_used_count_without_count", "'llama.expert_count': 0, but expert_used_count is 2",
        lambda m: m.set_kv("llama.expert_used_count", T_U32, 2))
    add("expert_used_count_above_count", "'llama.expert_used_count': 5, expected 1..4",
        lambda m: (to_moe(m), m.set_kv("llama.expert_used_count", T_U32, 5)))
    add("expert_count_too_large", "100000 experts, at most 512",
        lambda m: (to_moe(m), m.set_kv("llama.expert_count", T_U32, 100000)))
    add("expert_count_above_tensors", "tensor 'blk.0.ffn_gate_inp.weight': shape [64, 4] (rank 2), expected [64, 8]",
        lambda m: (to_moe(m), m.set_kv("llama.expert_count", T_U32, 8)))
    add("expert_stack_rank_2", "tensor 'blk.1.ffn_up_exps.weight': shape [64, 512] (rank 2), expected [64, 128, 4] "
        "(rank 3)", lambda m: (to_moe(m), m.tensor("blk.1.ffn_up_exps.weight").update(dims=[64, 512])))
    add("expert_keys_dense_tensors", "tensor 'blk.0.ffn_gate_inp.weight': missing",
        lambda m: (m.set_kv("llama.expert_count", T_U32, 4), m.set_kv("llama.expert_used_count", T_U32, 2)))
    add("moe_family_without_experts", "missing key 'qwen3moe.expert_count'", lambda m: m.set_arch("qwen3moe"))
    add("dense_family_with_experts", "qwen2 has no mixture-of-experts layers",
        lambda m: (to_moe(m), m.set_arch("qwen2")))
    add("qwen2_without_bias", "tensor 'blk.0.attn_q.bias': missing", lambda m: m.set_arch("qwen2"))
    add("unused_bias_tensor", "tensor 'blk.0.attn_output.bias': not part of a llama model",
        lambda m: m.add_tensor("blk.0.attn_output.bias", [64]))
    add("split_expert_matrices", "tensor 'blk.1.ffn_gate.3.weight': not part of a llama model",
        lambda m: (to_moe(m), m.add_tensor("blk.1.ffn_gate.3.weight", [64, 128], GGML_Q8_0)))
    add("softcap_negative", "key 'gemma2.attn_logit_softcapping': -1, expected a finite value > 0",
        lambda m: (m.set_arch("gemma2"), m.set_kv("gemma2.attn_logit_softcapping", T_F32, -1.0)))
    add("sliding_window_pattern_zero", "key 'gemma2.attention.sliding_window_pattern': 0",
        lambda m: (m.set_arch("gemma2"), m.set_kv("gemma2.attention.sliding_window_pattern", T_U32, 0)))
    add("sliding_window_pattern_array", "gemma2.attention.sliding_window_pattern",
        lambda m: (m.set_arch("gemma2"), m.set_kv("gemma2.attention.sliding_window_pattern", T_ARR,
                                                  (T_BOOL, [1, 0]))))
    return out


_clean = Model()
_clean.build()
SECTIONS = _clean.sections


def build_variant(mutate, post):
    m = Model()
    if mutate:
        mutate(m)
    b = m.build()
    return post(b) if post else b


def valid_edge_cases():
    """Files that must load: (name, mutate)."""
    def extra_tensor(m):
        m.tensors.append({"name": "extra.unused.weight", "dims": [32], "type": GGML_F32,
                          "data": b"\0" * 128, "offset": None})
    return [
        ("zero_length_array", lambda m: m.set_kv("general.tags", T_ARR, (T_STR, []))),
        ("empty_string", lambda m: m.set_kv("general.name", T_STR, "")),
        ("unknown_extra_keys", lambda m: (m.set_kv("vendor.custom.flag", T_U8, 7),
                                          m.set_kv("vendor.custom.list", T_ARR, (T_I32, [1, 2, 3])))),
        ("extra_unused_tensor", extra_tensor),
        ("gguf_v2", lambda m: setattr(m, "version", 2)),
        ("experts", to_moe),
        ("experts_all_used", lambda m: to_moe(m, n_expert=2, n_used=2)),
        ("rope_freqs", lambda m: m.add_tensor("rope_freqs.weight", [8], values=[1, 1, 1.5, 2, 4, 8, 8, 8])),
        ("longrope", longrope),
        ("sliding_window", lambda m: m.set_kv("llama.attention.sliding_window", T_U32, 4)),
        ("yarn", lambda m: (yarn(m), m.set_kv("mistral3.attention.temperature_scale", T_F32, 0.1))),
        ("llama4", to_llama4),
        ("gemma4", to_gemma4),
        ("gemma4_local_heads_of_their_own", lambda m: (
            to_gemma4(m), m.set_kv("gemma4.attention.key_length_swa", T_U32, 8),
            m.set_kv("gemma4.attention.value_length_swa", T_U32, 8),
            m.set_kv("gemma4.rope.dimension_count_swa", T_U32, 8),
            m.set_kv("gemma4.attention.head_count_kv", T_ARR, (T_I32, [4, 2])),
            m.set_kv("gemma4.feed_forward_length", T_ARR, (T_I32, [128, 256])),
            [m.tensors.remove(m.tensor("blk.%d.%s.weight" % (i, n))) for i in range(2)
             for n in ("attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm", "ffn_gate",
                       "ffn_up", "ffn_down")],
            [m.add_tensor("blk.%d.%s.weight" % (i, n), d) for i, w, kv, f in ((0, 8, 4, 128), (1, 16, 2, 256))
             for n, d in (("attn_q", [64, 4 * w]), ("attn_k", [64, kv * w]), ("attn_v", [64, kv * w]),
                          ("attn_output", [4 * w, 64]), ("attn_q_norm", [w]), ("attn_k_norm", [w]),
                          ("ffn_gate", [64, f]), ("ffn_up", [64, f]), ("ffn_down", [f, 64]))])),
        ("gemma4_per_layer_embeddings", lambda m: to_gemma4(m, 8)),
        ("llama4_chunk_8192", lambda m: (to_llama4(m), m.set_kv("llama4.attention.sliding_window", T_U32, 8192))),
    ]
