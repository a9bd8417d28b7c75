/* AVX-512 VNNI kernels.  vpdpbusd does the u8 x s8 -> int32 dot in one
 * instruction.  The file-layout kernels use 256-bit vectors (AVX512VL):
 * Zen 4 runs 512-bit ops as two 256-bit halves, so ymm VNNI costs no
 * throughput and keeps them the same shape as the AVX2 ones (see
 * kern_x86.inc).  The packed 16-row kernels below use 512-bit vectors, one
 * lane per row. */
#include "quant/quant_isa.h"

#if defined(__x86_64__)
#define KFN(name) name##_avx512
#define DOT_US_ADD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define DOT_US_ACC(acc, u, s, sc16)                                            \
    _mm256_dpwssd_epi32((acc), _mm256_maddubs_epi16((u), (s)), (sc16))
#define SP_KERN_AVX512 1
#define SP_KERN_VNNI 1
#include "quant/kern_x86.inc"

/* ------------------------------------- packed 16-row tiles (zmm, P16) */
/* Layouts in quant_isa.h, scalar oracle in packed.c: every output is one row's
 * blocks in order, so the column count (tile width, tails) changes no bit. */

#define P16_COLS 8       /* activation columns per register tile */
#define P16_COL_CHUNK 64 /* columns kept in L2 while a thread's row groups stream by */

/* The first tile over a row group (the one that reads it from memory)
 * asks for the bytes it reads `ahead` (nc >= 4) or P16_PF_STREAM (nc < 4)
 * bytes further on, [p + distance, p + distance + bytes) (groups are
 * contiguous, so past a group's end this is the next group's start).
 * With nc >= 4 the hardware prefetcher alone leaves an 8-column tile
 * waiting on memory for about half its time; P16_PF_BYTES (or a Q6_K
 * super-block) ahead keeps it fed.  A K-quant super-block (2.3 and 3.4 KB)
 * asks a quarter at a time: asked all at once, the requests bunch up and
 * stall the tile.  Decode (one to three columns) does too little work per
 * byte for such a short distance to hide the memory's latency: one
 * thread streams Q4_K at 17-25 GB/s with no prefetch and 26-30 GB/s 1-2.5
 * KB ahead, but at 33-34 GB/s 8 KB ahead (Q6_K 25 -> 34, two columns 12
 * -> 30; build/bench_packed_gemm, K = 4096, 65536 rows, Zen 5). */
#define P16_PF_BYTES 2560
#define P16_PF_STREAM 8192
ALWAYS_INLINE void p16_prefetch(const int nc, const uint8_t *p, size_t ahead, size_t bytes)
{
    p += nc >= 4 ? ahead : P16_PF_STREAM;
    for (size_t l = 0; l < bytes; l += 64)
        _mm_prefetch((const char *)p + l, _MM_HINT_T0);
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
 * side by side for the scheduler (Q4_1 and Q5_0 tiles of 8 columns gain
 * from it); Q8_0 and fewer columns do not, so they keep p16_dot8's chain
 * per column.  Same integers either way. */
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

/* acc[c] += d * y.d * (block b's dots with column c, started at the
 * column's -16 * sum(qs), m16): the tiles whose 16 rows' values are
 * stored + 16 (Q5_0, MXFP4) end each block so. */
ALWAYS_INLINE void p16_offset_block(const int nc, __m512 *acc, const __m512i *lo, const __m512i *hi, __m512 d,
                                    const uint8_t *a, size_t a_stride, int64_t b)
{
    __m512i isum[P16_COLS];
    for (int c = 0; c < nc; c++)
        isum[c] = _mm512_set1_epi32(((const struct sp_block_q8_p *)(a + (size_t)c * a_stride) + b)->m16);
    p16_dots(nc, isum, lo, hi, a + (size_t)b * sizeof(struct sp_block_q8_p), a_stride);
    for (int c = 0; c < nc; c++) {
        const struct sp_block_q8_p *y = (const struct sp_block_q8_p *)(a + (size_t)c * a_stride) + b;
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, _mm512_set1_ps(y->d)), acc[c]);
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
            p16_prefetch(nc, wg + (size_t)b * 320, P16_PF_BYTES, 320);
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
            p16_prefetch(nc, wg + (size_t)b * 544, P16_PF_BYTES, 544);
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
            p16_prefetch(nc, wg + (size_t)b * 352, P16_PF_BYTES, 352);
        const __m512i hb = _mm512_loadu_si512(wg + sp_p16_q5_0_hb(b));
        for (int j = 0; j < 4; j++) {
            __m512i v = _mm512_loadu_si512(wg + sp_p16_q5_0_qs(b) + 64 * j);
            __m512i hl = _mm512_and_si512(_mm512_slli_epi16(hb, 4 - j), b4);
            __m512i hh = _mm512_and_si512(_mm512_srli_epi16(hb, j), b4);
            lo[j] = _mm512_or_si512(_mm512_and_si512(v, m4), hl);
            hi[j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), hh);
        }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wg + sp_p16_q5_0_d(nb, b))));
        p16_offset_block(nc, acc, lo, hi, d, a, a_stride, b);
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, acc[c]);
}

/* The 16 rows' E8M0 exponents e as sp_e8m0_half's floats: (e - 1) << 23,
 * or the subnormals 2^-128 and 2^-129 for e = 1 and 0. */
ALWAYS_INLINE __m512 p16_e8m0_half(const uint8_t *e)
{
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)e));
    const __m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(v, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), v);
    const __mmask16 small = _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(norm, small, sub));
}

/* MXFP4: each nibble looks up its doubled value + 16 (vpshufb on the
 * 16-entry table in every 128-bit lane); the column's -16 * sum(qs) starts
 * the sum, as Q5_0's. */
ALWAYS_INLINE void mxfp4_p16_tile(int64_t nb, const uint8_t *wg, const uint8_t *a, size_t a_stride, float *s,
                                  size_t s_stride, const int nc, bool pf)
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)sp_mxfp4_u16));
    __m512 acc[P16_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i lo[4], hi[4];
        if (pf)
            p16_prefetch(nc, wg + (size_t)b * 272, P16_PF_BYTES, 272);
        for (int j = 0; j < 4; j++) {
            __m512i v = _mm512_loadu_si512(wg + sp_p16_mxfp4_qs(b) + 64 * j);
            lo[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
            hi[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        }
        const __m512 d = p16_e8m0_half(wg + sp_p16_mxfp4_e(b));
        p16_offset_block(nc, acc, lo, hi, d, a, a_stride, b);
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, acc[c]);
}

/* Q4_K (layout and arithmetic in quant_isa.h): scales and mins of the 16 rows
 * unpacked at once (the file kernels' q4k_scales_fast on vector lanes);
 * per sub-block an exact int dot, times its scale (vpmulld); the mins'
 * sum with vpdpwssd on (min j, min j+1) pairs of 16-bit lanes. */
ALWAYS_INLINE __m512i p16_byte(__m512i t, int i) /* byte i of each lane, as int32 */
{
    return _mm512_and_si512(_mm512_srli_epi32(t, 8 * i), _mm512_set1_epi32(0xFF));
}
ALWAYS_INLINE __m512i p16_pair(__m512i t, int i) /* bytes i, i+1 of each lane as two int16 */
{
    return _mm512_or_si512(p16_byte(t, i), _mm512_slli_epi32(p16_byte(t, i + 1), 16));
}

ALWAYS_INLINE void q4_K_p16_tile(int64_t nb, const uint8_t *wg, const uint8_t *a, size_t a_stride, float *s,
                                 size_t s_stride, const int nc, bool pf)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m6 = _mm512_set1_epi8(0x3F), m2 = _mm512_set1_epi8(3);
    __m512 acc[P16_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + (size_t)b * SP_P16_Q4_K_BYTES;
        const __m512i w0 = _mm512_loadu_si512(wb + SP_P16_Q4_K_SC), w1 = _mm512_loadu_si512(wb + SP_P16_Q4_K_SC + 64),
                      w2 = _mm512_loadu_si512(wb + SP_P16_Q4_K_SC + 128);
        const __m512i sc03 = _mm512_and_si512(w0, m6), mn03 = _mm512_and_si512(w1, m6);
        const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(w2, m4),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), m2), 4));
        const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), m4),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), m2), 4));
        __m512i isum[P16_COLS], msum[P16_COLS];
        for (int c = 0; c < nc; c++) {
            const struct sp_block_q8_K *y = (const struct sp_block_q8_K *)(a + (size_t)c * a_stride) + b;
            int bs[8];
            for (int j = 0; j < 8; j++) bs[j] = y->bsums[2 * j] + y->bsums[2 * j + 1];
            __m512i m = _mm512_setzero_si512();
            for (int j = 0; j < 8; j += 2)
                m = _mm512_dpwssd_epi32(m, p16_pair(j < 4 ? mn03 : mn47, j % 4),
                                        _mm512_set1_epi32((int32_t)((uint32_t)(uint16_t)bs[j] | (uint32_t)bs[j + 1] << 16)));
            msum[c] = m;
            isum[c] = _mm512_setzero_si512();
        }
        for (int p = 0; p < 4; p++) {
            __m512i lo[8], hi[8];
            if (pf) /* a quarter of the super-block at a time: paced, not a burst */
                p16_prefetch(nc, wb + p * (SP_P16_Q4_K_BYTES / 4), P16_PF_BYTES, SP_P16_Q4_K_BYTES / 4);
            for (int t = 0; t < 8; t++) {
                __m512i v = _mm512_loadu_si512(wb + (8 * p + t) * 64);
                lo[t] = _mm512_and_si512(v, m4);
                hi[t] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
            const __m512i sa = p16_byte(p < 2 ? sc03 : sc47, (2 * p) % 4), sb = p16_byte(p < 2 ? sc03 : sc47, (2 * p) % 4 + 1);
            for (int c = 0; c < nc; c++) {
                const int8_t *qs = ((const struct sp_block_q8_K *)(a + (size_t)c * a_stride) + b)->qs + 64 * p;
                __m512i da = _mm512_setzero_si512(), db = _mm512_setzero_si512();
                for (int t = 0; t < 8; t++) {
                    da = _mm512_dpbusd_epi32(da, lo[t], p16_bcast4(qs + 4 * t));
                    db = _mm512_dpbusd_epi32(db, hi[t], p16_bcast4(qs + 32 + 4 * t));
                }
                isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(da, sa), _mm512_mullo_epi32(db, sb)));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + SP_P16_Q4_K_D)));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + SP_P16_Q4_K_DMIN)));
        for (int c = 0; c < nc; c++) {
            const __m512 dy = _mm512_set1_ps(((const struct sp_block_q8_K *)(a + (size_t)c * a_stride) + b)->d);
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[c]), acc[c]);
            acc[c] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(msum[c]), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, acc[c]);
}

/* Q6_K: values q + 32 rebuilt from a low-nibble and a 2-bit vector; per
 * sub-block of 16 the dot starts at -32 * its activation sum (undoing the
 * +32) and is scaled by the signed scale. */
ALWAYS_INLINE void q6_K_p16_tile(int64_t nb, const uint8_t *wg, const uint8_t *a, size_t a_stride, float *s,
                                 size_t s_stride, const int nc, bool pf)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[P16_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + (size_t)b * SP_P16_Q6_K_BYTES;
        __m512i isum[P16_COLS];
        for (int c = 0; c < nc; c++) isum[c] = _mm512_setzero_si512();
        for (int g = 0; g < 4; g++) { /* sub-blocks g, 4+g, 8+g, 12+g: quads 4g..4g+3 of each 64 */
            __m512i u[4][4];             /* [i][x]: elements 64i + 16g + 4x .. +3 */
            if (pf)
                p16_prefetch(nc, wb + g * (SP_P16_Q6_K_BYTES / 4), SP_P16_Q6_K_BYTES, SP_P16_Q6_K_BYTES / 4);
            for (int x = 0; x < 4; x++) {
                const int w = 4 * g + x;
                __m512i la = _mm512_loadu_si512(wb + w * 64), lb = _mm512_loadu_si512(wb + (w + 16) * 64);
                __m512i h = _mm512_loadu_si512(wb + SP_P16_Q6_K_QH + w * 64);
                u[0][x] = _mm512_or_si512(_mm512_and_si512(la, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
                u[1][x] = _mm512_or_si512(_mm512_and_si512(lb, m4), _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
                u[2][x] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(la, 4), m4), _mm512_and_si512(h, m30));
                u[3][x] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lb, 4), m4),
                                          _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
            }
            __m512i sc[4];
            for (int i = 0; i < 4; i++)
                sc[i] = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(wb + SP_P16_Q6_K_SC + (4 * i + g) * 16)));
            for (int c = 0; c < nc; c++) {
                const struct sp_block_q8_K *y = (const struct sp_block_q8_K *)(a + (size_t)c * a_stride) + b;
                for (int i = 0; i < 4; i++) {
                    const int sb = 4 * i + g;
                    __m512i t = _mm512_set1_epi32(-32 * y->bsums[sb]);
                    for (int x = 0; x < 4; x++) t = _mm512_dpbusd_epi32(t, u[i][x], p16_bcast4(y->qs + 16 * sb + 4 * x));
                    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(t, sc[i]));
                }
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + SP_P16_Q6_K_D)));
        for (int c = 0; c < nc; c++) {
            const __m512 dy = _mm512_set1_ps(((const struct sp_block_q8_K *)(a + (size_t)c * a_stride) + b)->d);
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[c]), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, acc[c]);
}

/* Columns in L2-sized chunks; within one, each row group meets every column
 * in tiles of P16_COLS (its weights stay in L1 across the tiles). */
#define P16_GEMM(name, tile, QK)                                                                               \
    static void name(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,           \
                     const void *a, size_t a_stride, int nc)                                                  \
    {                                                                                                         \
        const int64_t nb = n / (QK);                                                                          \
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
P16_GEMM(q4_1_p16_gemm, q4_1_p16_tile, SP_QK)
P16_GEMM(q8_0_p16_gemm, q8_0_p16_tile, SP_QK)
P16_GEMM(q5_0_p16_gemm, q5_0_p16_tile, SP_QK)
P16_GEMM(mxfp4_p16_gemm, mxfp4_p16_tile, SP_QK)
P16_GEMM(q4_K_p16_gemm, q4_K_p16_tile, SP_QK_K)
P16_GEMM(q6_K_p16_gemm, q6_K_p16_tile, SP_QK_K)

/* F16_P16: G row groups (up to 4) x NC columns (up to 6) of F32
 * activations, 24 accumulators; per element one conversion per group and
 * one broadcast per column feed G x NC fused products.  Every output is
 * the oracle's single chain, so tiles and tails change no bit. */
#define F16P_GROUPS 4
#define F16P_COLS 6
ALWAYS_INLINE void f16_p16_tile(int64_t n, const uint8_t *w, size_t g_bytes, const float *a, size_t a_stride,
                                float *s, size_t s_stride, const int G, const int NC)
{
    __m512 acc[F16P_GROUPS][F16P_COLS];
    for (int g = 0; g < G; g++)
        for (int c = 0; c < NC; c++) acc[g][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        __m512 wv[F16P_GROUPS];
        for (int g = 0; g < G; g++)
            wv[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + (size_t)g * g_bytes + (size_t)k * 32)));
        for (int c = 0; c < NC; c++) {
            const __m512 av = _mm512_set1_ps(a[(size_t)c * a_stride + k]);
            for (int g = 0; g < G; g++) acc[g][c] = _mm512_fmadd_ps(wv[g], av, acc[g][c]);
        }
    }
    for (int g = 0; g < G; g++)
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(s + (size_t)c * s_stride + g * SP_P16_ROWS, acc[g][c]);
}

#define F16P_TILES(G)                                                                                           \
    static void f16_p16_tiles##G(int64_t n, const uint8_t *w, size_t g_bytes, const float *a, size_t a_stride,  \
                                 float *s, size_t s_stride, int nc)                                             \
    {                                                                                                           \
        switch (nc) {                                                                                           \
        case 6: f16_p16_tile(n, w, g_bytes, a, a_stride, s, s_stride, G, 6); break;                             \
        case 5: f16_p16_tile(n, w, g_bytes, a, a_stride, s, s_stride, G, 5); break;                             \
        case 4: f16_p16_tile(n, w, g_bytes, a, a_stride, s, s_stride, G, 4); break;                             \
        case 3: f16_p16_tile(n, w, g_bytes, a, a_stride, s, s_stride, G, 3); break;                             \
        case 2: f16_p16_tile(n, w, g_bytes, a, a_stride, s, s_stride, G, 2); break;                             \
        default: f16_p16_tile(n, w, g_bytes, a, a_stride, s, s_stride, G, 1); break;                            \
        }                                                                                                       \
    }
F16P_TILES(1)
F16P_TILES(2)
F16P_TILES(3)
F16P_TILES(4)

/* Row groups in blocks of F16P_GROUPS (their weights stay in L2 while they
 * meet every column); the columns in as few tiles as F16P_COLS allows,
 * of near-equal widths (13 columns: 5, 4, 4), so no tile is a thin tail. */
static void f16_p16_gemm(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr, const void *a,
                         size_t a_stride, int nc)
{
    static void (*const tiles[F16P_GROUPS + 1])(int64_t, const uint8_t *, size_t, const float *, size_t, float *,
                                                size_t, int) = {NULL, f16_p16_tiles1, f16_p16_tiles2,
                                                                f16_p16_tiles3, f16_p16_tiles4};
    const size_t g_bytes = SP_P16_ROWS * w_stride, as = a_stride / sizeof(float);
    const int groups = nr / SP_P16_ROWS, n_tiles = (nc + F16P_COLS - 1) / F16P_COLS;
    for (int g = 0; g < groups; g += F16P_GROUPS) {
        const int G = groups - g < F16P_GROUPS ? groups - g : F16P_GROUPS;
        for (int t = 0, c = 0; t < n_tiles; t++) {
            const int w_t = (nc - c) / (n_tiles - t);
            tiles[G](n, (const uint8_t *)w + (size_t)g * g_bytes, g_bytes, (const float *)a + (size_t)c * as, as,
                     s + (size_t)c * s_stride + (size_t)g * SP_P16_ROWS, s_stride, w_t);
            c += w_t;
        }
    }
}

/* sp_f16_store's AVX-512 row (16 values per conversion). */
void sp_f16_store_avx512(uint16_t *dst, size_t stride, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i h16 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (stride == 1) {
            _mm256_storeu_si256((__m256i *)(dst + i), h16);
            continue;
        }
        uint16_t h[16];
        _mm256_storeu_si256((__m256i *)h, h16);
        for (int k = 0; k < 16; k++)
            dst[(size_t)(i + k) * stride] = h[k];
    }
    if (i < n)
        sp_f16_store_scalar(dst + (size_t)i * stride, stride, src + i, n - i);
}

void sp_quant_register_avx512(struct sp_type_traits *table)
{
    register_avx512(table);
    table[SP_TYPE_Q4_1].packed = SP_TYPE_Q4_1_P16;
    table[SP_TYPE_Q4_1_P16].gemm = q4_1_p16_gemm;
    table[SP_TYPE_Q8_0].packed = SP_TYPE_Q8_0_P16;
    table[SP_TYPE_Q8_0_P16].gemm = q8_0_p16_gemm;
    table[SP_TYPE_Q5_0].packed = SP_TYPE_Q5_0_P16;
    table[SP_TYPE_Q5_0_P16].gemm = q5_0_p16_gemm;
    table[SP_TYPE_Q4_K].packed = SP_TYPE_Q4_K_P16;
    table[SP_TYPE_Q4_K_P16].gemm = q4_K_p16_gemm;
    table[SP_TYPE_Q6_K].packed = SP_TYPE_Q6_K_P16;
    table[SP_TYPE_Q6_K_P16].gemm = q6_K_p16_gemm;
    table[SP_TYPE_F16].packed = SP_TYPE_F16_P16;
    table[SP_TYPE_F16_P16].gemm = f16_p16_gemm;
    table[SP_TYPE_MXFP4].packed = SP_TYPE_MXFP4_P16;
    table[SP_TYPE_MXFP4_P16].gemm = mxfp4_p16_gemm;
}
#endif
