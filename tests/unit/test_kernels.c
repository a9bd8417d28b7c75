/* Kernels of the forward pass against plain double-precision references:
 * RMSNorm, RoPE, gated activations, quantized matmul (and its batch and
 * thread invariance), attention over the paged KV cache, the linear
 * layers' convolution and chunked scan; then every
 * row of the kernel table this CPU runs (kernels/kernels_isa.h) against the scalar
 * row, bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "check_isa.h"
#include "core/pool.h"
#include "kernels/attention.h"
#include "kernels/kernels_isa.h"
#include "kernels/kernels.h"
#include "kernels/scan.h"
#include "kv/kv.h"
#include "quant/quant.h"

/* max(a, b) for the error reductions (fmax in a reduction loop crashes
 * Debian 12's aarch64 gcc 12 vectorizer) */
static double maxd(double a, double b) { return a > b ? a : b; }

static float frand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return ((*s >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static void test_rmsnorm(void)
{
    unsigned s = 1;
    float x[576], w[576], y[576];
    for (int i = 0; i < 576; i++)
        x[i] = 3 * frand(&s), w[i] = 1 + frand(&s);
    sp_rmsnorm(x, w, y, 576, 1e-5f);
    double ss = 0;
    for (int i = 0; i < 576; i++)
        ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / 576 + 1e-5);
    double worst = 0;
    for (int i = 0; i < 576; i++)
        worst = maxd(worst, fabs(y[i] - x[i] * scale * w[i]) / (fabs(x[i] * scale * w[i]) + 1e-6));
    CHECK(worst < 1e-5, "rmsnorm relative error %g (budget 1e-5: a few float roundings)", worst);
}

/* LayerNorm against double math, with and without scale and shift, on a
 * row whose length 8 does not divide and an offset mean; in place equals
 * out of place. */
static void test_layernorm(void)
{
    enum { N = 389 };
    unsigned s = 7;
    float x[N], w[N], b[N], y[N], z[N];
    for (int i = 0; i < N; i++)
        x[i] = 5 + 3 * frand(&s), w[i] = 1 + frand(&s), b[i] = frand(&s);
    double mean = 0, var = 0;
    for (int i = 0; i < N; i++)
        mean += x[i];
    mean /= N;
    for (int i = 0; i < N; i++)
        var += (x[i] - mean) * (x[i] - mean);
    const double scale = 1.0 / sqrt(var / N + 1e-12);
    for (int k = 0; k < 3; k++) {
        const float *wk = k == 2 ? NULL : w, *bk = k == 0 ? b : NULL;
        sp_layernorm(x, wk, bk, y, N, 1e-12f);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double want = (x[i] - mean) * scale * (wk ? wk[i] : 1) + (bk ? bk[i] : 0);
            /* + 1: the mean is a float (llama.cpp's), ~3e-7 of x off */
            worst = maxd(worst, fabs(y[i] - want) / (fabs(want) + 1));
        }
        CHECK(worst < 1e-5, "layernorm (%s scale, %s shift) relative error %g", wk ? "with" : "no",
              bk ? "with" : "no", worst);
        memcpy(z, x, sizeof z);
        sp_layernorm(z, wk, bk, z, N, 1e-12f);
        CHECK(memcmp(y, z, sizeof y) == 0, "layernorm in place differs");
    }
}

static void test_rope(void)
{
    for (int neox = 0; neox < 2; neox++) {
        float x[64], y[64];
        unsigned s = 7;
        for (int i = 0; i < 64; i++)
            x[i] = frand(&s);
        memcpy(y, x, sizeof x);
        int pos = 37;
        sp_rope(y, 64, pos, 10000.0f, 1.0f, neox);
        double worst = 0;
        for (int i = 0; i < 32; i++) {
            double th = pos * pow(10000.0, -2.0 * i / 64);
            int a = neox ? i : 2 * i, b = neox ? i + 32 : 2 * i + 1;
            double ya = x[a] * cos(th) - x[b] * sin(th), yb = x[a] * sin(th) + x[b] * cos(th);
            worst = maxd(worst, maxd(fabs(ya - y[a]), fabs(yb - y[b])));
        }
        /* float theta accumulates ~1e-6 relative per pair over 32 pairs */
        CHECK(worst < 2e-4, "rope (neox %d) max error %g", neox, worst);
        memcpy(y, x, sizeof x);
        sp_rope(y, 64, 0, 10000.0f, 1.0f, neox);
        CHECK(!memcmp(x, y, sizeof x), "rope at position 0 is the identity");
    }
}

/* Per-pair factors and a cos/sin scale (Llama 3.1's rope_freqs, LongRoPE),
 * with linear scaling: theta_i = pos * base^(-2i/n) / f_i * scale. */
static void test_rope_factors(void)
{
    float f[32], cs[64], plain[64];
    for (int i = 0; i < 32; i++)
        f[i] = 1.0f + 0.25f * (float)i;
    sp_rope_table(cs, 64, 300, 500000.0f, 0.5f, f, 1.2f, NULL);
    double worst = 0;
    for (int i = 0; i < 32; i++) {
        double th = 300 * pow(500000.0, -2.0 * i / 64) / f[i] * 0.5;
        worst = fmax(worst, fmax(fabs(cs[i] - 1.2 * cos(th)), fabs(cs[32 + i] - 1.2 * sin(th))));
    }
    CHECK(worst < 1e-4, "rope table with factors: max error %g", worst);
    /* factors of 1 and scales of 1 change nothing, bit for bit */
    for (int i = 0; i < 32; i++)
        f[i] = 1.0f;
    sp_rope_table(cs, 64, 300, 10000.0f, 1.0f, f, 1.0f, NULL);
    sp_rope_table(plain, 64, 300, 10000.0f, 1.0f, NULL, 1.0f, NULL);
    CHECK(!memcmp(cs, plain, sizeof cs), "rope factors of 1 are the identity");
}

/* YaRN: pairs below the correction range keep their angle, pairs above it
 * are interpolated (angle x freq_scale), a linear ramp between, and cos and
 * sin are scaled by mscale (1 + 0.1 ln(1 / freq_scale)).  Ministral 3's
 * numbers: 128 rotated dims, base 1e6, 16384 trained positions, factor 16. */
static void test_rope_yarn(void)
{
    float dims[2], cs[128];
    sp_rope_yarn_dims(128, 16384, 1000000.0f, 32.0f, 1.0f, dims);
    /* dim d turns n_ctx / (2 pi base^(2d/128)) times: 32 turns at d = 20.4, 1 at d = 36.4 */
    CHECK(dims[0] == 20.0f && dims[1] == 37.0f, "yarn dims [%g, %g], expected [20, 37]", dims[0], dims[1]);
    sp_rope_table(cs, 128, 777, 1000000.0f, 1.0f / 16, NULL, 0.9f, dims);
    double worst = 0, ms = 0.9 * (1 + 0.1 * log(16.0));
    for (int i = 0; i < 64; i++) {
        double ex = 777 * pow(1e6, -2.0 * i / 128), mix = 1 - fmin(1, fmax(0, (i - 20.0) / 17.0));
        double th = ex / 16 * (1 - mix) + ex * mix;
        worst = fmax(worst, fmax(fabs(cs[i] - ms * cos(th)), fabs(cs[64 + i] - ms * sin(th))));
    }
    CHECK(worst < 2e-4, "yarn rope table: max error %g", worst);
    /* the ends: unscaled below lo, fully interpolated above hi */
    float plain[128], interp[128];
    sp_rope_table(plain, 128, 777, 1000000.0f, 1.0f, NULL, 1.0f, NULL);
    sp_rope_table(interp, 128, 777, 1000000.0f, 1.0f / 16, NULL, 1.0f, NULL);
    float k = 0.9f * (1.0f + 0.1f * logf(16.0f));
    CHECK(fabsf(cs[3] - k * plain[3]) < 1e-5f && fabsf(cs[64 + 3] - k * plain[64 + 3]) < 1e-5f,
          "yarn keeps pair 3's angle");
    CHECK(fabsf(cs[50] - k * interp[50]) < 1e-5f && fabsf(cs[64 + 50] - k * interp[64 + 50]) < 1e-5f,
          "yarn interpolates pair 50");
}

static void test_softcap(void)
{
    float x[6] = {-100, -3, -0.25f, 0, 2, 55};
    const float ref[6] = {-100, -3, -0.25f, 0, 2, 55};
    sp_softcap(x, 6, 5.0f);
    for (int i = 0; i < 6; i++)
        CHECK(fabs(x[i] - 5.0 * tanh(ref[i] / 5.0)) < 1e-6 * 5, "softcap(%g) = %g", ref[i], x[i]);
    CHECK(x[0] >= -5.0f && x[5] <= 5.0f, "softcap bounds the values");
}

static void test_moe_route(void)
{
    const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f};
    int32_t ids[3];
    float w[3];
    double p[6], sum = 0;
    for (int e = 0; e < 6; e++)
        sum += p[e] = exp(logits[e]);
    /* softmax, top-3, no renormalization: a tie (experts 1 and 3) goes to the lower id */
    sp_moe_route(logits, 6, 3, SP_ROUTER_SOFTMAX, false, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 4, "softmax top-3: %d %d %d", ids[0], ids[1], ids[2]);
    for (int i = 0; i < 3; i++)
        CHECK(fabs(w[i] - p[ids[i]] / sum) < 1e-6, "softmax weight %d: %g vs %g", i, w[i], p[ids[i]] / sum);
    sp_moe_route(logits, 6, 3, SP_ROUTER_SOFTMAX, true, ids, w);
    double top = p[1] + p[3] + p[4];
    for (int i = 0; i < 3; i++)
        CHECK(fabs(w[i] - p[ids[i]] / top) < 1e-6, "renormalized weight %d: %g vs %g", i, w[i], p[ids[i]] / top);
    /* sigmoid: each expert alone, the same ranking */
    sp_moe_route(logits, 6, 2, SP_ROUTER_SIGMOID, false, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3, "sigmoid top-2: %d %d", ids[0], ids[1]);
    CHECK(fabs(w[0] - 1 / (1 + exp(-2.0))) < 1e-6 && fabs(w[1] - w[0]) < 1e-7, "sigmoid weights %g %g", w[0], w[1]);
    sp_moe_route(logits, 6, 2, SP_ROUTER_SIGMOID, true, ids, w);
    CHECK(fabs(w[0] - 0.5) < 1e-6 && fabs(w[1] - 0.5) < 1e-6, "renormalized sigmoid weights %g %g", w[0], w[1]);
    /* gpt-oss: the 3 largest logits, then a softmax over those 3 alone */
    sp_moe_route(logits, 6, 3, SP_ROUTER_SOFTMAX_WEIGHT, false, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 4, "top-k softmax: %d %d %d", ids[0], ids[1], ids[2]);
    for (int i = 0; i < 3; i++)
        CHECK(fabs(w[i] - p[ids[i]] / top) < 1e-6, "top-k softmax weight %d: %g vs %g", i, w[i], p[ids[i]] / top);
    const float big[4] = {30.0f, -40.0f, 29.0f, 10.0f}; /* e^30 overflows nothing: the maximum is subtracted */
    sp_moe_route(big, 4, 2, SP_ROUTER_SOFTMAX_WEIGHT, false, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 2 && fabs(w[0] - 1 / (1 + exp(-1.0))) < 1e-6 && fabs(w[0] + w[1] - 1) < 1e-6,
          "top-k softmax of large logits: %d %d %g %g", ids[0], ids[1], w[0], w[1]);
}

/* DeepSeek's routing (sp_moe_route_rule): 8 experts in 4 groups of 2,
 * sigmoid probabilities, a selection bias that changes the choice but not
 * the weights, the 2 best groups (by their two best biased probabilities)
 * selected from, weights renormalized and scaled. */
static void test_moe_route_groups(void)
{
    const float logits[8] = {3.0f, 2.0f, 1.0f, 1.0f, 2.5f, 2.5f, 0.0f, 4.0f};
    const float bias[8] = {0, 0, 0, 0, 0, 0, 0, -3.0f};
    double p[8];
    for (int e = 0; e < 8; e++)
        p[e] = 1 / (1 + exp(-(double)logits[e]));
    int32_t ids[2];
    float w[2];
    /* groups {0,1} {2,3} {4,5} {6,7}, scored 1.834, 1.462, 1.848 and -1.518 (the bias on 7):
       {4,5} and {0,1} are kept; the best two of those are 0 and 4 (p0 > p4 = p5: the lower id) */
    struct sp_moe_rule r = {.router = SP_ROUTER_SIGMOID, .norm = true, .sel_bias = bias, .n_group = 4,
                            .n_group_used = 2, .scale = 2.5f};
    sp_moe_route_rule(logits, 8, 2, &r, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 4, "grouped routing: %d %d", ids[0], ids[1]);
    CHECK(fabs(w[0] - 2.5 * p[0] / (p[0] + p[4])) < 1e-6 && fabs(w[1] - 2.5 * p[4] / (p[0] + p[4])) < 1e-6,
          "grouped routing weights %g %g", w[0], w[1]);
    /* without the bias and the groups expert 7 wins; the bias enters the choice only */
    r.sel_bias = NULL, r.n_group = 0;
    sp_moe_route_rule(logits, 8, 2, &r, ids, w);
    CHECK(ids[0] == 7 && ids[1] == 0, "ungrouped-bias routing: %d %d", ids[0], ids[1]);
    /* one group used: only its experts */
    r.sel_bias = bias, r.n_group = 4, r.n_group_used = 1, r.norm = false, r.scale = 0.0f;
    sp_moe_route_rule(logits, 8, 2, &r, ids, w);
    CHECK(ids[0] == 4 && ids[1] == 5 && fabs(w[0] - p[4]) < 1e-6, "one group: %d %d %g", ids[0], ids[1], w[0]);
}

/* gpt-oss's clamped SwiGLU against its formula in double: the gate capped
 * above at 7 (not below), the up value clamped to [-7, 7], plus one. */
static void test_swiglu_oai(void)
{
    const float g[8] = {-12, -3, -0.5f, 0, 1, 6.5f, 7.5f, 30}, u[8] = {1, -9, -1, 3, 0.5f, 8, -2, 12};
    float y[8];
    sp_swiglu_oai(g, u, y, 8);
    for (int i = 0; i < 8; i++) {
        const double x = g[i] < 7 ? g[i] : 7, v = u[i] < -7 ? -7 : u[i] > 7 ? 7 : u[i];
        const double ref = x / (1 + exp(-1.702 * x)) * (v + 1);
        CHECK(fabs(y[i] - ref) < 1e-5 * (1 + fabs(ref)), "swiglu_oai(%g, %g): %g vs %g", g[i], u[i], y[i], ref);
    }
    CHECK(y[7] == y[7] && fabs(y[7] - 7 / (1 + exp(-1.702 * 7)) * 8) < 1e-4, "gate 30 and up 12 clamp to 7: %g", y[7]);
}

static void test_glu(void)
{
    float g[8] = {-12, -3, -0.5f, 0, 0.25f, 1, 4, 12}, u[8] = {1, 2, -1, 3, 0.5f, -2, 1, 0.5f}, y[8];
    sp_swiglu(g, u, y, 8);
    for (int i = 0; i < 8; i++) {
        double ref = g[i] / (1 + exp(-g[i])) * u[i];
        CHECK(fabs(y[i] - ref) < 1e-5 * (1 + fabs(ref)), "swiglu %g: %g vs %g", g[i], y[i], ref);
    }
    /* 40 values: the 16-lane form for 32 of them, the scalar one for the
     * rest; each must equal the same value computed alone (scalar) */
    float g40[40], u40[40], y40[40];
    for (int i = 0; i < 40; i++) {
        g40[i] = (float)(i - 20) * (i % 3 == 0 ? 7.3f : 0.37f); /* -146 .. 142 */
        u40[i] = 1.0f + 0.1f * (float)i;
    }
    sp_swiglu(g40, u40, y40, 40);
    int same = 0;
    double worst = 0;
    for (int i = 0; i < 40; i++) {
        float one;
        sp_swiglu(g40 + i, u40 + i, &one, 1);
        same += !memcmp(&one, &y40[i], sizeof one);
        double ref = g40[i] / (1 + exp(-(double)g40[i])) * u40[i];
        worst = maxd(worst, fabs(y40[i] - ref) / (1 + fabs(ref)));
    }
    CHECK(same == 40, "swiglu: %d of 40 values equal alone and in a row", same);
    CHECK(worst < 1e-5, "swiglu over -146..142: error %g", worst);
    sp_geglu(g, u, y, 8);
    for (int i = 0; i < 8; i++) {
        double x = g[i];
        double ref = 0.5 * x * (1 + tanh(0.7978845608 * x * (1 + 0.044715 * x * x))) * u[i];
        /* llama.cpp's f16 table: input and output rounded to f16 (2^-11 relative) */
        CHECK(fabs(y[i] - ref) < 2e-3 * (1 + fabs(ref)), "geglu %g: %g vs %g", g[i], y[i], ref);
    }
    /* in a row (16 at a time) as alone: every f16 input (the last table
     * entry among them), the clamps at +-10 and values between f16s */
    enum { NG = 65536 + 8 };
    float *gg = malloc(sizeof(float) * NG * 4), *ug = gg + NG, *yg = ug + NG, *yp = yg + NG;
    for (int i = 0; i < 65536; i++) {
        gg[i] = sp_f16_to_f32((uint16_t)i);
        ug[i] = 0.5f + (float)(i % 7);
    }
    const float edge[8] = {-10.0f, 10.0f, -10.001f, 10.001f, -9.999f, 9.999f, 0.1234567f, -3.3333333f};
    for (int i = 0; i < 8; i++)
        gg[65536 + i] = edge[i], ug[65536 + i] = 1.5f;
    sp_geglu(gg, ug, yg, NG);
    int ge = 0;
    for (int i = 0; i < NG; i++) {
        float one;
        sp_geglu(gg + i, ug + i, &one, 1);
        ge += !memcmp(&one, &yg[i], sizeof one) || (one != one && yg[i] != yg[i]);
    }
    CHECK(ge == NG, "geglu: %d of %d values equal alone and in a row", ge, NG);
    /* plain GELU is GEGLU with u = 1, in place too */
    for (int i = 0; i < NG; i++) ug[i] = 1.0f, yp[i] = gg[i];
    sp_geglu(gg, ug, yg, NG);
    sp_gelu(yp, yp, NG);
    int gp = 0;
    for (int i = 0; i < NG; i++) gp += !memcmp(&yp[i], &yg[i], sizeof yp[i]) || (yp[i] != yp[i] && yg[i] != yg[i]);
    CHECK(gp == NG, "gelu: %d of %d values equal geglu with u = 1", gp, NG);
    free(gg);
}

/* quantized weights [rows][n] of `type` from random floats */
static void *make_weights(uint32_t type, int rows, int n, float *deq)
{
    const struct sp_type_traits *tt = sp_type_get(type);
    size_t rb;
    sp_type_row_size(type, n, &rb);
    uint8_t *w = malloc(rb * rows);
    float *row = malloc(sizeof(float) * n);
    unsigned s = 99 + type;
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < n; i++)
            row[i] = frand(&s);
        sp_type_get_ref(type)->from_float(row, w + rb * r, n);
        tt->to_float(w + rb * r, deq + (size_t)r * n, n);
    }
    free(row);
    return w;
}

/* One weight type, in the file layout (pack = false) or repacked into
 * 16-row tiles as the model does when the ISA has a packed kernel. */
static void check_matmul(struct sp_pool *p1, struct sp_pool *p2, uint32_t type, bool pack)
{
    /* 200 tokens: a prompt-sized batch, split into column parts of uneven width */
    enum { MAXR = 48, n = 512, T = 200 };
    const int rows = pack ? 48 : 40;
    float *deq = malloc(sizeof(float) * MAXR * n), *x = malloc(sizeof(float) * T * n);
    void *wd = make_weights(type, rows, n, deq), *packed = NULL;
    struct sp_tensor w = {type, n, rows, 0, wd};
    sp_type_row_size(type, n, &w.row_bytes);
    char name[32];
    snprintf(name, sizeof name, "%s%s", sp_type_get(type)->name, pack ? " packed" : "");
    if (pack) {
        uint32_t pt = sp_type_packed_for(type, rows);
        packed = aligned_alloc(64, w.row_bytes * rows);
        sp_type_get(pt)->pack(wd, w.row_bytes, packed, n, rows);
        w.type = pt;
        w.data = packed;
    }
    unsigned s = 5;
    for (int i = 0; i < T * n; i++)
        x[i] = frand(&s);
    uint8_t *q = malloc(sp_act_row_bytes(&w) * T);
    float *out7 = malloc(sizeof(float) * T * MAXR), out1[MAXR], *out7b = malloc(sizeof(float) * T * MAXR);
    sp_act_quantize(p2, &w, x, n, T, q);
    sp_matmul(p2, &w, q, T, out7, rows);
    sp_matmul(p1, &w, q, T, out7b, rows);
    CHECK(!memcmp(out7, out7b, sizeof(float) * T * rows), "%s: 1 and 2 threads differ", name);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        sp_act_quantize(p1, &w, x + t * n, n, 1, q);
        sp_matmul(p1, &w, q, 1, out1, rows);
        CHECK(!memcmp(out1, out7 + t * rows, sizeof(float) * rows), "%s: token %d alone differs from the batch",
              name, t);
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < n; i++)
                ref += (double)deq[r * n + i] * x[t * n + i], mag += fabs(deq[r * n + i] * x[t * n + i]);
            worst = maxd(worst, fabs(out7[t * rows + r] - ref) / mag);
        }
    }
    /* 8-bit activations: ~0.4% of each block's range per value, averaging down */
    CHECK(worst < 0.01, "%s: matmul error %g of sum |terms|", name, worst);
    free(q);
    free(packed);
    free(wd);
    free(deq);
    free(x);
    free(out7);
    free(out7b);
}

static void test_matmul(struct sp_pool *p1, struct sp_pool *p2)
{
    const uint32_t types[] = {SP_TYPE_Q4_1, SP_TYPE_Q8_0, SP_TYPE_Q4_K, SP_TYPE_Q6_K, SP_TYPE_Q5_0, SP_TYPE_MXFP4,
                              SP_TYPE_F32};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        check_matmul(p1, p2, types[ti], false);
        if (sp_type_packed_for(types[ti], 48))
            check_matmul(p1, p2, types[ti], true);
    }
}

/* Experts' groups in one pool run: each group's output equals sp_matmul of
 * its matrix and rows, bit for bit, on 1 and 2 threads. */
static void test_matmul_grouped(struct sp_pool *p1, struct sp_pool *p2)
{
    enum { n = 256, rows = 48, G = 4 };
    const int toks[G] = {1, 0, 7, 70};
    float *deq = malloc(sizeof(float) * rows * n), *x = malloc(sizeof(float) * (70 + G) * n);
    struct sp_tensor w[G];
    void *wd[G], *packed[G];
    uint8_t *q[G];
    float *ref[G], *out[G];
    struct sp_mm_group g[G];
    unsigned s = 11;
    for (int i = 0; i < (70 + G) * n; i++) /* group k reads rows k.. */
        x[i] = frand(&s);
    for (int k = 0; k < G; k++) {
        uint32_t type = k % 2 ? SP_TYPE_Q8_0 : SP_TYPE_Q4_K;
        wd[k] = make_weights(type, rows, n, deq);
        w[k] = (struct sp_tensor){type, n, rows, 0, wd[k]};
        sp_type_row_size(type, n, &w[k].row_bytes);
        packed[k] = NULL;
        uint32_t pt = sp_type_packed_for(type, rows);
        if (pt && k >= 2) { /* two in the file layout, two repacked */
            packed[k] = aligned_alloc(64, w[k].row_bytes * rows);
            sp_type_get(pt)->pack(wd[k], w[k].row_bytes, packed[k], n, rows);
            w[k].type = pt, w[k].data = packed[k];
        }
        q[k] = malloc(sp_act_row_bytes(&w[k]) * 70);
        sp_act_quantize(p1, &w[k], x + k * n, n, toks[k], q[k]);
        ref[k] = malloc(sizeof(float) * 70 * rows);
        out[k] = malloc(sizeof(float) * 70 * rows);
        if (toks[k])
            sp_matmul(p1, &w[k], q[k], toks[k], ref[k], rows);
        g[k] = (struct sp_mm_group){&w[k], q[k], toks[k], out[k], rows};
    }
    for (int pass = 0; pass < 2; pass++) {
        sp_matmul_grouped(pass ? p2 : p1, G, g);
        for (int k = 0; k < G; k++)
            CHECK(!memcmp(ref[k], out[k], sizeof(float) * rows * toks[k]), "grouped matmul group %d (%d tokens, %d "
                  "threads) differs from sp_matmul", k, toks[k], pass + 1);
    }
    for (int k = 0; k < G; k++) {
        free(wd[k]);
        free(packed[k]);
        free(q[k]);
        free(ref[k]);
        free(out[k]);
    }
    free(deq);
    free(x);
}

/* HKV = 1 on two threads takes the one-token path that splits a group's
 * heads between the threads; HKV = 2 the whole-group path.  Every output
 * is appended to rec (when not NULL; *nrec floats so far) for comparing
 * the kernel table's rows. */
#define REC(p, n)                                                              \
    do {                                                                       \
        if (rec) {                                                             \
            memcpy(rec + *nrec, (p), sizeof(float) * (size_t)(n));             \
            *nrec += (size_t)(n);                                              \
        }                                                                      \
    } while (0)
/* x[0..n) replaced by what a cache of type t holds for it: rotated,
 * quantized and dequantized by the reference quantizer, rotated back (f16
 * inputs are already exact). */
static void cache_roundtrip(sp_cache_type t, float *x, int n)
{
    if (t == SP_CACHE_F16)
        return;
    const struct sp_type_traits *tr = sp_type_get_ref(t == SP_CACHE_Q8_0 ? SP_TYPE_Q8_0 : SP_TYPE_Q4_0);
    uint8_t blocks[256 / 32 * 34];
    sp_kv_rotate(x, (uint32_t)n, false);
    tr->from_float(x, blocks, n);
    tr->to_float(blocks, x, n);
    sp_kv_rotate(x, (uint32_t)n, true);
}

/* The largest |oh[i] - reference| for one query head over KV head hk:
 * attention in double over keys K and values V ([position][HKV][D]),
 * positions j0..pos, the query rounded to f16 as the kernels do; sink (a
 * logit with no value, -inf: none) in the maximum and the denominator. */
static double attn_ref_error(const float *qh, const float *K, const float *V, const float *oh, int HKV, int D, int hk,
                             int j0, int pos, float cap, double sink)
{
    double sc[64], mx = -1e30, sum = 0, worst = 0;
    for (int j = j0; j <= pos; j++) {
        double d = 0;
        for (int i = 0; i < D; i++)
            d += (double)sp_f16_to_f32(sp_f32_to_f16(qh[i])) * K[j * HKV * D + hk * D + i];
        sc[j - j0] = cap > 0 ? cap * tanh(d * 0.125 / cap) : d * 0.125;
        mx = fmax(mx, sc[j - j0]);
    }
    mx = fmax(mx, sink);
    for (int j = j0; j <= pos; j++)
        sum += sc[j - j0] = exp(sc[j - j0] - mx);
    sum += exp(sink - mx);
    for (int i = 0; i < D; i++) {
        double o = 0;
        for (int j = j0; j <= pos; j++)
            o += sc[j - j0] / sum * V[j * HKV * D + hk * D + i];
        worst = maxd(worst, fabs(o - oh[i]));
    }
    return worst;
}

static void test_attention(struct sp_pool *pool, const int HKV, const int D, sp_cache_type kt, sp_cache_type vt,
                           float *rec, size_t *nrec)
{
    const int H = 4, P = 40;
    struct sp_kv *kv;
    struct sp_kv_seq seq = {0};
    const struct sp_kv_shape shape = {.n_layer = 1, .n_head_kv = (uint32_t)HKV, .head_dim = D, .type_k = kt,
                                      .type_v = vt};
    CHECK(sp_kv_new(&kv, &shape, 8) == SP_OK, "kv init");
    CHECK(sp_kv_seq_reserve(kv, &seq, P) == SP_OK, "reserve");
    float *K = malloc(sizeof(float) * P * HKV * D), *V = malloc(sizeof(float) * P * HKV * D);
    float *K0 = malloc(sizeof(float) * P * HKV * D), *V0 = malloc(sizeof(float) * P * HKV * D);
    unsigned s = 3;
    for (int p = 0; p < P; p++) {
        for (int i = 0; i < HKV * D; i++) {
            K[p * HKV * D + i] = K0[p * HKV * D + i] = sp_f16_to_f32(sp_f32_to_f16(frand(&s)));
            V[p * HKV * D + i] = V0[p * HKV * D + i] = sp_f16_to_f32(sp_f32_to_f16(frand(&s)));
        }
        sp_kv_store(kv, &seq, 0, (uint32_t)p, K + p * HKV * D, V + p * HKV * D);
        for (int h = 0; h < HKV; h++) { /* the reference reads what the cache holds */
            cache_roundtrip(kt, K + (p * HKV + h) * D, D);
            cache_roundtrip(vt, V + (p * HKV + h) * D, D);
        }
    }
    float q[2 * 4 * 256], out[2 * 4 * 256];
    size_t per = sp_attention_scratch_floats(P, D);
    float *scratch = malloc(sizeof(float) * per * (size_t)sp_pool_chunks_for(sp_pool_size(pool)));
    for (int i = 0; i < 2 * H * D; i++)
        q[i] = 2 * frand(&s);
    const struct sp_kv_seq *seqs[2] = {&seq, &seq};
    int32_t pos[2] = {P - 1, 20};
    /* attention sinks (gpt-oss): one below every score, the others above
     * many of them, so the sink's share of the softmax is visible */
    static const float sinkv[4] = {-20.0f, 0.5f, 2.0f, 4.0f};
    for (int run = 0; run < 8; run++) { /* runs 4 and 5: chunks of 8 positions (Llama 4); 6 and 7: sinks */
        const int window = run % 2 || run == 4 ? 8 : 0;
        const bool chunked = run == 4 || run == 5;
        const float cap = run == 2 || run == 3 || run == 5 ? 1.5f : 0.0f; /* soft-capped scores (Gemma 2) */
        const float *sinks = run >= 6 ? sinkv : NULL;
        struct sp_attn_args a = {.kv = kv, .layer = 0, .n_tok = 2, .q = q, .q_stride = H * D, .seqs = seqs,
                                 .pos = pos, .n_head = H, .n_head_kv = HKV, .head_dim = D, .scale = 0.125f,
                                 .softcap = cap, .window = window, .chunked = chunked, .sinks = sinks, .out = out,
                                 .out_stride = H * D, .scratch = scratch, .scratch_per_thread = per, .max_pos = P};
        sp_attention(pool, &a);
        double worst = 0, worst0 = 0;
        for (int t = 0; t < 2; t++)
            for (int h = 0; h < H; h++) {
                int hk = h / (H / HKV), j0 = window && pos[t] - window + 1 > 0 ? pos[t] - window + 1 : 0;
                if (chunked) /* the query's own chunk */
                    j0 = pos[t] / window * window;
                const float *qh = q + t * H * D + h * D, *oh = out + t * H * D + h * D;
                const double sink = sinks ? sinks[h] : -INFINITY;
                worst = maxd(worst, attn_ref_error(qh, K, V, oh, HKV, D, hk, j0, pos[t], cap, sink));
                /* against the values before quantization */
                worst0 = maxd(worst0, attn_ref_error(qh, K0, V0, oh, HKV, D, hk, j0, pos[t], cap, sink));
            }
        /* probabilities are rounded to f16 as llama.cpp does: ~5e-4 relative */
        CHECK(worst < 2e-3, "attention (%d KV heads, D %d, K %s, V %s, %s %d, soft-cap %g, sinks %d) max error %g",
              HKV, D, sp_cache_type_name(kt), sp_cache_type_name(vt), chunked ? "chunk" : "window", window, cap,
              sinks != NULL, worst);
        /* quantization's own error (values in [-1, 1]): up to half a step
         * per element, a step being 1/127 (q8_0) or 1/8 (q4_0) of a
         * rotated block's largest value; a window of 8 averages little of
         * it out (measured: q8_0 < 0.01, q4_0 up to 0.175) */
        const double bound0 = kt == SP_CACHE_Q4_0 || vt == SP_CACHE_Q4_0 ? 0.25 : kt || vt ? 0.02 : 2e-3;
        CHECK(worst0 < bound0, "attention (%d KV heads, D %d, K %s, V %s, %s %d) error %g against the unquantized "
              "cache (bound %g)", HKV, D, sp_cache_type_name(kt), sp_cache_type_name(vt), chunked ? "chunk" : "window",
              window, worst0, bound0);
        REC(out, 2 * H * D);
    }
    /* a prompt run gives each token bit for bit what it gets alone:
     * positions 16..39 in one batch (blocks of 16 and 8 queries), and
     * 3..39 (blocks of 16, 16 and 5, none starting on a key tile); then a
     * bidirectional input's 24 tokens, every one seeing position 39, and
     * last positions rising by 0 or 1 (four tokens each); then the first
     * two with chunks of 8 (queries of one block in several chunks) */
    enum { NTMAX = 37 };
    float *qb = malloc(sizeof(float) * NTMAX * H * D), *ob = malloc(sizeof(float) * NTMAX * H * D), o1[4 * 256];
    const struct sp_kv_seq *seqb[NTMAX];
    int32_t posb[NTMAX], *plan = malloc(sizeof(int32_t) * sp_attention_plan_ints(NTMAX, H));
    for (int i = 0; i < NTMAX * H * D; i++)
        qb[i] = 2 * frand(&s);
    for (int run = 0; run < 10; run++) {
        const int NT = run == 9 || (run < 8 && run % 4 >= 2) ? 37 : 24, window = run % 2 || run >= 8 ? 8 : 0;
        const float cap = run == 4 || run == 5 ? 1.5f : 0.0f;
        const float *sinks = run % 3 == 2 ? sinkv : NULL; /* the block path's softmax too */
        for (int t = 0; t < NT; t++)
            seqb[t] = &seq, posb[t] = run < 6 || run >= 8 ? P - NT + t : run == 6 ? P - 1 : P - 1 - (NT - 1 - t) / 4;
        struct sp_attn_args a = {.kv = kv, .layer = 0, .n_tok = NT, .q = qb, .q_stride = H * D, .seqs = seqb,
                                 .pos = posb, .n_head = H, .n_head_kv = HKV, .head_dim = D, .scale = 0.125f,
                                 .softcap = cap, .window = window, .chunked = run >= 8, .sinks = sinks, .out = ob,
                                 .out_stride = H * D,
                                 .scratch = scratch, .scratch_per_thread = per, .max_pos = P, .plan = plan};
        sp_attention(pool, &a);
        int diff = 0;
        for (int t = 0; t < NT; t++) {
            struct sp_attn_args a1 = a;
            a1.n_tok = 1, a1.q = qb + (size_t)t * H * D, a1.seqs = &seqb[t], a1.pos = &posb[t], a1.out = o1;
            sp_attention(pool, &a1);
            diff += memcmp(o1, ob + (size_t)t * H * D, sizeof(float) * H * D) != 0;
        }
        CHECK(diff == 0, "attention (%d KV heads, D %d, K %s, V %s, window %d): %d of %d prompt tokens differ from the "
              "token alone", HKV, D, sp_cache_type_name(kt), sp_cache_type_name(vt), window, diff, NT);
        REC(ob, NT * H * D);
    }
    free(qb);
    free(ob);
    free(plan);
    free(K);
    free(V);
    free(K0);
    free(V0);
    free(scratch);
    sp_kv_seq_release(kv, &seq);
    sp_kv_free(kv);
}

/* Multi-head latent attention as the forward pass runs it (the absorbed
 * form): the cache holds one KV head per position, [latent c, RoPE key
 * k_pe] (C + NR wide) as both key and value; head h's query is
 * [W_kb[h] q_nope, q_pe] and its output's first C values, times W_vb[h],
 * its values.  Against the decompressed heads in double: keys
 * [W_kb[h]^T c, k_pe], values W_vb[h] c, softmax of (q_nope . k_nope +
 * q_pe . k_pe) x scale.  The query rounds to f16 after absorption and the
 * probabilities to f16 (llama.cpp's points), so within 2e-3 of the
 * largest |value|; with W_kb read transposed (a wrong absorption) or the
 * RoPE part left out of the score the error is 0.23 or 0.25 (largest
 * |value| 0.27: measured).  A prompt batch gives
 * each token bit for bit what it gets alone (the block path).  v_in_k:
 * the cache stores the rows once, as keys (the forward pass's cache), and
 * gives the same outputs bit for bit as one storing them as values too,
 * on every kernel row. */
static void test_mla_attention(struct sp_pool *pool, bool v_in_k)
{
    enum { H = 4, C = 64, NR = 16, D = C + NR, KN = 32, V = 24, P = 40, NT = 21 };
    struct sp_kv *kv, *kv2;
    struct sp_kv_seq seq = {0}, seq2 = {0};
    const struct sp_kv_shape shape = {.n_layer = 1, .n_head_kv = 1, .head_dim = D, .v_in_k = v_in_k};
    const struct sp_kv_shape shape2 = {.n_layer = 1, .n_head_kv = 1, .head_dim = D};
    CHECK(sp_kv_new(&kv, &shape, 8) == SP_OK && sp_kv_new(&kv2, &shape2, 8) == SP_OK, "mla: kv init");
    CHECK(sp_kv_seq_reserve(kv, &seq, P) == SP_OK && sp_kv_seq_reserve(kv2, &seq2, P) == SP_OK, "mla: reserve");
    CHECK(sp_kv_block_bytes(&shape) * (v_in_k ? 2 : 1) == sp_kv_block_bytes(&shape2), "mla: block bytes %llu vs %llu",
          (unsigned long long)sp_kv_block_bytes(&shape), (unsigned long long)sp_kv_block_bytes(&shape2));
    static float wkb[H][C][KN], wvb[H][V][C], lat[P][D], qn[NT][H][KN], qp[NT][H][NR], q[NT][H][D], out[NT][H][D];
    static float o1[H][D];
    unsigned s = 11;
    for (int h = 0; h < H; h++) {
        for (int r = 0; r < C; r++)
            for (int i = 0; i < KN; i++)
                wkb[h][r][i] = frand(&s) / sqrtf(KN);
        for (int j = 0; j < V; j++)
            for (int r = 0; r < C; r++)
                wvb[h][j][r] = frand(&s) / sqrtf(C);
    }
    for (int p = 0; p < P; p++) {
        for (int i = 0; i < D; i++)
            lat[p][i] = sp_f16_to_f32(sp_f32_to_f16(frand(&s)));
        sp_kv_store(kv, &seq, 0, (uint32_t)p, lat[p], lat[p]);
        sp_kv_store(kv2, &seq2, 0, (uint32_t)p, lat[p], lat[p]);
    }
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < KN; i++)
                qn[t][h][i] = 2 * frand(&s);
            for (int i = 0; i < NR; i++)
                qp[t][h][i] = 2 * frand(&s);
            for (int r = 0; r < C; r++) { /* absorbed: q_abs[r] = sum_i W_kb[r][i] q_nope[i] */
                float a = 0;
                for (int i = 0; i < KN; i++)
                    a += wkb[h][r][i] * qn[t][h][i];
                q[t][h][r] = a;
            }
            memcpy(&q[t][h][C], qp[t][h], sizeof qp[t][h]);
        }
    const float scale = 0.15f;
    size_t per = sp_attention_scratch_floats(P, D);
    float *scratch = malloc(sizeof(float) * per * (size_t)sp_pool_chunks_for(sp_pool_size(pool)));
    int32_t *plan = malloc(sizeof(int32_t) * sp_attention_plan_ints(NT, H)), pos[NT];
    const struct sp_kv_seq *seqs[NT];
    for (int t = 0; t < NT; t++)
        seqs[t] = &seq, pos[t] = P - NT + t;
    struct sp_attn_args a = {.kv = kv, .layer = 0, .n_tok = NT, .q = &q[0][0][0], .q_stride = H * D, .seqs = seqs,
                             .pos = pos, .n_head = H, .n_head_kv = 1, .head_dim = D, .scale = scale,
                             .out = &out[0][0][0], .out_stride = H * D, .scratch = scratch,
                             .scratch_per_thread = per, .max_pos = P, .plan = plan};
    sp_attention(pool, &a);
    double worst = 0, big = 0;
    int diff = 0;
    for (int t = 0; t < NT; t++) {
        for (int h = 0; h < H; h++) {
            double sc[P], mx = -1e30, sum = 0;
            for (int j = 0; j <= pos[t]; j++) {
                double d = 0;
                for (int i = 0; i < KN; i++) { /* k_nope[i] = sum_r W_kb[r][i] c[r] */
                    double k = 0;
                    for (int r = 0; r < C; r++)
                        k += (double)wkb[h][r][i] * lat[j][r];
                    d += (double)qn[t][h][i] * k;
                }
                for (int i = 0; i < NR; i++)
                    d += (double)qp[t][h][i] * lat[j][C + i];
                sc[j] = d * scale;
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j <= pos[t]; j++)
                sum += sc[j] = exp(sc[j] - mx);
            for (int jv = 0; jv < V; jv++) {
                double ref = 0, got = 0;
                for (int j = 0; j <= pos[t]; j++) {
                    double v = 0;
                    for (int r = 0; r < C; r++)
                        v += (double)wvb[h][jv][r] * lat[j][r];
                    ref += sc[j] / sum * v;
                }
                for (int r = 0; r < C; r++) /* the output latent widened by W_vb */
                    got += (double)wvb[h][jv][r] * out[t][h][r];
                worst = maxd(worst, fabs(got - ref));
                big = maxd(big, fabs(ref));
            }
        }
        struct sp_attn_args a1 = a;
        a1.n_tok = 1, a1.q = &q[t][0][0], a1.seqs = &seqs[t], a1.pos = &pos[t], a1.out = &o1[0][0];
        sp_attention(pool, &a1);
        diff += memcmp(o1, out[t], sizeof o1) != 0;
    }
    CHECK(worst < 2e-3 * big, "mla: absorbed attention differs from the decompressed heads by %g (largest |value| %g)",
          worst, big);
    CHECK(diff == 0, "mla: %d of %d prompt tokens differ from the token alone", diff, NT);
    /* the same queries over a cache holding the rows as keys and values */
    const struct sp_kv_seq *seqs2[NT];
    for (int t = 0; t < NT; t++)
        seqs2[t] = &seq2;
    static float out2[NT][H][D];
    struct sp_attn_args a2 = a;
    a2.kv = kv2, a2.seqs = seqs2, a2.out = &out2[0][0][0];
    const struct sp_kernels_isa *keep = sp_kernels_active();
    int rows = 0, rdiff = 0;
    for (int i = 0; i < SP_ISA_COUNT; i++) {
        const struct sp_kernels_isa *row = sp_kernels_for_isa(sp_isa_name((enum sp_isa)i));
        if (!row || row->isa != (enum sp_isa)i)
            continue;
        sp_kernels_use(row);
        sp_attention(pool, &a);
        sp_attention(pool, &a2);
        rows++;
        rdiff += memcmp(out, out2, sizeof out) != 0;
    }
    sp_kernels_use(keep);
    CHECK(rdiff == 0, "mla (values %s): %d of %d kernel rows differ between the two caches",
          v_in_k ? "in the keys" : "stored", rdiff, rows);
    free(scratch);
    free(plan);
    sp_kv_seq_release(kv, &seq);
    sp_kv_seq_release(kv2, &seq2);
    sp_kv_free(kv);
    sp_kv_free(kv2);
}

/* The chunked scan (scan.h) against the recurrence it stands for, in
 * double: h_p = a_p h_(p-1) + dt_p x_p B_p^T, y_p = h_p C_p, over three
 * chunks (a grid state after each, as the forward pass does) for a head
 * of 64 x 32 state and one of 40 x 16 (the scalar tails). */
static void test_ssd(void)
{
    enum { CH = 64, NP = 3 * CH };
    static const int shapes[][2] = {{64, 32}, {40, 16}};
    for (size_t sh = 0; sh < 2; sh++) {
        const int hd = shapes[sh][0], ds = shapes[sh][1];
        unsigned s = 5;
        static float X[NP][64], B[NP][32], C[NP][32], dt[NP], lam[NP], grid[2][32 * 64], y[64];
        static double H[32][64];
        memset(H, 0, sizeof H);
        for (int p = 0; p < NP; p++) {
            for (int i = 0; i < hd; i++)
                X[p][i] = frand(&s);
            for (int d = 0; d < ds; d++)
                B[p][d] = frand(&s), C[p][d] = frand(&s);
            dt[p] = 0.05f + 0.1f * (frand(&s) + 1.0f);
        }
        const float A = -0.7f;
        double err = 0, mag = 0;
        for (int p = 0; p < NP; p++) {
            const int g0 = p / CH * CH, n = p - g0 + 1;
            const double a = exp((double)dt[p] * A);
            for (int d = 0; d < ds; d++)
                for (int i = 0; i < hd; i++)
                    H[d][i] = a * H[d][i] + (double)dt[p] * X[p][i] * B[p][d];
            lam[p] = (p == g0 ? 0.0f : lam[p - 1]) + dt[p] * A;
            const float *xs[CH], *Bs[CH];
            float w[CH], u[CH];
            for (int q = 0; q < n; q++) {
                xs[q] = X[g0 + q], Bs[q] = B[g0 + q];
                w[q] = expf(lam[p] - lam[g0 + q]) * dt[g0 + q] * sp_dot16(B[g0 + q], C[p], ds);
                u[q] = expf(lam[p] - lam[g0 + q]) * dt[g0 + q];
            }
            const float *h0 = g0 ? grid[(g0 / CH) & 1] : NULL;
            sp_ssd_out(y, h0, C[p], expf(lam[p]), n, w, xs, ds, hd);
            for (int i = 0; i < hd; i++) {
                double want = 0;
                for (int d = 0; d < ds; d++)
                    want += H[d][i] * C[p][d];
                err = maxd(err, fabs(y[i] - want));
                mag = maxd(mag, fabs(want));
            }
            if (n == CH)
                sp_ssd_state(grid[((p + 1) / CH) & 1], h0, expf(lam[p]), n, u, Bs, xs, ds, hd);
        }
        CHECK(err < 2e-5 * mag, "ssd %dx%d: chunked output off the recurrence by %g (largest %g)", hd, ds, err, mag);
        printf("  ssd %dx%d: chunked scan within %.2e of the recurrence (largest value %.2f)\n", hd, ds, err, mag);
    }
    /* a convolution: taps before the sequence (NULL) count as zeros */
    float r0[3] = {1, 2, 3}, r1[3] = {4, 5, 6}, w[3 * 3] = {1, 1, 1, 2, 2, 2, 3, 3, 3}, bias[3] = {0.5f, 0, 0}, out[3];
    const float *rows[3] = {NULL, r0, r1};
    sp_conv_causal(out, rows, w, bias, 3, 3, false);
    CHECK(out[0] == 2 * 1 + 3 * 4 + 0.5f && out[1] == 2 * 2 + 3 * 5 && out[2] == 2 * 3 + 3 * 6,
          "conv: %g %g %g", out[0], out[1], out[2]);
}

/* The linear layers' kernels' outputs for comparing rows: convolutions
 * with and without bias and SiLU, channel counts with vector tails, taps
 * before the sequence; dot products of several lengths; the scan's state
 * update and output from a grid state and from none, for head widths the
 * vectors divide and one they do not. */
static size_t scan_outputs(float *rec)
{
    unsigned s = 23;
    size_t n = 0;
    static float a[8 * 700], wt[8 * 700], bias[700], st[64 * 80], x[64][80], b[64][64], c[64];
    for (int i = 0; i < 8 * 700; i++)
        a[i] = 3 * frand(&s), wt[i] = frand(&s);
    for (int i = 0; i < 700; i++)
        bias[i] = frand(&s);
    for (int i = 0; i < 64 * 80; i++)
        st[i] = frand(&s);
    for (int q = 0; q < 64; q++) {
        for (int i = 0; i < 80; i++)
            x[q][i] = frand(&s);
        for (int d = 0; d < 64; d++)
            b[q][d] = frand(&s);
        c[q] = frand(&s);
    }
    static const int chs[] = {640, 647, 5};
    for (size_t k = 0; k < 3; k++)
        for (int v = 0; v < 2; v++) {
            const float *rows[4] = {v ? NULL : a, a + 700, a + 1400, a + 2100};
            sp_conv_causal(rec + n, rows, wt, v ? NULL : bias, chs[k], 4, v == 0);
            n += (size_t)chs[k];
        }
    static const int lens[] = {64, 128, 37, 5};
    for (size_t k = 0; k < 4; k++)
        rec[n++] = sp_dot16(a, wt, lens[k]);
    const float *xs[64], *bs[64];
    float w[64];
    for (int q = 0; q < 64; q++)
        xs[q] = x[q], bs[q] = b[q], w[q] = 0.5f * (frand(&s) + 1.0f);
    static const int hds[][3] = {{64, 64, 64}, {80, 16, 7}, {16, 32, 1}, {72, 64, 30}};
    for (size_t k = 0; k < 4; k++)
        for (int h0 = 0; h0 < 2; h0++) {
            const int hd = hds[k][0], ds = hds[k][1], np = hds[k][2];
            sp_ssd_state(rec + n, h0 ? st : NULL, 0.75f, np, w, bs, xs, ds, hd);
            n += (size_t)hd * ds;
            sp_ssd_out(rec + n, h0 ? st : NULL, c, 0.625f, np, w, xs, ds, hd);
            n += (size_t)hd;
        }
    return n;
}

/* The element-wise kernels' outputs for comparing rows: RMSNorm of rows
 * of several lengths (tails of every size), RoPE of both pair layouts,
 * SwiGLU across the clamp, GEGLU over every f16 input and the +-10
 * edges.  (The f16 stores are quant's, tests/unit/test_quant.c.) */
static size_t ops_outputs(float *rec)
{
    unsigned s = 11;
    size_t n = 0;
    static float x[1100], w[1100], g[70000], u[70000];
    for (int i = 0; i < 1100; i++)
        x[i] = 4 * frand(&s), w[i] = 1 + frand(&s);
    static const int lens[] = {576, 640, 7, 1, 1003, 64, 256};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        sp_rmsnorm(x, k % 2 ? NULL : w, rec + n, lens[k], 1e-6f);
        n += (size_t)lens[k];
    }
    static const int rots[] = {64, 256, 48};
    for (size_t k = 0; k < sizeof rots / sizeof rots[0]; k++)
        for (int neox = 0; neox < 2; neox++) {
            float cs[256], whole[256];
            memcpy(rec + n, x, sizeof(float) * (size_t)rots[k]);
            memcpy(whole, x, sizeof(float) * (size_t)rots[k]);
            sp_rope_table(cs, rots[k], 1000 + (int)k, 10000.0f, 1.0f, NULL, 1.0f, NULL);
            sp_rope_apply(rec + n, cs, rots[k], neox);
            sp_rope(whole, rots[k], 1000 + (int)k, 10000.0f, 1.0f, neox);
            CHECK(!memcmp(whole, rec + n, sizeof(float) * (size_t)rots[k]), "rope %d (neox %d): table + apply differs "
                  "from sp_rope", rots[k], neox);
            n += (size_t)rots[k];
        }
    for (int i = 0; i < 1003; i++)
        g[i] = 120 * frand(&s), u[i] = frand(&s);
    sp_swiglu(g, u, rec + n, 1003);
    n += 1003;
    const int NG = 65536 + 8;
    for (int i = 0; i < 65536; i++)
        g[i] = sp_f16_to_f32((uint16_t)i), u[i] = 0.5f + (float)(i % 7);
    const float edge[8] = {-10.0f, 10.0f, -10.001f, 10.001f, -9.999f, 9.999f, 0.1234567f, -3.3333333f};
    for (int i = 0; i < 8; i++)
        g[65536 + i] = edge[i], u[65536 + i] = 1.5f;
    sp_geglu(g, u, rec + n, NG);
    sp_gelu(g, rec + n + NG, NG);
    return n + 2 * (size_t)NG;
}

/* Every row of the kernel table this CPU runs computes the scalar row's
 * bits: the element-wise kernels, and attention through both paths (one
 * token; prompt blocks) for SmolLM2's and Gemma 3's head sizes and one the
 * vectors do not divide. */
static void test_rows(struct sp_pool *pool)
{
    const size_t cap = 1 << 23;
    float *ref = malloc(sizeof(float) * cap), *got = malloc(sizeof(float) * cap);
    size_t nref = 0;
    const struct sp_kernels_isa *keep = sp_kernels_active();
    for (int i = 0; i < SP_ISA_COUNT; i++) {
        const struct sp_kernels_isa *row = sp_kernels_for_isa(sp_isa_name((enum sp_isa)i));
        const bool own = row && row->isa == (enum sp_isa)i; /* a level without a row of its own uses its parent's */
        if (own) {
            float *rec = i == SP_ISA_SCALAR ? ref : got;
            size_t n = 0;
            sp_kernels_use(row);
            n = ops_outputs(rec);
            n += scan_outputs(rec + n);
            static const int dims[][2] = {{2, 64}, {1, 64}, {1, 256}, {2, 72}};
            for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
                test_attention(pool, dims[k][0], dims[k][1], SP_CACHE_F16, SP_CACHE_F16, rec, &n);
            /* quantized caches: both, keys only, values only */
            static const int qdims[][2] = {{2, 64}, {1, 256}, {2, 96}};
            static const sp_cache_type qt[][2] = {{SP_CACHE_Q8_0, SP_CACHE_Q8_0},
                                                  {SP_CACHE_Q4_0, SP_CACHE_Q4_0},
                                                  {SP_CACHE_Q8_0, SP_CACHE_F16},
                                                  {SP_CACHE_F16, SP_CACHE_Q4_0}};
            for (size_t t = 0; t < sizeof qt / sizeof qt[0]; t++)
                for (size_t k = 0; k < sizeof qdims / sizeof qdims[0]; k++)
                    test_attention(pool, qdims[k][0], qdims[k][1], qt[t][0], qt[t][1], rec, &n);
            if (i == SP_ISA_SCALAR) {
                nref = n;
            } else {
                size_t diff = 0;
                for (size_t j = 0; j < n && j < nref; j++)
                    diff += memcmp(&got[j], &ref[j], sizeof(float)) != 0;
                CHECK(n == nref && diff == 0, "kernel row %s: %zu of %zu outputs differ from the scalar row's",
                      sp_isa_name((enum sp_isa)i), diff, n);
                printf("  kernel row %s: %zu outputs equal the scalar row's bit for bit: %s\n",
                       sp_isa_name((enum sp_isa)i), n, diff == 0 ? "yes" : "NO");
            }
        }
        if (own || !row)
            sp_check_isa_path("kernels", (enum sp_isa)i, own);
    }
    sp_kernels_use(keep);
    free(ref);
    free(got);
}

int main(void)
{
    struct sp_pool *p1, *p2;
    sp_quant_init();
    printf("  kernel row in use: %s\n", sp_kernels_isa());
    if (sp_pool_init(&p1, 1) != SP_OK || sp_pool_init(&p2, 2) != SP_OK)
        return 1;
    test_rmsnorm();
    test_layernorm();
    test_rope();
    test_rope_factors();
    test_rope_yarn();
    test_softcap();
    test_moe_route();
    test_moe_route_groups();
    test_swiglu_oai();
    test_glu();
    test_ssd();
    test_matmul(p1, p2);
    test_matmul_grouped(p1, p2);
    test_rows(p2);
    test_mla_attention(p1, true);
    test_mla_attention(p2, true);
    test_mla_attention(p2, false);
    sp_pool_free(p1);
    sp_pool_free(p2);
    return sp_check_report("kernels");
}
