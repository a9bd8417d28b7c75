#ifndef SP_KERNELS_ATTENTION_H
#define SP_KERNELS_ATTENTION_H

#include "core/pool.h"
#include "kv/kv.h"

struct sp_attn_args {
    const struct sp_kv *kv;
    uint32_t layer;
    int n_tok;
    const float *q;                    /* [n_tok][n_head * head_dim], roped */
    size_t q_stride;
    const struct sp_kv_seq *const *seqs; /* [n_tok] the sequence of each token */
    const int32_t *pos;                /* [n_tok] position of each token */
    int n_head, n_head_kv, head_dim;
    float scale;                       /* applied to q·k */
    float softcap;                     /* > 0: scores become softcap * tanh(score / softcap) */
    int window;                        /* > 0: keys with pos - j < window only (chunked: j / window ==
                                          pos / window: the query's chunk) */
    bool chunked;                      /* the window's rule (sp_attn_first_key) */
    const float *sinks;                /* [n_head] or NULL: each head's learned logit, in the softmax's
                                          maximum and denominator but given no value (gpt-oss) */
    float *out;                        /* [n_tok][n_head * head_dim] */
    size_t out_stride;
    float *scratch;                    /* [pool chunks][scratch_per_thread] */
    size_t scratch_per_thread;         /* >= sp_attention_scratch_floats(n_ctx, head_dim) */
    int max_pos;                       /* largest pos + 1 in the batch (bound) */
    int32_t *plan;                     /* >= sp_attention_plan_ints(n_tok, n_head) ints of work-list
                                          scratch; NULL: every token takes the one-by-one path */
};

/* The first key position a query at pos sees, by the window's rule:
 * the last `window` positions (llama.cpp's standard sliding window) or the
 * query's chunk of `window` positions (its chunked one, Llama 4). */
static inline int sp_attn_first_sliding(int pos, int window)
{
    return pos - window + 1 > 0 ? pos - window + 1 : 0;
}

static inline int sp_attn_first_chunked(int pos, int window)
{
    return pos / window * window;
}

static inline int sp_attn_first_key(const struct sp_attn_args *a, int pos)
{
    static int (*const rules[2])(int, int) = {sp_attn_first_sliding, sp_attn_first_chunked};
    return a->window > 0 ? rules[a->chunked](pos, a->window) : 0;
}

/* Floats of per-thread scratch for contexts up to n_ctx positions. */
size_t sp_attention_scratch_floats(int n_ctx, int head_dim);

/* Ints of work-list scratch for batches up to n_batch tokens. */
size_t sp_attention_plan_ints(int n_batch, int n_head);

/* K/V of every token must already be written to the cache. */
void sp_attention(struct sp_pool *pool, const struct sp_attn_args *a);

#endif
