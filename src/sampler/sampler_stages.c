/* The built-in stages of the chain and the table that builds the default
 * chain from sp_sampler_params (the order and each stage's contract:
 * sampler.h; the interface: sampler_stage.h). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sampler/sampler_stage.h"

#define TOP_P_BINS 256   /* histogram bins for large top-p */

void sp_cands_load(struct sp_cands *c, const float *logits)
{
    for (uint32_t i = 0; i < c->n_vocab; i++) {
        c->cand[i].id = (sp_token)i;
        c->cand[i].logit = sp_sampler_clamp(logits[i]);
    }
    c->n = c->n_vocab;
    c->sorted = 0;
    c->z = 0.0;
    c->identity = true;
    c->have_p = false;
}

/* cand.p = exp((logit - max) / T), unnormalised (the best candidate gets
 * exactly 1); z is their sum. */
void sp_cands_softmax(struct sp_cands *c)
{
    float mx = c->cand[sp_cands_best(c)].logit;
    float inv_t = 1.0f / c->temperature;
    double z = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        float e = expf((c->cand[i].logit - mx) * inv_t);
        c->cand[i].p = e;
        z += e;
    }
    c->z = z;
    c->have_p = true;
}

/* ---- logit bias: an owned copy of the request's list ---- */

struct bias_state {
    size_t n;
    struct sp_logit_bias b[];
};

/* Requires the identity layout. */
static sp_status bias_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    const struct bias_state *bs = st->state;
    for (size_t i = 0; i < bs->n; i++) {
        struct sp_candidate *x = &c->cand[bs->b[i].id];
        x->logit = sp_sampler_clamp(x->logit + bs->b[i].bias);
    }
    return SP_OK;
}

static sp_status bias_copy(struct sp_sampler_stage *out, const struct sp_logit_bias *b, size_t n)
{
    struct bias_state *bs = malloc(sizeof *bs + n * sizeof *b);
    if (!bs)
        return sp_error_set(SP_ERR_NOMEM, "sampler: out of memory for %zu logit biases", n);
    bs->n = n;
    memcpy(bs->b, b, n * sizeof *b);
    out->state = bs;
    return SP_OK;
}

static sp_status bias_clone(const struct sp_sampler_stage *st, struct sp_sampler_stage *out)
{
    const struct bias_state *bs = st->state;
    return bias_copy(out, bs->b, bs->n);
}

static void state_free(struct sp_sampler_stage *st) { free(st->state); }

static const struct sp_sampler_stage_ops bias_ops = {bias_apply, NULL, NULL, bias_clone, state_free};

static bool bias_wanted(const struct sp_sampler_params *p) { return p->n_logit_bias > 0; }

static sp_status bias_make(struct sp_sampler_stage *out, const struct sp_sampler_params *p, uint32_t n_vocab)
{
    (void)n_vocab;
    out->ops = &bias_ops;
    return bias_copy(out, p->logit_bias, p->n_logit_bias);
}

/* ---- penalties: counts of the history window, scratch of n_vocab ---- */

struct pen_state {
    float repeat, presence, frequency;
    int32_t last_n;
    uint32_t n_vocab;
    int32_t *count;   /* [n_vocab], all zero between calls */
};

/* Requires the identity layout. */
static sp_status pen_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    struct pen_state *ps = st->state;
    size_t n_hist = c->n_hist;
    if (n_hist == 0)
        return SP_OK;
    size_t window = ps->last_n < 0 ? n_hist : (size_t)ps->last_n;
    if (window > n_hist)
        window = n_hist;
    const sp_token *w = c->hist + (n_hist - window);

    for (size_t i = 0; i < window; i++)
        if (w[i] >= 0 && (uint32_t)w[i] < c->n_vocab)
            ps->count[w[i]]++;
    /* Each distinct token is penalised once, at its first occurrence in the
     * window, which also resets its count. */
    for (size_t i = 0; i < window; i++) {
        if (w[i] < 0 || (uint32_t)w[i] >= c->n_vocab || ps->count[w[i]] == 0)
            continue;
        struct sp_candidate *x = &c->cand[w[i]];
        int32_t cnt = ps->count[w[i]];
        float l = x->logit;
        if (ps->repeat != 1.0f)
            l = l > 0.0f ? l / ps->repeat : l * ps->repeat;
        l -= (float)cnt * ps->frequency + ps->presence;
        x->logit = sp_sampler_clamp(l);
        ps->count[w[i]] = 0;
    }
    return SP_OK;
}

static sp_status pen_copy(struct sp_sampler_stage *out, const struct pen_state *from)
{
    struct pen_state *ps = malloc(sizeof *ps);
    int32_t *count = calloc(from->n_vocab, sizeof *count);
    if (!ps || !count) {
        free(ps);
        free(count);
        return sp_error_set(SP_ERR_NOMEM, "sampler: out of memory for %u penalty counts", from->n_vocab);
    }
    *ps = *from;
    ps->count = count;
    out->state = ps;
    return SP_OK;
}

static sp_status pen_clone(const struct sp_sampler_stage *st, struct sp_sampler_stage *out)
{
    return pen_copy(out, st->state);
}

static void pen_free(struct sp_sampler_stage *st)
{
    struct pen_state *ps = st->state;
    if (ps)
        free(ps->count);
    free(ps);
}

static const struct sp_sampler_stage_ops pen_ops = {pen_apply, NULL, NULL, pen_clone, pen_free};

/* Off unless a penalty is set and the window is not empty; also off for
 * a call with no history. */
static bool pen_wanted(const struct sp_sampler_params *p)
{
    return p->repeat_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

static sp_status pen_make(struct sp_sampler_stage *out, const struct sp_sampler_params *p, uint32_t n_vocab)
{
    struct pen_state from = {p->repeat_penalty, p->presence_penalty, p->frequency_penalty, p->repeat_last_n,
                             n_vocab, NULL};
    out->ops = &pen_ops;
    return pen_copy(out, &from);
}

/* ---- grammar mask (sp_sampler_set_mask): only the allowed tokens stay ---- */

static inline bool allowed(const uint64_t *m, sp_token id)
{
    return (m[(uint32_t)id >> 6] >> ((uint32_t)id & 63)) & 1;
}

/* Keeps only the allowed candidates, in order.  In the identity layout it
 * walks the mask's words, else every candidate.  explain's first columns:
 * the one before the mask is "penalties" (what bias, penalties and any
 * stages before here did); the one after is the logprobs stage's. */
static sp_status mask_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    (void)st;
    if (!c->mask)
        return SP_OK;
    if (c->ex) {
        sp_sampler_explain_rows(c->ex, c);
        sp_sampler_explain_column(c->ex, c, "penalties", NAN, false);
    }
    size_t k = 0;
    if (c->identity) {
        uint32_t n_words = (c->n_vocab + 63) / 64;
        for (uint32_t w = 0; w < n_words; w++)
            for (uint64_t bits = c->mask[w]; bits; bits &= bits - 1) {
                uint32_t id = w * 64 + (uint32_t)__builtin_ctzll(bits);
                if (id < c->n_vocab)
                    c->cand[k++] = c->cand[id];
            }
    } else {
        for (size_t i = 0; i < c->n; i++)
            if (allowed(c->mask, c->cand[i].id))
                c->cand[k++] = c->cand[i];
    }
    c->n = k;
    c->sorted = 0;
    c->identity = false;
    if (c->n == 0)
        return sp_error_set(SP_ERR_ARG, "sampler: the grammar allows no token");
    return SP_OK;
}

static const struct sp_sampler_stage_ops mask_ops = {mask_apply, NULL, NULL, NULL, NULL};

/* ---- logprobs: the best first, then the model's distribution here ---- */

/* log of the softmax normaliser of cand[0..n) at temperature 1. */
static double log_partition(const struct sp_cands *c)
{
    float mx = c->cand[sp_cands_best(c)].logit;
    double sum = 0.0;
    for (size_t i = 0; i < c->n; i++)
        sum += expf(c->cand[i].logit - mx);
    return (double)mx + log(sum);
}

static void fill_logprob_top(struct sp_cands *c, int32_t k, double logz)
{
    struct sp_token_logprobs *lp = c->lp;
    sp_cands_sort_prefix(c, (size_t)k);
    lp->n_top = 0;
    for (int i = 0; i < k && (size_t)i < c->n; i++) {
        if (c->cand[i].logit == -INFINITY)
            break;
        lp->top[i].id = c->cand[i].id;
        lp->top[i].logprob = (float)((double)c->cand[i].logit - logz);
        lp->n_top = i + 1;
    }
}

/* Fails when no token is possible; moves the best candidate first (a
 * sorted prefix of one, so later stages find the maximum without scanning
 * again). */
static sp_status logprobs_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    size_t bi = sp_cands_best(c);
    if (c->cand[bi].logit == -INFINITY)
        return sp_error_set(SP_ERR_ARG, c->mask ? "sampler: every token the grammar allows is banned"
                                                : "sampler: every token is banned or has a NaN logit");
    sp_sampler_swap(&c->cand[0], &c->cand[bi]);
    c->sorted = 1;
    c->identity = false;
    if (c->ex) {
        sp_sampler_explain_rows(c->ex, c);
        sp_sampler_explain_column(c->ex, c, c->mask ? "grammar" : "penalties", NAN, false);
    }
    if (c->lp) {
        *c->logz = log_partition(c);
        fill_logprob_top(c, st->k, *c->logz);
    }
    return SP_OK;
}

static const struct sp_sampler_stage_ops logprobs_ops = {logprobs_apply, NULL, NULL, NULL, NULL};

/* ---- sampling filters (temperature > 0) ---- */

static sp_status top_k_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    if ((size_t)st->k >= c->n)
        return SP_OK;
    sp_cands_sort_prefix(c, (size_t)st->k);
    c->n = (size_t)st->k;
    return SP_OK;
}

static sp_status temperature_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    (void)st;
    sp_cands_softmax(c);
    return SP_OK;
}

/* The smallest prefix (highest first) whose mass reaches p. */
static sp_status top_p_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    double target = (double)st->param * c->z, cum = 0.0;
    size_t m = c->n < 64 ? c->n : 64, i = 0;
    if (c->sorted < c->n && c->n > 4096) {
        /* Large unsorted set: a histogram of -log(p / p_max) in bins of 1/8
         * nat bounds how many of the best are needed, so one selection
         * replaces repeated growth.  Bins are monotone in the logit, so
         * whole bins are exactly a best-m set. */
        double mass[TOP_P_BINS] = {0};
        size_t cnt[TOP_P_BINS] = {0};
        float mx = c->cand[sp_cands_best(c)].logit, scale = 8.0f / c->temperature;
        for (size_t j = 0; j < c->n; j++) {
            float x = (mx - c->cand[j].logit) * scale;
            size_t b = x < (float)(TOP_P_BINS - 1) ? (size_t)x : TOP_P_BINS - 1;
            mass[b] += c->cand[j].p;
            cnt[b]++;
        }
        double acc = 0.0;
        m = 0;
        for (size_t b = 0; b < TOP_P_BINS; b++) {
            acc += mass[b];
            m += cnt[b];
            if (acc >= target)
                break;
        }
    }
    for (;;) {
        sp_cands_sort_prefix(c, m);
        for (; i < m; i++) {
            cum += c->cand[i].p;
            if (cum >= target) {
                c->n = i + 1;
                c->z = cum;
                return SP_OK;
            }
        }
        if (m == c->n)
            return SP_OK;   /* rounding: the whole set was needed */
        m = c->n / 4 < m ? c->n : m * 4;
    }
}

/* Keeps p >= min_p * p_max.  Survivors are exactly the best m by logit (p
 * grows with the logit), so a count plus a partial selection keeps the
 * sorted-prefix invariant. */
static sp_status min_p_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    float thr = st->param * c->cand[sp_cands_best(c)].p;
    size_t m = 0;
    double z = 0.0;
    for (size_t i = 0; i < c->n; i++)
        if (c->cand[i].p >= thr) {
            m++;
            z += c->cand[i].p;
        }
    if (m == 0)
        m = 1;   /* only when min_p > 1: keep the best token */
    sp_cands_sort_prefix(c, m);
    if (m == 1)
        z = c->cand[0].p;
    c->n = m;
    c->z = z;
    return SP_OK;
}

/* Locally typical sampling: rank by |-log p - H|, keep the smallest set
 * reaching mass p, back in the candidate order. */
static sp_status typical_p_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    if (c->n <= 1)
        return SP_OK;
    double ent = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        double q = c->cand[i].p / c->z;
        if (q > 0.0)
            ent -= q * log(q);
    }
    for (size_t i = 0; i < c->n; i++) {
        double q = c->cand[i].p / c->z;
        c->cand[i].aux = q > 0.0 ? (float)fabs(-log(q) - ent) : INFINITY;
    }
    qsort(c->cand, c->n, sizeof *c->cand, sp_sampler_cmp_typical);
    double target = (double)st->param * c->z, cum = 0.0;
    size_t keep = c->n;
    for (size_t i = 0; i < c->n; i++) {
        cum += c->cand[i].p;
        if (cum >= target) {
            keep = i + 1;
            break;
        }
    }
    c->n = keep;
    c->z = cum;
    qsort(c->cand, c->n, sizeof *c->cand, sp_sampler_cmp_better);
    c->sorted = c->n;
    return SP_OK;
}

/* Temperature <= 0: only the argmax survives, with p = 1. */
static sp_status greedy_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    (void)st;
    size_t bi = sp_cands_best(c);
    sp_sampler_swap(&c->cand[0], &c->cand[bi]);
    c->n = 1;
    c->sorted = 1;
    c->cand[0].p = 1.0f;
    c->z = 1.0;
    c->have_p = true;
    return SP_OK;
}

static const struct sp_sampler_stage_ops top_k_ops = {top_k_apply, NULL, NULL, NULL, NULL};
static const struct sp_sampler_stage_ops temperature_ops = {temperature_apply, NULL, NULL, NULL, NULL};
static const struct sp_sampler_stage_ops top_p_ops = {top_p_apply, NULL, NULL, NULL, NULL};
static const struct sp_sampler_stage_ops min_p_ops = {min_p_apply, NULL, NULL, NULL, NULL};
static const struct sp_sampler_stage_ops typical_p_ops = {typical_p_apply, NULL, NULL, NULL, NULL};
static const struct sp_sampler_stage_ops greedy_ops = {greedy_apply, NULL, NULL, NULL, NULL};

static bool always(const struct sp_sampler_params *p)
{
    (void)p;
    return true;
}
static bool top_k_wanted(const struct sp_sampler_params *p) { return p->temperature > 0.0f && p->top_k > 0; }
static bool sampling(const struct sp_sampler_params *p) { return p->temperature > 0.0f; }
static bool top_p_wanted(const struct sp_sampler_params *p) { return p->temperature > 0.0f && p->top_p < 1.0f; }
static bool min_p_wanted(const struct sp_sampler_params *p) { return p->temperature > 0.0f && p->min_p > 0.0f; }
static bool typical_p_wanted(const struct sp_sampler_params *p)
{
    return p->temperature > 0.0f && p->typical_p < 1.0f;
}
static bool greedy_wanted(const struct sp_sampler_params *p) { return !(p->temperature > 0.0f); }

/* The stages whose whole state is their setting. */
struct setting {
    float param;   /* NAN: none */
    int32_t k;
};

static struct setting set_none(const struct sp_sampler_params *p)
{
    (void)p;
    return (struct setting){NAN, 0};
}

static struct setting set_logprobs(const struct sp_sampler_params *p) { return (struct setting){NAN, p->n_logprobs}; }

static struct setting set_top_k(const struct sp_sampler_params *p)
{
    return (struct setting){(float)p->top_k, p->top_k};
}

static struct setting set_temp(const struct sp_sampler_params *p) { return (struct setting){p->temperature, 0}; }
static struct setting set_top_p(const struct sp_sampler_params *p) { return (struct setting){p->top_p, 0}; }
static struct setting set_min_p(const struct sp_sampler_params *p) { return (struct setting){p->min_p, 0}; }
static struct setting set_typical(const struct sp_sampler_params *p) { return (struct setting){p->typical_p, 0}; }

/* One row per sp_stage_point, in chain order: whether p wants the stage,
 * and either a constructor (stages with state) or its operations, explain
 * column and setting. */
static const struct builtin {
    bool (*wanted)(const struct sp_sampler_params *p);
    sp_status (*make)(struct sp_sampler_stage *out, const struct sp_sampler_params *p, uint32_t n_vocab);
    const struct sp_sampler_stage_ops *ops;
    const char *column;
    struct setting (*setting)(const struct sp_sampler_params *p);
} builtins[SP_STAGE_DRAW + 1] = {
    [SP_STAGE_LOGIT_BIAS] = {bias_wanted, bias_make, NULL, NULL, set_none},
    [SP_STAGE_PENALTIES] = {pen_wanted, pen_make, NULL, NULL, set_none},
    [SP_STAGE_GRAMMAR] = {always, NULL, &mask_ops, NULL, set_none},
    [SP_STAGE_LOGPROBS] = {always, NULL, &logprobs_ops, NULL, set_logprobs},
    [SP_STAGE_TOP_K] = {top_k_wanted, NULL, &top_k_ops, "top-k", set_top_k},
    [SP_STAGE_TEMPERATURE] = {sampling, NULL, &temperature_ops, "temperature", set_temp},
    [SP_STAGE_TOP_P] = {top_p_wanted, NULL, &top_p_ops, "top-p", set_top_p},
    [SP_STAGE_MIN_P] = {min_p_wanted, NULL, &min_p_ops, "min-p", set_min_p},
    [SP_STAGE_TYPICAL_P] = {typical_p_wanted, NULL, &typical_p_ops, "typical-p", set_typical},
    [SP_STAGE_DRAW] = {greedy_wanted, NULL, &greedy_ops, "greedy", set_none},
};

sp_status sp_sampler_stage_builtin(sp_stage_point at, const struct sp_sampler_params *p, uint32_t n_vocab,
                                   struct sp_sampler_stage *out, bool *made)
{
    const struct builtin *b = &builtins[at];
    struct setting s = b->setting(p);
    memset(out, 0, sizeof *out);
    *made = b->wanted(p);
    if (!*made)
        return SP_OK;
    out->ops = b->ops;
    out->name = b->column;
    out->param = s.param;
    out->k = s.k;
    return b->make ? b->make(out, p, n_vocab) : SP_OK;
}
