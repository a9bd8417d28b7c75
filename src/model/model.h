/* A loaded model: architecture, hyper-parameters and weight views.
 *
 * The file is mapped once; weights are borrowed views into the mapping.
 * Loading validates everything the forward pass relies on: required keys,
 * every tensor's presence, type and shape, and the consistency of the
 * hyper-parameters with the tensors.  Errors name the key or tensor, what was
 * expected and what was found.
 */
#ifndef SP_MODEL_H
#define SP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mmap.h"
#include "core/progress.h"
#include "gguf/gguf.h"
#include "gguf/split.h"
#include "kernels/kernels.h"

enum sp_ffn_act {
    SP_FFN_SILU, SP_FFN_GELU, SP_FFN_RELU2 /* relu(x)^2, plain feed-forwards only */,
    SP_FFN_SWIGLU_OAI /* gpt-oss's clamped SwiGLU (sp_swiglu_oai), experts only */
};
enum sp_qk_norm {
    SP_QK_NORM_NONE,
    SP_QK_NORM_HEAD,  /* RMSNorm on each q/k head ([head_dim] weights) */
    SP_QK_NORM_FULL,  /* RMSNorm on the whole q and k rows (OLMoE) */
    SP_QK_NORM_L2,    /* RMSNorm without weights on each q/k head after RoPE, on the RoPE layers only, and
                         not in models of 128 experts (llama.cpp's rule: Llama 4 Maverick has none) */
};
enum sp_swa {
    SP_SWA_NONE,
    SP_SWA_ALL,       /* every layer local when the file gives a sliding window (Mistral) */
    SP_SWA_PATTERN,   /* every swa_pattern-th layer global, the others local */
    SP_SWA_LIST,      /* attention.sliding_window_pattern: a bool per layer (true: local), required */
};
enum sp_rope_factors {
    SP_ROPE_FACTORS_NONE,
    SP_ROPE_FACTORS_FREQS,     /* optional rope_freqs.weight (Llama 3.1 scaling) */
    SP_ROPE_FACTORS_LONGROPE,  /* optional rope_factors_long/short.weight (Phi-3 LongRoPE) */
    SP_ROPE_FACTORS_GLOBAL,    /* rope_freqs.weight required, on the global (not local) layers only
                                  (Gemma 4's "proportional" RoPE: factors of 1e30 leave pairs unrotated) */
};
enum sp_moe { SP_MOE_NONE, SP_MOE_OPTIONAL, SP_MOE_REQUIRED };
enum sp_norm {
    SP_NORM_RMS,      /* RMSNorm, weight only (attention.layer_norm_rms_epsilon) */
    SP_NORM_LAYER,    /* LayerNorm with weight and bias (attention.layer_norm_epsilon) */
};

/* What a layer mixes its positions with: attention (full or local, by the
 * layer's swa flag), or a linear layer with a fixed-size recurrent state
 * (src/model/forward_linear.c). */
enum sp_mixer {
    SP_MIXER_ATTN,
    SP_MIXER_SSM,     /* Mamba-2: causal convolution, selective scan (SSD), gated RMSNorm */
    SP_MIXER_CONV,    /* LFM2: in_proj to B, C, x; causal convolution of B * x; C times it; out_proj */
    SP_MIXER_MLP,     /* the layer is a feed-forward block alone (Nemotron-H's "-" layers) */
    SP_MIXER_DELTA,   /* Qwen3.5: causal convolution over q, k, v; gated delta rule; gated RMSNorm */
};
/* Which layers are linear. */
enum sp_layer_kinds {
    SP_KINDS_ATTN,    /* none */
    SP_KINDS_LINEAR,  /* all */
    SP_KINDS_KV_ZERO, /* those whose attention.head_count_kv (a per-layer array) is 0 */
    SP_KINDS_KV_FF,   /* per layer: head_count_kv > 0 attention, else feed_forward_length > 0 a
                         feed-forward alone (SP_MIXER_MLP), else linear (Nemotron-H) */
    SP_KINDS_INTERVAL, /* every full_attention_interval-th layer attention (default 4), the others linear */
};

enum { SP_ALTUP_MAX = 8 }; /* altup: the most streams a model may have */

/* What distinguishes one family's forward pass; one entry per
 * general.architecture (src/model/arch.c).  Zero is "not this feature". */
struct sp_arch {
    const char *name;          /* general.architecture */
    enum sp_ffn_act ffn_act;
    bool rope_neox;            /* rotate halves (NEOX) instead of adjacent pairs */
    enum sp_qk_norm qk_norm;   /* attn_q_norm, attn_k_norm */
    bool qkv_bias;             /* attn_q/k/v.bias required (optional in other families) */
    bool post_norms;           /* post_attention_norm, post_ffw_norm */
    bool embed_scale;          /* embeddings × sqrt(n_embd) */
    bool q_prescale;           /* q × the attention scale before attention, which then scales by 1 */
    bool ffn_fused;            /* ffn_up holds gate then up ([n_embd, 2 n_ff]); no ffn_gate */
    bool softcap;              /* attention and final-logit soft-capping (keys, else 50 and 30) */
    enum sp_swa swa;
    uint32_t swa_pattern;      /* SP_SWA_PATTERN: default of attention.sliding_window_pattern */
    uint32_t swa_default;      /* window when attention.sliding_window is absent (0: required) */
    float swa_rope_base;       /* rope base of local layers (0: the global base); rope.freq_base_swa wins */
    enum sp_rope_factors rope_factors;
    uint32_t wide_scale_layers; /* a model of this many layers scales q by 1/sqrt(n_embd / n_head)
                                  (Gemma 2 27B's query_pre_attn_scalar) instead of 1/sqrt(head_dim) */
    enum sp_moe moe;           /* experts: expert_count, expert_used_count, ffn_*_exps */
    enum sp_router router;
    bool moe_norm;             /* renormalize the selected experts' weights to sum to 1 */
    bool moe_ff_key;           /* expert width from expert_feed_forward_length (else feed_forward_length) */
    bool shared_expert;        /* ffn_*_shexp with a sigmoid gate ffn_gate_inp_shexp (hp.n_ff_shexp > 0) */
    enum sp_norm norm;
    bool post_ln;              /* the norm after each residual add (attn_output_norm, layer_output_norm)
                                  instead of before each block; no output_norm */
    bool abs_pos;              /* no RoPE: position_embd and token_types row 0 added to the
                                  embeddings, then token_embd_norm */
    bool bidirectional;        /* a token attends to every position of its sequence (which must be
                                  whole in the batch): an encoder, for embeddings only */
    bool ffn_plain;            /* act(ffn_up x) into ffn_down, no gate */
    bool layer_bias;           /* biases on attn_output, ffn_up and ffn_down (required) */
    enum sp_mixer linear;      /* the mixer of the family's linear layers */
    enum sp_layer_kinds kinds; /* which layers are linear */
    bool no_ffn;               /* layers are a mixer and its residual only (no feed-forward block) */
    bool out_norm_embd;        /* the output norm is stored as token_embd_norm (LFM2's converter) */
    bool granite;              /* Granite's multipliers (embedding_scale, residual_scale, attention.scale,
                                  logit_scale) and RoPE switched by rope.scaling.finetuned (default on) */
    bool nope;                 /* attention without RoPE; attention.scale (optional) scales it */
    uint32_t nope_interval;    /* every nope_interval-th layer attends without RoPE, the others with it
                                  (SmolLM3: 4, fixed as in llama.cpp; 0: none) */
    bool q_gate;               /* attn_q gives each head's query then its gate: the attention output
                                  times sigmoid(gate) (Qwen3.5) */
    bool ffn_norm_post;        /* the feed-forward's norm is stored as post_attention_norm (Qwen3.5) */
    bool dn_grouped;           /* the delta rule's value heads grouped by key head (Qwen3-Next): value head h
                                  reads key head h / (value heads / key heads) (else h % key heads), and
                                  beta and alpha come fused in ssm_ba, per key head its value
                                  heads' betas then their alphas (else ssm_beta, ssm_alpha) */
    bool mrope_text;           /* rope.dimension_sections (M-RoPE) required; text positions are equal in
                                  every section, so it rotates as RoPE halves */
    bool nope_global;          /* with a sliding window: the global (full-attention) layers attend
                                  without RoPE (Command R7B, EXAONE 4.0 32B) */
    uint32_t swa_layers;       /* SP_SWA_PATTERN only in models of this many layers (0: all), llama.cpp's
                                  rule for EXAONE 4.0 (32B, 64 layers; the 1.2B's layers are all global) */
    bool parallel;             /* attention and feed-forward both read the layer's one normed input, their
                                  outputs added to the residual together (Cohere); no ffn_norm */
    bool no_pre_norm;          /* blocks read the residual stream itself (no attn_norm, ffn_norm): with
                                  post_norms, EXAONE 4.0 */
    bool logit_mul;            /* logits times logit_scale (required; Cohere) */
    bool yarn;                 /* rope.scaling.type "yarn" accepted (with rope.scaling.yarn_beta_fast,
                                  yarn_beta_slow, yarn_log_multiplier) */
    bool attn_temp;            /* attention.temperature_scale (optional): each query times
                                  1 + scale ln(floor(pos / original context) + 1) (Llama 4's tuning) */
    bool swa_chunked;          /* the local layers attend within their chunk: keys whose position / n_swa
                                  equals the query's, not the last n_swa (Llama 4); the chunk is
                                  swa_default, the one size llama.cpp runs (another file value is refused) */
    bool moe_interleave;       /* interleave_moe_layer_step s (required): layers with (il + 1) % s == 0 are
                                  mixture-of-experts, the others dense (s = 0: all dense) */
    bool shexp_ungated;        /* the shared expert's output is added as is (no ffn_gate_inp_shexp); its
                                  width defaults to the experts' */
    bool shexp_keyed;          /* a shared expert only where expert_shared_feed_forward_length is given and
                                  > 0 (Granite 4.0-H: absent or 0, the experts alone) */
    bool moe_weight_in;        /* each selected expert reads its input times its router weight; the
                                  outputs add unweighted (Llama 4) */
    bool nope_temp;            /* the NoPE layers' queries times Llama 4's temperature 1 + 0.1 ln(floor((pos
                                  + 1) / 8192) + 1), llama.cpp's fixed values (no keys) */
    bool attn_sinks;           /* attn_sinks.weight [n_head] required: a learned logit per head in each
                                  softmax's maximum and denominator (gpt-oss) */
    bool out_bias;             /* attn_output.bias required (without layer_bias's feed-forward biases) */
    bool moe_bias;             /* ffn_gate_inp.bias (added to the router's logits) and each expert's
                                  ffn_{gate,up,down}_exps.bias [n_expert][rows] required */
    bool final_softcap;        /* final_logit_softcapping (optional; absent: none), without softcap's
                                  attention cap */
    bool unit_scale;           /* attention scores unscaled (scale 1: the QK-norm sets their size) */
    bool v_norm;               /* each value head RMS-normed without a weight */
    bool v_from_k;             /* attn_v optional: without it the values are the keys before their norm */
    bool kv_shared;            /* attention.shared_kv_layers n (optional): the last n layers compute no
                                  keys or values and read the cache of the last layer of their kind
                                  (local or global) before them (Gemma 3n / 4) */
    bool per_layer_embd;       /* embedding_length_per_layer_input P (required; 0: none): each layer adds
                                  proj(gelu(inp_gate x) * its P-wide input) normed, the inputs from
                                  per_layer_token_embd and the embeddings' projection (sp_forward_ple) */
    bool out_scale;            /* layer_output_scale.weight [1] (optional): the layer's output times it */
    bool altup;                /* AltUp (Gemma 3n): altup_num_inputs residual streams (src/model/forward_altup.c);
                                  each layer predicts them from the active one's router (altup_router,
                                  altup_router_norm, altup_predict_coef), runs its block on the active
                                  prediction and corrects them with the block's output (altup_correct_coef),
                                  the per-layer embeddings (per_layer_embd) added to the other streams from
                                  the corrected active one times altup_correct_scale; altup_proj makes the
                                  streams from the embeddings, altup_unembd_proj merges them before the
                                  output norm; the final-logit soft-cap defaults to 30 */
    bool laurel;               /* Laurel (Gemma 3n): beside the attention, rmsnorm(laurel_r(laurel_l h)) + h
                                  (laurel_post_norm), added to the attention's residual, the sum / sqrt(2) */
    uint32_t sparse_layers;    /* the first sparse_layers layers' feed-forward gates pass the Gaussian top-k:
                                  relu(g - mean(g) - 1.6448533 std(g)) (Gemma 3n: 10, llama.cpp's fixed
                                  values; the file's activation_sparsity_scale is not read) */
    uint32_t kv_from;          /* kv_shared: layers from kv_from on read shared KV (llama.cpp's fixed
                                  n_layer_kv_from_start; attention.shared_kv_layers, when given, must agree;
                                  0: the key alone decides) */
    bool moe_dense;            /* expert layers also run the dense feed-forward (ffn_gate/up/down): dense on
                                  ffn_norm(x) then post_ffw_norm_1, experts on pre_ffw_norm_2(x) routed by
                                  rmsnorm(x) / sqrt(n_embd) * ffn_gate_inp.scale, each expert's output times
                                  ffn_down_exps.scale (optional), then post_ffw_norm_2; the two added (Gemma 4
                                  26B-A4B) */
    bool mla;                  /* multi-head latent attention (DeepSeek V2/V3): q from attn_q (or the
                                  attn_q_a -> attn_q_a_norm -> attn_q_b LoRA), one attn_kv_a_mqa row per
                                  token holding the latent (normed by attn_kv_a_norm) and the shared RoPE
                                  key; each head's query absorbed into the latent by attn_k_b and its
                                  output widened by attn_v_b, so the cache holds the latent and the RoPE
                                  key per position, one KV head (key_length = kv_lora_rank + RoPE dims);
                                  also DeepSeek's MoE keys (expert_gating_func, expert_weights_scale and
                                  _norm, expert groups, leading dense layers, exp_probs_b, shared experts
                                  expert_shared_count x the experts' width) and its YaRN attention scale */
    const char *chat_format;   /* built-in chat format when the file has no template */
};

const struct sp_arch *sp_arch_find(struct sp_gguf_str name);
/* Writes "llama, gemma3, ...": the families of the table (those `keep`
 * accepts, NULL: all), for refusals that say what runs. */
void sp_arch_list(char *buf, size_t size, bool (*keep)(const struct sp_arch *));

struct sp_hparams {
    uint32_t n_vocab, n_ctx_train, n_embd, n_layer, n_ff;
    uint32_t n_layer_all;      /* block_count: the n_layer run, then nextn_predict_layers
                                  multi-token-prediction layers (not run) */
    uint32_t n_head, n_head_kv, head_dim, n_rot; /* n_head_kv, n_ff: the widest layer's (per layer: sp_layer) */
    uint32_t head_dim_swa, n_rot_swa; /* the local layers' (attention.key_length_swa, rope.dimension_count_swa;
                                         absent: the others') */
    uint32_t n_swa;            /* sliding window; 0 = none */
    float rope_base, rope_freq_scale, eps, attn_scale;
    float rope_mscale;         /* cos/sin scale (rope.scaling.attn_factor; 1 = none) */
    uint32_t n_ctx_orig;       /* LongRoPE: long factors for contexts above this; YaRN and the
                                  attention temperature: the trained context */
    bool yarn;                 /* YaRN RoPE scaling (rope_mscale then holds llama.cpp's attention factor) */
    float yarn_beta_fast, yarn_beta_slow;
    float yarn_log_mul;        /* rope.scaling.yarn_log_multiplier (mla: over 0.1, DeepSeek's mscale_all_dim) */
    float attn_temp;           /* attention temperature scale (0: none): queries times
                                  1 + attn_temp ln(floor((pos + attn_temp_offset) / attn_temp_floor) + 1) */
    uint32_t attn_temp_floor;
    float attn_temp_offset;
    uint32_t n_moe_step;       /* moe_interleave families: every n_moe_step-th layer has experts (0: none) */
    float attn_softcap, final_softcap; /* 0 = none */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp; /* 0 = dense; n_ff_shexp 0: no shared expert */
    uint32_t pooling;          /* pooling_type as stored (llama.cpp's values: 0 none, 1 mean, 2 cls,
                                  3 last; absent: 0); the embed room interprets it */
    /* Mamba-2 layers (ssm.*): convolution taps, inner width (heads x head
     * width), state size per head, heads (time_step_rank), groups sharing
     * B and C */
    uint32_t ssm_conv, ssm_inner, ssm_state, ssm_heads, ssm_head_dim, ssm_groups;
    /* Qwen3.5's gated delta rule reads the same keys: state_size the key (and
     * value) width per head, time_step_rank the value heads, group_count the
     * key heads (value head h reads key head h % group_count) */
    uint32_t conv_taps;        /* LFM2's short convolutions (shortconv.l_cache) */
    /* Granite: embeddings x embd_scale, each block's output x resid_scale
     * before its residual add, logits / logit_scale (0: none); logit_mul
     * families: logits x logit_scale */
    float embd_scale, resid_scale, logit_scale;
    uint32_t n_linear;         /* linear layers */
    uint32_t n_embd_pl;        /* per_layer_embd: each layer's input width P (0: none) */
    uint32_t n_kv_own;         /* kv_shared: layers [0, n_kv_own) compute their own keys and values */
    uint32_t n_altup, altup_act; /* altup: streams (altup_num_inputs, 2..SP_ALTUP_MAX) and the active one
                                    (altup_active_idx) */
    uint32_t laurel_rank;      /* laurel: laurel_l's rows */
    /* mla families: the query LoRA's rank (0: attn_q), the latent's width,
     * a head's key width before absorption (no-RoPE part + n_rot) and its
     * value width after attn_v_b */
    uint32_t n_lora_q, n_lora_kv, mla_k, mla_v;
    uint32_t n_dense_lead;     /* the first n_dense_lead layers dense (leading_dense_block_count) */
    uint32_t n_group, n_group_used; /* experts in n_group groups; only the n_group_used best groups (each
                                       scored by its two best experts) are selected from (0: no groups) */
    float exp_w_scale;         /* the selected experts' weights times this (0 or 1: none) */
    enum sp_router router;     /* the family's router, or the file's expert_gating_func (mla) */
    bool moe_norm;             /* the family's moe_norm, or the file's expert_weights_norm (mla) */
};

/* The expert stacks of one layer: views of each expert's matrix. */
enum { SP_EXP_GATE, SP_EXP_UP, SP_EXP_DOWN, SP_EXP_KINDS };

struct sp_layer {
    struct sp_tensor attn_norm, wq, wk, wv, wo, q_norm, k_norm, post_attn_norm;
    struct sp_tensor bq, bk, bv;       /* biases (data NULL: none) */
    struct sp_tensor bo, b_up, b_down; /* layer_bias families */
    /* post_ln families: the norms after the attention and feed-forward adds */
    struct sp_tensor attn_out_norm, attn_out_norm_b, ffn_out_norm, ffn_out_norm_b;
    struct sp_tensor ffn_norm, w_gate, w_up, w_down, post_ffn_norm;
    /* mixture of experts (n_expert > 0): router [n_embd -> n_expert], the
     * experts [SP_EXP_KINDS][n_expert], a shared expert (w_gate, w_up,
     * w_down above) scaled by sigmoid(x · shexp_gate) */
    struct sp_tensor gate_inp, shexp_gate;
    struct sp_tensor *exps;
    /* moe_bias families: the router's bias [n_expert]; each kind's expert
     * biases, F32 [n_expert][rows] (data NULL: none) */
    struct sp_tensor gate_inp_b, exps_b[SP_EXP_KINDS];
    struct sp_tensor sinks;            /* attn_sinks families: F32 [n_head] */
    /* moe_dense families: post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2 [n_embd], the router input's
     * scale ffn_gate_inp.scale [n_embd], the experts' output scales ffn_down_exps.scale [n_expert] */
    struct sp_tensor ffn_post1, ffn_pre2, ffn_post2, gate_inp_s, exps_s;
    /* mla: the query LoRA (wq_a, q_a_norm, wq_b; or wq alone), the
     * latent + RoPE key projection and the latent's norm, and per head
     * attn_k_b's [n_lora_kv][mla_k - n_rot] and attn_v_b's [mla_v][n_lora_kv]
     * views ([n_head] each, owned by the model) */
    struct sp_tensor wq_a, q_a_norm, wkv_a, kv_a_norm;
    struct sp_tensor *wk_b, *wv_b;
    struct sp_tensor exp_probs_b;      /* mla: F32 [n_expert] added to the router's probabilities for the
                                          selection alone (data NULL: none) */
    /* Mamba-2 mixer: ssm_in [n_embd -> z, x, B, C, dt], the convolution's
     * taps transposed to [taps][channels] (copied at load), its bias, dt's
     * bias, A and D per head, the gated norm's weight [inner], ssm_out */
    struct sp_tensor ssm_in, ssm_conv, ssm_conv_b, ssm_dt_b, ssm_a, ssm_d, ssm_norm, ssm_out;
    /* LFM2 short convolution: in_proj [n_embd -> B, C, x], the taps
     * transposed to [taps][n_embd] (copied at load), out_proj */
    struct sp_tensor sc_in, sc_conv, sc_out;
    /* Qwen3.5 gated delta rule: attn_qkv [n_embd -> q, k, v], attn_gate (z),
     * ssm_beta and ssm_alpha [n_embd -> value heads] (dn_grouped: dn_beta is
     * ssm_ba [n_embd -> 2 x value heads], dn_alpha absent); ssm_conv (transposed),
     * ssm_dt_b, ssm_a, ssm_norm [value width] and ssm_out above */
    struct sp_tensor dn_qkv, dn_z, dn_beta, dn_alpha;
    /* per_layer_embd: inp_gate [n_embd -> P], proj [P -> n_embd], post_norm [n_embd] */
    struct sp_tensor pl_gate, pl_proj, pl_norm;
    /* altup: the router [n_embd -> A] and its input's norm, the prediction coefficients [A * A][A] and
     * the correction's [A][A] (any matmul type, rows read as floats), the corrected active stream's scale
     * [n_embd]; laurel: laurel_l [n_embd -> rank], laurel_r [rank -> n_embd], laurel_post_norm */
    struct sp_tensor alt_router, alt_rnorm, alt_pred, alt_corr, alt_cscale, lau_l, lau_r, lau_norm;
    float out_scale;           /* out_scale families: the layer's output times it (1: none) */
    uint32_t head_dim, n_head_kv, n_rot; /* its attention's (local layers: head_dim_swa, n_rot_swa; KV heads
                                            from head_count_kv, one per layer or one for all) */
    uint32_t n_ff;             /* its dense feed-forward's width (feed_forward_length, per layer or for all) */
    uint32_t kv_src;           /* the layer whose keys and values this one reads (its own index: its own) */
    bool rope_ff;              /* the model's rope factors apply in this layer */
    enum sp_mixer mixer;
    bool swa;                  /* local (sliding-window) layer */
    bool nope;                 /* attention without RoPE in this layer (the family's nope_interval) */
    bool moe;                  /* the feed-forward is the experts (n_expert > 0; moe_interleave: some layers) */
    bool qk_l2;                /* SP_QK_NORM_L2 in this layer */
    bool sparse;               /* its feed-forward gate passes the Gaussian top-k (the family's sparse_layers) */
    float rope_base;
};

struct sp_model {
    const struct sp_arch *arch;
    struct sp_hparams hp;
    struct sp_mapping map;     /* the file, or the first part of a split model */
    struct sp_gguf gguf;       /* its header; the tensor table covers every part */
    struct sp_gguf_parts parts; /* a split model's other parts */
    struct sp_tensor tok_embd, out_norm, output;
    struct sp_tensor pos_embd, tok_types, embd_norm, embd_norm_b; /* abs_pos families (else data NULL) */
    const float *rope_freqs, *rope_long, *rope_short; /* [n_rot / 2] rope factors (NULL: none) */
    /* per_layer_embd: per_layer_token_embd [n_vocab][n_layer P] (rows read one at a time),
     * per_layer_model_proj [n_embd -> n_layer P], per_layer_proj_norm [P] */
    struct sp_tensor pl_tok_embd, pl_model_proj, pl_proj_norm;
    /* altup: altup_proj's and altup_unembd_proj's [n_altup - 1] matrices [n_embd -> n_embd] */
    struct sp_tensor alt_proj[SP_ALTUP_MAX - 1], alt_unembd[SP_ALTUP_MAX - 1];
    struct sp_layer *layers;   /* [n_layer] */
    struct sp_tensor *exps;    /* owned: every layer's expert views */
    struct sp_tensor *heads;   /* owned: every layer's attn_k_b and attn_v_b head views (mla) */
    bool qkv_fused;            /* Q, K, V are row views of one attn_qkv */
    bool tied_output;          /* the output head is token_embd */
    void *packed;              /* owned (sp_huge_alloc): matrices repacked at load (NULL: none) */
    size_t packed_bytes;
    uint32_t n_packed;         /* how many */
    void *vectors;             /* owned: the norm weights, copied out of the mapping */
    struct sp_span *repacked;  /* owned: where the repacked matrices lie in the file; after
                                  loading only those no tensor read in place shares [n_skip] */
    uint32_t n_skip;
    uint64_t copy_bytes;       /* the file's bytes still read after loading (sp_model_detach) */
    uint64_t weights_bytes;    /* bytes of weight data read per token (routed experts: the used ones) */
    uint64_t resident_bytes;   /* weights held in memory: every matrix (all experts) and vector; the
                                  embedding table only as a tied head (other rows are read per token) */
    uint64_t file_bytes;
    char features[1024];       /* sp_model_features' words */
};

/* After sp_model_open: replaces the file mapping by a private copy of what
 * is still read from it (the metadata the tokenizer and chat template
 * read, the weights used in place: copy_bytes), leaving out the repacked
 * matrices' bytes, so the file may change or be truncated while the model
 * is used (sp_mapping_detach).  lock: mlock the copy. */
sp_status sp_model_detach(struct sp_model *m, bool lock);

/* Opens and validates the model at `path`; map_flags (SP_MAP_READ,
 * SP_MAP_LOCK) say how the file is held in memory, and SP_MAP_LOCK also
 * locks the repacked weights.  progress (may be NULL) hears about the
 * weight repacking. */
sp_status sp_model_open(struct sp_model **out, const char *path, unsigned map_flags,
                        const struct sp_progress *progress);
void sp_model_close(struct sp_model *m);
/* The family's features in words (also kept in m->features) ("QKV bias, sliding window 4096 on 1 of 2
 * layers, 8 experts (2 used)"): for `spindle info`. */
void sp_model_features(const struct sp_model *m, char *buf, size_t size);
/* Loading (model.c, model_hparams.c): m->hp from the file's "<arch>.*"
 * keys for m->arch, checked against each other, and *swa_pattern for the
 * layers' kinds (sp_model_layer_kind).  Bad keys: an error naming the key. */
sp_status sp_model_hparams(struct sp_model *m, uint32_t *swa_pattern);
/* "<arch>.<suffix>" into key. */
void sp_model_key(const struct sp_model *m, const char *suffix, char *key, size_t size);
/* An optional positive finite float key (left at its default when absent). */
sp_status sp_model_hp_pos(const struct sp_model *m, const char *suffix, float *out);
/* Rope factors for a context of n_ctx positions (NULL: none). */
const float *sp_model_rope_factors(const struct sp_model *m, int n_ctx);
/* The built-in chat format of the model's architecture ("chatml", "gemma"). */
const char *sp_model_chat_format(const struct sp_model *m);

/* Opens the file for its vocabulary only (no architecture checks): for
 * `tokenize` on vocabulary-only files.  With `parts`, a split model's
 * parts too (gguf/split.h: *g's tensor table covers them all; free with
 * sp_gguf_parts_free); NULL: `path` alone, whatever its keys say. */
sp_status sp_model_open_gguf(struct sp_mapping *map, struct sp_gguf *g, struct sp_gguf_parts *parts,
                             const char *path, unsigned map_flags);

#endif
