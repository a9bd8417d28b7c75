/* Causal (optionally sliding-window) grouped-query attention over the paged
 * KV cache.
 *
 * Work units: a run of up to 16 consecutive positions of one sequence (a
 * prompt) is a block, one unit per query head, its 16 queries computed
 * side by side (sp_attn_block; units claimed dynamically); any other token is a (token, KV head) group of
 * query heads, or a single (token, query head) when there are fewer groups
 * than threads, and a unit handles the heads of a group together so each
 * K/V row is streamed once per group (sp_attn_group).  The cache is read
 * through a view (sp_kv_view: key tiles, value rows, runs), the only way
 * this file sees it.  Every
 * head's arithmetic is the same on every path: scores over positions
 * ascending (each q·k one sequential FMA chain over d), softmax with
 * sp_exp and its denominator in sp_attn_tree16's order, then V summed over
 * positions ascending — so a token's output does not depend on its batch,
 * chunking or the thread count.
 *
 * Numerics follow llama.cpp's non-flash CPU path: the query is rounded to
 * f16 before the dot with the f16 keys; softmax probabilities are rounded to
 * f16 before weighting the f16 values; scores, softmax and the V sum are f32. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
#include <immintrin.h>
#endif

#include "kernels/attention.h"
#include "kernels/exp.h"
#include "kernels/kernels.h"


/* The softmax denominator's order, shared by every path: S[r] sums the
 * exponentials of the positions j with j % 16 == r, j ascending, and the
 * sixteen S[r] are added as a tree, halves first:
 * ((S[r] + S[r+8]) + (S[r+4] + S[r+12])) ... = sp_attn_tree16(S): sixteen
 * short chains, one vector add per 16 keys, instead of one sequential chain
 * whose add latency grows with the context. */
static inline float sp_attn_tree16(const float S[16])
{
    float t8[8], t4[4];
    for (int r = 0; r < 8; r++)
        t8[r] = S[r] + S[r + 8];
    for (int r = 0; r < 4; r++)
        t4[r] = t8[r] + t8[r + 4];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

/* Softmax of n scores in place, sc[i] the score of position j0 + i:
 * p = f16(e^(s - mx) / sum), the sum in sp_attn_tree16's order. */
static void sp_attn_softmax(float *sc, int n, float mx, int j0)
{
    int i = 0;
#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(sc + i, sp_exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + i), _mm512_set1_ps(mx))));
#endif
    for (; i < n; i++)
        sc[i] = sp_exp1(sc[i] - mx);
    float S[16] = {0};
#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
    /* vectors of 16 positions aligned to 16 (lane r: j % 16 == r); lanes
     * outside [j0, j0 + n) are masked */
    __m512 acc = _mm512_setzero_ps();
    for (int g = -(j0 & 15); g < n; g += 16) {
        __mmask16 in = 0xFFFF;
        if (g < 0)
            in &= (__mmask16)(0xFFFFu << -g);
        if (n - g < 16)
            in &= (__mmask16)((1u << (n - g)) - 1);
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(in, sc + g)); /* +0 for lanes outside: exact */
    }
    _mm512_storeu_ps(S, acc);
#else
    for (i = 0; i < n; i++)
        S[(j0 + i) & 15] += sc[i];
#endif
    float inv = 1.0f / sp_attn_tree16(S);
    i = 0;
#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
    for (; i + 16 <= n; i += 16) {
        __m512 p = _mm512_mul_ps(_mm512_loadu_ps(sc + i), _mm512_set1_ps(inv));
        p = _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); /* as the cast */
        _mm512_storeu_ps(sc + i, p);
    }
#endif
    for (; i < n; i++)
        sc[i] = (float)(_Float16)(sc[i] * inv);
}

/* Largest group handled at once (heads per KV head); larger groups split. */
#define SP_ATTN_GMAX 16

/* Dots of f32 q (already f16-exact) with n <= 4 f16 keys of one tile,
 * the first at k (key i at k + i, value d SP_KV_TILE apart), D values
 * each.  Every dot is one sequential fused multiply-add chain over d
 * ascending: the order the goldens were matched with (a vector-lane order
 * moved a near-tie in gemma3's goldens).  The chains of the n keys are
 * interleaved so the FMA latency is hidden. */
static inline void sp_attn_dots(const float *q, const uint16_t *k, int n, int D, float *out)
{
    const _Float16 *k0 = (const _Float16 *)k;
    if (n == 4) {
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (int d = 0; d < D; d++) {
            float qd = q[d];
            const _Float16 *kd = k0 + (size_t)d * SP_KV_TILE;
            s0 = fmaf(qd, (float)kd[0], s0);
            s1 = fmaf(qd, (float)kd[1], s1);
            s2 = fmaf(qd, (float)kd[2], s2);
            s3 = fmaf(qd, (float)kd[3], s3);
        }
        out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
        return;
    }
    for (int i = 0; i < n; i++) {
        float s = 0.0f;
        for (int d = 0; d < D; d++)
            s = fmaf(q[d], (float)k0[(size_t)d * SP_KV_TILE + i], s);
        out[i] = s;
    }
}

#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
/* m heads' scaled dots with the keys of lanes `in` of one tile (tile: its
 * first value row): per d one load gives value d of all 16 keys.  Lane i
 * goes to out[h * out_stride + i] (lanes in `in` only) and into the
 * running maximum vmx[h] (x > max ? x : max, as the scalar form).  One
 * tile per call: the loop is bound by the FP pipes, conversions included,
 * not by FMA latency, so more independent chains would not help. */
static inline __attribute__((always_inline)) void sp_attn_dots16_m(const float *qh, int D, const uint16_t *tile,
                                                                    __mmask16 in, __m512 scale, float *out,
                                                                    size_t out_stride, __m512 *vmx, const int m)
{
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int d = 0; d < D; d += 2) {
        __m512 k0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, tile + (size_t)d * SP_KV_TILE));
        __m512 k1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, tile + (size_t)(d + 1) * SP_KV_TILE));
        for (int h = 0; h < m; h++) {
            s[h] = _mm512_fmadd_ps(_mm512_set1_ps(qh[(size_t)h * D + d]), k0, s[h]);
            s[h] = _mm512_fmadd_ps(_mm512_set1_ps(qh[(size_t)h * D + d + 1]), k1, s[h]);
        }
    }
    for (int h = 0; h < m; h++) {
        __m512 x = _mm512_mul_ps(s[h], scale);
        _mm512_mask_storeu_ps(out + (size_t)h * out_stride, in, x);
        vmx[h] = _mm512_mask_max_ps(vmx[h], in, x, vmx[h]);
    }
}

/* The same dots as sp_attn_dots for the keys of lanes `in` of a tile at
 * once, one key per lane: each lane runs the identical sequential FMA chain
 * over d, so the results are bit-equal; the nh heads' q rows are D apart.
 * D % 2 == 0. */
static inline void sp_attn_dots16(const float *q, int nh, int D, const uint16_t *tile, __mmask16 in, __m512 scale,
                                  float *out, size_t out_stride, __m512 *vmx)
{
    for (int h0 = 0; h0 < nh; h0 += 4) { /* up to 4 heads share each load; accumulators in registers */
        const float *qh = q + (size_t)h0 * D;
        float *o = out + (size_t)h0 * out_stride;
        switch (nh - h0 < 4 ? nh - h0 : 4) {
        case 1: sp_attn_dots16_m(qh, D, tile, in, scale, o, out_stride, vmx + h0, 1); break;
        case 2: sp_attn_dots16_m(qh, D, tile, in, scale, o, out_stride, vmx + h0, 2); break;
        case 3: sp_attn_dots16_m(qh, D, tile, in, scale, o, out_stride, vmx + h0, 3); break;
        default: sp_attn_dots16_m(qh, D, tile, in, scale, o, out_stride, vmx + h0, 4); break;
        }
    }
}

/* out[h][0..D) += p[h * pstride + r] * v row r, for rows r < run ascending
 * (row stride rs), m heads: per element the order of sp_attn_axpy called
 * row by row, with the accumulators in registers for the whole run, CV
 * vectors of each head at a time (so each p is broadcast D / (16 CV)
 * times).  D % (16 CV) == 0. */
static inline __attribute__((always_inline)) void sp_attn_group_pv_m(float *out, const float *p, size_t pstride,
                                                                const uint16_t *v, uint32_t rs, int run, int D,
                                                                const int m, const int CV)
{
    for (int c = 0; c < D; c += 16 * CV) {
        __m512 acc[4][4];
        for (int h = 0; h < m; h++)
            for (int i = 0; i < CV; i++)
                acc[h][i] = _mm512_loadu_ps(out + (size_t)h * D + c + 16 * i);
        for (int r = 0; r < run; r++) {
            const uint16_t *vr = v + (size_t)r * rs + c;
            __m512 vv[4];
            for (int i = 0; i < CV; i++)
                vv[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * i)));
            for (int h = 0; h < m; h++) {
                __m512 ph = _mm512_set1_ps(p[(size_t)h * pstride + r]);
                for (int i = 0; i < CV; i++)
                    acc[h][i] = _mm512_fmadd_ps(ph, vv[i], acc[h][i]);
            }
        }
        for (int h = 0; h < m; h++)
            for (int i = 0; i < CV; i++)
                _mm512_storeu_ps(out + (size_t)h * D + c + 16 * i, acc[h][i]);
    }
}

/* D % 32 == 0 */
static inline void sp_attn_group_pv(float *out, const float *p, size_t pstride, int nh, const uint16_t *v, uint32_t rs,
                                    int run, int D)
{
    for (int h0 = 0; h0 < nh; h0 += 4) {
        float *o = out + (size_t)h0 * D;
        const float *ph = p + (size_t)h0 * pstride;
        const int m = nh - h0 < 4 ? nh - h0 : 4;
#define SP_ATTN_PV(M, CV) sp_attn_group_pv_m(o, ph, pstride, v, rs, run, D, M, CV)
        if (D % 64 == 0)
            switch (m) {
            case 1: SP_ATTN_PV(1, 4); break;
            case 2: SP_ATTN_PV(2, 4); break;
            case 3: SP_ATTN_PV(3, 4); break;
            default: SP_ATTN_PV(4, 4); break;
            }
        else
            switch (m) {
            case 1: SP_ATTN_PV(1, 2); break;
            case 2: SP_ATTN_PV(2, 2); break;
            case 3: SP_ATTN_PV(3, 2); break;
            default: SP_ATTN_PV(4, 2); break;
            }
#undef SP_ATTN_PV
    }
}
#define SP_ATTN_WIDE 16
#else
#define SP_ATTN_WIDE 4
#endif

/* out[h][0..D) += p[h] * v for the nh heads of a group (out rows D apart) */
static inline void sp_attn_axpy(float *out, const float *p, int nh, const uint16_t *v, int D)
{
    int d = 0;
#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
    for (; d + 16 <= D; d += 16) {
        __m512 vv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + d)));
        for (int h = 0; h < nh; h++) {
            float *o = out + (size_t)h * D + d;
            _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_set1_ps(p[h]), vv, _mm512_loadu_ps(o)));
        }
    }
#endif
    for (; d < D; d++) {
        _Float16 x;
        memcpy(&x, v + d, sizeof x);
        for (int h = 0; h < nh; h++)
            out[(size_t)h * D + d] = fmaf(p[h], (float)x, out[(size_t)h * D + d]);
    }
}

/* Heads h0 .. h0+nh-1 of token t, all sharing KV head hk.  scores holds
 * nh * (window length) floats, qf nh * D.  No software prefetch: a
 * sequence's blocks are consecutive in runs of up to an extent (src/kv), so
 * each head's keys and values are two streams the hardware prefetcher
 * follows, and prefetch instructions would only add to the work. */
static void sp_attn_group(const struct sp_attn_args *a, int t, int h0, int nh, float *scores, float *qf)
{
    const int D = a->head_dim, hk = h0 / (a->n_head / a->n_head_kv);
    const struct sp_kv_view w = sp_kv_view(a->kv, a->seqs[t], a->layer);
    const uint32_t rs = (uint32_t)D; /* row stride: a head's rows are contiguous */
    const int pos = a->pos[t];
    const int j0 = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    const int n = pos - j0 + 1;
    float mx[SP_ATTN_GMAX], p[SP_ATTN_GMAX];
    for (int h = 0; h < nh; h++) {
        const float *q = a->q + (size_t)t * a->q_stride + (size_t)(h0 + h) * D;
        for (int d = 0; d < D; d++)
            qf[(size_t)h * D + d] = (float)(_Float16)q[d];
        mx[h] = -INFINITY;
    }
#if SP_ATTN_WIDE == 16
    const __m512 scale = _mm512_set1_ps(a->scale);
    __m512 vmx[SP_ATTN_GMAX];
    for (int h = 0; h < nh; h++)
        vmx[h] = _mm512_set1_ps(-INFINITY);
    if (D % 2 == 0) { /* the keys a tile (16 positions) at a time */
        for (int j = j0; j <= pos;) {
            const int off = j % SP_KV_TILE, m = SP_KV_TILE - off < pos + 1 - j ? SP_KV_TILE - off : pos + 1 - j;
            const uint16_t *tile = sp_kv_view_k(&w, (uint32_t)j, (uint32_t)hk) - off;
            /* lane i: position j - off + i; the masked store writes lanes
             * in [off, off + m) only */
            sp_attn_dots16(qf, nh, D, tile, (__mmask16)(((1u << m) - 1) << off), scale, scores + (j - j0) - off,
                           (size_t)n, vmx);
            j += m;
        }
    } else
#endif
        for (int j = j0; j <= pos;) {
            const uint32_t run = sp_kv_view_run(&w, (uint32_t)j, (uint32_t)(pos + 1 - j));
            /* the run in groups of up to 4 keys within key tiles: keys
             * [off, off + m) of the tile at kt */
            for (uint32_t r = 0; r < run;) {
                const int off = (int)((j + (int)r) % SP_KV_TILE);
                const int left = SP_KV_TILE - off < 4 ? SP_KV_TILE - off : 4;
                const int m = (int)(run - r) < left ? (int)(run - r) : left;
                const uint16_t *kt = sp_kv_view_k(&w, (uint32_t)(j + (int)r), (uint32_t)hk);
                float s4[SP_ATTN_GMAX * 4];
                for (int h = 0; h < nh; h++)
                    sp_attn_dots(qf + (size_t)h * D, kt, m, D, s4 + (size_t)h * 4);
                for (int h = 0; h < nh; h++) {
                    for (int i = 0; i < m; i++) {
                        float x = s4[(size_t)h * 4 + i] * a->scale;
                        scores[(size_t)h * n + (j - j0) + r + i] = x;
                        mx[h] = x > mx[h] ? x : mx[h];
                    }
                }
                r += (uint32_t)m;
            }
            j += (int)run;
        }
#if SP_ATTN_WIDE == 16
    for (int h = 0; h < nh; h++) {
        float x = _mm512_reduce_max_ps(vmx[h]); /* max is exact in any order */
        mx[h] = x > mx[h] ? x : mx[h];
    }
#endif
    if (a->softcap > 0.0f) /* monotonic: the capped maximum is the maximum of the capped */
        for (int h = 0; h < nh; h++) {
            sp_softcap(scores + (size_t)h * n, n, a->softcap);
            sp_softcap(&mx[h], 1, a->softcap);
        }
    for (int h = 0; h < nh; h++)
        sp_attn_softmax(scores + (size_t)h * n, n, mx[h], j0);
    memset(qf, 0, (size_t)nh * D * sizeof *qf); /* reused as the output accumulator */
    for (int j = j0; j <= pos;) {
        const uint32_t run = sp_kv_view_run(&w, (uint32_t)j, (uint32_t)(pos + 1 - j));
        const uint16_t *v = sp_kv_view_v(&w, (uint32_t)j, (uint32_t)hk);
#if SP_ATTN_WIDE == 16
        if (D % 32 == 0) {
            sp_attn_group_pv(qf, scores + (j - j0), (size_t)n, nh, v, rs, (int)run, D);
            j += (int)run;
            continue;
        }
#endif
        for (uint32_t r = 0; r < run; r++) {
            for (int h = 0; h < nh; h++)
                p[h] = scores[(size_t)h * n + (j - j0) + r];
            sp_attn_axpy(qf, p, nh, v + (size_t)r * rs, D);
        }
        j += (int)run;
    }
    for (int h = 0; h < nh; h++)
        memcpy(a->out + (size_t)t * a->out_stride + (size_t)(h0 + h) * D, qf + (size_t)h * D,
               (size_t)D * sizeof *qf);
}

#if SP_ATTN_WIDE == 16
/* Prefill: head h of nq <= 16 queries t0.. of one sequence at consecutive
 * positions, one query per lane.  Per (query, key) the arithmetic is
 * sp_attn_group's: the q·k chain over d ascending, the same scaling,
 * softmax (sp_exp, sums over positions ascending) and V sum, so a
 * token's output is the same whichever path serves it.  q·k takes a key
 * tile (16 positions, one per lane) at a time with the 16 queries' chains
 * side by side, so each f16 key vector is widened once for the block and
 * the queries are broadcast; softmax runs per query as on the token path;
 * the V sum shares each widened value vector among 4 queries.
 * Needs D % 16 == 0 and D <= SP_ATTN_BLOCK_DMAX. */
#define SP_ATTN_BLOCK_DMAX 256

/* o[i][c0..c0+16*CN) += p[i * ps + x] * v[x][c0..] for queries i < QN and
 * x in [0, m) ascending, v[x] the f16 row vh + x * rs: per output element
 * the order of one query's sequential sum over its keys.  Keys outside a
 * query's range (past its position, before its window) have probability
 * exactly 0, and an FMA with p = 0 leaves the (never negative-zero) sum
 * unchanged, so summing the whole tile for every query changes no bit and
 * lets QN queries share each value load (QN x CN accumulators in
 * registers).  This needs finite
 * values: an f16 overflow (|v| > 65504) stored as inf would make 0 * inf
 * a NaN in queries that do not see that key (llama.cpp's masked matmul
 * does the same). */
static inline __attribute__((always_inline)) void sp_attn_block_pv(float *o, const float *p, size_t ps,
                                                                   const uint16_t *vh, uint32_t rs, int m, const int D,
                                                                   int c0, const int QN, const int CN)
{
    __m512 acc[4][4];
    for (int i = 0; i < QN; i++)
        for (int c = 0; c < CN; c++)
            acc[i][c] = _mm512_loadu_ps(o + (size_t)i * D + c0 + c * 16);
    for (int x = 0; x < m; x++) {
        __m512 v[4];
        for (int c = 0; c < CN; c++)
            v[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vh + (size_t)x * rs + c0 + c * 16)));
        for (int i = 0; i < QN; i++) {
            __m512 pv = _mm512_set1_ps(p[(size_t)i * ps + x]);
            for (int c = 0; c < CN; c++)
                acc[i][c] = _mm512_fmadd_ps(pv, v[c], acc[i][c]);
        }
    }
    for (int i = 0; i < QN; i++)
        for (int c = 0; c < CN; c++)
            _mm512_storeu_ps(o + (size_t)i * D + c0 + c * 16, acc[i][c]);
}

/* Lanes lo..hi of a 16-lane mask (clipped to 0..15; empty when hi < lo). */
static inline __mmask16 sp_attn_lanes(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 15 ? 15 : hi;
    return hi < lo ? 0 : (__mmask16)((0xFFFFu >> (15 - hi + lo)) << lo);
}

/* Asks for the queries of block unit (t0, nq, h): they were written by
 * the matmul before, for all tokens, and have left the caches; a unit's
 * 16 rows of one head are 64 lines that cost more than its q·k of a
 * short context when loaded on demand (bench/attention.c). */
static void sp_attn_block_prefetch(const struct sp_attn_args *a, int t0, int nq, int h)
{
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < a->head_dim; d += 16)
            _mm_prefetch((const char *)(a->q + (size_t)(t0 + i) * a->q_stride + (size_t)h * a->head_dim + d),
                         _MM_HINT_T0);
}

static void sp_attn_block(const struct sp_attn_args *a, int t0, int nq, int h, float *scratch)
{
    const int D = a->head_dim, hk = h / (a->n_head / a->n_head_kv);
    const struct sp_kv_view w = sp_kv_view(a->kv, a->seqs[t0], a->layer);
    const uint32_t rs = (uint32_t)D; /* row stride: a head's rows are contiguous */
    const int p0 = a->pos[t0], plast = p0 + nq - 1;
    int j0[16];
    for (int i = 0; i < nq; i++) {
        int p = p0 + i;
        j0[i] = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
    }
    const int jlo = j0[0], jb = jlo & ~(SP_KV_TILE - 1);
    const size_t L = (size_t)((plast + 1 - jb + 15) & ~15); /* score row length, from position jb */
    float *sct = scratch;                              /* [16][L] scores, then probabilities */
    float *qt = sct + 16 * L;                          /* [D/16][16][16] queries, f16-rounded (zero past nq) */
    float *o = qt + (size_t)16 * D;                    /* [16][D] outputs */
    for (int i = 0; i < 16; i++) { /* qt: for each 16 values c.. of d, [query][16] */
        const float *q = a->q + (size_t)(t0 + i) * a->q_stride + (size_t)h * D;
        for (int c = 0; c < D; c += 16)
            _mm512_storeu_ps(qt + (size_t)c * 16 + i * 16,
                             i < nq ? _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(q + c),
                                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
                                    : _mm512_setzero_ps());
    }
    /* q·k a key tile at a time, one key per lane, the 16 queries' chains
     * side by side (each the sequential FMA chain over d of sp_attn_dots) */
    const __m512 scale = _mm512_set1_ps(a->scale);
    __m512 vmx[16];
    for (int i = 0; i < 16; i++)
        vmx[i] = _mm512_set1_ps(-INFINITY);
    for (int jt = jb; jt <= plast; jt += SP_KV_TILE) {
        const int js = jt > jlo ? jt : jlo; /* first position of the tile read */
        const uint16_t *tile = sp_kv_view_k(&w, (uint32_t)js, (uint32_t)hk) - (js - jt);
        const __mmask16 in = sp_attn_lanes(js - jt, plast - jt);
        __m512 s[16];
        for (int i = 0; i < 16; i++)
            s[i] = _mm512_setzero_ps();
        for (int c = 0; c < D; c += 16) {
            const float *qc = qt + (size_t)c * 16;
            const uint16_t *kc = tile + (size_t)c * SP_KV_TILE;
#pragma GCC unroll 16
            for (int e = 0; e < 16; e++) {
                __m512 k = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, kc + e * SP_KV_TILE));
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    s[i] = _mm512_fmadd_ps(_mm512_set1_ps(qc[i * 16 + e]), k, s[i]);
            }
        }
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            __m512 x = _mm512_mul_ps(s[i], scale);
            _mm512_storeu_ps(sct + (size_t)i * L + (jt - jb), x);
            vmx[i] = _mm512_mask_max_ps(vmx[i], i < nq ? sp_attn_lanes(j0[i] - jt, p0 + i - jt) : 0, x, vmx[i]);
        }
    }
    /* each query's softmax over its own keys with sp_attn_softmax's
     * arithmetic and order (rows start on a key tile, so lane r of each
     * vector is the sum S[j % 16 = r]); its other keys within the tiles
     * covering [jlo, plast] get probability 0 */
    for (int i = 0; i < nq; i++) {
        float *row = sct + (size_t)i * L;
        float mxs = _mm512_reduce_max_ps(vmx[i]);
        if (a->softcap > 0.0f) { /* as sp_attn_group */
            sp_softcap(row, (int64_t)L, a->softcap);
            sp_softcap(&mxs, 1, a->softcap);
        }
        const __m512 mx = _mm512_set1_ps(mxs);
        __m512 acc = _mm512_setzero_ps();
        for (int jt = jb; jt <= plast; jt += 16) {
            const __mmask16 in = sp_attn_lanes(j0[i] - jt, p0 + i - jt);
            __m512 e = _mm512_maskz_mov_ps(in, sp_exp16(_mm512_sub_ps(_mm512_loadu_ps(row + (jt - jb)), mx)));
            _mm512_storeu_ps(row + (jt - jb), e);
            acc = _mm512_add_ps(acc, e); /* +0 for lanes outside: exact */
        }
        float S[16];
        _mm512_storeu_ps(S, acc);
        const __m512 inv = _mm512_set1_ps(1.0f / sp_attn_tree16(S));
        for (int jt = jb; jt <= plast; jt += 16) {
            __m512 pr = _mm512_mul_ps(_mm512_loadu_ps(row + (jt - jb)), inv);
            _mm512_storeu_ps(row + (jt - jb),
                             _mm512_cvtph_ps(_mm512_cvtps_ph(pr, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        }
    }
    memset(o, 0, (size_t)16 * D * sizeof *o);
    for (int j = jlo; j <= plast;) {
        const uint32_t run = sp_kv_view_run(&w, (uint32_t)j, (uint32_t)(plast + 1 - j));
        const uint16_t *v = sp_kv_view_v(&w, (uint32_t)j, (uint32_t)hk);
        for (uint32_t r = 0; r < run; r += 16) { /* 16 rows at a time: they stay in L1 for all queries */
            const int m = run - r < 16 ? (int)(run - r) : 16;
            const uint16_t *vr = v + (size_t)r * rs;
            const float *pb = sct + (j + (int)r - jb); /* probabilities of these rows' keys */
            for (int i = 0; i < nq; i += 4) {
                const int qn = nq - i < 4 ? nq - i : 4;
                const float *pi = pb + (size_t)i * L;
                float *oi = o + (size_t)i * D;
                for (int c0 = 0; c0 < D; c0 += 64) {
                    const int cn = (D - c0) / 16 < 4 ? (D - c0) / 16 : 4;
                    if (qn == 4 && cn == 4) /* the common case unrolled */
                        sp_attn_block_pv(oi, pi, L, vr, rs, m, D, c0, 4, 4);
                    else
                        for (int q = 0; q < qn; q++)
                            for (int c = 0; c < cn; c++)
                                sp_attn_block_pv(oi + (size_t)q * D, pi + (size_t)q * L, L, vr, rs, m, D,
                                                 c0 + 16 * c, 1, 1);
                }
            }
        }
        j += (int)run;
    }
    for (int i = 0; i < nq; i++)
        memcpy(a->out + (size_t)(t0 + i) * a->out_stride + (size_t)h * D, o + (size_t)i * D, (size_t)D * sizeof *o);
}
#endif

static void sp_attn_run(void *arg, int ith, int nth)
{
    const struct sp_attn_args *a = arg;
    const int H = a->n_head, group = a->n_head / a->n_head_kv;
    float *scores = a->scratch + (size_t)ith * a->scratch_per_thread;
    float *qf = scores + (size_t)SP_ATTN_GMAX * a->max_pos;
    long lo, hi;
    /* Units are whole groups when they divide evenly among the chunks (one
     * per thread; batched decode of an even number of SmolLM2 tokens),
     * else each chunk takes one run of heads, a group split between two
     * chunks being read by both, so the threads' shares stay even: one-token
     * decode of Gemma 3 (one KV head, read twice, not once per query head)
     * or of SmolLM2 (3 groups on 2 threads: 5 and 4 heads, not 6 and 3).
     * Either way each head's result is the same; only how K/V reads are
     * shared changes. */
    if ((long)a->n_tok * a->n_head_kv % nth == 0) {
        sp_pool_split((long)a->n_tok * a->n_head_kv, 1, ith, nth, &lo, &hi);
        for (long u = lo; u < hi; u++) {
            int t = (int)(u / a->n_head_kv), hk = (int)(u % a->n_head_kv), h0 = hk * group;
            for (int h = h0; h < h0 + group; h += SP_ATTN_GMAX)
                sp_attn_group(a, t, h, h0 + group - h < SP_ATTN_GMAX ? h0 + group - h : SP_ATTN_GMAX, scores, qf);
        }
        return;
    }
    sp_pool_split((long)a->n_tok * H, 1, ith, nth, &lo, &hi);
    for (long i = lo; i < hi;) {
        int t = (int)(i / H), h = (int)(i % H);
        int end = (h / group + 1) * group; /* first head of the next group */
        long stop = (long)t * H + end < hi ? (long)t * H + end : hi;
        int nh = (int)(stop - i) < SP_ATTN_GMAX ? (int)(stop - i) : SP_ATTN_GMAX;
        sp_attn_group(a, t, h, nh, scores, qf);
        i += nh;
    }
}

size_t sp_attention_scratch_floats(int n_ctx, int head_dim)
{
    /* one token: scores [16][n_ctx] and queries [16][D]; a prompt block:
     * scores [16][n_ctx + 15 rounded up to 16], queries and outputs [16][D] */
    return (size_t)SP_ATTN_GMAX * ((size_t)n_ctx + 16 + 2 * (size_t)head_dim) + 64;
}

size_t sp_attention_plan_ints(int n_batch, int n_head)
{
    return (size_t)3 * n_batch * n_head + 2;
}

#if SP_ATTN_WIDE == 16
/* Runs of at least this many consecutive positions of one sequence take the
 * block path (a prompt being prefilled); other tokens go one by one. */
#define SP_ATTN_BLOCK_MIN 4

/* The work list of a batch with prompt runs: plan[2u], plan[2u+1] =
 * (first token, query count) for a block unit of head h = the unit's head,
 * or (token, -1 - first head) for a single token's group of heads. */
struct sp_attn_plan {
    const struct sp_attn_args *a;
    int32_t *units; /* pairs */
    int32_t *heads; /* head of each block unit, else -1 */
    int n;
    _Atomic int left; /* units not yet claimed: the next claim takes unit left - 1 */
};

static void sp_attn_plan_run(void *arg, int ith, int nth)
{
    struct sp_attn_plan *pl = arg;
    const struct sp_attn_args *a = pl->a;
    float *scratch = a->scratch + (size_t)ith * a->scratch_per_thread;
    const int group = a->n_head / a->n_head_kv;
    /* claimed one at a time from the last: a prompt's later blocks cost
     * more, so the cheap ones are left for the end, and a thread the
     * machine slows down takes fewer instead of holding the others up */
    for (;;) {
        const int u = atomic_fetch_sub_explicit(&pl->left, 1, memory_order_relaxed) - 1;
        if (u < 0)
            break;
        int t = pl->units[2 * u], c = pl->units[2 * u + 1];
        /* the queries of the unit this thread likely takes next (the
         * threads alternate), during this one */
        if (u - nth >= 0 && pl->units[2 * (u - nth) + 1] > 0)
            sp_attn_block_prefetch(a, pl->units[2 * (u - nth)], pl->units[2 * (u - nth) + 1], pl->heads[u - nth]);
        if (c > 0) {
            sp_attn_block(a, t, c, pl->heads[u], scratch);
            continue;
        }
        int h0 = -1 - c;
        for (int h = h0; h < h0 + group; h += SP_ATTN_GMAX) {
            sp_attn_group(a, t, h, h0 + group - h < SP_ATTN_GMAX ? h0 + group - h : SP_ATTN_GMAX, scratch,
                          scratch + (size_t)SP_ATTN_GMAX * a->max_pos);
        }
    }
}

/* Builds the work list in a->plan; false when the batch has no prompt run. */
static bool sp_attn_plan_build(const struct sp_attn_args *a, struct sp_attn_plan *pl)
{
    if (!a->plan || a->head_dim % 16 != 0 || a->head_dim > SP_ATTN_BLOCK_DMAX)
        return false;
    int n_blocks = 0, n = 0;
    /* units and heads share the plan: pairs first, then one int per unit */
    size_t cap = (size_t)a->n_tok * a->n_head;
    pl->a = a;
    pl->units = a->plan;
    pl->heads = a->plan + 2 * cap;
    for (int t = 0; t < a->n_tok;) {
        int len = 1;
        while (len < 16 && t + len < a->n_tok && a->seqs[t + len] == a->seqs[t] &&
               a->pos[t + len] == a->pos[t] + len)
            len++;
        if (len >= SP_ATTN_BLOCK_MIN) {
            for (int h = 0; h < a->n_head; h++, n++) {
                pl->units[2 * n] = t, pl->units[2 * n + 1] = len;
                pl->heads[n] = h;
            }
            n_blocks++;
            t += len;
            continue;
        }
        for (int g = 0; g < a->n_head_kv; g++, n++) {
            pl->units[2 * n] = t, pl->units[2 * n + 1] = -1 - g * (a->n_head / a->n_head_kv);
            pl->heads[n] = -1;
        }
        t++;
    }
    pl->n = n;
    atomic_init(&pl->left, n);
    return n_blocks > 0;
}
#endif

void sp_attention(struct sp_pool *pool, const struct sp_attn_args *a)
{
#if SP_ATTN_WIDE == 16
    struct sp_attn_plan pl;
    if (sp_attn_plan_build(a, &pl)) {
        sp_pool_run(pool, sp_attn_plan_run, &pl);
        return;
    }
#endif
    sp_pool_run(pool, sp_attn_run, (void *)a);
}
