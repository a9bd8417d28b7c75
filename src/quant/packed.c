/* Weights repacked at load into 16-row interleaved tiles (the P16 types),
 * their activation type Q8_P, and the scalar oracle of their gemm.
 *
 * Why: in the file layout one row's blocks are contiguous, so a SIMD dot
 * sums 8 lanes of one row and must convert and scale per block and row.
 * With 16 rows side by side, each vpdpbusd lane is one row's running sum,
 * a block's scaling is one vector op for 16 rows, and no horizontal sum is
 * left at the end (layouts in isa.h).  The ISA file registers the fast
 * gemm and sets `packed` on the file types it handles; the model repacks
 * then (src/model/model.c).
 *
 * The fast kernels do exactly the arithmetic written here, in this order
 * (tests/unit/test_quant.c checks bit equality), for any column count. */
#include <math.h>
#include <string.h>

#include "quant/isa.h"

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

/* Walks every file block of n_rows rows, group by group; file_block is the
 * file type's block size (a group of nb blocks takes 16 * nb of them). */
static void p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows,
                     size_t file_block, p16_put_fn put)
{
    const int64_t nb = n / SP_QK;
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

void sp_q4_1_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, sizeof(struct sp_block_q4_1), q4_1_put);
}

void sp_q8_0_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, sizeof(struct sp_block_q8_0), q8_0_put);
}

void sp_q5_0_p16_pack(const void *src, size_t src_row_bytes, void *dst, int64_t n, int64_t n_rows)
{
    p16_pack(src, src_row_bytes, dst, n, n_rows, sizeof(struct sp_block_q5_0), q5_0_put);
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

#define P16_GEMM_REF(name, dot)                                                                              \
    void name(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr, const void *a,   \
              size_t a_stride, int nc)                                                                       \
    {                                                                                                        \
        for (int g = 0; g < nr / GROUP; g++)                                                                 \
            for (int c = 0; c < nc; c++)                                                                     \
                for (int r = 0; r < GROUP; r++)                                                              \
                    s[(size_t)c * s_stride + g * GROUP + r] =                                                \
                        dot(n / SP_QK, (const uint8_t *)w + (size_t)g * GROUP * w_stride, r,                 \
                            (const struct sp_block_q8_p *)((const uint8_t *)a + (size_t)c * a_stride));      \
    }
P16_GEMM_REF(sp_q4_1_p16_gemm_ref, q4_1_p16_dot)
P16_GEMM_REF(sp_q8_0_p16_gemm_ref, q8_0_p16_dot)
P16_GEMM_REF(sp_q5_0_p16_gemm_ref, q5_0_p16_dot)
