/* Causal (optionally sliding-window) grouped-query attention over the paged
 * KV cache.
 *
 * Work unit: one (token, query head) pair; threads take contiguous ranges of
 * units, and within its range a thread handles the consecutive heads that
 * share a KV head together, so each K/V row is streamed once per group
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

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/attention.h"

/* Largest group handled at once (heads per KV head); larger groups split. */
#define SP_ATTN_GMAX 16

/* dot of f32 q (already f16-exact) with f16 k, D values, fixed order */
static inline float sp_attn_dot(const float *q, const uint16_t *k, int D)
{
    int d = 0;
    float s = 0.0f;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; d + 16 <= D; d += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + d))), acc);
    s = _mm512_reduce_add_ps(acc);
#endif
    for (; d < D; d++) {
        _Float16 h;
        memcpy(&h, k + d, sizeof h);
        s = fmaf(q[d], (float)h, s);
    }
    return s;
}

/* out[h][0..D) += p[h] * v for the nh heads of a group (out rows D apart) */
static inline void sp_attn_axpy(float *out, const float *p, int nh, const uint16_t *v, int D)
{
    int d = 0;
#if defined(__AVX512F__)
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
        for (uint32_t r = 0; r < run; r++) {
            const uint16_t *kr = k + (size_t)r * kvd + (size_t)hk * D;
            for (int h = 0; h < nh; h++) {
                float s = sp_attn_dot(qf + (size_t)h * D, kr, D) * a->scale;
                scores[(size_t)h * n + (j - j0) + r] = s;
                mx[h] = s > mx[h] ? s : mx[h];
            }
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
