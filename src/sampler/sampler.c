/* The sampler chain: builds the list of stages and runs it; the contract
 * and the order of stages are in sampler.h, the stage interface in
 * sampler_stage.h. */
#include "sampler/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "sampler/sampler_stage.h"

/* One built-in stage per point at most, plus the caller's. */
#define MAX_CHAIN (SP_STAGE_DRAW + 1 + SP_MAX_STAGES)

struct sp_sampler {
    struct sp_cands c;            /* the candidate set and scratch */
    struct sp_rng rng;
    const uint64_t *mask;         /* allowed tokens, or NULL */
    struct sp_sampler_stage stage[MAX_CHAIN];
    size_t n_stages, n_user;
    /* temperature <= 0 with no bias and no stages of one's own: unless the
     * penalties apply, the chain's answer is the first maximum of the
     * logits, found without filling the candidate set */
    bool plain_greedy, penalties;
};

/* ---- parameters ---------------------------------------------------------- */

void sp_sampler_params_default(struct sp_sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->typical_p = 1.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->seed = 0;
    p->logit_bias = NULL;
    p->n_logit_bias = 0;
    p->n_logprobs = 0;
}

static sp_status params_check(const struct sp_sampler_params *p, uint32_t n_vocab)
{
    if (n_vocab == 0)
        return sp_error_set(SP_ERR_ARG, "sampler: vocabulary is empty");
    if (isnan(p->temperature))
        return sp_error_set(SP_ERR_ARG, "sampler: temperature is NaN");
    if (isnan(p->top_p))
        return sp_error_set(SP_ERR_ARG, "sampler: top_p is NaN");
    if (isnan(p->min_p))
        return sp_error_set(SP_ERR_ARG, "sampler: min_p is NaN");
    if (isnan(p->typical_p))
        return sp_error_set(SP_ERR_ARG, "sampler: typical_p is NaN");
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return sp_error_set(SP_ERR_ARG, "sampler: repeat_penalty %g must be finite and > 0",
                            (double)p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return sp_error_set(SP_ERR_ARG, "sampler: repeat_last_n %d must be >= -1",
                            (int)p->repeat_last_n);
    if (!isfinite(p->presence_penalty))
        return sp_error_set(SP_ERR_ARG, "sampler: presence_penalty is not finite");
    if (!isfinite(p->frequency_penalty))
        return sp_error_set(SP_ERR_ARG, "sampler: frequency_penalty is not finite");
    if (p->n_logprobs < 0 || p->n_logprobs > SP_SAMPLER_MAX_LOGPROBS)
        return sp_error_set(SP_ERR_ARG, "sampler: n_logprobs %d must be in 0..%d",
                            (int)p->n_logprobs, SP_SAMPLER_MAX_LOGPROBS);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return sp_error_set(SP_ERR_ARG, "sampler: logit_bias is NULL but n_logit_bias is %zu",
                            p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const struct sp_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || (uint32_t)b->id >= n_vocab)
            return sp_error_set(SP_ERR_ARG, "sampler: logit_bias token %d is outside 0..%u",
                                (int)b->id, n_vocab - 1);
        if (isnan(b->bias) || b->bias == INFINITY)
            return sp_error_set(SP_ERR_ARG, "sampler: logit_bias for token %d is %g",
                                (int)b->id, (double)b->bias);
    }
    return SP_OK;
}

/* A sampler with scratch for n_vocab candidates and no stages. */
static sp_status sampler_alloc(struct sp_sampler **out, uint32_t n_vocab, bool user_stages)
{
    struct sp_sampler *s = calloc(1, sizeof *s);
    uint64_t bytes;
    *out = NULL;
    if (!s)
        return sp_error_set(SP_ERR_NOMEM, "sampler: out of memory");
    s->c.n_vocab = n_vocab;
    if (!sp_mul_u64(n_vocab, sizeof *s->c.cand, &bytes) || bytes > SIZE_MAX) {
        sp_sampler_free(s);
        return sp_error_set(SP_ERR_NOMEM, "sampler: %u candidates overflow", n_vocab);
    }
    s->c.cand = malloc((size_t)bytes);
    s->c.heap = malloc(SP_SAMPLER_HEAP_MAX * sizeof *s->c.heap);
    if (user_stages) {
        s->c.user_buf = malloc((size_t)n_vocab * sizeof *s->c.user_buf);
        s->c.user_seen = calloc(((size_t)n_vocab + 63) / 64, sizeof *s->c.user_seen);
    }
    if (!s->c.cand || !s->c.heap || (user_stages && (!s->c.user_buf || !s->c.user_seen))) {
        sp_sampler_free(s);
        return sp_error_set(SP_ERR_NOMEM, "sampler: out of memory for %u candidates", n_vocab);
    }
    *out = s;
    return SP_OK;
}

/* Builds the chain point by point: the caller's stages at each point, in
 * their order, then the built-in stage there if p wants it. */
static sp_status build_chain(struct sp_sampler *s, const struct sp_sampler_params *p, const sp_stage *stages,
                             size_t n_stages)
{
    sp_status st = SP_OK;
    for (int at = SP_STAGE_LOGIT_BIAS; at <= SP_STAGE_DRAW && st == SP_OK; at++) {
        for (size_t i = 0; i < n_stages && st == SP_OK; i++) {
            if ((int)stages[i].before != at)
                continue;
            st = sp_sampler_stage_user(&s->stage[s->n_stages], &stages[i], i);
            if (st == SP_OK) {
                s->n_stages++;
                s->n_user++;
            }
        }
        bool made = false;
        if (st == SP_OK)
            st = sp_sampler_stage_builtin((sp_stage_point)at, p, s->c.n_vocab, &s->stage[s->n_stages], &made);
        if (st == SP_OK && made) {
            s->penalties |= at == SP_STAGE_PENALTIES;
            s->n_stages++;
        }
    }
    return st;
}

sp_status sp_sampler_init_stages(struct sp_sampler **out, const struct sp_sampler_params *p,
                                 const sp_stage *stages, size_t n_stages, uint32_t n_vocab)
{
    sp_status st;
    struct sp_sampler *s = NULL;

    *out = NULL;
    if (!p)
        return sp_error_set(SP_ERR_ARG, "sampler: no parameters");
    st = params_check(p, n_vocab);
    if (st != SP_OK)
        return st;
    if (n_stages > SP_MAX_STAGES)
        return sp_error_set(SP_ERR_ARG, "stages: %zu is more than %d", n_stages, SP_MAX_STAGES);
    if (n_stages > 0 && !stages)
        return sp_error_set(SP_ERR_ARG, "stages is NULL but n_stages is %zu", n_stages);
    for (size_t i = 0; i < n_stages; i++)
        if ((unsigned)stages[i].before > SP_STAGE_DRAW)
            return sp_error_set(SP_ERR_ARG, "stages[%zu]: before = %d is not a stage point (0..%d)", i,
                                (int)stages[i].before, SP_STAGE_DRAW);
    if ((st = sampler_alloc(&s, n_vocab, n_stages > 0)) != SP_OK)
        return st;
    s->c.temperature = p->temperature;
    sp_rng_seed(&s->rng, p->seed);
    if ((st = build_chain(s, p, stages, n_stages)) != SP_OK) {
        sp_sampler_free(s);
        return st;
    }
    s->plain_greedy = p->temperature <= 0.0f && p->n_logit_bias == 0 && s->n_user == 0;
    *out = s;
    return SP_OK;
}

sp_status sp_sampler_init(struct sp_sampler **out, const struct sp_sampler_params *p, uint32_t n_vocab)
{
    return sp_sampler_init_stages(out, p, NULL, 0, n_vocab);
}

sp_status sp_sampler_clone(const struct sp_sampler *s, struct sp_sampler **out)
{
    struct sp_sampler *d;
    sp_status st = sampler_alloc(&d, s->c.n_vocab, s->n_user > 0);
    if (st != SP_OK)
        return st;
    d->c.temperature = s->c.temperature;
    d->rng = s->rng;
    d->mask = s->mask;
    d->n_user = s->n_user;
    d->plain_greedy = s->plain_greedy;
    d->penalties = s->penalties;
    for (size_t i = 0; i < s->n_stages && st == SP_OK; i++) {
        d->stage[i] = s->stage[i];
        d->stage[i].state = NULL;
        if (s->stage[i].ops->clone)
            st = s->stage[i].ops->clone(&s->stage[i], &d->stage[i]);
        if (st == SP_OK)
            d->n_stages = i + 1;
    }
    if (st != SP_OK) {
        sp_sampler_free(d);
        return st;
    }
    *out = d;
    return SP_OK;
}

void sp_sampler_free(struct sp_sampler *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_stages; i++)
        if (s->stage[i].ops->free)
            s->stage[i].ops->free(&s->stage[i]);
    free(s->c.cand);
    free(s->c.heap);
    free(s->c.user_buf);
    free(s->c.user_seen);
    free(s);
}

void sp_sampler_set_seed(struct sp_sampler *s, uint64_t seed)
{
    sp_rng_seed(&s->rng, seed);
}

void sp_sampler_set_mask(struct sp_sampler *s, const uint64_t *allowed)
{
    s->mask = allowed;
}

void sp_sampler_accept(struct sp_sampler *s, sp_token t)
{
    if (s->n_user == 0)
        return;   /* no built-in stage keeps a history of its own */
    for (size_t i = 0; i < s->n_stages; i++)
        if (s->stage[i].ops->accept)
            s->stage[i].ops->accept(&s->stage[i], t);
}

void sp_sampler_reset(struct sp_sampler *s)
{
    for (size_t i = 0; i < s->n_stages; i++)
        if (s->stage[i].ops->reset)
            s->stage[i].ops->reset(&s->stage[i]);
}

/* ---- the chain ------------------------------------------------------------- */

/* Runs every stage, leaving the survivors in cand[0..n) with p summing to
 * c.z.  lp's top[] is filled by the logprobs stage, its logprob by the
 * caller; ex records a column after each stage that has one. */
static sp_status run_chain(struct sp_sampler *s, const float *logits, const sp_token *hist, size_t n_hist,
                           struct sp_token_logprobs *lp, double *logz, struct sp_sampler_explain *ex)
{
    struct sp_cands *c = &s->c;
    if (!logits)
        return sp_error_set(SP_ERR_ARG, "sampler: no logits");
    if (n_hist > 0 && !hist)
        return sp_error_set(SP_ERR_ARG, "sampler: history is NULL but has %zu tokens", n_hist);
    c->hist = hist;
    c->n_hist = n_hist;
    c->mask = s->mask;
    c->lp = lp;
    c->logz = logz;
    c->ex = ex;
    if (ex) {
        sp_cands_load(c, logits);
        sp_sampler_explain_rows(ex, c);
    }
    /* explain's rows sorted a prefix; the bias and the penalties index
     * candidates by id, so start over from the raw logits */
    sp_cands_load(c, logits);
    for (size_t i = 0; i < s->n_stages; i++) {
        struct sp_sampler_stage *st = &s->stage[i];
        sp_status r = st->ops->apply(st, c);
        if (r != SP_OK)
            return r;
        if (ex && st->name)
            sp_sampler_explain_column(ex, c, st->name, st->param, c->have_p);
    }
    /* the survivors' total, exactly as the draw will accumulate it; the p
     * stay unnormalised (the draw scales its uniform by z instead), which
     * saves a pass over the vocabulary when no filter is on;
     * sp_sampler_dist() divides for its callers */
    double z = 0.0;
    for (size_t i = 0; i < c->n; i++)
        z += c->cand[i].p;
    c->z = z;
    return SP_OK;
}

/* One draw over cand[0..n) (p summing to s->c.z) in their current order,
 * which is deterministic for given inputs. */
static size_t draw(const struct sp_sampler *s, struct sp_rng *rng)
{
    if (s->c.n == 1)
        return 0;
    double u = sp_rng_uniform(rng) * s->c.z, cum = 0.0;
    size_t last = 0;
    for (size_t i = 0; i < s->c.n; i++) {
        if (s->c.cand[i].p <= 0.0f)
            continue;
        cum += s->c.cand[i].p;
        last = i;
        if (u < cum)
            return i;
    }
    return last;   /* u landed past the rounded total */
}

sp_token sp_sampler_sample(struct sp_sampler *s, const float *logits, const sp_token *history,
                           size_t n_history, struct sp_token_logprobs *lp)
{
    double logz = 0.0;
    if (logits && s->plain_greedy && !lp && !(s->penalties && n_history != 0)) {
        /* plain greedy: the chain's answer (the first maximum of the clamped
         * logits) without filling the candidate array */
        uint32_t bi = 0;
        float best = -INFINITY;
        if (s->mask) {
            uint32_t n_words = (s->c.n_vocab + 63) / 64;
            bi = UINT32_MAX;
            for (uint32_t w = 0; w < n_words; w++)
                for (uint64_t bits = s->mask[w]; bits; bits &= bits - 1) {
                    uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
                    float l = i < s->c.n_vocab ? sp_sampler_clamp(logits[i]) : -INFINITY;
                    if (l > best || bi == UINT32_MAX) {
                        best = l;
                        bi = i;
                    }
                }
        } else {
            best = sp_sampler_clamp(logits[0]);
            for (uint32_t i = 1; i < s->c.n_vocab; i++) {
                float l = sp_sampler_clamp(logits[i]);
                if (l > best) {
                    best = l;
                    bi = i;
                }
            }
        }
        if (best == -INFINITY) {
            sp_error_set(SP_ERR_ARG, "sampler: every token is banned or has a NaN logit");
            return -1;
        }
        return (sp_token)bi;
    }
    if (run_chain(s, logits, history, n_history, lp, &logz, NULL) != SP_OK)
        return -1;
    const struct sp_candidate *c = &s->c.cand[draw(s, &s->rng)];
    if (lp)
        lp->logprob = (float)((double)c->logit - logz);
    return c->id;
}

sp_status sp_sampler_dist(struct sp_sampler *s, const float *logits, const sp_token *history, size_t n_history,
                          struct sp_token_logprobs *lp, const struct sp_candidate **out, size_t *n_out,
                          double *logz)
{
    *out = NULL;
    *n_out = 0;
    *logz = 0.0;
    sp_status st = run_chain(s, logits, history, n_history, lp, logz, NULL);
    if (st != SP_OK)
        return st;
    for (size_t i = 0; i < s->c.n; i++)
        s->c.cand[i].p = (float)(s->c.cand[i].p / s->c.z);
    s->c.z = 1.0;
    *out = s->c.cand;
    *n_out = s->c.n;
    return SP_OK;
}

sp_status sp_sampler_candidates(struct sp_sampler *s, const float *logits, const sp_token *history,
                                size_t n_history, const struct sp_candidate **out, size_t *n_out)
{
    double logz;
    sp_status st = sp_sampler_dist(s, logits, history, n_history, NULL, out, n_out, &logz);
    if (st == SP_OK)
        qsort(s->c.cand, s->c.n, sizeof *s->c.cand, sp_sampler_cmp_prob);
    return st;
}

sp_status sp_sampler_explain_data(struct sp_sampler *s, const float *logits,
                                  const sp_token *history, size_t n_history,
                                  struct sp_sampler_explain *ex)
{
    memset(ex, 0, sizeof *ex);
    sp_status st = run_chain(s, logits, history, n_history, NULL, NULL, ex);
    if (st != SP_OK)
        return st;
    struct sp_rng look = s->rng;   /* a copy: the sampler's sequence is untouched */
    ex->chosen = s->c.cand[draw(s, &look)].id;
    ex->n_vocab = s->c.n_vocab;

    /* raw column: softmax of the unmodified logits */
    float raw_max = -INFINITY;
    for (uint32_t i = 0; i < s->c.n_vocab; i++) {
        float l = sp_sampler_clamp(logits[i]);
        if (l > raw_max)
            raw_max = l;
    }
    double raw_z = 0.0;
    for (uint32_t i = 0; i < s->c.n_vocab; i++)
        raw_z += expf(sp_sampler_clamp(logits[i]) - raw_max);
    for (uint32_t r = 0; r < ex->n_rows; r++)
        ex->raw[r] = (float)(expf(sp_sampler_clamp(logits[ex->row[r]]) - raw_max) / raw_z);
    return SP_OK;
}

sp_status sp_sampler_explain(struct sp_sampler *s, const float *logits, const sp_token *history,
                             size_t n_history, FILE *out, sp_sampler_token_text_fn token_text,
                             void *ctx)
{
    struct sp_sampler_explain ex;
    sp_status st = sp_sampler_explain_data(s, logits, history, n_history, &ex);
    if (st == SP_OK)
        sp_sampler_explain_print(&ex, out, token_text, ctx);
    return st;
}
