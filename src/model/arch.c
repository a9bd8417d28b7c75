/* The architecture table: each family's differences from the common
 * transformer block, read by the one forward pass (forward.c) and the
 * loader (model.c).  docs/architectures.md describes each row. */
#include "model/model.h"

#include <stdio.h>

static const struct sp_arch sp_archs[] = {
    {
        .name = "llama", /* Llama 2/3, SmolLM2, Mistral, Mixtral, TinyLlama */
        .ffn_act = SP_FFN_SILU,
        .swa = SP_SWA_ALL,
        .rope_factors = SP_ROPE_FACTORS_FREQS,
        .moe = SP_MOE_OPTIONAL,
        .moe_norm = true,
        .chat_format = "chatml",
    },
    {
        .name = "gemma3",
        .ffn_act = SP_FFN_GELU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .post_norms = true,
        .embed_scale = true,
        .swa = SP_SWA_PATTERN,
        .swa_pattern = 6,
        .swa_rope_base = 10000.0f,
        .chat_format = "gemma",
    },
    {
        .name = "gemma2",
        .ffn_act = SP_FFN_GELU,
        .rope_neox = true,
        .post_norms = true,
        .embed_scale = true,
        .q_prescale = true,
        .softcap = true,
        .swa = SP_SWA_PATTERN,
        .swa_pattern = 2,
        .swa_default = 4096,
        .wide_scale_layers = 46,
        .chat_format = "gemma",
    },
    {
        .name = "qwen2", /* Qwen 2 / 2.5, DeepSeek-R1 distills */
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qkv_bias = true,
        .chat_format = "chatml",
    },
    {
        .name = "qwen3",
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .chat_format = "chatml",
    },
    {
        .name = "phi3",
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .q_prescale = true,
        .ffn_fused = true,
        .rope_factors = SP_ROPE_FACTORS_LONGROPE,
        .chat_format = "chatml",
    },
    {
        .name = "qwen2moe",
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qkv_bias = true,
        .moe = SP_MOE_REQUIRED,
        .moe_ff_key = true,
        .shared_expert = true,
        .chat_format = "chatml",
    },
    {
        .name = "qwen3moe",
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .moe = SP_MOE_REQUIRED,
        .moe_norm = true,
        .moe_ff_key = true,
        .chat_format = "chatml",
    },
    {
        .name = "olmoe",
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_FULL,
        .moe = SP_MOE_REQUIRED,
        .chat_format = "chatml",
    },
    {
        .name = "mamba2", /* Mamba-2 (state-spaces/mamba2-*, Mamba-Codestral) */
        .linear = SP_MIXER_SSM,
        .kinds = SP_KINDS_LINEAR,
        .no_ffn = true,
        .chat_format = "chatml",
    },
    {
        .name = "lfm2", /* LFM2 (Liquid): short gated convolutions with a few attention layers */
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .swa = SP_SWA_ALL, /* attention.sliding_window, when given, on every attention layer (as llama.cpp) */
        .qk_norm = SP_QK_NORM_HEAD,
        .linear = SP_MIXER_CONV,
        .kinds = SP_KINDS_KV_ZERO,
        .out_norm_embd = true,
        .chat_format = "chatml",
    },
    {
        .name = "granitehybrid", /* Granite 4.0-H: Mamba-2 layers and a few attention layers; Micro dense,
                                    Tiny and Small with experts and a shared expert */
        .ffn_act = SP_FFN_SILU,
        .rope_neox = false,
        .linear = SP_MIXER_SSM,
        .kinds = SP_KINDS_KV_ZERO,
        .granite = true,
        .moe = SP_MOE_OPTIONAL,
        .moe_norm = true,
        .shared_expert = true,
        .shexp_ungated = true,
        .shexp_keyed = true,
        .chat_format = "chatml",
    },
    {
        .name = "nemotron_h", /* Nemotron-H (dense): Mamba-2, attention and feed-forward layers */
        .ffn_act = SP_FFN_RELU2,
        .ffn_plain = true,
        .linear = SP_MIXER_SSM,
        .kinds = SP_KINDS_KV_FF,
        .no_ffn = true,
        .nope = true,
        .chat_format = "chatml",
    },
    {
        .name = "qwen35", /* Qwen3.5 (dense): gated DeltaNet layers and gated attention */
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .linear = SP_MIXER_DELTA,
        .kinds = SP_KINDS_INTERVAL,
        .q_gate = true,
        .ffn_norm_post = true,
        .mrope_text = true,
        .chat_format = "chatml",
    },
    {
        .name = "qwen35moe", /* Qwen3.5 MoE: qwen35's layers with experts and a gated shared expert */
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .linear = SP_MIXER_DELTA,
        .kinds = SP_KINDS_INTERVAL,
        .q_gate = true,
        .ffn_norm_post = true,
        .mrope_text = true,
        .moe = SP_MOE_REQUIRED,
        .moe_norm = true,
        .moe_ff_key = true,
        .shared_expert = true,
        .chat_format = "chatml",
    },
    {
        .name = "qwen3next", /* Qwen3-Next: as qwen35moe, RoPE halves without M-RoPE sections, and the
                                delta rule's value heads grouped by key head */
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .linear = SP_MIXER_DELTA,
        .kinds = SP_KINDS_INTERVAL,
        .q_gate = true,
        .ffn_norm_post = true,
        .dn_grouped = true,
        .moe = SP_MOE_REQUIRED,
        .moe_norm = true,
        .moe_ff_key = true,
        .shared_expert = true,
        .chat_format = "chatml",
    },
    {
        .name = "smollm3", /* SmolLM3: Llama with RoPE left out of every 4th layer */
        .ffn_act = SP_FFN_SILU,
        .nope_interval = 4,
        .chat_format = "chatml",
    },
    {
        .name = "mistral3", /* Ministral 3, Mistral Small 3.x (text) */
        .ffn_act = SP_FFN_SILU,
        .rope_factors = SP_ROPE_FACTORS_FREQS,
        .yarn = true,
        .attn_temp = true,
        .chat_format = "chatml",
    },
    {
        .name = "granite", /* Granite 3.x (dense) */
        .ffn_act = SP_FFN_SILU,
        .rope_factors = SP_ROPE_FACTORS_FREQS,
        .granite = true,
        .chat_format = "chatml",
    },
    {
        .name = "cohere2", /* Command R7B, Command A */
        .ffn_act = SP_FFN_SILU,
        .norm = SP_NORM_LAYER, /* without bias */
        .parallel = true,
        .swa = SP_SWA_PATTERN,
        .swa_pattern = 4,
        .nope_global = true,
        .logit_mul = true,
        .chat_format = "chatml",
    },
    {
        .name = "exaone4", /* EXAONE 4.0 */
        .ffn_act = SP_FFN_SILU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .post_norms = true,
        .no_pre_norm = true,
        .swa = SP_SWA_PATTERN,
        .swa_pattern = 4,
        .swa_default = 4096,
        .swa_layers = 64,
        .nope_global = true,
        .rope_factors = SP_ROPE_FACTORS_FREQS,
        .chat_format = "chatml",
    },
    {
        .name = "glm4", /* GLM-4-0414 (dense): sandwich norms, gate and up fused, partial RoPE on pairs */
        .ffn_act = SP_FFN_SILU,
        .post_norms = true,
        .ffn_fused = true,
        .chat_format = "chatml",
    },
    {
        .name = "llama4", /* Llama 4 Scout / Maverick (text) */
        .ffn_act = SP_FFN_SILU,
        .qk_norm = SP_QK_NORM_L2,
        .swa = SP_SWA_PATTERN,
        .swa_pattern = 4,
        .swa_default = 8192,
        .swa_chunked = true,
        .nope_interval = 4,
        .nope_temp = true,
        .rope_factors = SP_ROPE_FACTORS_FREQS,
        .moe = SP_MOE_REQUIRED,
        .router = SP_ROUTER_SIGMOID,
        .moe_ff_key = true,
        .moe_interleave = true,
        .moe_weight_in = true,
        .shared_expert = true,
        .shexp_ungated = true,
        .chat_format = "llama4",
    },
    {
        .name = "gpt-oss", /* gpt-oss 20b/120b (llama.cpp's openai-moe) */
        .ffn_act = SP_FFN_SWIGLU_OAI,
        .rope_neox = true,
        .qkv_bias = true,
        .out_bias = true,
        .attn_sinks = true,
        .swa = SP_SWA_PATTERN, /* even layers local, odd ones global */
        .swa_pattern = 2,
        .yarn = true,
        .moe = SP_MOE_REQUIRED,
        .router = SP_ROUTER_SOFTMAX_WEIGHT,
        .moe_ff_key = true,
        .moe_bias = true,
        .ffn_norm_post = true,
        .chat_format = "chatml",
    },
    {
        .name = "gemma4", /* Gemma 4 (dense); E2B / E4B with per-layer embeddings and shared KV */
        .ffn_act = SP_FFN_GELU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .post_norms = true,
        .embed_scale = true,
        .swa = SP_SWA_LIST,
        .rope_factors = SP_ROPE_FACTORS_GLOBAL,
        .final_softcap = true,
        .unit_scale = true,
        .v_norm = true,
        .v_from_k = true,
        .kv_shared = true,
        .per_layer_embd = true,
        .out_scale = true,
        .moe = SP_MOE_OPTIONAL, /* 26B-A4B: experts beside the dense feed-forward */
        .moe_norm = true,
        .moe_ff_key = true,
        .moe_dense = true,
        .chat_format = "gemma",
    },
    {
        .name = "gemma3n", /* Gemma 3n (E2B / E4B, text): Gemma 3's block with AltUp, Laurel, sparse gates,
                              per-layer embeddings and KV shared from layer 20 on */
        .ffn_act = SP_FFN_GELU,
        .rope_neox = true,
        .qk_norm = SP_QK_NORM_HEAD,
        .post_norms = true,
        .embed_scale = true,
        .swa = SP_SWA_LIST,
        .swa_rope_base = 10000.0f,
        .final_softcap = true,
        .unit_scale = true,
        .v_norm = true,
        .kv_shared = true,
        .kv_from = 20,
        .per_layer_embd = true,
        .altup = true,
        .laurel = true,
        .sparse_layers = 10,
        .chat_format = "gemma",
    },
    {
        .name = "deepseek2", /* DeepSeek V2 / V2-Lite / V3 / R1: MLA, grouped expert routing */
        .ffn_act = SP_FFN_SILU,
        .yarn = true,
        .mla = true,
        .moe = SP_MOE_REQUIRED,
        .router = SP_ROUTER_SOFTMAX, /* expert_gating_func absent: softmax, as llama.cpp for V2 */
        .moe_ff_key = true,
        .shared_expert = true,
        .shexp_ungated = true,
        .chat_format = "chatml",
    },
    {
        .name = "bert", /* BERT sentence encoders (all-MiniLM, bge): embeddings only */
        .ffn_act = SP_FFN_GELU,
        .qkv_bias = true,
        .norm = SP_NORM_LAYER,
        .post_ln = true,
        .abs_pos = true,
        .bidirectional = true,
        .ffn_plain = true,
        .layer_bias = true,
    },
};

#define SP_N_ARCHS (sizeof sp_archs / sizeof sp_archs[0])

const struct sp_arch *sp_arch_find(struct sp_gguf_str name)
{
    for (size_t i = 0; i < SP_N_ARCHS; i++)
        if (sp_gguf_str_eq(name, sp_archs[i].name))
            return &sp_archs[i];
    return NULL;
}

void sp_arch_list(char *buf, size_t size, bool (*keep)(const struct sp_arch *))
{
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < SP_N_ARCHS && n < size; i++)
        if (!keep || keep(&sp_archs[i]))
            n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "", sp_archs[i].name);
}
