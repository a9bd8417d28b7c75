/* AVX-512 VNNI kernels.  vpdpbusd does the u8 x s8 -> int32 dot in one
 * instruction.  The file-layout kernels use 256-bit vectors (AVX512VL):
 * Zen 4 runs 512-bit ops as two 256-bit halves, so ymm VNNI costs no
 * throughput and keeps them the same shape as the AVX2 ones (see
 * kern_x86.inc).  The packed 16-row kernels below use 512-bit vectors, one
 * lane per row. */
#include "quant/isa.h"

#if defined(__x86_64__)
#define KFN(name) name##_avx512
#define DOT_US_ADD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define DOT_US_ACC(acc, u, s, sc16)                                            \
    _mm256_dpwssd_epi32((acc), _mm256_maddubs_epi16((u), (s)), (sc16))
#define SP_KERN_AVX512 1
#include "quant/kern_x86.inc"

/* ------------------------------------- packed 16-row tiles (zmm, P16) */
/* Layouts in isa.h, scalar oracle in packed.c: every output is one row's
 * blocks in order, so the column count (tile width, tails) changes no bit. */

#define P16_COLS 8       /* activation columns per register tile */
#define P16_COL_CHUNK 64 /* columns kept in L2 while a thread's row groups stream by */

/* The first tile over a row group (the one that reads it from memory) of
 * nc >= 4 columns asks for the block P16_PF_BYTES past block b (bpb bytes
 * a block; groups are contiguous, so past a group's end this is the next
 * group's start).  With the hardware prefetcher alone an 8-column tile
 * read memory at 5-6 GB/s a thread (25-28 cycles per block and column
 * against 12 in L2); asked 2.5 KB ahead it took 13.5 (Q4_1), 18 (Q8_0)
 * and 15 (Q5_0).  One or two columns stream faster without it (Q4_1, one
 * column: 40 cycles without, 51 with). */
#define P16_PF_BYTES 2560
ALWAYS_INLINE void p16_prefetch(const int nc, const uint8_t *wg, int64_t b, size_t bpb)
{
    if (nc < 4)
        return;
    const char *p = (const char *)wg + (size_t)b * bpb + P16_PF_BYTES;
    for (size_t l = 0; l < bpb; l += 64)
        _mm_prefetch(p + l, _MM_HINT_T0);
}

ALWAYS_INLINE __m512i p16_bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* init + the 32 products of one block: lo[j] against activation bytes 4j..,
 * hi[j] against 16+4j...  Integer sums are exact in any order: with few
 * columns two chains hide the vpdpbusd latency, with 4 or more the columns'
 * chains do and one chain saves the add. */
ALWAYS_INLINE __m512i p16_dot8(const int nc, __m512i init, const __m512i *lo, const __m512i *hi, const int8_t *qs)
{
    if (nc >= 4) {
        __m512i i = init;
        for (int j = 0; j < 4; j++) i = _mm512_dpbusd_epi32(i, lo[j], p16_bcast4(qs + 4 * j));
        for (int j = 0; j < 4; j++) i = _mm512_dpbusd_epi32(i, hi[j], p16_bcast4(qs + 16 + 4 * j));
        return i;
    }
    __m512i i0 = _mm512_dpbusd_epi32(init, lo[0], p16_bcast4(qs));
    __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], p16_bcast4(qs + 16));
    for (int j = 1; j < 4; j++) {
        i0 = _mm512_dpbusd_epi32(i0, lo[j], p16_bcast4(qs + 4 * j));
        i1 = _mm512_dpbusd_epi32(i1, hi[j], p16_bcast4(qs + 16 + 4 * j));
    }
    return _mm512_add_epi32(i0, i1);
}

/* isum[c] += the 32 products of one block with column c's activations
 * (y, a_stride apart), for c < nc.  With six or more columns the columns'
 * chains are interleaved in program order, so independent vpdpbusd sit
 * side by side for the scheduler: Q4_1 and Q5_0 tiles of 8 columns went
 * from 15 and 17 to 12 and 14 cycles per block and column (in L2, min of
 * six alternating runs); Q8_0 and fewer columns did not gain, so they keep
 * p16_dot8's chain per column.  Same integers either way. */
ALWAYS_INLINE void p16_dots(const int nc, __m512i *isum, const __m512i *lo, const __m512i *hi, const uint8_t *y,
                            size_t a_stride)
{
    if (nc < 6) {
        for (int c = 0; c < nc; c++)
            isum[c] = p16_dot8(nc, isum[c], lo, hi, ((const struct sp_block_q8_p *)(y + (size_t)c * a_stride))->qs);
        return;
    }
    for (int j = 0; j < 8; j++)
        for (int c = 0; c < nc; c++) {
            const int8_t *qs = ((const struct sp_block_q8_p *)(y + (size_t)c * a_stride))->qs;
            isum[c] = _mm512_dpbusd_epi32(isum[c], j < 4 ? lo[j] : hi[j - 4],
                                          p16_bcast4(qs + 4 * (j & 3) + 16 * (j >> 2)));
        }
}

/* 16 rows (one group) x nc columns; s gets s[c * s_stride + r]. */
ALWAYS_INLINE void q4_1_p16_tile(int64_t nb, const uint8_t *wg, const uint8_t *a, size_t a_stride, float *s,
                                 size_t s_stride, const int nc, bool pf)
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512 acc[P16_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i lo[4], hi[4];
        if (pf)
            p16_prefetch(nc, wg, b, 320);
        for (int j = 0; j < 4; j++) {
            __m512i v = _mm512_loadu_si512(wg + sp_p16_q4_1_qs(b) + 64 * j);
            lo[j] = _mm512_and_si512(v, m4);
            hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        const uint8_t *dm = wg + sp_p16_q4_1_dm(b);
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dm));
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dm + 32)));
        __m512i isum[P16_COLS];
        for (int c = 0; c < nc; c++) isum[c] = _mm512_setzero_si512();
        p16_dots(nc, isum, lo, hi, a + (size_t)b * sizeof(struct sp_block_q8_p), a_stride);
        for (int c = 0; c < nc; c++) {
            const struct sp_block_q8_p *y = (const struct sp_block_q8_p *)(a + (size_t)c * a_stride) + b;
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, _mm512_set1_ps(y->d)), acc[c]);
            acc[c] = _mm512_fmadd_ps(m, _mm512_set1_ps(y->s), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, acc[c]);
}

ALWAYS_INLINE void q8_0_p16_tile(int64_t nb, const uint8_t *wg, const uint8_t *a, size_t a_stride, float *s,
                                 size_t s_stride, const int nc, bool pf)
{
    __m512 acc[P16_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i q[8];
        if (pf)
            p16_prefetch(nc, wg, b, 544);
        for (int j = 0; j < 8; j++) q[j] = _mm512_loadu_si512(wg + sp_p16_q8_0_qs(b) + 64 * j);
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wg + sp_p16_q8_0_d(nb, b))));
        for (int c = 0; c < nc; c++) {
            const struct sp_block_q8_p *y = (const struct sp_block_q8_p *)(a + (size_t)c * a_stride) + b;
            __m512 f = _mm512_cvtepi32_ps(p16_dot8(nc, _mm512_set1_epi32(y->m128), q, q + 4, y->qs));
            acc[c] = _mm512_fmadd_ps(f, _mm512_mul_ps(d, _mm512_set1_ps(y->d)), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, acc[c]);
}

/* Q5_0: the fifth bits come from one hb vector; for chunk j, bit j (low
 * nibbles) or bit 4 + j (high nibbles) of each byte is moved to bit 4. */
ALWAYS_INLINE void q5_0_p16_tile(int64_t nb, const uint8_t *wg, const uint8_t *a, size_t a_stride, float *s,
                                 size_t s_stride, const int nc, bool pf)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), b4 = _mm512_set1_epi8(0x10);
    __m512 acc[P16_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i lo[4], hi[4];
        if (pf)
            p16_prefetch(nc, wg, b, 352);
        const __m512i hb = _mm512_loadu_si512(wg + sp_p16_q5_0_hb(b));
        for (int j = 0; j < 4; j++) {
            __m512i v = _mm512_loadu_si512(wg + sp_p16_q5_0_qs(b) + 64 * j);
            __m512i hl = _mm512_and_si512(_mm512_slli_epi16(hb, 4 - j), b4);
            __m512i hh = _mm512_and_si512(_mm512_srli_epi16(hb, j), b4);
            lo[j] = _mm512_or_si512(_mm512_and_si512(v, m4), hl);
            hi[j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), hh);
        }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wg + sp_p16_q5_0_d(nb, b))));
        __m512i isum[P16_COLS];
        for (int c = 0; c < nc; c++)
            isum[c] = _mm512_set1_epi32(((const struct sp_block_q8_p *)(a + (size_t)c * a_stride) + b)->m16);
        p16_dots(nc, isum, lo, hi, a + (size_t)b * sizeof(struct sp_block_q8_p), a_stride);
        for (int c = 0; c < nc; c++) {
            const struct sp_block_q8_p *y = (const struct sp_block_q8_p *)(a + (size_t)c * a_stride) + b;
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, _mm512_set1_ps(y->d)), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, acc[c]);
}

/* Columns in L2-sized chunks; within one, each row group meets every column
 * in tiles of P16_COLS (its weights stay in L1 across the tiles). */
#define P16_GEMM(name, tile)                                                                                   \
    static void name(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,           \
                     const void *a, size_t a_stride, int nc)                                                  \
    {                                                                                                         \
        const int64_t nb = n / 32;                                                                            \
        const uint8_t *ab = a;                                                                                \
        for (int c0 = 0; c0 < nc; c0 += P16_COL_CHUNK) {                                                      \
            int c1 = nc - c0 < P16_COL_CHUNK ? nc : c0 + P16_COL_CHUNK;                                       \
            for (int g = 0; g < nr / SP_P16_ROWS; g++) {                                                      \
                const uint8_t *wg = (const uint8_t *)w + (size_t)g * SP_P16_ROWS * w_stride;                  \
                float *sg = s + (size_t)g * SP_P16_ROWS;                                                      \
                int c = c0;                                                                                   \
                for (; c + P16_COLS <= c1; c += P16_COLS)                                                     \
                    tile(nb, wg, ab + (size_t)c * a_stride, a_stride, sg + (size_t)c * s_stride, s_stride,   \
                         P16_COLS, c == c0);                                                                  \
                const uint8_t *ac = ab + (size_t)c * a_stride;                                                \
                float *sc = sg + (size_t)c * s_stride;                                                        \
                switch (c1 - c) {                                                                             \
                case 7: tile(nb, wg, ac, a_stride, sc, s_stride, 7, c == c0); break;                          \
                case 6: tile(nb, wg, ac, a_stride, sc, s_stride, 6, c == c0); break;                          \
                case 5: tile(nb, wg, ac, a_stride, sc, s_stride, 5, c == c0); break;                          \
                case 4: tile(nb, wg, ac, a_stride, sc, s_stride, 4, c == c0); break;                          \
                case 3: tile(nb, wg, ac, a_stride, sc, s_stride, 3, c == c0); break;                          \
                case 2: tile(nb, wg, ac, a_stride, sc, s_stride, 2, c == c0); break;                          \
                case 1: tile(nb, wg, ac, a_stride, sc, s_stride, 1, c == c0); break;                          \
                default: break;                                                                               \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }
P16_GEMM(q4_1_p16_gemm, q4_1_p16_tile)
P16_GEMM(q8_0_p16_gemm, q8_0_p16_tile)
P16_GEMM(q5_0_p16_gemm, q5_0_p16_tile)

void sp_quant_register_avx512(struct sp_type_traits *table)
{
    register_avx512(table);
    table[SP_TYPE_Q4_1].packed = SP_TYPE_Q4_1_P16;
    table[SP_TYPE_Q4_1_P16].gemm = q4_1_p16_gemm;
    table[SP_TYPE_Q8_0].packed = SP_TYPE_Q8_0_P16;
    table[SP_TYPE_Q8_0_P16].gemm = q8_0_p16_gemm;
    table[SP_TYPE_Q5_0].packed = SP_TYPE_Q5_0_P16;
    table[SP_TYPE_Q5_0_P16].gemm = q5_0_p16_gemm;
}
#endif
