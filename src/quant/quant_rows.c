/* Weight quantisers that match llama.cpp's reference quantisers bit for bit
 * (see quant_rows.h).  The algorithms are ggml's (ggml-quants.c): for each
 * type the same candidate scales are tried in the same order, with the same
 * float expressions, so every tie and every rounding falls the same way.
 *
 * Conventions of this file: a "group" is the run of elements one scale
 * covers (16 or 32); `w` are per-element weights of the error being
 * minimised; L holds the chosen integer levels. */
#include "quant/quant_rows.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "quant/quant_isa.h"
#include "quant/quant.h"

#define SP_GROUP_EPS 1e-15f /* below this a group counts as all zero */

static inline float h2f(uint16_t h) { return sp_f16_to_f32(h); }
static inline uint16_t f2h(float f) { return sp_f32_to_f16(f); }
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 puts
 * the integer in the low mantissa bits (the K-quants' rounding). */
static inline int round_k(float v)
{
    float t = v + 12582912.f;
    int32_t bits;
    memcpy(&bits, &t, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

/* ------------------------------------------------------ scale searches */

/* The value of largest magnitude (the first one when several tie); 0 for
 * an all-zero group. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* Symmetric levels l = round(iscale x) clamped to [-nmax, nmax) of a
 * group, with their sums sum w x l and sum w l^2 (w = qw, or x^2 when qw is
 * NULL); L (optional) receives l + offset. */
static void sym_levels(int n, int nmax, const float *x, const float *qw, float iscale, int8_t *L, int offset,
                       float *sumlx, float *suml2)
{
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, round_k(iscale * x[i])));
        if (L)
            L[i] = (int8_t)(l + offset);
        float w = qw ? qw[i] : x[i] * x[i];
        slx += w * x[i] * l;
        sl2 += w * l * l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

/* Symmetric levels in [-nmax, nmax): the scale minimising sum w (x - s l)^2
 * over 19 candidate inverse scales around -nmax / max.  w = qw, or x^2 when
 * qw is NULL.  L receives l + nmax. */
static float search_sym(int n, int nmax, const float *x, int8_t *L, const float *qw)
{
    float max = signed_absmax(x, n);
    if (fabsf(max) < SP_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx, suml2;
    sym_levels(n, nmax, x, qw, iscale, L, nmax, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int step = -9; step <= 9; step++) {
        if (step == 0)
            continue;
        iscale = -(nmax + 0.1f * step) / max;
        sym_levels(n, nmax, x, qw, iscale, NULL, 0, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, round_k(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's group search: levels in [-nmax, nmax) from -nmax / max, then up
 * to five passes that move single elements to the level that raises
 * (sum w x l)^2 / sum w l^2, w = x^2.  L receives l + nmax. */
static float search_q3(int n, int nmax, const float *x, int8_t *L)
{
    float max = signed_absmax(x, n);
    if (fabsf(max) < SP_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float sumlx, suml2;
    sym_levels(n, nmax, x, NULL, -nmax / max, L, 0, &sumlx, &suml2);
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx <= 0)
                continue;
            float sl2 = suml2 - w * L[i] * L[i];
            int nl = imax(-nmax, imin(nmax - 1, round_k(x[i] * sl2 / slx)));
            if (nl == L[i])
                continue;
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric levels in [0, nmax] with a minimum (x ~ s l - m, m >= 0):
 * least-squares (use_mad false) or least-absolute (true) weighted error
 * over nstep + 1 candidate inverse scales (rmin + rdelta k + nmax) /
 * (max - min), each refitted by weighted least squares.  Returns the scale,
 * *neg_min = m. */
static float search_asym(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                         uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        int l = round_k(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best += w[i] * diff;
    }
    for (int step = 0; step <= nstep; step++) {
        iscale = (rmin + rdelta * step + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, round_k(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0))
            continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            err += w[i] * diff;
        }
        if (err < best) {
            memcpy(L, Laux, (size_t)n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Non-negative values (scales, minimums of a super-block) to levels in
 * [0, nmax] under weights qw: 9 candidate scales, then single-element moves
 * as in search_q3.  Returns the super-block scale. */
static float search_pos(int n, int nmax, const float *x, uint8_t *L, const float *qw)
{
    float max = 0;
    for (int i = 0; i < n; i++)
        max = max > x[i] ? max : x[i];
    if (max < SP_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)round_k(iscale * x[i]);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        best += qw[i] * diff * diff;
    }
    for (int step = -4; step <= 4; step++) {
        if (step == 0)
            continue;
        float is = (0.1f * step + nmax) / max;
        float s = 1 / is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = imin(nmax, round_k(is * x[i]));
            float diff = x[i] - s * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best) {
            best = mse;
            iscale = is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imin(nmax, round_k(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * l;
        suml2 += qw[i] * l * l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (!(slx > 0 && sl2 > 0))
                continue;
            int nl = imin(nmax, round_k(x[i] * sl2 / slx));
            if (nl == L[i])
                continue;
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed)
            break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The importance weights of an imatrix row: qw (sigma2 + x^2)^(1/2). */
static void imatrix_weights(int n, const float *x, const float *qw, float sigma2, float *w)
{
    for (int i = 0; i < n; i++)
        w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
}

static float row_sum_sq(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return s;
}

/* ------------------------------------------------- 32-element blocks */

static void pack_q5(const uint8_t q[32], uint8_t qs[16], uint8_t qh_out[4])
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        qh |= ((q[j] & 0x10u) >> 4) << j;
        qh |= ((q[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh_out, &qh, 4);
}

static void q4_0_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q4_0 *y = vy;
    float w[SP_QK];
    if (qw) {
        int8_t L[SP_QK];
        imatrix_weights(SP_QK, x, qw, sigma2, w);
        y->d = f2h(search_sym(SP_QK, 8, x, L, w));
        for (int j = 0; j < 16; j++)
            y->qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
        return;
    }
    float d = signed_absmax(x, SP_QK) / -8;
    float id = d ? 1.0f / d : 0.0f;
    y->d = f2h(d);
    for (int j = 0; j < 16; j++) {
        int a = imin(15, (int8_t)(x[j] * id + 8.5f));
        int b = imin(15, (int8_t)(x[j + 16] * id + 8.5f));
        y->qs[j] = (uint8_t)(a | (b << 4));
    }
}

static void q5_0_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q5_0 *y = vy;
    float w[SP_QK];
    uint8_t q[SP_QK];
    if (qw) {
        int8_t L[SP_QK];
        imatrix_weights(SP_QK, x, qw, sigma2, w);
        y->d = f2h(search_sym(SP_QK, 16, x, L, w));
        for (int j = 0; j < SP_QK; j++)
            q[j] = (uint8_t)L[j];
    } else {
        float d = signed_absmax(x, SP_QK) / -16;
        float id = d ? 1.0f / d : 0.0f;
        y->d = f2h(d);
        for (int j = 0; j < SP_QK; j++)
            q[j] = (uint8_t)imin(31, (int8_t)(x[j] * id + 16.5f));
    }
    pack_q5(q, y->qs, y->qh);
}

/* Q4_1 / Q5_1: levels [0, nmax] above the block minimum.  Without weights
 * the scale is (max - min) / nmax and levels are truncated after + 0.5. */
static void q_1_block(const float *x, int nmax, const float *w, uint16_t *d_out, uint16_t *m_out, uint8_t q[32])
{
    if (w) {
        uint8_t Laux[SP_QK];
        float neg_min;
        float d = search_asym(SP_QK, nmax, x, w, q, &neg_min, Laux, -0.9f, 0.05f, 36, false);
        *d_out = f2h(d);
        *m_out = f2h(-neg_min);
        return;
    }
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < SP_QK; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    float d = (max - min) / nmax;
    float id = d ? 1.0f / d : 0.0f;
    *d_out = f2h(d);
    *m_out = f2h(min);
    for (int j = 0; j < SP_QK; j++) {
        float v = (x[j] - min) * id + 0.5f;
        q[j] = nmax == 15 ? (uint8_t)imin(15, (int8_t)v) : (uint8_t)v; /* Q5_1 has no clamp */
    }
}

static void q4_1_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q4_1 *y = vy;
    float w[SP_QK];
    uint8_t q[SP_QK];
    if (qw)
        imatrix_weights(SP_QK, x, qw, sigma2, w);
    q_1_block(x, 15, qw ? w : NULL, &y->d, &y->m, q);
    for (int j = 0; j < 16; j++)
        y->qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
}

static void q5_1_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q5_1 *y = vy;
    float w[SP_QK];
    uint8_t q[SP_QK];
    if (qw)
        imatrix_weights(SP_QK, x, qw, sigma2, w);
    q_1_block(x, 31, qw ? w : NULL, &y->d, &y->m, q);
    pack_q5(q, y->qs, y->qh);
}

/* MXFP4: ggml's quantize_row_mxfp4_ref (the traits table's quantizer is
 * that algorithm); importance weights change nothing, as in ggml. */
static void mxfp4_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    (void)qw;
    (void)sigma2;
    sp_type_get_ref(SP_TYPE_MXFP4)->from_float(x, vy, n);
}

static void q8_0_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q8_0 *y = vy;
    (void)qw;
    float amax = 0;
    for (int j = 0; j < SP_QK; j++)
        amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    float d = amax / 127;
    float id = d ? 1.0f / d : 0.0f;
    y->d = f2h(d);
    for (int j = 0; j < SP_QK; j++)
        y->qs[j] = (int8_t)roundf(x[j] * id);
}

/* ---------------------------------------------------------- K-quants */

/* Packs 256 2-bit levels: byte l of each 32-byte half holds elements
 * l, l + 32, l + 64, l + 96 of its 128. */
static void pack_2bit(const uint8_t L[SP_QK_K], uint8_t qs[64])
{
    for (int j = 0; j < SP_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

static void q2_K_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q2_K *y = vy;
    uint8_t L[SP_QK_K], Laux[16], Ls[16], Lm[16];
    float w[16], mins[16], scales[16], sw[16];
    if (qw) {
        sigma2 = row_sum_sq(x, SP_QK_K) / SP_QK_K; /* the super-block's, not the row's */
        for (int j = 0; j < 16; j++) {
            imatrix_weights(16, x + 16 * j, qw + 16 * j, sigma2, w);
            sw[j] = 0;
            for (int l = 0; l < 16; l++)
                sw[j] += w[l];
            scales[j] = search_asym(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
        }
        y->d = f2h(search_pos(16, 15, scales, Ls, sw));
        y->dmin = f2h(search_pos(16, 15, mins, Lm, sw));
        for (int j = 0; j < 16; j++)
            y->scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
    } else {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++)
                w[l] = fabsf(x[16 * j + l]);
            scales[j] = search_asym(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        const float q4scale = 15.f;
        for (int j = 0; j < 16; j++)
            y->scales[j] = max_scale > 0 ? (uint8_t)round_k(q4scale / max_scale * scales[j]) : 0;
        y->d = f2h(max_scale > 0 ? max_scale / q4scale : 0.f);
        if (max_min > 0)
            for (int j = 0; j < 16; j++)
                y->scales[j] |= (uint8_t)(round_k(q4scale / max_min * mins[j]) << 4);
        y->dmin = f2h(max_min > 0 ? max_min / q4scale : 0.f);
    }
    float dall = h2f(y->d), mall = h2f(y->dmin);
    for (int j = 0; j < 16; j++) {
        float d = dall * (y->scales[j] & 0xF);
        if (!d)
            continue;
        float m = mall * (y->scales[j] >> 4);
        for (int l = 0; l < 16; l++)
            L[16 * j + l] = (uint8_t)imax(0, imin(3, round_k((x[16 * j + l] + m) / d)));
    }
    pack_2bit(L, y->qs);
}

/* Q3_K's 16 6-bit scales (stored + 32): low nibbles in bytes 0..7, high
 * 2-bit pairs in bytes 8..11. */
static void q3_K_set_scales(uint8_t s[12], const int lv[16])
{
    memset(s, 0, 12);
    for (int j = 0; j < 16; j++) {
        int l = lv[j];
        if (j < 8)
            s[j] = (uint8_t)(l & 0xF);
        else
            s[j - 8] |= (uint8_t)((l & 0xF) << 4);
        s[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
}

static int q3_K_get_scale(const uint8_t s[12], int j)
{
    int sc = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    return (sc | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

static void q3_K_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q3_K *y = vy;
    int8_t L[SP_QK_K], Ls[16];
    float scales[16], w[16], sw[16];
    int lv[16];
    if (qw) {
        sigma2 = 2 * row_sum_sq(x, SP_QK_K) / SP_QK_K; /* the super-block's, not the row's */
        for (int j = 0; j < 16; j++) {
            imatrix_weights(16, x + 16 * j, qw + 16 * j, sigma2, w);
            float sumw = 0;
            for (int l = 0; l < 16; l++)
                sumw += w[l];
            sw[j] = sumw;
            scales[j] = search_sym(16, 4, x + 16 * j, L + 16 * j, w);
        }
        float d_block = search_sym(16, 32, scales, Ls, sw);
        for (int j = 0; j < 16; j++)
            lv[j] = Ls[j];
        q3_K_set_scales(y->scales, lv);
        y->d = f2h(d_block);
    } else {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = search_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int8_t l = (int8_t)round_k(iscale * scales[j]);
                lv[j] = imax(-32, imin(31, l)) + 32;
            }
            q3_K_set_scales(y->scales, lv);
            y->d = f2h(1 / iscale);
        } else {
            memset(y->scales, 0, 12);
            y->d = f2h(0.f);
        }
    }
    for (int j = 0; j < 16; j++) {
        float d = h2f(y->d) * q3_K_get_scale(y->scales, j);
        if (!d)
            continue;
        for (int l = 0; l < 16; l++)
            L[16 * j + l] = (int8_t)(imax(-4, imin(3, round_k(x[16 * j + l] / d))) + 4);
    }
    /* the high bit of element j goes to bit j / 32 of hmask[j % 32] */
    memset(y->hmask, 0, sizeof y->hmask);
    uint8_t low[SP_QK_K];
    for (int j = 0; j < SP_QK_K; j++) {
        low[j] = (uint8_t)L[j];
        if (L[j] > 3) {
            y->hmask[j % 32] |= (uint8_t)(1 << (j / 32));
            low[j] = (uint8_t)(L[j] - 4);
        }
    }
    pack_2bit(low, y->qs);
}

/* Q4_K / Q5_K's 8 scale and 8 minimum levels (6 bits each) in 12 bytes. */
static void k4_set_scales(uint8_t s[12], const uint8_t ls[8], const uint8_t lm[8])
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

static void k4_get_scale(const uint8_t s[12], int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The shared part of Q4_K and Q5_K (nmax 15 or 31): scales, minimums and
 * the 256 levels L of one super-block. */
static void k45_block(const float *x, int nmax, const float *qw, uint16_t *d_out, uint16_t *dmin_out,
                      uint8_t s[12], uint8_t L[SP_QK_K])
{
    uint8_t Laux[32], ls[8], lm[8];
    float w[32], mins[8], scales[8], sw[8];
    if (qw) {
        float sigma2 = 2 * row_sum_sq(x, SP_QK_K) / SP_QK_K;
        for (int j = 0; j < 8; j++) {
            imatrix_weights(32, x + 32 * j, qw + 32 * j, sigma2, w);
            float sumw = 0;
            for (int l = 0; l < 32; l++)
                sumw += w[l];
            sw[j] = sumw;
            scales[j] = search_asym(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
        }
        float d_block = search_pos(8, 63, scales, ls, sw);
        float m_block = search_pos(8, 63, mins, lm, sw);
        k4_set_scales(s, ls, lm);
        *d_out = f2h(d_block);
        *dmin_out = f2h(m_block);
    } else {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++)
                sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++)
                w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = nmax == 15
                ? search_asym(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false)
                : search_asym(32, 31, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < 8; j++) {
            ls[j] = (uint8_t)imin(63, (uint8_t)round_k(inv_scale * scales[j]));
            lm[j] = (uint8_t)imin(63, (uint8_t)round_k(inv_min * mins[j]));
        }
        k4_set_scales(s, ls, lm);
        *d_out = f2h(max_scale / 63.f);
        *dmin_out = f2h(max_min / 63.f);
    }
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_get_scale(s, j, &sc, &m);
        float d = h2f(*d_out) * sc;
        if (!d)
            continue;
        float dm = h2f(*dmin_out) * m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)imax(0, imin(nmax, round_k((x[32 * j + l] + dm) / d)));
    }
}

static void q4_K_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q4_K *y = vy;
    uint8_t L[SP_QK_K];
    k45_block(x, 15, qw, &y->d, &y->dmin, y->scales, L);
    for (int j = 0; j < SP_QK_K; j += 64)
        for (int l = 0; l < 32; l++)
            y->qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

static void q5_K_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q5_K *y = vy;
    uint8_t L[SP_QK_K];
    k45_block(x, 31, qw, &y->d, &y->dmin, y->scales, L);
    memset(y->qh, 0, sizeof y->qh);
    for (int j = 0; j < SP_QK_K; j += 64) {
        uint8_t m1 = (uint8_t)(1 << (j / 32)), m2 = (uint8_t)(2 << (j / 32));
        for (int l = 0; l < 32; l++) {
            int l1 = L[j + l], l2 = L[j + l + 32];
            if (l1 > 15) {
                l1 -= 16;
                y->qh[l] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                y->qh[l] |= m2;
            }
            y->qs[j / 2 + l] = (uint8_t)(l1 | (l2 << 4));
        }
    }
}

static void q6_K_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    struct sp_block_q6_K *y = vy;
    int8_t L[SP_QK_K];
    float scales[16];
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = search_sym(16, 32, x + 16 * j, L + 16 * j, qw ? qw + 16 * j : NULL);
        if (fabsf(scales[j]) > max_abs) {
            max_abs = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    if (max_abs < SP_GROUP_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    float iscale = -128.f / max_scale;
    y->d = f2h(1 / iscale);
    for (int j = 0; j < 16; j++)
        y->scales[j] = (int8_t)imin(127, round_k(iscale * scales[j]));
    for (int j = 0; j < 16; j++) {
        float d = h2f(y->d) * y->scales[j];
        if (!d)
            continue;
        for (int l = 0; l < 16; l++)
            L[16 * j + l] = (int8_t)(imax(-32, imin(31, round_k(x[16 * j + l] / d))) + 32);
    }
    for (int j = 0; j < SP_QK_K; j += 128) {
        uint8_t *ql = y->ql + j / 2, *qh = y->qh + j / 4;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((L[j + l] & 0xF) | ((L[j + l + 64] & 0xF) << 4));
            ql[l + 32] = (uint8_t)((L[j + l + 32] & 0xF) | ((L[j + l + 96] & 0xF) << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                              ((L[j + l + 96] >> 4) << 6));
        }
    }
}

/* -------------------------------------------------------- float types */

static void f32_block(const float *x, void *y, int64_t n, const float *qw, float sigma2)
{
    (void)qw;
    memcpy(y, x, (size_t)n * sizeof(float));
}

static void f16_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    uint16_t *y = vy;
    (void)qw;
    for (int64_t i = 0; i < n; i++)
        y[i] = f2h(x[i]);
}

static void bf16_block(const float *x, void *vy, int64_t n, const float *qw, float sigma2)
{
    uint16_t *y = vy;
    (void)qw;
    for (int64_t i = 0; i < n; i++)
        y[i] = sp_f32_to_bf16(x[i]);
}

/* ------------------------------------------------------------- table */

/* Writes one block of a type: x[0..n) into y, n being the type's block
 * size, or the whole row for the float types (block size 1).  qw: the
 * block's importance weights (NULL: none); sigma2: with qw, the row's mean
 * square. */
typedef void (*sp_quant_block_fn)(const float *x, void *y, int64_t n, const float *qw, float sigma2);

static const sp_quant_block_fn sp_quant_writers[SP_TYPE_COUNT] = {
    [SP_TYPE_F32] = f32_block,   [SP_TYPE_F16] = f16_block,   [SP_TYPE_BF16] = bf16_block,
    [SP_TYPE_Q4_0] = q4_0_block, [SP_TYPE_Q4_1] = q4_1_block, [SP_TYPE_Q5_0] = q5_0_block,
    [SP_TYPE_Q5_1] = q5_1_block, [SP_TYPE_Q8_0] = q8_0_block, [SP_TYPE_Q2_K] = q2_K_block,
    [SP_TYPE_Q3_K] = q3_K_block, [SP_TYPE_Q4_K] = q4_K_block, [SP_TYPE_Q5_K] = q5_K_block,
    [SP_TYPE_Q6_K] = q6_K_block, [SP_TYPE_MXFP4] = mxfp4_block,
};

bool sp_quant_can_write(uint32_t type)
{
    return type < SP_TYPE_COUNT && sp_quant_writers[type];
}

sp_status sp_quant_rows(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row,
                        const float *imatrix)
{
    size_t row_bytes;
    if (!sp_quant_can_write(type))
        return sp_error_set(SP_ERR_ARG, "cannot write tensors of type %u", type);
    if (n_rows < 0 || n_per_row <= 0 || !sp_type_row_size(type, n_per_row, &row_bytes))
        return sp_error_set(SP_ERR_ARG, "rows of %lld elements cannot be stored as %s", (long long)n_per_row,
                            sp_type_get(type)->name);
    const struct sp_type_traits *t = sp_type_get(type);
    int64_t step = t->block_size > 1 ? t->block_size : n_per_row;
    size_t step_bytes = t->block_size > 1 ? t->type_size : row_bytes;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = src + r * n_per_row;
        uint8_t *y = (uint8_t *)dst + (size_t)r * row_bytes;
        float sigma2 = imatrix ? row_sum_sq(x, n_per_row) / n_per_row : 0;
        for (int64_t i = 0; i < n_per_row; i += step, y += step_bytes)
            sp_quant_writers[type](x + i, y, step, imatrix ? imatrix + i : NULL, sigma2);
    }
    return SP_OK;
}
