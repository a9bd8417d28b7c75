/* Scalar reference ("oracle") for every weight/activation type, the traits
 * table, and start-up dispatch to the ISA files.
 *
 * Block layouts and the integer quantities each dot product computes follow
 * ggml (ggml-common.h, ggml-cpu/quants.c) so logits stay close to
 * llama.cpp's: per block an exact integer sum of weight-quant x
 * activation-quant products, scaled by the block scales in float.
 *
 * Rounding: all quantizers round half to even (nearbyintf under the default
 * FP environment), the same as the SIMD quantizers, so fast and reference
 * activation rows are bit-identical. */
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "quant/quant_isa.h"

/* ---------------------------------------------------------------- f16/bf16 */

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float sp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float */
        float v = (float)mant * 0x1p-24f;
        return bits_f32(f32_bits(v) | sign);
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t sp_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: keep it quiet and keep the top payload bits */
        return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));
    if (x >= 0x477ff000u) /* >= 65520 rounds to infinity (65504 is the max) */
        return (uint16_t)(sign | 0x7c00);
    if (x < 0x38800000u) {
        /* below 2^-14: half subnormal.  Adding 0.5f aligns the value so the
         * FPU's round-to-nearest-even drops exactly the bits half cannot
         * hold; the low mantissa bits are then the half subnormal. */
        float v = bits_f32(x) + 0.5f;
        return (uint16_t)(sign | (f32_bits(v) - 0x3f000000u));
    }
    uint32_t odd = (x >> 13) & 1;
    x += 0xc8000000u + 0xfffu + odd; /* rebias exponent (-112 << 23), RNE */
    return (uint16_t)(sign | (x >> 13));
}

float sp_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t sp_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

void sp_f16_store_scalar(uint16_t *dst, size_t stride, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        _Float16 h = (_Float16)src[i];
        memcpy(dst + (size_t)i * stride, &h, sizeof h);
    }
}

#define H2F(h) sp_f16_to_f32(h)
#define F2H(f) sp_f32_to_f16(f)

static inline int rne(float v) { return (int)nearbyintf(v); }
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ------------------------------------------------------- float row types */

static void f32_to_float(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * 4); }
static void f32_from_float(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * 4); }

static void f16_to_float(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = H2F(x[i]);
}
static void f16_from_float(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = F2H(x[i]);
}
static void bf16_to_float(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = sp_bf16_to_f32(x[i]);
}
static void bf16_from_float(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = sp_f32_to_bf16(x[i]);
}

/* Float dots accumulate in double, as ggml's scalar path does. */
static void f32_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const float *w = vw, *a = va;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(w[i] * a[i]);
    *s = (float)sum;
}
static void f16_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const uint16_t *w = vw, *a = va;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(H2F(w[i]) * H2F(a[i]));
    *s = (float)sum;
}
static void bf16_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const uint16_t *w = vw, *a = va;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(sp_bf16_to_f32(w[i]) * sp_bf16_to_f32(a[i]));
    *s = (float)sum;
}

/* ------------------------------------------------------ 32-element blocks */

static void q4_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / SP_QK; i++, y += SP_QK) {
        float d = H2F(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * ((x[i].qs[j] & 0xF) - 8);
            y[j + 16] = d * ((x[i].qs[j] >> 4) - 8);
        }
    }
}
static void q4_0_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / SP_QK; i++, x += SP_QK) {
        float amax = 0, max = 0;
        for (int j = 0; j < SP_QK; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        float d = max / -8, id = d != 0 ? 1 / d : 0;
        y[i].d = F2H(d);
        for (int j = 0; j < 16; j++) {
            int a = clampi(rne(x[j] * id) + 8, 0, 15);
            int b = clampi(rne(x[j + 16] * id) + 8, 0, 15);
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}
static void q4_0_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q4_0 *x = vw;
    const struct sp_block_q8_0 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK; i++) {
        int si = 0;
        for (int j = 0; j < 16; j++)
            si += ((x[i].qs[j] & 0xF) - 8) * a[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * a[i].qs[j + 16];
        sum += si * (H2F(x[i].d) * H2F(a[i].d));
    }
    *s = sum;
}

/* MXFP4 (ggml's block_mxfp4): quantized as ggml does, the shared exponent
 * floor(log2(amax)) - 2 so the largest value lands near the top code (6),
 * each value to its nearest code (the first on a tie); dotted with Q8_0
 * as an exact integer sum of doubled code points times activation quants,
 * scaled by half the E8M0 scale. */
static void mxfp4_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / SP_QK; i++, y += SP_QK) {
        float d = sp_e8m0_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = d * sp_mxfp4_values[x[i].qs[j] & 0xF];
            y[j + 16] = d * sp_mxfp4_values[x[i].qs[j] >> 4];
        }
    }
}
static int mxfp4_code(float x, float d)
{
    int best = 0;
    float err = fabsf(sp_mxfp4_values[0] * d - x);
    for (int k = 1; k < 16; k++) {
        float e = fabsf(sp_mxfp4_values[k] * d - x);
        if (e < err) { best = k; err = e; }
    }
    return best;
}
static void mxfp4_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / SP_QK; i++, x += SP_QK) {
        float amax = 0;
        for (int j = 0; j < SP_QK; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
        /* clamped to the byte: ggml's cast is undefined outside it */
        int e = amax > 0 ? clampi((int)floorf(log2f(amax)) - 2 + 127, 0, 254) : 0;
        float d = sp_e8m0_half((uint8_t)e);
        y[i].e = (uint8_t)e;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(mxfp4_code(x[j], d) | (mxfp4_code(x[j + 16], d) << 4));
    }
}
static void mxfp4_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_mxfp4 *x = vw;
    const struct sp_block_q8_0 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK; i++) {
        int si = 0;
        for (int j = 0; j < 16; j++)
            si += sp_mxfp4_values[x[i].qs[j] & 0xF] * a[i].qs[j] + sp_mxfp4_values[x[i].qs[j] >> 4] * a[i].qs[j + 16];
        sum += si * (sp_e8m0_half(x[i].e) * H2F(a[i].d));
    }
    *s = sum;
}

static void q4_1_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / SP_QK; i++, y += SP_QK) {
        float d = H2F(x[i].d), m = H2F(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (x[i].qs[j] & 0xF) + m;
            y[j + 16] = d * (x[i].qs[j] >> 4) + m;
        }
    }
}
static void q4_1_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / SP_QK; i++, x += SP_QK) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < SP_QK; j++) { mn = fminf(mn, x[j]); mx = fmaxf(mx, x[j]); }
        float d = (mx - mn) / 15, id = d != 0 ? 1 / d : 0;
        y[i].d = F2H(d);
        y[i].m = F2H(mn);
        for (int j = 0; j < 16; j++) {
            int a = clampi(rne((x[j] - mn) * id), 0, 15);
            int b = clampi(rne((x[j + 16] - mn) * id), 0, 15);
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}
static void q4_1_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q4_1 *x = vw;
    const struct sp_block_q8_1 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK; i++) {
        int si = 0;
        for (int j = 0; j < 16; j++)
            si += (x[i].qs[j] & 0xF) * a[i].qs[j] + (x[i].qs[j] >> 4) * a[i].qs[j + 16];
        sum += (H2F(x[i].d) * H2F(a[i].d)) * si + H2F(x[i].m) * H2F(a[i].s);
    }
    *s = sum;
}

/* Q5: bit j of qh is the fifth bit of element j. */
static inline int q5_hi(const uint8_t qh[4], int j)
{
    uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    return (int)((h >> j) & 1) << 4;
}
static void q5_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / SP_QK; i++, y += SP_QK) {
        float d = H2F(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (((x[i].qs[j] & 0xF) | q5_hi(x[i].qh, j)) - 16);
            y[j + 16] = d * (((x[i].qs[j] >> 4) | q5_hi(x[i].qh, j + 16)) - 16);
        }
    }
}
static void q5_pack(const int q[32], uint8_t qs[16], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        h |= (uint32_t)(q[j] >> 4) << j;
        h |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}
static void q5_0_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / SP_QK; i++, x += SP_QK) {
        float amax = 0, max = 0;
        for (int j = 0; j < SP_QK; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        float d = max / -16, id = d != 0 ? 1 / d : 0;
        int q[32];
        for (int j = 0; j < SP_QK; j++) q[j] = clampi(rne(x[j] * id) + 16, 0, 31);
        y[i].d = F2H(d);
        q5_pack(q, y[i].qs, y[i].qh);
    }
}
static void q5_0_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q5_0 *x = vw;
    const struct sp_block_q8_0 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK; i++) {
        int si = 0;
        for (int j = 0; j < 16; j++)
            si += (((x[i].qs[j] & 0xF) | q5_hi(x[i].qh, j)) - 16) * a[i].qs[j] +
                  (((x[i].qs[j] >> 4) | q5_hi(x[i].qh, j + 16)) - 16) * a[i].qs[j + 16];
        sum += (H2F(x[i].d) * H2F(a[i].d)) * si;
    }
    *s = sum;
}

static void q5_1_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / SP_QK; i++, y += SP_QK) {
        float d = H2F(x[i].d), m = H2F(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = d * ((x[i].qs[j] & 0xF) | q5_hi(x[i].qh, j)) + m;
            y[j + 16] = d * ((x[i].qs[j] >> 4) | q5_hi(x[i].qh, j + 16)) + m;
        }
    }
}
static void q5_1_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / SP_QK; i++, x += SP_QK) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < SP_QK; j++) { mn = fminf(mn, x[j]); mx = fmaxf(mx, x[j]); }
        float d = (mx - mn) / 31, id = d != 0 ? 1 / d : 0;
        int q[32];
        for (int j = 0; j < SP_QK; j++) q[j] = clampi(rne((x[j] - mn) * id), 0, 31);
        y[i].d = F2H(d);
        y[i].m = F2H(mn);
        q5_pack(q, y[i].qs, y[i].qh);
    }
}
static void q5_1_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q5_1 *x = vw;
    const struct sp_block_q8_1 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK; i++) {
        int si = 0;
        for (int j = 0; j < 16; j++)
            si += ((x[i].qs[j] & 0xF) | q5_hi(x[i].qh, j)) * a[i].qs[j] +
                  ((x[i].qs[j] >> 4) | q5_hi(x[i].qh, j + 16)) * a[i].qs[j + 16];
        sum += (H2F(x[i].d) * H2F(a[i].d)) * si + H2F(x[i].m) * H2F(a[i].s);
    }
    *s = sum;
}

static void q8_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / SP_QK; i++, y += SP_QK) {
        float d = H2F(x[i].d);
        for (int j = 0; j < SP_QK; j++) y[j] = d * x[i].qs[j];
    }
}
static void q8_0_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / SP_QK; i++, x += SP_QK) {
        float amax = 0;
        for (int j = 0; j < SP_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127, id = amax != 0 ? 127.f / amax : 0; /* as ggml's x86 quantizer */
        y[i].d = F2H(d);
        for (int j = 0; j < SP_QK; j++) y[i].qs[j] = (int8_t)rne(x[j] * id);
    }
}
static void q8_0_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q8_0 *x = vw, *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK; i++) {
        int si = 0;
        for (int j = 0; j < SP_QK; j++) si += x[i].qs[j] * a[i].qs[j];
        sum += si * (H2F(x[i].d) * H2F(a[i].d));
    }
    *s = sum;
}

static void q8_1_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / SP_QK; i++, y += SP_QK) {
        float d = H2F(x[i].d);
        for (int j = 0; j < SP_QK; j++) y[j] = d * x[i].qs[j];
    }
}
static void q8_1_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / SP_QK; i++, x += SP_QK) {
        float amax = 0;
        for (int j = 0; j < SP_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127, id = amax != 0 ? 127.f / amax : 0; /* as ggml's x86 quantizer */
        int sum = 0;
        for (int j = 0; j < SP_QK; j++) {
            y[i].qs[j] = (int8_t)rne(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = F2H(d);
        y[i].s = F2H((float)sum * d);
    }
}

/* ------------------------------------------------------------- K-quants */

static void q8_K_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / SP_QK_K; i++, y += SP_QK_K)
        for (int j = 0; j < SP_QK_K; j++) y[j] = x[i].d * x[i].qs[j];
}
static void q8_K_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / SP_QK_K; i++, x += SP_QK_K) {
        float amax = 0, max = 0;
        for (int j = 0; j < SP_QK_K; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* ggml: the largest-magnitude element maps to -127 */
        float iscale = -127.f / max;
        for (int j = 0; j < SP_QK_K; j++) {
            int v = rne(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y[i].qs[16 * j + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* Q2_K: 16 sub-blocks of 16; x = d*(sc&15)*q - dmin*(sc>>4), q in 0..3.
 * Element 128h + 32k + l sits in qs[32h + l] bits 2k..2k+1. */
static inline int q2k_q(const struct sp_block_q2_K *b, int e)
{
    int h = e / 128, k = (e % 128) / 32, l = e % 32;
    return (b->qs[32 * h + l] >> (2 * k)) & 3;
}
static void q2_K_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q2_K *x = vx;
    for (int64_t i = 0; i < n / SP_QK_K; i++, y += SP_QK_K) {
        float d = H2F(x[i].d), dmin = H2F(x[i].dmin);
        for (int e = 0; e < SP_QK_K; e++) {
            uint8_t sc = x[i].scales[e / 16];
            y[e] = d * (sc & 0xF) * q2k_q(&x[i], e) - dmin * (sc >> 4);
        }
    }
}
static void q2_K_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q2_K *y = vy;
    for (int64_t i = 0; i < n / SP_QK_K; i++, x += SP_QK_K) {
        float scale[16], mins[16], smax = 0, mmax = 0;
        for (int j = 0; j < 16; j++) {
            float mn = 0, mx = 0;
            for (int k = 0; k < 16; k++) { mn = fminf(mn, x[16 * j + k]); mx = fmaxf(mx, x[16 * j + k]); }
            scale[j] = (mx - mn) / 3;
            mins[j] = -mn;
            smax = fmaxf(smax, scale[j]);
            mmax = fmaxf(mmax, mins[j]);
        }
        y[i].d = F2H(smax / 15);
        y[i].dmin = F2H(mmax / 15);
        float d = H2F(y[i].d), dmin = H2F(y[i].dmin);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 16; j++) {
            int sc = d != 0 ? clampi(rne(scale[j] / d), 0, 15) : 0;
            int m = dmin != 0 ? clampi(rne(mins[j] / dmin), 0, 15) : 0;
            y[i].scales[j] = (uint8_t)(sc | (m << 4));
            float ds = d * sc, dm = dmin * m;
            for (int k = 0; k < 16; k++) {
                int e = 16 * j + k;
                int q = ds != 0 ? clampi(rne((x[e] + dm) / ds), 0, 3) : 0;
                y[i].qs[32 * (e / 128) + e % 32] |= (uint8_t)(q << (2 * ((e % 128) / 32)));
            }
        }
    }
}
static void q2_K_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q2_K *x = vw;
    const struct sp_block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK_K; i++) {
        int summs = 0, isum = 0;
        for (int j = 0; j < 16; j++) summs += a[i].bsums[j] * (x[i].scales[j] >> 4);
        for (int j = 0; j < 16; j++) {
            int si = 0;
            for (int k = 0; k < 16; k++) si += a[i].qs[16 * j + k] * q2k_q(&x[i], 16 * j + k);
            isum += (x[i].scales[j] & 0xF) * si;
        }
        float dall = a[i].d * H2F(x[i].d), dmin = a[i].d * H2F(x[i].dmin);
        sum += dall * isum - dmin * summs;
    }
    *s = sum;
}

/* Q3_K: x = d*sc*q, sc six-bit minus 32, q = low2 - (hmask bit ? 0 : 4).
 * Element 128h + 32k + l: low bits in qs[32h + l] >> 2k, high bit in
 * hmask[l] bit 4h + k. */
static inline int q3k_q(const struct sp_block_q3_K *b, int e)
{
    int h = e / 128, k = (e % 128) / 32, l = e % 32;
    int lo = (b->qs[32 * h + l] >> (2 * k)) & 3;
    return lo - ((b->hmask[l] >> (4 * h + k)) & 1 ? 0 : 4);
}
static void q3_K_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q3_K *x = vx;
    for (int64_t i = 0; i < n / SP_QK_K; i++, y += SP_QK_K) {
        int8_t sc[16];
        sp_q3k_scales(x[i].scales, sc);
        float d = H2F(x[i].d);
        for (int e = 0; e < SP_QK_K; e++) y[e] = d * sc[e / 16] * q3k_q(&x[i], e);
    }
}
static void q3_K_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q3_K *y = vy;
    for (int64_t i = 0; i < n / SP_QK_K; i++, x += SP_QK_K) {
        float scale[16], amax_all = 0;
        for (int j = 0; j < 16; j++) {
            float amax = 0, max = 0;
            for (int k = 0; k < 16; k++)
                if (fabsf(x[16 * j + k]) > amax) { amax = fabsf(x[16 * j + k]); max = x[16 * j + k]; }
            scale[j] = max / -4;
            amax_all = fmaxf(amax_all, fabsf(scale[j]));
        }
        y[i].d = F2H(amax_all / 31);
        float d = H2F(y[i].d);
        memset(y[i].qs, 0, sizeof y[i].qs);
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        memset(y[i].scales, 0, sizeof y[i].scales);
        for (int j = 0; j < 16; j++) {
            int sc = d != 0 ? clampi(rne(scale[j] / d), -32, 31) : 0;
            int u = sc + 32;
            if (j < 8) y[i].scales[j] |= (uint8_t)(u & 0xF);
            else y[i].scales[j - 8] |= (uint8_t)((u & 0xF) << 4);
            y[i].scales[8 + (j & 3)] |= (uint8_t)((u >> 4) << (2 * (j >> 2)));
            float ds = d * sc;
            for (int k = 0; k < 16; k++) {
                int e = 16 * j + k, h = e / 128, kk = (e % 128) / 32, l = e % 32;
                int q = (ds != 0 ? clampi(rne(x[e] / ds), -4, 3) : 0) + 4;
                y[i].qs[32 * h + l] |= (uint8_t)((q & 3) << (2 * kk));
                y[i].hmask[l] |= (uint8_t)((q >> 2) << (4 * h + kk));
            }
        }
    }
}
static void q3_K_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q3_K *x = vw;
    const struct sp_block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK_K; i++) {
        int8_t sc[16];
        sp_q3k_scales(x[i].scales, sc);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int si = 0;
            for (int k = 0; k < 16; k++) si += a[i].qs[16 * j + k] * q3k_q(&x[i], 16 * j + k);
            isum += sc[j] * si;
        }
        sum += H2F(x[i].d) * a[i].d * isum;
    }
    *s = sum;
}

/* Q4_K/Q5_K: 8 sub-blocks of 32; x = d*sc*q - dmin*m.  Element 64c + l
 * (l < 32) is the low nibble of qs[32c + l], 64c + 32 + l the high one;
 * Q5_K's fifth bit of element 32t + l is qh[l] bit t. */
static inline int q5k_q(const struct sp_block_q5_K *b, int e)
{
    return sp_q4k_q(b->qs, e) | (((b->qh[e % 32] >> (e / 32)) & 1) << 4);
}
static void q4_K_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / SP_QK_K; i++, y += SP_QK_K) {
        uint8_t sc[8], mn[8];
        sp_q4k_scales(x[i].scales, sc, mn);
        float d = H2F(x[i].d), dmin = H2F(x[i].dmin);
        for (int e = 0; e < SP_QK_K; e++)
            y[e] = d * sc[e / 32] * sp_q4k_q(x[i].qs, e) - dmin * mn[e / 32];
    }
}
static void q5_K_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q5_K *x = vx;
    for (int64_t i = 0; i < n / SP_QK_K; i++, y += SP_QK_K) {
        uint8_t sc[8], mn[8];
        sp_q4k_scales(x[i].scales, sc, mn);
        float d = H2F(x[i].d), dmin = H2F(x[i].dmin);
        for (int e = 0; e < SP_QK_K; e++)
            y[e] = d * sc[e / 32] * q5k_q(&x[i], e) - dmin * mn[e / 32];
    }
}
/* Shared by Q4_K (qmax 15) and Q5_K (qmax 31): fills d, dmin, scales and
 * the quant values q[256]. */
static void qk_scale_min(const float *x, int qmax, uint16_t *dh, uint16_t *dminh,
                         uint8_t scales[12], int q[256])
{
    float scale[8], mins[8], smax = 0, mmax = 0;
    for (int j = 0; j < 8; j++) {
        float mn = 0, mx = 0;
        for (int k = 0; k < 32; k++) { mn = fminf(mn, x[32 * j + k]); mx = fmaxf(mx, x[32 * j + k]); }
        scale[j] = (mx - mn) / qmax;
        mins[j] = -mn;
        smax = fmaxf(smax, scale[j]);
        mmax = fmaxf(mmax, mins[j]);
    }
    *dh = F2H(smax / 63);
    *dminh = F2H(mmax / 63);
    float d = H2F(*dh), dmin = H2F(*dminh);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d != 0 ? clampi(rne(scale[j] / d), 0, 63) : 0);
        mn[j] = (uint8_t)(dmin != 0 ? clampi(rne(mins[j] / dmin), 0, 63) : 0);
        float ds = d * sc[j], dm = dmin * mn[j];
        for (int k = 0; k < 32; k++)
            q[32 * j + k] = ds != 0 ? clampi(rne((x[32 * j + k] + dm) / ds), 0, qmax) : 0;
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
}
static void q4_K_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q4_K *y = vy;
    for (int64_t i = 0; i < n / SP_QK_K; i++, x += SP_QK_K) {
        int q[256];
        qk_scale_min(x, 15, &y[i].d, &y[i].dmin, y[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}
static void q5_K_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q5_K *y = vy;
    for (int64_t i = 0; i < n / SP_QK_K; i++, x += SP_QK_K) {
        int q[256];
        qk_scale_min(x, 31, &y[i].d, &y[i].dmin, y[i].scales, q);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0xF) | ((q[64 * c + 32 + l] & 0xF) << 4));
        for (int e = 0; e < SP_QK_K; e++)
            y[i].qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
    }
}
static void q4_K_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q4_K *x = vw;
    const struct sp_block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK_K; i++) {
        uint8_t sc[8], mn[8];
        sp_q4k_scales(x[i].scales, sc, mn);
        int summ = 0, isum = 0;
        for (int j = 0; j < 16; j++) summ += a[i].bsums[j] * mn[j / 2];
        for (int j = 0; j < 8; j++) {
            int si = 0;
            for (int k = 0; k < 32; k++) si += a[i].qs[32 * j + k] * sp_q4k_q(x[i].qs, 32 * j + k);
            isum += sc[j] * si;
        }
        sum += H2F(x[i].d) * a[i].d * isum - H2F(x[i].dmin) * a[i].d * summ;
    }
    *s = sum;
}
static void q5_K_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q5_K *x = vw;
    const struct sp_block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK_K; i++) {
        uint8_t sc[8], mn[8];
        sp_q4k_scales(x[i].scales, sc, mn);
        int summ = 0, isum = 0;
        for (int j = 0; j < 16; j++) summ += a[i].bsums[j] * mn[j / 2];
        for (int j = 0; j < 8; j++) {
            int si = 0;
            for (int k = 0; k < 32; k++) si += a[i].qs[32 * j + k] * q5k_q(&x[i], 32 * j + k);
            isum += sc[j] * si;
        }
        sum += H2F(x[i].d) * a[i].d * isum - H2F(x[i].dmin) * a[i].d * summ;
    }
    *s = sum;
}

/* Q6_K: 16 sub-blocks of 16, x = d*sc*(q - 32), q six bits.  Element
 * 128h + 32k + l: low nibble from ql[64h + l + 32(k&1)] (k<2 low, k>=2 high
 * nibble), top two bits from qh[32h + l] bits 2k..2k+1. */
static void q6_K_to_float(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q6_K *x = vx;
    for (int64_t i = 0; i < n / SP_QK_K; i++, y += SP_QK_K) {
        float d = H2F(x[i].d);
        for (int e = 0; e < SP_QK_K; e++) y[e] = d * x[i].scales[e / 16] * sp_q6k_q(&x[i], e);
    }
}
static void q6_K_from_float(const float *x, void *vy, int64_t n)
{
    struct sp_block_q6_K *y = vy;
    for (int64_t i = 0; i < n / SP_QK_K; i++, x += SP_QK_K) {
        float scale[16], amax_all = 0;
        for (int j = 0; j < 16; j++) {
            float amax = 0, max = 0;
            for (int k = 0; k < 16; k++)
                if (fabsf(x[16 * j + k]) > amax) { amax = fabsf(x[16 * j + k]); max = x[16 * j + k]; }
            scale[j] = max / -32;
            amax_all = fmaxf(amax_all, fabsf(scale[j]));
        }
        y[i].d = F2H(amax_all / 127);
        float d = H2F(y[i].d);
        memset(y[i].ql, 0, sizeof y[i].ql);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int j = 0; j < 16; j++) {
            int sc = d != 0 ? clampi(rne(scale[j] / d), -128, 127) : 0;
            y[i].scales[j] = (int8_t)sc;
            float ds = d * sc;
            for (int k = 0; k < 16; k++) {
                int e = 16 * j + k, h = e / 128, kk = (e % 128) / 32, l = e % 32;
                int q = (ds != 0 ? clampi(rne(x[e] / ds), -32, 31) : 0) + 32;
                y[i].ql[64 * h + l + 32 * (kk & 1)] |= (uint8_t)((q & 0xF) << (kk < 2 ? 0 : 4));
                y[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * kk));
            }
        }
    }
}
static void q6_K_vec_dot(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_q6_K *x = vw;
    const struct sp_block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK_K; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int si = 0;
            for (int k = 0; k < 16; k++) si += a[i].qs[16 * j + k] * sp_q6k_q(&x[i], 16 * j + k);
            isum += x[i].scales[j] * si;
        }
        sum += H2F(x[i].d) * a[i].d * isum;
    }
    *s = sum;
}

/* ------------------------------------------------------------------ table */

#define T(id, nm, bs, ts, w, pfx, vdt, dot)                                   \
    [SP_TYPE_##id] = {.name = nm, .block_size = bs, .type_size = ts, .is_weight = w, \
                      .to_float = pfx##_to_float, .from_float = pfx##_from_float,    \
                      .vec_dot_type = SP_TYPE_##vdt, .vec_dot = dot, .gemm = NULL}

static const struct sp_type_traits ref_table[SP_TYPE_COUNT] = {
    T(F32, "F32", 1, 4, true, f32, F32, f32_vec_dot),
    T(F16, "F16", 1, 2, true, f16, F16, f16_vec_dot),
    T(BF16, "BF16", 1, 2, true, bf16, BF16, bf16_vec_dot),
    T(Q4_0, "Q4_0", 32, 18, true, q4_0, Q8_0, q4_0_vec_dot),
    T(Q4_1, "Q4_1", 32, 20, true, q4_1, Q8_1, q4_1_vec_dot),
    T(Q5_0, "Q5_0", 32, 22, true, q5_0, Q8_0, q5_0_vec_dot),
    T(Q5_1, "Q5_1", 32, 24, true, q5_1, Q8_1, q5_1_vec_dot),
    T(Q8_0, "Q8_0", 32, 34, true, q8_0, Q8_0, q8_0_vec_dot),
    T(MXFP4, "MXFP4", 32, 17, true, mxfp4, Q8_0, mxfp4_vec_dot),
    T(Q8_1, "Q8_1", 32, 36, false, q8_1, Q8_1, NULL),
    T(Q2_K, "Q2_K", 256, 84, true, q2_K, Q8_K, q2_K_vec_dot),
    T(Q3_K, "Q3_K", 256, 110, true, q3_K, Q8_K, q3_K_vec_dot),
    T(Q4_K, "Q4_K", 256, 144, true, q4_K, Q8_K, q4_K_vec_dot),
    T(Q5_K, "Q5_K", 256, 176, true, q5_K, Q8_K, q5_K_vec_dot),
    T(Q6_K, "Q6_K", 256, 210, true, q6_K, Q8_K, q6_K_vec_dot),
    T(Q8_K, "Q8_K", 256, 292, false, q8_K, Q8_K, NULL),
    /* internal (src/quant/packed.c): type_size is per row and block, as in the file type */
    [SP_TYPE_Q8_P] = {.name = "Q8_P", .block_size = 32, .type_size = 48, .to_float = sp_q8_p_to_float_ref,
                      .from_float = sp_q8_p_from_float_ref, .vec_dot_type = SP_TYPE_Q8_P},
    [SP_TYPE_Q4_1_P16] = {.name = "Q4_1_P16", .block_size = 32, .type_size = 20, .vec_dot_type = SP_TYPE_Q8_P,
                          .gemm = sp_q4_1_p16_gemm_ref, .pack = sp_q4_1_p16_pack},
    [SP_TYPE_Q8_0_P16] = {.name = "Q8_0_P16", .block_size = 32, .type_size = 34, .vec_dot_type = SP_TYPE_Q8_P,
                          .gemm = sp_q8_0_p16_gemm_ref, .pack = sp_q8_0_p16_pack},
    [SP_TYPE_Q5_0_P16] = {.name = "Q5_0_P16", .block_size = 32, .type_size = 22, .vec_dot_type = SP_TYPE_Q8_P,
                          .gemm = sp_q5_0_p16_gemm_ref, .pack = sp_q5_0_p16_pack},
    [SP_TYPE_Q4_K_P16] = {.name = "Q4_K_P16", .block_size = 256, .type_size = 144, .vec_dot_type = SP_TYPE_Q8_K,
                          .gemm = sp_q4_K_p16_gemm_ref, .pack = sp_q4_K_p16_pack},
    [SP_TYPE_Q6_K_P16] = {.name = "Q6_K_P16", .block_size = 256, .type_size = 210, .vec_dot_type = SP_TYPE_Q8_K,
                          .gemm = sp_q6_K_p16_gemm_ref, .pack = sp_q6_K_p16_pack},
    [SP_TYPE_F16_P16] = {.name = "F16_P16", .block_size = 1, .type_size = 2, .vec_dot_type = SP_TYPE_F32,
                         .gemm = sp_f16_p16_gemm_ref, .pack = sp_f16_p16_pack},
    [SP_TYPE_MXFP4_P16] = {.name = "MXFP4_P16", .block_size = 32, .type_size = 17, .vec_dot_type = SP_TYPE_Q8_P,
                           .gemm = sp_mxfp4_p16_gemm_ref, .pack = sp_mxfp4_p16_pack},
};

/* The ISA levels' registrars, each applied on top of its parent's table
 * (avx512 on avx2 on the oracle), and which families each provides. */
static const struct {
    void (*reg)(struct sp_type_traits *table);
    bool dots, packed; /* file-layout dots and quantizers; packed tiles */
} quant_isas[SP_ISA_COUNT] = {
#if defined(__x86_64__)
    [SP_ISA_AVX2] = {sp_quant_register_avx2, true, true},
    [SP_ISA_AVXVNNI] = {sp_quant_register_avxvnni, true, true},
    [SP_ISA_AVX512] = {sp_quant_register_avx512, true, true},
#elif defined(__aarch64__)
    [SP_ISA_NEON] = {sp_quant_register_neon, false, true},
    [SP_ISA_DOTPROD] = {sp_quant_register_dotprod, false, true},
    [SP_ISA_I8MM] = {sp_quant_register_i8mm, false, true},
#endif
};

/* sp_f16_store's rows by level; a level without one uses its parent's. */
static const sp_f16_store_fn f16_store_rows[SP_ISA_COUNT] = {
    [SP_ISA_SCALAR] = sp_f16_store_scalar,
#if defined(__x86_64__)
    [SP_ISA_AVX2] = sp_f16_store_avx2,
    [SP_ISA_AVX512] = sp_f16_store_avx512,
#elif defined(__aarch64__)
    [SP_ISA_NEON] = sp_f16_store_neon,
#endif
};

static sp_f16_store_fn f16_store_row(enum sp_isa isa)
{
    while (!f16_store_rows[isa])
        isa = sp_isa_parent(isa);
    return f16_store_rows[isa];
}

sp_f16_store_fn sp_f16_store_for_isa(const char *name)
{
    enum sp_isa isa;
    return sp_isa_parse(name, &isa) && sp_isa_runs(isa) ? f16_store_row(isa) : NULL;
}

static struct sp_type_traits active_table[SP_TYPE_COUNT];
static enum sp_isa active_dots = SP_ISA_SCALAR, active_packed = SP_ISA_SCALAR;
static bool active_packs;
static sp_f16_store_fn active_f16_store = sp_f16_store_scalar;
static pthread_once_t quant_once = PTHREAD_ONCE_INIT;

static void quant_build(enum sp_isa isa, struct sp_type_traits *out)
{
    if (isa == SP_ISA_SCALAR) {
        memcpy(out, ref_table, sizeof ref_table);
        return;
    }
    quant_build(sp_isa_parent(isa), out);
    if (quant_isas[isa].reg)
        quant_isas[isa].reg(out);
}

bool sp_quant_table_for_isa(const char *name, struct sp_type_traits *out)
{
    enum sp_isa isa;
    if (!sp_isa_parse(name, &isa) || !sp_isa_runs(isa))
        return false;
    quant_build(isa, out);
    return true;
}

static void quant_init_once(void)
{
    enum sp_isa isa = sp_isa_active();
    quant_build(isa, active_table);
    /* the families' levels: the nearest level up the chain that provides them */
    active_dots = active_packed = SP_ISA_SCALAR;
    for (enum sp_isa i = isa; i != SP_ISA_SCALAR; i = sp_isa_parent(i)) {
        if (quant_isas[i].dots && active_dots == SP_ISA_SCALAR)
            active_dots = i;
        if (quant_isas[i].packed && active_packed == SP_ISA_SCALAR)
            active_packed = i;
    }
    active_packs = active_packed != SP_ISA_SCALAR;
    active_f16_store = f16_store_row(isa);
}

void sp_quant_init(void) { pthread_once(&quant_once, quant_init_once); }

void sp_f16_store(uint16_t *dst, size_t stride, const float *src, int64_t n)
{
    sp_quant_init();
    active_f16_store(dst, stride, src, n);
}

const char *sp_quant_isa(void)
{
    sp_quant_init();
    return sp_isa_name(active_dots);
}

const char *sp_quant_packed_isa(void)
{
    sp_quant_init();
    return active_packs ? sp_isa_name(active_packed) : NULL;
}

const struct sp_type_traits *sp_type_get(uint32_t type)
{
    if (type >= SP_TYPE_COUNT || !ref_table[type].name) return NULL;
    sp_quant_init();
    return &active_table[type];
}

const struct sp_type_traits *sp_type_get_ref(uint32_t type)
{
    if (type >= SP_TYPE_COUNT || !ref_table[type].name) return NULL;
    return &ref_table[type];
}

uint32_t sp_type_packed_for(uint32_t type, int64_t n_rows)
{
    const struct sp_type_traits *t = sp_type_get(type);
    const char *env = getenv("SP_REPACK");
    if (!t || !t->packed || n_rows <= 0 || n_rows % SP_P16_ROWS != 0 || (env && strcmp(env, "0") == 0))
        return 0;
    return t->packed;
}

bool sp_type_row_size(uint32_t type, int64_t n, size_t *out)
{
    const struct sp_type_traits *t = sp_type_get_ref(type);
    if (!t || n < 0 || n % t->block_size != 0) return false;
    uint64_t blocks = (uint64_t)n / t->block_size;
    if (blocks > SIZE_MAX / t->type_size) return false;
    *out = (size_t)(blocks * t->type_size);
    return true;
}
