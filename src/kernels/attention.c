/* Causal (optionally sliding-window) grouped-query attention over the paged
 * KV cache.
 *
 * Work unit: a (token, KV head) group of query heads, or one (token, query
 * head) pair when there are fewer groups than pool chunks; a chunk handles
 * the consecutive heads of its range that share a KV head together, so each K/V row is streamed once per group
 * instead of once per head (the cache is walked run by run with sp_kv_run,
 * the only way this file reads it).  Every head's arithmetic is the same
 * whatever its group: scores over positions ascending (each q·k a fixed-order
 * vector dot), softmax, then V summed over positions ascending — so a token's
 * output does not depend on its batch, chunking or the thread count.
 *
 * Numerics follow llama.cpp's non-flash CPU path: the query is rounded to
 * f16 before the dot with the f16 keys; softmax probabilities are rounded to
 * f16 before weighting the f16 values; scores, softmax and the V sum are f32. */
#include <math.h>
#include <string.h>

#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
#include <immintrin.h>
#endif

#include "kernels/attention.h"

/* Largest group handled at once (heads per KV head); larger groups split. */
#define SP_ATTN_GMAX 16

/* Dots of f32 q (already f16-exact) with n <= 4 f16 keys k[i] (stride
 * kstride), D values each.  Every dot is one sequential fused multiply-add
 * chain over d ascending: the order the goldens were matched with (a
 * vector-lane order moved a near-tie in gemma3's goldens).  The chains of
 * the n keys are interleaved so the FMA latency is hidden. */
static inline void sp_attn_dots(const float *q, const uint16_t *k, size_t kstride, int n, int D, float *out)
{
    const _Float16 *k0 = (const _Float16 *)k;
    if (n == 4) {
        const _Float16 *k1 = k0 + kstride, *k2 = k1 + kstride, *k3 = k2 + kstride;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (int d = 0; d < D; d++) {
            float qd = q[d];
            s0 = fmaf(qd, (float)k0[d], s0);
            s1 = fmaf(qd, (float)k1[d], s1);
            s2 = fmaf(qd, (float)k2[d], s2);
            s3 = fmaf(qd, (float)k3[d], s3);
        }
        out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
        return;
    }
    for (int i = 0; i < n; i++) {
        const _Float16 *ki = k0 + (size_t)i * kstride;
        float s = 0.0f;
        for (int d = 0; d < D; d++)
            s = fmaf(q[d], (float)ki[d], s);
        out[i] = s;
    }
}

#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
/* The same dots for 16 keys at once, one key per lane: each lane runs the
 * identical sequential FMA chain over d (bit-equal to sp_attn_dots).  A
 * dword gather fetches elements d, d+1 of all 16 keys, shared by the nh
 * heads (q rows D apart); out[h * out_stride + key].  D must be even. */
static inline void sp_attn_dots16(const float *q, int nh, int D, const uint16_t *k, size_t kstride, float *out,
                                  size_t out_stride)
{
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)kstride));
    for (int h0 = 0; h0 < nh; h0 += 4) { /* up to 4 heads share each gather */
        int m = nh - h0 < 4 ? nh - h0 : 4;
        const float *qh = q + (size_t)h0 * D;
        __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int d = 0; d < D; d += 2) {
            __m512i g = _mm512_i32gather_epi32(idx, (const void *)(k + d), 2);
            __m512 k0 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
            __m512 k1 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
            for (int h = 0; h < m; h++) {
                s[h] = _mm512_fmadd_ps(_mm512_set1_ps(qh[(size_t)h * D + d]), k0, s[h]);
                s[h] = _mm512_fmadd_ps(_mm512_set1_ps(qh[(size_t)h * D + d + 1]), k1, s[h]);
            }
        }
        for (int h = 0; h < m; h++)
            _mm512_storeu_ps(out + (size_t)(h0 + h) * out_stride, s[h]);
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
 * nh * (window length) floats, qf nh * D. */
static void sp_attn_group(const struct sp_attn_args *a, int t, int h0, int nh, float *scores, float *qf)
{
    const int D = a->head_dim, hk = h0 / (a->n_head / a->n_head_kv);
    const struct sp_kv_seq *seq = a->seqs[t];
    const uint32_t kvd = a->kv->kv_dim;
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
    for (int j = j0; j <= pos;) {
        const uint16_t *k, *v;
        uint32_t run = sp_kv_run(a->kv, seq, a->layer, (uint32_t)j, (uint32_t)(pos + 1 - j), &k, &v);
        for (uint32_t r = 0; r < run;) {
            int m = run - r < 4 ? (int)(run - r) : 4;
            if (run - r >= 16 && SP_ATTN_WIDE == 16 && D % 2 == 0)
                m = 16;
            const uint16_t *kr = k + (size_t)r * kvd + (size_t)hk * D;
            float s16[SP_ATTN_GMAX * 16];
#if SP_ATTN_WIDE == 16
            if (m == 16)
                sp_attn_dots16(qf, nh, D, kr, kvd, s16, 16);
            else
#endif
                for (int h = 0; h < nh; h++)
                    sp_attn_dots(qf + (size_t)h * D, kr, kvd, m, D, s16 + (size_t)h * 16);
            for (int h = 0; h < nh; h++) {
                for (int i = 0; i < m; i++) {
                    float s = s16[(size_t)h * 16 + i] * a->scale;
                    scores[(size_t)h * n + (j - j0) + r + i] = s;
                    mx[h] = s > mx[h] ? s : mx[h];
                }
            }
            r += (uint32_t)m;
        }
        j += (int)run;
    }
    for (int h = 0; h < nh; h++) {
        float *sc = scores + (size_t)h * n, sum = 0.0f;
        for (int i = 0; i < n; i++) {
            float e = expf(sc[i] - mx[h]);
            sc[i] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < n; i++)
            sc[i] = (float)(_Float16)(sc[i] * inv);
    }
    memset(qf, 0, (size_t)nh * D * sizeof *qf); /* reused as the output accumulator */
    for (int j = j0; j <= pos;) {
        const uint16_t *k, *v;
        uint32_t run = sp_kv_run(a->kv, seq, a->layer, (uint32_t)j, (uint32_t)(pos + 1 - j), &k, &v);
        for (uint32_t r = 0; r < run; r++) {
            for (int h = 0; h < nh; h++)
                p[h] = scores[(size_t)h * n + (j - j0) + r];
            sp_attn_axpy(qf, p, nh, v + (size_t)r * kvd + (size_t)hk * D, D);
        }
        j += (int)run;
    }
    for (int h = 0; h < nh; h++)
        memcpy(a->out + (size_t)t * a->out_stride + (size_t)(h0 + h) * D, qf + (size_t)h * D,
               (size_t)D * sizeof *qf);
}

static void sp_attn_run(void *arg, int ith, int nth)
{
    const struct sp_attn_args *a = arg;
    const int H = a->n_head, group = a->n_head / a->n_head_kv;
    float *scores = a->scratch + (size_t)ith * a->scratch_per_thread;
    float *qf = scores + (size_t)SP_ATTN_GMAX * a->max_pos;
    long lo, hi;
    /* Units are whole groups when there are enough to keep every chunk
     * busy (prefill, batched decode), else single heads (one-token decode
     * of a model with few KV heads).  Either way each head's result is the
     * same; only how K/V reads are shared changes. */
    if ((long)a->n_tok * a->n_head_kv >= nth) {
        sp_pool_split((long)a->n_tok * a->n_head_kv, 1, ith, nth, &lo, &hi);
        for (long u = lo; u < hi; u++) {
            int t = (int)(u / a->n_head_kv), h0 = (int)(u % a->n_head_kv) * group;
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
    return (size_t)SP_ATTN_GMAX * ((size_t)n_ctx + head_dim) + 64;
}

void sp_attention(struct sp_pool *pool, const struct sp_attn_args *a)
{
    sp_pool_run(pool, sp_attn_run, (void *)a);
}
