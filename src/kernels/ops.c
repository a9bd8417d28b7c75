/* Element-wise and per-row kernels (RMSNorm, RoPE, gated activations,
 * soft-capping, mixture-of-experts routing), their scalar row of the kernel
 * table, and the choice of the row in use (kernels_isa.h). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "kernels/exp.h"
#include "kernels/kernels_isa.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

/* The rows by ISA level; a level without one uses its parent's. */
static const struct sp_kernels_isa *const kernel_rows[SP_ISA_COUNT] = {
    [SP_ISA_SCALAR] = &sp_kernels_scalar,
#if defined(__x86_64__)
    [SP_ISA_AVX2] = &sp_kernels_avx2,
    [SP_ISA_AVX512] = &sp_kernels_avx512,
#elif defined(__aarch64__)
    [SP_ISA_NEON] = &sp_kernels_neon,
#endif
};
static const struct sp_kernels_isa *_Atomic kernels_active;

static const struct sp_kernels_isa *kernels_row(enum sp_isa isa)
{
    while (!kernel_rows[isa])
        isa = sp_isa_parent(isa);
    return kernel_rows[isa];
}

const struct sp_kernels_isa *sp_kernels_active(void)
{
    const struct sp_kernels_isa *k = atomic_load_explicit(&kernels_active, memory_order_acquire);
    if (!k) { /* every thread that gets here stores the same row */
        k = kernels_row(sp_isa_active());
        atomic_store_explicit(&kernels_active, k, memory_order_release);
    }
    return k;
}

const struct sp_kernels_isa *sp_kernels_for_isa(const char *name)
{
    enum sp_isa isa;
    return sp_isa_parse(name, &isa) && sp_isa_runs(isa) ? kernels_row(isa) : NULL;
}

void sp_kernels_use(const struct sp_kernels_isa *k) { atomic_store_explicit(&kernels_active, k, memory_order_release); }

const char *sp_kernels_isa(void) { return sp_isa_name(sp_kernels_active()->isa); }

void sp_isa_paths(struct sp_isa_paths *out)
{
    out->level = sp_isa_name(sp_isa_active());
    out->quant = sp_quant_isa();
    out->packed = sp_quant_packed_isa();
    out->attention = out->ops = sp_kernels_isa();
}

/* part[k] = sum of x[i]^2 over i % 8 == k, ascending (kernels_isa.h) */
static void sp_sumsq8_scalar(const float *x, int64_t n, double part[8])
{
    for (int64_t i = 0; i < n; i++)
        part[i % 8] += (double)x[i] * x[i];
}

/* Eight partial sums (part[k]: the elements i % 8 == k) added as a fixed tree. */
static double sp_tree8(const double p[8]) { return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7])); }

void sp_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps)
{
    /* The sum of squares in double, as llama.cpp, so long rows keep
     * precision; in eight partial sums (element i into part[i % 8],
     * ascending) added as a fixed tree: the same order for every row and
     * batch, without one add chain through all n elements (whose latency
     * would bound a long row).  x * x is exact in double, so fused or not
     * rounds the same. */
    double part[8] = {0};
    sp_kernels_active()->sumsq8(x, n, part);
    double ss = sp_tree8(part);
    float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (w)
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * scale * w[i];
    else
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * scale;
}

void sp_layernorm(const float *x, const float *w, const float *b, float *y, int64_t n, float eps)
{
    /* mean and variance in double, each in sp_rmsnorm's eight partial sums
     * (element i into part[i % 8], ascending): eight short add chains
     * instead of one through the row, the same order for every row */
    double ps[8] = {0}, pv[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            ps[k] += x[i + k];
    for (; i < n; i++)
        ps[i % 8] += x[i];
    const float mean = (float)(sp_tree8(ps) / (double)n);
    for (i = 0; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            float d = x[i + k] - mean;
            pv[k] += (double)d * d;
        }
    for (; i < n; i++) {
        float d = x[i] - mean;
        pv[i % 8] += (double)d * d;
    }
    const float scale = 1.0f / sqrtf((float)(sp_tree8(pv) / (double)n) + eps);
    for (i = 0; i < n; i++) {
        float v = (x[i] - mean) * scale;
        if (w)
            v *= w[i];
        y[i] = b ? v + b[i] : v;
    }
}

void sp_rope(float *x, int n_rot, int pos, float base, float freq_scale, int neox)
{
    float cs[SP_ROPE_MAX];
    sp_rope_table(cs, n_rot, pos, base, freq_scale, NULL, 1.0f, NULL);
    sp_rope_apply(x, cs, n_rot, neox);
}

/* cs: the n_rot/2 cosines, then the n_rot/2 sines (rows of a vector row) */
void sp_rope_table(float *cs, int n_rot, int pos, float base, float freq_scale, const float *factors, float mscale,
                   const float *yarn)
{
    /* theta_i = pos * base^(-2i/n_rot) (the power accumulated as a running
     * product), divided by the pair's factor, times freq_scale; cos and sin
     * times mscale: llama.cpp's rope cache (ext_factor 0), in its order, so
     * every rounding agrees.  Multiplying by 1.0f is exact: without factors
     * or scaling this is pos * base^(-2i/n_rot). */
    float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    const int half = n_rot / 2;
    if (yarn) /* as ggml: the magnitude correction of the interpolated angles */
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    for (int i = 0; i < half; i++) {
        float extrap = factors ? theta / factors[i] : theta, t = freq_scale * extrap;
        if (yarn) { /* ggml's rope_yarn_ramp: 1 below lo, 0 above hi */
            float y = ((float)i - yarn[0]) / fmaxf(0.001f, yarn[1] - yarn[0]);
            float mix = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            t = t * (1.0f - mix) + extrap * mix;
        }
        cs[i] = cosf(t) * mscale;
        cs[half + i] = sinf(t) * mscale;
        theta *= theta_scale;
    }
}

void sp_rope_yarn_dims(int n_rot, uint32_t n_ctx_orig, float base, float beta_fast, float beta_slow, float dims[2])
{
    /* the dim whose pair turns `turns` times over n_ctx_orig positions */
    const float lb = 2.0f * logf(base), two_pi = 2.0f * (float)M_PI;
    float lo = floorf((float)n_rot * logf((float)n_ctx_orig / (beta_fast * two_pi)) / lb);
    float hi = ceilf((float)n_rot * logf((float)n_ctx_orig / (beta_slow * two_pi)) / lb);
    dims[0] = fmaxf(0.0f, lo);
    dims[1] = fminf((float)(n_rot - 1), hi);
}

void sp_rope_apply(float *x, const float *cs, int n_rot, int neox) { sp_kernels_active()->rope(x, cs, n_rot, neox); }

/* Each output is one rounded product and one fused multiply-add, the
 * product of x0 fused: llama.cpp's rotation as its gcc build compiles it
 * (contracted), so the roundings agree (kernels_isa.h's sp_rope_rows). */
void sp_rope_scalar(float *x, const float *cs, int n_rot, int neox) { sp_rope_rows(x, cs, n_rot, neox); }

/* silu(g) = g / (1 + e^-g) with e^-g from sp_exp (-g clamped to 88, where
 * e^-g is already ~1e38 and silu ~0). */
static void sp_swiglu_scalar(const float *g, const float *u, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float ng = -g[i];
        float e = sp_exp1(ng < 88.0f ? ng : 88.0f);
        y[i] = g[i] / (1.0f + e) * u[i];
    }
}

/* 1 + 0.044715 x^2 as one fmaf, as llama.cpp's build contracts it: the
 * table then holds llama.cpp's f16 values. */
static float sp_gelu_tanh(float x)
{
    const float k = 0.79788456080286535588f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * x * fmaf(0.044715f * x, x, 1.0f)));
}

/* GELU is evaluated as llama.cpp does on the CPU: on the input rounded to
 * f16, through a table of f16 results, so our activations match its
 * numerics (the rounding is ~5e-4 relative: larger than any summation-order
 * effect).  Outside (-10, 10) GELU is 0 or x. */
_Float16 sp_gelu_table[(1 << 16) + 1]; /* + 1: a 32-bit gather at the last entry stays inside */
static pthread_once_t sp_gelu_once = PTHREAD_ONCE_INIT;

static void sp_gelu_table_init(void)
{
    for (uint32_t i = 0; i < (1u << 16); i++) {
        uint16_t h = (uint16_t)i;
        _Float16 x;
        memcpy(&x, &h, sizeof x);
        sp_gelu_table[i] = (_Float16)sp_gelu_tanh((float)x);
    }
}

void sp_gelu_table_ready(void) { pthread_once(&sp_gelu_once, sp_gelu_table_init); }

void sp_gelu_table_warm(void)
{
    sp_gelu_table_ready();
    const size_t line = 64 / sizeof sp_gelu_table[0], end = 0x4900; /* f16 10.0: the table's last use */
    for (size_t k = 0; k < end; k += line) {
        __builtin_prefetch(sp_gelu_table + k);
        __builtin_prefetch(sp_gelu_table + 0x8000 + k); /* the negative inputs */
    }
}

void sp_geglu_scalar(const float *g, const float *u, float *y, int64_t n)
{
    sp_gelu_table_ready();
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        const float ui = u ? u[i] : 1.0f; /* x 1 is exact: plain GELU */
        if (x <= -10.0f) {
            y[i] = 0.0f;
        } else if (x >= 10.0f) {
            y[i] = x * ui;
        } else {
            _Float16 xh = (_Float16)x;
            uint16_t h;
            memcpy(&h, &xh, sizeof h);
            y[i] = (float)sp_gelu_table[h] * ui;
        }
    }
}

void sp_swiglu_oai(const float *g, const float *u, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) { /* llama.cpp's order: libm's expf, then the product */
        const float x = g[i] < SP_SWIGLU_OAI_LIMIT ? g[i] : SP_SWIGLU_OAI_LIMIT;
        const float v = u[i] < -SP_SWIGLU_OAI_LIMIT ? -SP_SWIGLU_OAI_LIMIT
                        : u[i] > SP_SWIGLU_OAI_LIMIT ? SP_SWIGLU_OAI_LIMIT : u[i];
        const float glu = x / (1.0f + expf(SP_SWIGLU_OAI_ALPHA * -x));
        y[i] = glu * (v + 1.0f);
    }
}

void sp_softcap(float *x, int64_t n, float cap)
{
    /* as llama.cpp: a scale by 1/cap (not a division), tanh, a scale by cap */
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++)
        x[i] = tanhf(x[i] * inv) * cap;
}

void sp_moe_route(const float *logits, int n_expert, int k, enum sp_router router, bool norm, int32_t *ids,
                  float *w)
{
    const struct sp_moe_rule rule = {.router = router, .norm = norm};
    sp_moe_route_rule(logits, n_expert, k, &rule, ids, w);
}

/* The n best of x[0, n_x) (highest first, the lower index on a tie) into idx. */
static void sp_moe_top(const float *x, int n_x, int n, int *idx)
{
    for (int i = 0; i < n; i++) {
        int best = -1;
        for (int e = 0; e < n_x; e++) {
            bool taken = false;
            for (int j = 0; j < i; j++)
                taken = taken || idx[j] == e;
            if (!taken && (best < 0 || x[e] > x[best]))
                best = e;
        }
        idx[i] = best;
    }
}

void sp_moe_route_rule(const float *logits, int n_expert, int k, const struct sp_moe_rule *rule, int32_t *ids,
                       float *w)
{
    const enum sp_router router = rule->router;
    const bool norm = rule->norm;
    /* probabilities of every expert (softmax: e^(l - max) over a sum in
     * double, as llama.cpp's softmax; sigmoid: each alone), then the k
     * largest by selection (highest first, the lower id on a tie) */
    float p[SP_MOE_MAX_EXPERTS];
    if (router == SP_ROUTER_SOFTMAX_WEIGHT) {
        memcpy(p, logits, (size_t)n_expert * sizeof *p);
    } else if (router == SP_ROUTER_SOFTMAX) {
        float mx = -INFINITY;
        for (int e = 0; e < n_expert; e++)
            mx = logits[e] > mx ? logits[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < n_expert; e++) {
            p[e] = expf(logits[e] - mx);
            sum += p[e];
        }
        const float inv = (float)(1.0 / sum);
        for (int e = 0; e < n_expert; e++)
            p[e] *= inv;
    } else {
        for (int e = 0; e < n_expert; e++)
            p[e] = 1.0f / (1.0f + expf(-logits[e]));
    }
    float sel[SP_MOE_MAX_EXPERTS];
    for (int e = 0; e < n_expert; e++)
        sel[e] = rule->sel_bias ? p[e] + rule->sel_bias[e] : p[e];
    if (rule->n_group > 1) { /* each group scored by its two best; the others' experts out */
        const int per = n_expert / rule->n_group;
        float score[SP_MOE_MAX_EXPERTS];
        int top[SP_MOE_MAX_EXPERTS], two[2];
        bool keep[SP_MOE_MAX_EXPERTS] = {false};
        for (int g = 0; g < rule->n_group; g++) {
            sp_moe_top(sel + g * per, per, 2, two);
            score[g] = sel[g * per + two[0]] + sel[g * per + two[1]];
        }
        sp_moe_top(score, rule->n_group, rule->n_group_used, top);
        for (int i = 0; i < rule->n_group_used; i++)
            keep[top[i]] = true;
        for (int e = 0; e < n_expert; e++)
            sel[e] = keep[e / per] ? sel[e] : -INFINITY;
    }
    int idx[SP_MOE_MAX_EXPERTS];
    sp_moe_top(sel, n_expert, k, idx);
    for (int i = 0; i < k; i++) {
        ids[i] = idx[i];
        w[i] = p[idx[i]];
    }
    if (router == SP_ROUTER_SOFTMAX_WEIGHT) { /* as ggml's soft_max over the k: the first is the largest */
        double sum = 0.0;
        const float mx = w[0];
        for (int i = 0; i < k; i++) {
            w[i] = expf(w[i] - mx);
            sum += w[i];
        }
        const float inv = (float)(1.0 / sum);
        for (int i = 0; i < k; i++)
            w[i] *= inv;
    }
    if (norm) {
        /* the sum clamped below at f16's smallest normal, as llama.cpp */
        float sum = 0.0f;
        for (int i = 0; i < k; i++)
            sum += w[i];
        sum = sum > 6.103515625e-5f ? sum : 6.103515625e-5f;
        for (int i = 0; i < k; i++)
            w[i] /= sum;
    }
    if (rule->scale != 0.0f && rule->scale != 1.0f)
        for (int i = 0; i < k; i++)
            w[i] *= rule->scale;
}

void sp_swiglu(const float *g, const float *u, float *y, int64_t n) { sp_kernels_active()->swiglu(g, u, y, n); }

void sp_geglu(const float *g, const float *u, float *y, int64_t n) { sp_kernels_active()->geglu(g, u, y, n); }
void sp_gelu(const float *x, float *y, int64_t n) { sp_kernels_active()->geglu(x, NULL, y, n); }

const struct sp_kernels_isa sp_kernels_scalar = {
    .isa = SP_ISA_SCALAR,
    .sumsq8 = sp_sumsq8_scalar,
    .swiglu = sp_swiglu_scalar,
    .geglu = sp_geglu_scalar,
    .rope = sp_rope_scalar,
    .attn_group = sp_attn_group_scalar,
    .attn_block = NULL, /* prompt tokens take the group kernel one by one */
    .conv_causal = sp_conv_causal_scalar,
    .dot16 = sp_dot16_scalar,
    .ssd_state = sp_ssd_state_scalar,
    .ssd_out = sp_ssd_out_scalar,
};
