/* Weights repacked at load into 16-row interleaved tiles (the P16 types),
 * their activation type Q8_P (F32 rows for F16_P16), and the scalar oracle
 * of their gemm.
 *
 * Why: in the file layout one row's blocks are contiguous, so a SIMD dot
 * sums 8 lanes of one row and must convert and scale per block and row.
 * With 16 rows side by side, each vpdpbusd lane is one row's running sum,
 * a block's scaling is one vector op for 16 rows, and no horizontal sum is
 * left at the end (layouts in quant_isa.h); for F16 one conversion serves 16
 * rows, and each product is one fused multiply-add of a lane.  The ISA
 * file registers the fast gemm and sets `packed` on the file types it
 * handles; the model repacks then (src/model/model.c).
 *
 * The fast kernels do exactly the arithmetic written here, in this order
 * (tests/unit/test_quant.c checks bit equality), for any column count. */
#include <math.h>
#include <string.h>

#include "quant/quant_isa.h"

#define GROUP SP_P16_ROWS

void sp_q8_p_from_float_ref(const float *x, void *vy, int64_t n)
{
    struct sp_block_q8_p *y = vy;
    for (int64_t i = 0; i < n / SP_QK; i++, x += SP_QK) {
        float amax = 0;
        for (int j = 0; j < SP_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127, id = amax != 0 ? 127.f / amax : 0;
        int sum = 0;
        for (int j = 0; j < SP_QK; j++) {
            y[i].qs[j] = (int8_t)nearbyintf(x[j] * id);
            sum += y[i].qs[j];
        }
        /* the scales Q8_0/Q8_1 would store (f16), so results stay as close
         * to llama.cpp's as the file-layout kernels' */
        y[i].d = sp_f16_to_f32(sp_f32_to_f16(d));
        y[i].s = sp_f16_to_f32(sp_f32_to_f16(d * (float)sum));
        y[i].m128 = -128 * sum;
        y[i].m16 = -16 * sum;
    }
}

void sp_q8_p_to_float_ref(const void *vx, float *y, int64_t n)
{
    const struct sp_block_q8_p *x = vx;
    for (int64_t i = 0; i < n / SP_QK; i++)
        for (int j = 0; j < SP_QK; j++) y[i * SP_QK + j] = x[i].d * x[i].qs[j];
}

/* Puts block b of row r (file layout, `blk`) into its group `out` of nb
 * blocks per row. */
typedef void (*p16_put_fn)(uint8_t *out, int64_t nb, int64_t b, int r, const uint8_t *blk);

/* Walks every file block (qk elements, file_block bytes) of n_rows rows,
 * group by group (a group of nb blocks takes 16 * nb * file_block bytes). */
static void p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows, int qk,
                     size_t file_block, p16_put_fn put)
{
    const int64_t nb = n / qk;
    uint8_t *out = dst;
    for (int64_t g = 0; g < n_rows / GROUP; g++, out += (size_t)nb * GROUP * file_block)
        for (int r = 0; r < GROUP; r++) {
            const uint8_t *row = (const uint8_t *)src + (size_t)(g * GROUP + r) * src_row_bytes;
            for (int64_t b = 0; b < nb; b++)
                put(out, nb, b, r, row + (size_t)b * file_block);
        }
}

static void q4_1_put(uint8_t *out, int64_t nb, int64_t b, int r, const uint8_t *blk)
{
    const struct sp_block_q4_1 *x = (const struct sp_block_q4_1 *)blk;
    uint16_t *dm = (uint16_t *)(out + sp_p16_q4_1_dm(b));
    (void)nb;
    for (int j = 0; j < 4; j++) memcpy(out + sp_p16_q4_1_qs(b) + j * 64 + r * 4, x->qs + 4 * j, 4);
    dm[r] = x->d;
    dm[16 + r] = x->m;
}

static void q8_0_put(uint8_t *out, int64_t nb, int64_t b, int r, const uint8_t *blk)
{
    const struct sp_block_q8_0 *x = (const struct sp_block_q8_0 *)blk;
    for (int j = 0; j < 8; j++)
        for (int k = 0; k < 4; k++)
            out[sp_p16_q8_0_qs(b) + j * 64 + r * 4 + k] = (uint8_t)(x->qs[4 * j + k] + 128);
    memcpy(out + sp_p16_q8_0_d(nb, b) + 2 * r, &x->d, 2);
}

static void q5_0_put(uint8_t *out, int64_t nb, int64_t b, int r, const uint8_t *blk)
{
    const struct sp_block_q5_0 *x = (const struct sp_block_q5_0 *)blk;
    uint32_t qh;
    memcpy(&qh, x->qh, 4);
    for (int j = 0; j < 4; j++) memcpy(out + sp_p16_q5_0_qs(b) + j * 64 + r * 4, x->qs + 4 * j, 4);
    for (int k = 0; k < 4; k++) {
        uint8_t hb = 0;
        for (int j = 0; j < 4; j++)
            hb |= (uint8_t)((((qh >> (4 * j + k)) & 1) << j) | (((qh >> (16 + 4 * j + k)) & 1) << (4 + j)));
        out[sp_p16_q5_0_hb(b) + r * 4 + k] = hb;
    }
    memcpy(out + sp_p16_q5_0_d(nb, b) + 2 * r, &x->d, 2);
}

static void q4_K_put(uint8_t *out, int64_t nb, int64_t b, int r, const uint8_t *blk)
{
    const struct sp_block_q4_K *x = (const struct sp_block_q4_K *)blk;
    uint8_t *o = out + (size_t)b * SP_P16_Q4_K_BYTES;
    (void)nb;
    for (int v = 0; v < 32; v++) memcpy(o + v * 64 + r * 4, x->qs + 4 * v, 4);
    for (int w = 0; w < 3; w++) memcpy(o + SP_P16_Q4_K_SC + w * 64 + r * 4, x->scales + 4 * w, 4);
    memcpy(o + SP_P16_Q4_K_D + 2 * r, &x->d, 2);
    memcpy(o + SP_P16_Q4_K_DMIN + 2 * r, &x->dmin, 2);
}

static void q6_K_put(uint8_t *out, int64_t nb, int64_t b, int r, const uint8_t *blk)
{
    const struct sp_block_q6_K *x = (const struct sp_block_q6_K *)blk;
    uint8_t *o = out + (size_t)b * SP_P16_Q6_K_BYTES;
    uint8_t u[SP_QK_K];
    (void)nb;
    for (int e = 0; e < SP_QK_K; e++) u[e] = (uint8_t)(sp_q6k_q(x, e) + 32);
    for (int v = 0; v < 32; v++)
        for (int k = 0; k < 4; k++)
            o[v * 64 + r * 4 + k] = (uint8_t)((u[4 * v + k] & 0xF) | (u[128 + 4 * v + k] & 0xF) << 4);
    for (int w = 0; w < 16; w++)
        for (int k = 0; k < 4; k++) {
            uint8_t h = 0;
            for (int i = 0; i < 4; i++) h |= (uint8_t)((u[64 * i + 4 * w + k] >> 4) << (2 * i));
            o[SP_P16_Q6_K_QH + w * 64 + r * 4 + k] = h;
        }
    for (int sb = 0; sb < 16; sb++) o[SP_P16_Q6_K_SC + sb * 16 + r] = (uint8_t)x->scales[sb];
    memcpy(o + SP_P16_Q6_K_D + 2 * r, &x->d, 2);
}

static void mxfp4_put(uint8_t *out, int64_t nb, int64_t b, int r, const uint8_t *blk)
{
    const struct sp_block_mxfp4 *x = (const struct sp_block_mxfp4 *)blk;
    (void)nb;
    for (int j = 0; j < 4; j++) memcpy(out + sp_p16_mxfp4_qs(b) + j * 64 + r * 4, x->qs + 4 * j, 4);
    out[sp_p16_mxfp4_e(b) + r] = x->e;
}

void sp_mxfp4_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, SP_QK, sizeof(struct sp_block_mxfp4), mxfp4_put);
}

void sp_q4_K_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, SP_QK_K, sizeof(struct sp_block_q4_K), q4_K_put);
}

void sp_q6_K_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, SP_QK_K, sizeof(struct sp_block_q6_K), q6_K_put);
}

void sp_q4_1_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, SP_QK, sizeof(struct sp_block_q4_1), q4_1_put);
}

void sp_q8_0_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, SP_QK, sizeof(struct sp_block_q8_0), q8_0_put);
}

void sp_q5_0_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, SP_QK, sizeof(struct sp_block_q5_0), q5_0_put);
}

void sp_f16_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    uint16_t *out = dst;
    for (int64_t g = 0; g < n_rows / GROUP; g++, out += (size_t)n * GROUP)
        for (int r = 0; r < GROUP; r++) {
            const uint16_t *row = (const uint16_t *)((const uint8_t *)src + (size_t)(g * GROUP + r) * src_row_bytes);
            for (int64_t k = 0; k < n; k++)
                out[(size_t)k * GROUP + r] = row[k];
        }
}

/* Row r of a group against one activation row: the order every kernel keeps. */
static float q4_1_p16_dot(int64_t nb, const uint8_t *wg, int r, const struct sp_block_q8_p *y)
{
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 4; k++) {
                uint8_t q = wg[sp_p16_q4_1_qs(b) + j * 64 + r * 4 + k];
                isum += (q & 0xF) * y[b].qs[4 * j + k] + (q >> 4) * y[b].qs[16 + 4 * j + k];
            }
        const uint16_t *dm = (const uint16_t *)(wg + sp_p16_q4_1_dm(b));
        float t = sp_f16_to_f32(dm[r]) * y[b].d;
        acc = fmaf((float)isum, t, acc);
        acc = fmaf(sp_f16_to_f32(dm[16 + r]), y[b].s, acc);
    }
    return acc;
}

static float q8_0_p16_dot(int64_t nb, const uint8_t *wg, int r, const struct sp_block_q8_p *y)
{
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int isum = y[b].m128;
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 4; k++) isum += wg[sp_p16_q8_0_qs(b) + j * 64 + r * 4 + k] * y[b].qs[4 * j + k];
        const uint16_t *d = (const uint16_t *)(wg + sp_p16_q8_0_d(nb, b));
        acc = fmaf((float)isum, sp_f16_to_f32(d[r]) * y[b].d, acc);
    }
    return acc;
}

static float q5_0_p16_dot(int64_t nb, const uint8_t *wg, int r, const struct sp_block_q8_p *y)
{
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int isum = y[b].m16;
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 4; k++) {
                uint8_t q = wg[sp_p16_q5_0_qs(b) + j * 64 + r * 4 + k];
                uint8_t hb = wg[sp_p16_q5_0_hb(b) + r * 4 + k];
                int lo = (q & 0xF) | (((hb >> j) & 1) << 4), hi = (q >> 4) | (((hb >> (4 + j)) & 1) << 4);
                isum += lo * y[b].qs[4 * j + k] + hi * y[b].qs[16 + 4 * j + k];
            }
        const uint16_t *d = (const uint16_t *)(wg + sp_p16_q5_0_d(nb, b));
        acc = fmaf((float)isum, sp_f16_to_f32(d[r]) * y[b].d, acc);
    }
    return acc;
}

static float mxfp4_p16_dot(int64_t nb, const uint8_t *wg, int r, const struct sp_block_q8_p *y)
{
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int isum = y[b].m16;
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 4; k++) {
                uint8_t q = wg[sp_p16_mxfp4_qs(b) + j * 64 + r * 4 + k];
                isum += sp_mxfp4_u16[q & 0xF] * y[b].qs[4 * j + k] + sp_mxfp4_u16[q >> 4] * y[b].qs[16 + 4 * j + k];
            }
        acc = fmaf((float)isum, sp_e8m0_half(wg[sp_p16_mxfp4_e(b) + r]) * y[b].d, acc);
    }
    return acc;
}

/* K types: nb super-blocks; the file-layout kernels' arithmetic (quant_isa.h). */
static float q4_K_p16_dot(int64_t nb, const uint8_t *wg, int r, const struct sp_block_q8_K *y)
{
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = wg + (size_t)b * SP_P16_Q4_K_BYTES;
        uint8_t qs[128], sf[12], sc[8], mn[8];
        for (int v = 0; v < 32; v++) memcpy(qs + 4 * v, o + v * 64 + r * 4, 4);
        for (int w = 0; w < 3; w++) memcpy(sf + 4 * w, o + SP_P16_Q4_K_SC + w * 64 + r * 4, 4);
        sp_q4k_scales(sf, sc, mn);
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            int si = 0;
            for (int k = 0; k < 32; k++) si += sp_q4k_q(qs, 32 * j + k) * y[b].qs[32 * j + k];
            isum += sc[j] * si;
        }
        for (int j = 0; j < 16; j++) msum += mn[j / 2] * y[b].bsums[j];
        const uint16_t *d = (const uint16_t *)(o + SP_P16_Q4_K_D), *dmin = (const uint16_t *)(o + SP_P16_Q4_K_DMIN);
        acc = fmaf(sp_f16_to_f32(d[r]) * y[b].d, (float)isum, acc);
        acc = fmaf(-(sp_f16_to_f32(dmin[r]) * y[b].d), (float)msum, acc);
    }
    return acc;
}

static float q6_K_p16_dot(int64_t nb, const uint8_t *wg, int r, const struct sp_block_q8_K *y)
{
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = wg + (size_t)b * SP_P16_Q6_K_BYTES;
        int isum = 0;
        for (int sb = 0; sb < 16; sb++) {
            int si = 0;
            for (int k = 0; k < 16; k++) {
                int e = 16 * sb + k, v = (e % 128) / 4, w = (e % 64) / 4, i = e / 64;
                uint8_t ql = o[v * 64 + r * 4 + e % 4], qh = o[SP_P16_Q6_K_QH + w * 64 + r * 4 + e % 4];
                int u = (e < 128 ? ql & 0xF : ql >> 4) | ((qh >> (2 * i)) & 3) << 4;
                si += (u - 32) * y[b].qs[e];
            }
            isum += (int8_t)o[SP_P16_Q6_K_SC + sb * 16 + r] * si;
        }
        const uint16_t *d = (const uint16_t *)(o + SP_P16_Q6_K_D);
        acc = fmaf(sp_f16_to_f32(d[r]) * y[b].d, (float)isum, acc);
    }
    return acc;
}

#define P16_GEMM_REF(name, dot, QK, AT)                                                                             \
    void name(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr, const void *a,   \
              size_t a_stride, int nc)                                                                       \
    {                                                                                                        \
        for (int g = 0; g < nr / GROUP; g++)                                                                 \
            for (int c = 0; c < nc; c++)                                                                     \
                for (int r = 0; r < GROUP; r++)                                                              \
                    s[(size_t)c * s_stride + g * GROUP + r] =                                                \
                        dot(n / QK, (const uint8_t *)w + (size_t)g * GROUP * w_stride, r,                    \
                            (const AT *)((const uint8_t *)a + (size_t)c * a_stride));                        \
    }
static float f16_p16_dot(int64_t n, const uint8_t *wg, int r, const float *y)
{
    const uint16_t *w = (const uint16_t *)wg;
    float acc = 0;
    for (int64_t k = 0; k < n; k++)
        acc = fmaf(sp_f16_to_f32(w[(size_t)k * GROUP + r]), y[k], acc);
    return acc;
}

P16_GEMM_REF(sp_q4_1_p16_gemm_ref, q4_1_p16_dot, SP_QK, struct sp_block_q8_p)
P16_GEMM_REF(sp_q8_0_p16_gemm_ref, q8_0_p16_dot, SP_QK, struct sp_block_q8_p)
P16_GEMM_REF(sp_q5_0_p16_gemm_ref, q5_0_p16_dot, SP_QK, struct sp_block_q8_p)
P16_GEMM_REF(sp_q4_K_p16_gemm_ref, q4_K_p16_dot, SP_QK_K, struct sp_block_q8_K)
P16_GEMM_REF(sp_q6_K_p16_gemm_ref, q6_K_p16_dot, SP_QK_K, struct sp_block_q8_K)
P16_GEMM_REF(sp_f16_p16_gemm_ref, f16_p16_dot, 1, float)
P16_GEMM_REF(sp_mxfp4_p16_gemm_ref, mxfp4_p16_dot, SP_QK, struct sp_block_q8_p)
