/* Causal (optionally sliding-window) grouped-query attention over the paged
 * KV cache.  Each (token, head) pair is computed on its own, in one fixed
 * order: scores over positions ascending, softmax, then V summed ascending —
 * so a token's output does not depend on its batch or the thread count.
 * Numerics follow llama.cpp's CPU path: the query is rounded to f16 before the
 * dot with the f16 keys; scores, softmax and the V sum are f32. */
#include <math.h>
#include <string.h>

#include "kernels/attention.h"

struct sp_attn_job {
    const struct sp_attn_args *a;
};

static float sp_dot_f16(const _Float16 *x, const _Float16 *y, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += (float)x[i] * (float)y[i];
    return s;
}

static void sp_axpy_f16(float *y, float p, const _Float16 *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += p * (float)x[i];
}

static void sp_attn_run(void *arg, int ith, int nth)
{
    const struct sp_attn_args *a = arg;
    int D = a->head_dim, H = a->n_head, group = a->n_head / a->n_head_kv;
    float *scores = a->scratch + (size_t)ith * a->scratch_per_thread;
    _Float16 *qh = (_Float16 *)(scores + a->max_pos);
    long lo, hi;
    sp_pool_split((long)a->n_tok * H, 1, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        int t = (int)(i / H), h = (int)(i % H), hk = h / group;
        const struct sp_kv_seq *seq = a->seqs[t];
        int pos = a->pos[t];
        int j0 = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
        const float *q = a->q + (size_t)t * a->q_stride + (size_t)h * D;
        float *out = a->out + (size_t)t * a->out_stride + (size_t)h * D;
        for (int d = 0; d < D; d++)
            qh[d] = (_Float16)q[d];
        float mx = -INFINITY;
        for (int j = j0; j <= pos; j++) {
            const _Float16 *k = (const _Float16 *)sp_kv_k_at(a->kv, seq, a->layer, (uint32_t)j) + (size_t)hk * D;
            float s = sp_dot_f16(qh, k, D) * a->scale;
            scores[j - j0] = s;
            mx = s > mx ? s : mx;
        }
        float sum = 0.0f;
        for (int j = j0; j <= pos; j++) {
            float e = expf(scores[j - j0] - mx);
            scores[j - j0] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        memset(out, 0, (size_t)D * sizeof *out);
        for (int j = j0; j <= pos; j++) {
            const _Float16 *v = (const _Float16 *)sp_kv_v_at(a->kv, seq, a->layer, (uint32_t)j) + (size_t)hk * D;
            sp_axpy_f16(out, (float)(_Float16)(scores[j - j0] * inv), v, D);
        }
    }
}

void sp_attention(struct sp_pool *pool, const struct sp_attn_args *a)
{
    sp_pool_run(pool, sp_attn_run, (void *)a);
}
