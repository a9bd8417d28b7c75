/* Compute kernels of the forward pass.  All take row-major f32 activations
 * ([n_tokens][width]) and reduce each output value in one fixed order that
 * does not depend on the number of tokens or threads (batch invariance). */
#ifndef SP_KERNELS_H
#define SP_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"

/* A 2-D weight view: rows of ne0 elements of `type`, borrowed from the
 * mapping (or a repacked copy owned by the model). */
struct sp_tensor {
    uint32_t type;
    int64_t ne0, ne1;   /* row length, row count */
    size_t row_bytes;
    const void *data;
};

/* Bytes of one quantized activation row of n elements for weight `w`. */
size_t sp_act_row_bytes(const struct sp_tensor *w);

/* Quantizes x [n_tok][w->ne0] (row stride x_stride floats) to w's
 * vec_dot_type into q (row stride sp_act_row_bytes(w)).  Threaded. */
void sp_act_quantize(struct sp_pool *pool, const struct sp_tensor *w, const float *x, size_t x_stride,
                     int n_tok, void *q);

/* One row of sp_act_quantize: x [w->ne0] to q (sp_act_row_bytes(w) bytes),
 * for a per-token stage that quantizes its own output. */
void sp_act_quantize_row(const struct sp_tensor *w, const float *x, void *q);

/* out[t][r] = dot(w row r, q row t): q from sp_act_quantize, out row stride
 * out_stride floats.  Rows are split across threads; each value is one
 * vec_dot, so results are batch- and thread-invariant. */
void sp_matmul(struct sp_pool *pool, const struct sp_tensor *w, const void *q, int n_tok, float *out,
               size_t out_stride);

/* Up to SP_MATMUL_MAX matrices that read the same activations (same ne0 and
 * vec_dot_type: Q/K/V, gate/up) in one pool run: out[m] = w[m] x q, each
 * value computed exactly as sp_matmul would (one fewer barrier each). */
#define SP_MATMUL_MAX 3
void sp_matmul_multi(struct sp_pool *pool, int n_mat, const struct sp_tensor *const *w, const void *q, int n_tok,
                     float *const *out, const size_t *out_stride);

/* Groups of (matrix, its own activation rows) in one pool run: for each
 * group, out[t][r] = w row r · q row t for its n_tok rows of q (contiguous,
 * sp_act_row_bytes(w) apart), each value computed exactly as sp_matmul
 * would.  The experts of a mixture-of-experts layer: each expert's weights
 * are read once for all the tokens routed to it. */
struct sp_mm_group {
    const struct sp_tensor *w;
    const void *q;
    int n_tok;
    float *out;
    size_t out_stride;
};
void sp_matmul_grouped(struct sp_pool *pool, int n, const struct sp_mm_group *g);

/* y = x / rms(x) * w over rows of n (w may be NULL: no scale).  In place ok. */
void sp_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);

/* Rotary embedding of one head vector of `dim` values (first n_rot rotate,
 * n_rot <= SP_ROPE_MAX).  neox: pairs (i, i + n_rot/2); else adjacent
 * pairs (2i, 2i+1). */
#define SP_ROPE_MAX 1024
void sp_rope(float *x, int n_rot, int pos, float base, float freq_scale, int neox);
/* The same rotation split in two: the table cs[n_rot] (the n_rot/2
 * cosines, then the sines) of a position, computed once per token and
 * base, then applied to every head; bit-identical to sp_rope.
 * factors (NULL: none): n_rot / 2 divisors of the pairs' angles (Llama 3's
 * rope_freqs, LongRoPE's long or short factors); mscale scales cos and sin
 * (LongRoPE's attention factor; 1 = none).  yarn (NULL: none): YaRN's
 * correction dims [lo, hi] (sp_rope_yarn_dims): pair i keeps its unscaled
 * angle below lo, takes the angle times freq_scale above hi, and a linear
 * mix between; cos and sin then also times 1 + 0.1 ln(1 / freq_scale)
 * (ggml's rope_yarn with ext_factor 1). */
void sp_rope_table(float *cs, int n_rot, int pos, float base, float freq_scale, const float *factors, float mscale,
                   const float *yarn);
/* YaRN's correction dims of n_rot rotated dimensions trained on n_ctx_orig
 * positions: the pairs turning more than beta_fast times over the context
 * (lo, floored) and fewer than beta_slow times (hi, ceiled), clamped to
 * [0, n_rot - 1] (ggml_rope_yarn_corr_dims). */
void sp_rope_yarn_dims(int n_rot, uint32_t n_ctx_orig, float base, float beta_fast, float beta_slow, float dims[2]);
void sp_rope_apply(float *x, const float *cs, int n_rot, int neox);

/* LayerNorm: y = (x - mean) / sqrt(var + eps) * w + b over a row of n (w,
 * b may be NULL: no scale, no shift); mean and variance summed in double
 * (as llama.cpp's ggml_norm), in eight partial sums (sp_rmsnorm's order).
 * In place ok. */
void sp_layernorm(const float *x, const float *w, const float *b, float *y, int64_t n, float eps);

/* y = gelu_tanh(x), n values, through llama.cpp's f16 table (as sp_geglu).  In place ok. */
void sp_gelu(const float *x, float *y, int64_t n);

/* y = silu(g) * u and y = gelu_tanh(g) * u, n values (sp_geglu: u NULL
 * multiplies by nothing, sp_gelu). */
void sp_swiglu(const float *g, const float *u, float *y, int64_t n);
void sp_geglu(const float *g, const float *u, float *y, int64_t n);

/* gpt-oss's clamped SwiGLU (llama.cpp's swiglu_oai): with g' = min(g, 7)
 * and u' = clamp(u, -7, 7), y = g' / (1 + e^(-1.702 g')) * (u' + 1). */
#define SP_SWIGLU_OAI_ALPHA 1.702f
#define SP_SWIGLU_OAI_LIMIT 7.0f
void sp_swiglu_oai(const float *g, const float *u, float *y, int64_t n);

/* x = cap * tanh(x / cap), n values (attention scores, final logits). */
void sp_softcap(float *x, int64_t n, float cap);

/* Mixture-of-experts routing of one token: from the router's logits over
 * n_expert (<= SP_MOE_MAX_EXPERTS) experts, the k selected (ids, highest
 * probability first; the lower id on a tie) and their weights w: the
 * probabilities (softmax over all experts, or each expert's sigmoid; or,
 * SP_ROUTER_SOFTMAX_WEIGHT, the k largest logits chosen and a softmax over
 * those k alone: gpt-oss), renormalized to sum to 1 when `norm`. */
#define SP_MOE_MAX_EXPERTS 512
enum sp_router { SP_ROUTER_SOFTMAX, SP_ROUTER_SIGMOID, SP_ROUTER_SOFTMAX_WEIGHT };
void sp_moe_route(const float *logits, int n_expert, int k, enum sp_router router, bool norm, int32_t *ids,
                  float *w);
/* sp_moe_route with DeepSeek's selection rules: the experts are chosen by
 * their probability plus sel_bias (NULL: none; the weights stay the
 * unbiased probabilities), only from the n_group_used groups (of n_group
 * consecutive groups; n_group <= 1: no groups) whose two best biased
 * probabilities sum highest, and the weights (after `norm`) times scale
 * (0 or 1: none), as llama.cpp's build_moe_ffn. */
struct sp_moe_rule {
    enum sp_router router;
    bool norm;
    const float *sel_bias;
    int n_group, n_group_used;
    float scale;
};
void sp_moe_route_rule(const float *logits, int n_expert, int k, const struct sp_moe_rule *rule, int32_t *ids,
                       float *w);

/* ISA level of the norm, activation and attention kernels in use
 * ("avx512", "avx2", "neon", "scalar"): the active level (core/cpu.h) or
 * the nearest parent with a row of its own. */
const char *sp_kernels_isa(void);

/* The kernel paths chosen for this CPU, by family, as level names (for
 * `spindle info`, `spindle bench --json`). */
struct sp_isa_paths {
    const char *level;     /* the active ISA level (SP_ISA or the CPU's best) */
    const char *quant;     /* file-layout quantized dots and activation quantizers */
    const char *packed;    /* packed 16-row tiles; NULL: weights keep the file layout */
    const char *attention; /* attention (and its softmax) */
    const char *ops;       /* norms, activations */
};
void sp_isa_paths(struct sp_isa_paths *out);

/* Dequantizes row `row` of w into y[w->ne0]. */
void sp_tensor_row(const struct sp_tensor *w, int64_t row, float *y);

#endif
