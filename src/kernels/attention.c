/* Causal (optionally sliding-window) grouped-query attention over the paged
 * KV cache: the work units and their scheduling, and the scalar row of the
 * kernel table (kernels_isa.h; the vector rows are vec.inc).
 *
 * Work units: a run of up to 16 consecutive positions of one sequence (a
 * prompt; or 16 tokens of a bidirectional encoder's input, which all see
 * its last position) is a block, one unit per query head, its 16 queries computed
 * side by side (attn_block, when the active row has one; units claimed
 * dynamically); any other token is a (token, KV head) group of query
 * heads, or a single (token, query head) when there are fewer groups than
 * threads, and a unit handles the heads of a group together so each K/V
 * row is streamed once per group (attn_group).  The cache is read through
 * a view (sp_kv_view: key tiles, value rows, runs), the only way the
 * kernels see it.  Every head's
 * arithmetic is the same on every path and every row: scores over
 * positions ascending (each q·k one sequential FMA chain over d), softmax
 * with sp_exp and its denominator in sp_attn_tree16's order, then V summed
 * over positions ascending — so a token's output does not depend on its
 * batch, chunking, the thread count or the ISA level.
 *
 * Numerics follow llama.cpp's non-flash CPU path: the query is rounded to
 * f16 before the dot with the f16 keys; softmax probabilities are rounded to
 * f16 before weighting the f16 values; scores, softmax and the V sum are f32.
 * A quantized cache (q8_0, q4_0: kv.h) changes only where a key or value
 * element comes from: its scale times its integer, exact in f32, then the
 * same chains in the same order; its rows are stored rotated, so the
 * f16-rounded query is rotated first and the value sum rotated back
 * (sp_kv_rotate, one scalar function for every row), on the block path as
 * on the group path, so every token's result is the group kernel's
 * whatever the batch. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/exp.h"
#include "kernels/kernels_isa.h"
#include "kernels/kernels.h"

typedef void (*sp_attn_group_fn)(const struct sp_attn_args *a, int t, int h0, int nh, float *scores, float *qf);

/* Softmax of n scores in place, sc[i] the score of position j0 + i:
 * p = f16(e^(s - mx) / sum), the sum in sp_attn_tree16's order, plus
 * e^(sink - mx) after it (sp_attn_sink: mx already takes the sink in). */
static void sp_attn_softmax(float *sc, int n, float mx, int j0, float sink)
{
    float S[16] = {0};
    for (int i = 0; i < n; i++) {
        sc[i] = sp_exp1(sc[i] - mx);
        S[(j0 + i) & 15] += sc[i];
    }
    float inv = 1.0f / (sp_attn_tree16(S) + sp_exp1(sink - mx));
    for (int i = 0; i < n; i++)
        sc[i] = (float)(_Float16)(sc[i] * inv);
}

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

/* sp_attn_dots for quantized keys (type t): key i at lane `lane` + i of
 * the tile, each value the exact d * q (sp_kv_qkey); the same chains. */
static void sp_attn_dots_q(const float *q, const uint8_t *tile, sp_cache_type t, int lane, int n, int D, float *out)
{
    for (int i = 0; i < n; i++) {
        float s = 0.0f;
        for (int d = 0; d < D; d++)
            s = fmaf(q[d], sp_kv_qkey(tile, t, lane + i, d), s);
        out[i] = s;
    }
}

/* sp_attn_axpy for a quantized value row (type t) */
static void sp_attn_axpy_q(float *out, const float *p, int nh, const uint8_t *v, sp_cache_type t, int D)
{
    for (int d = 0; d < D; d++) {
        const float x = sp_kv_qval(v, t, d);
        for (int h = 0; h < nh; h++)
            out[(size_t)h * D + d] = fmaf(p[h], x, out[(size_t)h * D + d]);
    }
}

/* out[h][0..D) += p[h] * v for the nh heads of a group (out rows D apart) */
static inline void sp_attn_axpy(float *out, const float *p, int nh, const uint16_t *v, int D)
{
    for (int d = 0; d < D; d++) {
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
void sp_attn_group_scalar(const struct sp_attn_args *a, int t, int h0, int nh, float *scores, float *qf)
{
    const int D = a->head_dim, hk = h0 / (a->n_head / a->n_head_kv);
    const struct sp_kv_view w = sp_kv_view(a->kv, a->seqs[t], a->layer);
    const int pos = a->pos[t];
    const int j0 = sp_attn_first_key(a, pos);
    const int n = pos - j0 + 1;
    float mx[SP_ATTN_GMAX], p[SP_ATTN_GMAX];
    for (int h = 0; h < nh; h++) {
        const float *q = a->q + (size_t)t * a->q_stride + (size_t)(h0 + h) * D;
        for (int d = 0; d < D; d++)
            qf[(size_t)h * D + d] = (float)(_Float16)q[d];
        if (w.kt != SP_CACHE_F16) /* the keys are stored rotated (kv.h) */
            sp_kv_rotate(qf + (size_t)h * D, (uint32_t)D, true);
        mx[h] = -INFINITY;
    }
    for (int j = j0; j <= pos;) {
        const uint32_t run = sp_kv_view_run(&w, (uint32_t)j, (uint32_t)(pos + 1 - j));
        /* the run in groups of up to 4 keys within key tiles: keys
         * [off, off + m) of the tile at kt */
        for (uint32_t r = 0; r < run;) {
            const int off = (int)((j + (int)r) % SP_KV_TILE);
            const int left = SP_KV_TILE - off < 4 ? SP_KV_TILE - off : 4;
            const int m = (int)(run - r) < left ? (int)(run - r) : left;
            const uint32_t jr = (uint32_t)(j + (int)r);
            float s4[SP_ATTN_GMAX * 4];
            for (int h = 0; h < nh; h++) {
                if (w.kt == SP_CACHE_F16)
                    sp_attn_dots(qf + (size_t)h * D, sp_kv_view_k(&w, jr, (uint32_t)hk), m, D, s4 + (size_t)h * 4);
                else
                    sp_attn_dots_q(qf + (size_t)h * D, sp_kv_view_ktile(&w, jr, (uint32_t)hk), w.kt, off, m, D,
                                   s4 + (size_t)h * 4);
            }
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
    if (a->softcap > 0.0f) /* monotonic: the capped maximum is the maximum of the capped */
        for (int h = 0; h < nh; h++) {
            sp_softcap(scores + (size_t)h * n, n, a->softcap);
            sp_softcap(&mx[h], 1, a->softcap);
        }
    for (int h = 0; h < nh; h++) {
        const float sink = sp_attn_sink(a, h0 + h);
        sp_attn_softmax(scores + (size_t)h * n, n, sp_attn_sink_max(mx[h], sink), j0, sink);
    }
    memset(qf, 0, (size_t)nh * D * sizeof *qf); /* reused as the output accumulator */
    uint16_t vbuf[SP_KV_TILE * SP_KV_VK_DIM_MAX]; /* v_in_k caches: a run's values */
    for (int j = j0; j <= pos;) {
        const uint32_t run = sp_kv_view_run(&w, (uint32_t)j, (uint32_t)(pos + 1 - j));
        uint32_t vr;
        const uint8_t *v = sp_kv_view_vrows(&w, (uint32_t)j, (uint32_t)hk, run, vbuf, &vr);
        for (uint32_t r = 0; r < run; r++) {
            for (int h = 0; h < nh; h++)
                p[h] = scores[(size_t)h * n + (j - j0) + r];
            if (w.vt == SP_CACHE_F16)
                sp_attn_axpy(qf, p, nh, (const uint16_t *)(const void *)(v + (size_t)r * vr), D);
            else
                sp_attn_axpy_q(qf, p, nh, v + (size_t)r * vr, w.vt, D);
        }
        j += (int)run;
    }
    for (int h = 0; h < nh; h++) {
        if (w.vt != SP_CACHE_F16) /* the values are stored rotated: rotate the sum back */
            sp_kv_rotate(qf + (size_t)h * D, (uint32_t)D, true);
        memcpy(a->out + (size_t)t * a->out_stride + (size_t)(h0 + h) * D, qf + (size_t)h * D,
               (size_t)D * sizeof *qf);
    }
}

/* Asks for the queries of block unit (t0, nq, h): they were written by
 * the matmul before, for all tokens, and have left the caches; a unit's
 * 16 rows of one head are 64 lines that cost more than its q·k of a
 * short context when loaded on demand (bench/bench_attention.c). */
static void sp_attn_block_prefetch(const struct sp_attn_args *a, int t0, int nq, int h)
{
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < a->head_dim; d += 16)
            __builtin_prefetch(a->q + (size_t)(t0 + i) * a->q_stride + (size_t)h * a->head_dim + d, 0, 3);
}

static void sp_attn_run(void *arg, int ith, int nth)
{
    const struct sp_attn_args *a = arg;
    const sp_attn_group_fn group_fn = sp_kernels_active()->attn_group;
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
                group_fn(a, t, h, h0 + group - h < SP_ATTN_GMAX ? h0 + group - h : SP_ATTN_GMAX, scores, qf);
        }
        return;
    }
    sp_pool_split((long)a->n_tok * H, 1, ith, nth, &lo, &hi);
    for (long i = lo; i < hi;) {
        int t = (int)(i / H), h = (int)(i % H);
        int end = (h / group + 1) * group; /* first head of the next group */
        long stop = (long)t * H + end < hi ? (long)t * H + end : hi;
        int nh = (int)(stop - i) < SP_ATTN_GMAX ? (int)(stop - i) : SP_ATTN_GMAX;
        group_fn(a, t, h, nh, scores, qf);
        i += nh;
    }
}

size_t sp_attention_scratch_floats(int n_ctx, int head_dim)
{
    /* one token: scores [16][n_ctx] and queries [16][D]; a prompt block:
     * scores [16][n_ctx + 15 rounded up to 16], queries, outputs and a
     * quantized tile or value rows widened to f32, each [16][D] */
    return (size_t)SP_ATTN_GMAX * ((size_t)n_ctx + 16 + 3 * (size_t)head_dim) + 64;
}

size_t sp_attention_plan_ints(int n_batch, int n_head)
{
    return (size_t)3 * n_batch * n_head + 2;
}

/* Runs of at least this many tokens of one sequence whose positions ascend
 * by 0 or 1 take the block path (a prompt being prefilled; a bidirectional
 * encoder's input, all at its last position); other tokens go one by one. */
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
    const struct sp_kernels_isa *k = sp_kernels_active();
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
            k->attn_block(a, t, c, pl->heads[u], scratch);
            continue;
        }
        int h0 = -1 - c;
        for (int h = h0; h < h0 + group; h += SP_ATTN_GMAX) {
            k->attn_group(a, t, h, h0 + group - h < SP_ATTN_GMAX ? h0 + group - h : SP_ATTN_GMAX, scratch,
                          scratch + (size_t)SP_ATTN_GMAX * a->max_pos);
        }
    }
}

/* Builds the work list in a->plan; false when the batch has no prompt run. */
static bool sp_attn_plan_build(const struct sp_attn_args *a, struct sp_attn_plan *pl)
{
    if (!a->plan || !sp_kernels_active()->attn_block || a->head_dim % 16 != 0 || a->head_dim > SP_ATTN_BLOCK_DMAX)
        return false;
    if (a->n_tok < 1)
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
               (unsigned)(a->pos[t + len] - a->pos[t + len - 1]) <= 1)
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

void sp_attention(struct sp_pool *pool, const struct sp_attn_args *a)
{
    struct sp_attn_plan pl;
    if (sp_attn_plan_build(a, &pl)) {
        sp_pool_run(pool, sp_attn_plan_run, &pl);
        return;
    }
    sp_pool_run(pool, sp_attn_run, (void *)a);
}
