/* The stage interface of the sampler chain, inside the sampler room.
 *
 * A sampler (sampler.c) is a list of stages run in order over one
 * candidate set (struct sp_cands), then one draw.  Each stage is an
 * instance (struct sp_sampler_stage: its operations, its state and its
 * setting) of an interface in the spirit of llama.cpp's llama_sampler_i:
 *   apply   reshapes the candidate set (filters, rescales, reorders);
 *   accept  sees the token the sequence drew (NULL: keeps no history);
 *   reset   forgets that history (the sequence starts over);
 *   clone   copies the instance for another sequence (NULL: the state is
 *           NULL and copying the instance is enough);
 *   free    frees the state (NULL: none).
 * State and scratch are allocated when the instance is made, never per
 * token.
 *
 * The built-in stages (sampler_stages.c) come from a table of
 * constructors indexed by sp_stage_point, in chain order; a caller's
 * stages (sp_stage, include/spindle.h) are wrapped by sampler_user.c.  The
 * ordering helpers (sampler_order.c) and explain's recording
 * (sampler_explain.c) are shared by all of them. */
#ifndef SP_SAMPLER_STAGE_H
#define SP_SAMPLER_STAGE_H

#include <float.h>
#include <math.h>

#include "sampler/sampler.h"

#define SP_SAMPLER_HEAP_MAX 1024     /* largest k selected with a heap */
#define SP_SAMPLER_EXPLAIN_TOP (SP_EXPLAIN_ROWS / 2) /* rows per source in the explain table */

struct sp_sampler_heap_entry {
    struct sp_candidate c;
    size_t idx;   /* where c was found */
};

/* The candidate set of one run of the chain (one row of logits) and the
 * inputs of that call.  Invariants between stages:
 *   cand[0..n) are the survivors; cand[0..sorted) are the best `sorted` of
 *   them in the candidate order (sp_sampler_better), the rest unordered;
 *   identity: n == n_vocab and cand[i].id == i (nothing filtered or moved
 *   yet), which the logit bias, the penalties and the mask's fast path need;
 *   have_p: cand.p holds exp((logit - max) / T) for the survivors, z their
 *   sum (from the temperature stage on). */
struct sp_cands {
    struct sp_candidate *cand;           /* [n_vocab] */
    struct sp_sampler_heap_entry *heap;  /* [SP_SAMPLER_HEAP_MAX] */
    sp_token_logit *user_buf;            /* [n_vocab] when the chain has stages of one's own */
    uint64_t *user_seen;                 /* [(n_vocab + 63) / 64], all zero between calls */
    uint32_t n_vocab;
    float temperature;                   /* the request's */
    size_t n, sorted;
    double z;
    bool identity, have_p;
    /* this call's inputs */
    const sp_token *hist;
    size_t n_hist;
    const uint64_t *mask;                /* allowed tokens, or NULL */
    struct sp_token_logprobs *lp;        /* NULL: no logprobs */
    double *logz;                        /* with lp: the log-partition the logprobs use */
    struct sp_sampler_explain *ex;       /* NULL on the hot path */
};

struct sp_sampler_stage;

struct sp_sampler_stage_ops {
    sp_status (*apply)(struct sp_sampler_stage *st, struct sp_cands *c);
    void (*accept)(struct sp_sampler_stage *st, sp_token t);
    void (*reset)(struct sp_sampler_stage *st);
    sp_status (*clone)(const struct sp_sampler_stage *st, struct sp_sampler_stage *out);
    void (*free)(struct sp_sampler_stage *st);
};

struct sp_sampler_stage {
    const struct sp_sampler_stage_ops *ops;
    void *state;          /* the instance's own, or NULL */
    /* explain's column after the stage (NULL: none; the chain's first
     * columns are recorded by the grammar and logprobs stages themselves)
     * and the setting shown in its head (NAN: none) */
    const char *name;
    float param;
    int32_t k;            /* an integer setting (top-k, logprobs) */
};

/* ---- the stages (sampler_stages.c, sampler_user.c) ---- */

/* Makes the built-in stage at `at` for p into *out, or sets *made false
 * when p leaves it out (the chain is built point by point). */
sp_status sp_sampler_stage_builtin(sp_stage_point at, const struct sp_sampler_params *p, uint32_t n_vocab,
                                   struct sp_sampler_stage *out, bool *made);

/* Checks def's name and apply (SP_ERR_ARG naming stages[idx]; its point is
 * the chain builder's to check) and wraps it, with a copy of its state
 * made by def->clone. */
sp_status sp_sampler_stage_user(struct sp_sampler_stage *out, const sp_stage *def, size_t idx);

/* Fills the set from one row of logits: ids in order, logits clamped. */
void sp_cands_load(struct sp_cands *c, const float *logits);

/* The temperature stage's work: p = exp((logit - max) / T), z their sum. */
void sp_cands_softmax(struct sp_cands *c);

/* ---- ordering (sampler_order.c) ---- */

static inline float sp_sampler_clamp(float x)
{
    if (isnan(x))
        return -INFINITY;
    if (x > FLT_MAX)
        return FLT_MAX;
    return x;
}

/* The candidate order: higher logit first, then lower id.  Total, because
 * ids are distinct and logits are never NaN here. */
static inline int sp_sampler_better(const struct sp_candidate *a, const struct sp_candidate *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static inline void sp_sampler_swap(struct sp_candidate *a, struct sp_candidate *b)
{
    struct sp_candidate t = *a;
    *a = *b;
    *b = t;
}

/* Index of the best candidate in cand[0..n); n > 0. */
static inline size_t sp_cands_best(const struct sp_cands *c)
{
    if (c->sorted > 0)
        return 0;
    size_t bi = 0;
    for (size_t i = 1; i < c->n; i++)
        if (sp_sampler_better(&c->cand[i], &c->cand[bi]))
            bi = i;
    return bi;
}

/* qsort comparators: the candidate order; typical-p's (smaller aux first,
 * then the candidate order); probability descending, then lower id. */
int sp_sampler_cmp_better(const void *x, const void *y);
int sp_sampler_cmp_typical(const void *x, const void *y);
int sp_sampler_cmp_prob(const void *x, const void *y);

/* Makes cand[0..m) the best m of cand[0..n), sorted.  Extends the sorted
 * prefix, so repeated calls with growing m cost only the new part. */
void sp_cands_sort_prefix(struct sp_cands *c, size_t m);

/* ---- explain's recording (sampler_explain.c) ---- */

/* Adds the best SP_SAMPLER_EXPLAIN_TOP candidates to the table's rows
 * (sorts a prefix of the set). */
void sp_sampler_explain_rows(struct sp_sampler_explain *ex, struct sp_cands *c);

/* Records a column: the survivors' share of each row.  use_p: from cand.p;
 * else the softmax of the logits at T = 1 over the survivors. */
void sp_sampler_explain_column(struct sp_sampler_explain *ex, const struct sp_cands *c, const char *name,
                               float param, bool use_p);

#endif
