/* Speculative decoding: configuration, per-sequence state, how many drafts
 * pay, verification and the acceptance rule.  See spec.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"
#include "spec/spec_internal.h"
#include "tokenizer/tokenizer.h"

/* Acceptance memory: each verification's counts weigh this much less at
 * the next, so k follows a sequence moving between copied and new text
 * within a few steps, while ten failed drafts in a row bring the estimate
 * under 5 % (prior: half a draft accepted of one). */
#define SP_SPEC_DECAY 0.9
/* A sequence paused for low acceptance drafts one token again at its
 * first draft after this many steps without drafts, doubling (to
 * SP_SPEC_PROBE_MAX) while probes fail, and stretched by what a draft
 * forward costs against a step (a probe of self-speculation on Gemma 3,
 * whose output head is most of its weights, costs most of a step). */
#define SP_SPEC_PROBE_MIN 8
/* Probing explores, so it waits for a clear case: a row whose certain draft
 * would yield this many times what the row's time gives without it. */
#define SP_SPEC_PROBE_PAYS 2.0
#define SP_SPEC_PROBE_MAX 128
/* Each step size keeps its last SP_SPEC_RING step times; the cost model
 * reads their median, so one step slowed by another job on a shared
 * machine moves nothing. */
#define SP_SPEC_RING 5
/* A step size measured longer ago than this many forwards is measured
 * again (a step without drafts) before drafts are weighed against it: the
 * machine's speed drifts, and a size that drafting always avoids would
 * otherwise keep a stale time. */
#define SP_SPEC_STALE 32
/* The slope of step time over step size is fitted on the SP_SPEC_FIT
 * measured sizes nearest the step's decoding rows, and only from sizes
 * measured in the last SP_SPEC_OLD forwards. */
#define SP_SPEC_FIT 12
#define SP_SPEC_OLD 256
/* Drafts are added while each raises the step's expected tokens per
 * second, and the plan is kept only when its rate beats the step without
 * drafts by this fraction: the estimates are noisy (shared machines), and
 * near the break-even point, where a batch that is already compute-bound
 * sits, a misjudged plan loses more than a right one gains.  The margin is
 * on the whole plan, not on each draft: the last drafts of a sequence that
 * keeps most of them each add a little, and together they carry the plan. */
#define SP_SPEC_MARGIN 0.3

static const char *const sp_spec_names[] = {"none", "ngram", "draft", "self"};

const char *sp_spec_kind_name(enum sp_spec_kind k)
{
    return (unsigned)k < sizeof sp_spec_names / sizeof *sp_spec_names ? sp_spec_names[k] : "unknown";
}

sp_status sp_spec_kind_parse(const char *name, enum sp_spec_kind *out)
{
    for (unsigned i = 0; i < sizeof sp_spec_names / sizeof *sp_spec_names; i++)
        if (name && !strcmp(name, sp_spec_names[i])) {
            *out = (enum sp_spec_kind)i;
            return SP_OK;
        }
    return sp_error_set(SP_ERR_ARG, "speculative decoding '%s': want none, ngram, draft or self", name ? name : "");
}

/* The draft model must share the vocabulary: the same ids for the same
 * token texts, and an output head over all of them. */
static sp_status sp_spec_vocab_check(const struct sp_spec_config *c, const struct sp_spec_target *t)
{
    uint32_t nt = sp_vocab_size(t->vocab), nd = sp_vocab_size(c->draft_vocab);
    if (nt != nd || c->draft->hp.n_vocab != t->model->hp.n_vocab)
        return sp_error_set(SP_ERR_ARG, "--draft-model: its vocabulary has %u tokens, the model's %u", nd, nt);
    if (strcmp(sp_vocab_model_name(t->vocab), sp_vocab_model_name(c->draft_vocab)))
        return sp_error_set(SP_ERR_ARG, "--draft-model: its tokenizer is '%s', the model's '%s'",
                            sp_vocab_model_name(c->draft_vocab), sp_vocab_model_name(t->vocab));
    for (uint32_t i = 0; i < nt; i++) {
        const char *a = sp_vocab_token_text(t->vocab, (sp_token)i), *b = sp_vocab_token_text(c->draft_vocab, (sp_token)i);
        if (strcmp(a ? a : "", b ? b : ""))
            return sp_error_set(SP_ERR_ARG, "--draft-model: token %u is '%.40s' there, '%.40s' in the model", i,
                                b ? b : "", a ? a : "");
    }
    return SP_OK;
}

sp_status sp_spec_init(struct sp_spec **out, const struct sp_spec_config *c, const struct sp_spec_target *t)
{
    struct sp_spec *sp;
    sp_status st;
    *out = NULL;
    if (c->k < 1 || c->k > SP_SPEC_K_MAX)
        return sp_error_set(SP_ERR_ARG, "--spec-k %d: want 1..%d", c->k, SP_SPEC_K_MAX);
    if (c->kind == SP_SPEC_DRAFT && !c->draft)
        return sp_error_set(SP_ERR_ARG, "--spec draft needs --draft-model");
    if (c->kind != SP_SPEC_DRAFT && c->draft)
        return sp_error_set(SP_ERR_ARG, "--draft-model is for --spec draft (not %s)", sp_spec_kind_name(c->kind));
    if (c->kind == SP_SPEC_SELF && (c->layers < 0 || (uint32_t)c->layers >= t->model->hp.n_layer))
        return sp_error_set(SP_ERR_ARG, "--spec-layers %d: want 1..%u (the model has %u layers)", c->layers,
                            t->model->hp.n_layer - 1, t->model->hp.n_layer);
    if (c->kind == SP_SPEC_DRAFT && (st = sp_spec_vocab_check(c, t)) != SP_OK)
        return st;
    sp = calloc(1, sizeof *sp);
    if (!sp)
        return sp_error_set(SP_ERR_NOMEM, "speculative decoding: no memory");
    sp->c = *c;
    sp->t = *t;
    sp->n_vocab = t->model->hp.n_vocab;
    size_t B = (size_t)t->n_batch, R = (size_t)t->n_rows;
    sp->t_ring = calloc((B + 1) * SP_SPEC_RING, sizeof *sp->t_ring);
    sp->n_seen = calloc(B + 1, sizeof *sp->n_seen);
    sp->stamp = calloc(B + 1, sizeof *sp->stamp);
    sp->k = calloc(R, sizeof *sp->k);
    sp->next = calloc(R, sizeof *sp->next);
    sp->scratch = calloc(sp->n_vocab, sizeof *sp->scratch);
    if (!sp->t_ring || !sp->n_seen || !sp->stamp || !sp->k || !sp->next || !sp->scratch) {
        st = sp_error_set(SP_ERR_NOMEM, "speculative decoding: no memory");
        goto fail;
    }
    if (c->kind == SP_SPEC_DRAFT || c->kind == SP_SPEC_SELF) {
        sp->b_tokens = malloc(B * sizeof *sp->b_tokens);
        sp->b_pos = malloc(B * sizeof *sp->b_pos);
        sp->b_seqs = malloc(B * sizeof *sp->b_seqs);
        sp->b_out = malloc(R * sizeof *sp->b_out);
        sp->b_job = malloc(R * sizeof *sp->b_job);
        sp->logits = malloc(R * sp->n_vocab * sizeof *sp->logits);
        if (!sp->b_tokens || !sp->b_pos || !sp->b_seqs || !sp->b_out || !sp->b_job || !sp->logits) {
            st = sp_error_set(SP_ERR_NOMEM, "speculative decoding: no memory for %zu draft rows", R);
            goto fail;
        }
    }
    if ((c->kind == SP_SPEC_SELF && t->model->hp.n_linear) || (c->kind == SP_SPEC_DRAFT && c->draft->hp.n_linear)) {
        /* a linear layer's state cannot run ahead of the target's tokens
         * (self) and is not sized for drafting (a draft model) */
        st = sp_error_set(SP_ERR_UNSUPPORTED, "--spec %s: a %s model has linear (recurrent) layers; draft with "
                          "--spec ngram%s", c->kind == SP_SPEC_SELF ? "self" : "draft",
                          (c->kind == SP_SPEC_SELF ? t->model : c->draft)->arch->name,
                          c->kind == SP_SPEC_SELF ? " or a draft model" : "");
        goto fail;
    }
    if (c->kind == SP_SPEC_SELF) {
        sp->dm = t->model;
        sp->dmem = t->mem;
        sp->dfs = t->fs;
        sp->layers = c->layers ? (uint32_t)c->layers : t->model->hp.n_layer / 2;
    } else if (c->kind == SP_SPEC_DRAFT) {
        const struct sp_hparams *hp = &c->draft->hp;
        /* every layer paged (no sliding-window rings): the draft's memory
         * is small, and rings would need the engine's ring sizing */
        uint32_t *source = calloc(3 * (size_t)hp->n_layer, sizeof *source); /* shared KV; per-layer geometry */
        if (!source) {
            st = sp_error_set(SP_ERR_NOMEM, "spec: no memory");
            goto fail;
        }
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            source[l] = c->draft->layers[l].kv_src;
            source[hp->n_layer + l] = c->draft->layers[l].n_head_kv;
            source[2 * hp->n_layer + l] = c->draft->layers[l].head_dim;
        }
        struct sp_memory_shape shape = {
            .kv = {.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .source = source,
                   .heads_kv = source + hp->n_layer, .head_dims = source + 2 * hp->n_layer}};
        uint64_t n_blocks = sp_kv_blocks_for((uint64_t)t->n_ctx * t->n_parallel) + (uint64_t)t->n_rows;
        if (n_blocks > UINT32_MAX / 2) {
            free(source);
            st = sp_error_set(SP_ERR_ARG, "draft KV cache of %llu blocks is out of range", (unsigned long long)n_blocks);
            goto fail;
        }
        shape.n_blocks = (uint32_t)n_blocks;
        st = sp_memory_new(&sp->own_mem, &shape);
        free(source);
        if (st != SP_OK)
            goto fail;
        sp->dmem = sp->own_mem;
        if ((st = sp_forward_scratch_init(&sp->own_fs, c->draft, t->n_batch, t->n_ctx, sp_pool_size(t->pool))) != SP_OK)
            goto fail;
        sp->dfs = &sp->own_fs;
        sp->dm = c->draft;
    }
    *out = sp;
    return SP_OK;
fail:
    sp_spec_free(sp);
    return st;
}

void sp_spec_free(struct sp_spec *sp)
{
    if (!sp)
        return;
    sp_memory_free(sp->own_mem);
    if (sp->dfs == &sp->own_fs)
        sp_forward_scratch_free(&sp->own_fs);
    free(sp->b_tokens); free(sp->b_pos); free(sp->b_seqs); free(sp->b_out); free(sp->b_job);
    free(sp->logits); free(sp->scratch); free(sp->k); free(sp->next); free(sp->t_ring); free(sp->n_seen); free(sp->stamp);
    free(sp);
}

sp_status sp_spec_seq_new(struct sp_spec *sp, const struct sp_sampler_params *params, struct sp_spec_seq **out)
{
    sp_status st = SP_OK;
    struct sp_spec_seq *ss = calloc(1, sizeof *ss);
    *out = NULL;
    if (!ss)
        return sp_error_set(SP_ERR_NOMEM, "speculative decoding: no memory");
    ss->probe = ss->idle = SP_SPEC_PROBE_MIN; /* a new sequence probes at its first draft */
    sp_rng_seed(&ss->rng, params->seed ^ 0x5bd1e9955bd1e995ull);
    if (sp->dm) {
        struct sp_sampler_params dp = *params;
        dp.n_logprobs = 0;
        if ((st = sp_sampler_init(&ss->sampler, &dp, sp->n_vocab)) != SP_OK)
            goto fail;
        ss->dense = params->temperature > 0.0f;
        if (ss->dense) {
            ss->q_id = malloc((size_t)SP_SPEC_K_MAX * SP_SPEC_Q_MAX * sizeof *ss->q_id);
            ss->q_p = malloc((size_t)SP_SPEC_K_MAX * SP_SPEC_Q_MAX * sizeof *ss->q_p);
            if (!ss->q_id || !ss->q_p) {
                st = sp_error_set(SP_ERR_NOMEM, "speculative decoding: no memory");
                goto fail;
            }
        }
    }
    *out = ss;
    return SP_OK;
fail:
    sp_spec_seq_free(sp, ss);
    return st;
}

void sp_spec_seq_free(struct sp_spec *sp, struct sp_spec_seq *ss)
{
    if (!ss)
        return;
    if (sp->own_mem)
        sp_memory_seq_release(sp->own_mem, &ss->dseq);
    sp_sampler_free(ss->sampler);
    free(ss->q_id);
    free(ss->q_p);
    free(ss);
}

/* ---- the cost model ---- */

void sp_spec_observe(struct sp_spec *sp, int n_tok, int n_out, double seconds)
{
    /* only steps whose every row has logits (decoding rows and drafts): a
     * prompt chunk's rows skip the output head and run the big-batch
     * kernels, so they cost less per row than a draft does */
    if (n_tok < 1 || n_tok > sp->t.n_batch || n_out != n_tok || !(seconds > 0))
        return;
    uint32_t *k = &sp->n_seen[n_tok];
    sp->t_ring[(size_t)n_tok * SP_SPEC_RING + *k % SP_SPEC_RING] = seconds;
    *k = *k + 1 < UINT32_MAX ? *k + 1 : SP_SPEC_RING;
    sp->stamp[n_tok] = ++sp->clock;
}

static int sp_spec_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double sp_spec_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, sp_spec_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The slope a pair of step sizes gives, and its weight: the sizes' distance,
 * since the same noise on two times moves the slope of close sizes most. */
struct sp_spec_pair {
    double slope, weight;
};

static int sp_spec_pair_cmp(const void *a, const void *b)
{
    return sp_spec_cmp(&((const struct sp_spec_pair *)a)->slope, &((const struct sp_spec_pair *)b)->slope);
}

static double sp_spec_weighted_median(struct sp_spec_pair *p, int n)
{
    double total = 0.0, sum = 0.0;
    qsort(p, (size_t)n, sizeof *p, sp_spec_pair_cmp);
    for (int i = 0; i < n; i++)
        total += p[i].weight;
    for (int i = 0; i < n; i++)
        if ((sum += p[i].weight) >= 0.5 * total)
            return p[i].slope;
    return p[n - 1].slope;
}

/* The median time of a measured step size. */
static double sp_spec_time(const struct sp_spec *sp, int T)
{
    double v[SP_SPEC_RING];
    int n = sp->n_seen[T] > SP_SPEC_RING ? SP_SPEC_RING : (int)sp->n_seen[T];
    memcpy(v, sp->t_ring + (size_t)T * SP_SPEC_RING, (size_t)n * sizeof *v);
    return sp_spec_median(v, n);
}

/* The cost of one row more in a step near D decoding rows: *slope, the
 * median of the pairwise slopes of the measured sizes nearest D, each pair
 * weighing the sizes' distance (the same noise moves the slope of close
 * sizes most), never below 0.  A median, so a few steps slowed or sped up
 * by other jobs leave it in place.  *reach: the largest size the slope
 * vouches for, its largest measured size plus the span it was fitted on;
 * beyond, a batch may turn compute-bound unseen, so a plan grows by at most
 * that much a step and measures on the way.  False with fewer than two
 * sizes measured: no slope to go by. */
static bool sp_spec_fit(const struct sp_spec *sp, int D, double *slope, int *reach)
{
    int size[SP_SPEC_FIT], n = 0;
    double t[SP_SPEC_FIT];
    struct sp_spec_pair pair[SP_SPEC_FIT * (SP_SPEC_FIT - 1) / 2];
    for (int d = 0; n < SP_SPEC_FIT && (D - d >= 1 || D + d <= sp->t.n_batch); d++)
        for (int s = -1; s <= 1 && n < SP_SPEC_FIT; s += 2) {
            int T = D + s * d;
            if ((s > 0 && !d) || T < 1 || T > sp->t.n_batch || !sp->n_seen[T] || sp->clock - sp->stamp[T] > SP_SPEC_OLD)
                continue;
            size[n] = T;
            t[n++] = sp_spec_time(sp, T);
        }
    if (n < 2)
        return false;
    int m = 0, lo = size[0], hi = size[0];
    for (int i = 1; i < n; i++) {
        lo = size[i] < lo ? size[i] : lo;
        hi = size[i] > hi ? size[i] : hi;
    }
    *reach = hi + (hi - lo);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            pair[m++] = (struct sp_spec_pair){(t[j] - t[i]) / (size[j] - size[i]), abs(size[j] - size[i])};
    *slope = sp_spec_weighted_median(pair, m);
    if (*slope < 0.0)
        *slope = 0.0;
    return true;
}

/* A sequence's chance that its next draft is accepted, given the one
 * before was: decayed counts over a prior of one draft, half accepted. */
static double sp_spec_alpha(const struct sp_spec_seq *ss)
{
    return (ss->acc_hit + 0.5) / (ss->acc_try + 1.0);
}

/* Sets sp->k[i] <= jobs[i].cap: the drafts that raise the expected tokens
 * per second of the step's decoding rows.  Draft j of a sequence with
 * acceptance a yields a^j tokens on average and costs one row more (the
 * fitted slope) and, for model drafts, one draft forward per draft depth.
 * Prompt chunks in the step are left out of both sides: their rows are work
 * that is done anyway, and counting their time would make a draft look
 * cheap against a long step.  Drafts are added best first while each one's
 * expected tokens exceed what its time gives at the plan's rate so far (so
 * the plan reaches the highest rate the line allows), and the plan stands
 * only if that rate beats the step's without drafts by SP_SPEC_MARGIN.  So
 * where another row costs about what a row costs on average (a
 * compute-bound batch), no acceptance pays and nothing is drafted.  A
 * sequence left without drafts probes with one now and then, so its
 * acceptance is measured again (a new sequence at its first draft); one
 * probe per step at most, and none in a batch where even certain drafts
 * would not pay SP_SPEC_PROBE_PAYS times their time. */
static void sp_spec_plan(struct sp_spec *sp, struct sp_spec_job *jobs, int n_jobs, int n_decode, int n_base)
{
    for (int i = 0; i < n_jobs; i++)
        sp->k[i] = sp->c.fixed ? jobs[i].cap : 0;
    if (sp->c.fixed)
        return;
    const bool model = sp->dm != NULL;
    const int D = n_decode > 0 ? n_decode : 1;
    if (D > sp->t.n_batch || !sp->n_seen[D] || sp->clock - sp->stamp[D] > SP_SPEC_STALE)
        return; /* measure the step without drafts first */
    /* the step without drafts: D's own recent times, not the line's, since
     * sizes met only around other events (requests arriving and ending)
     * carry those events' time */
    const double base = sp_spec_time(sp, D);
    double slope = 0.0, value = D, t_draft = 0.0, now = base;
    int reach = D, T = n_base, R = D, depth = 0; /* R: rows with logits */
    const bool fitted = sp_spec_fit(sp, D, &slope, &reach);
    for (; fitted;) {
        int best = -1;
        double gain = 0.0;
        for (int i = 0; i < n_jobs; i++) {
            if (sp->k[i] >= jobs[i].cap)
                continue;
            double g = pow(sp_spec_alpha(jobs[i].ss), sp->k[i] + 1);
            if (g > gain)
                gain = g, best = i;
        }
        if (best < 0 || T + 1 > sp->t.n_batch || R + 1 > reach)
            break;
        int d = (int)sp->k[best] + 1 > depth ? (int)sp->k[best] + 1 : depth;
        double td = model ? t_draft + (d - depth) * (sp->draft_seen ? sp->t_draft : 0.5 * base) : 0.0;
        if (gain * (now + t_draft) <= value * (slope + td - t_draft))
            break;
        value += gain;
        T++, R++;
        now += slope;
        t_draft = td;
        depth = d;
        sp->k[best]++;
    }
    if (fitted && value * base < (1.0 + SP_SPEC_MARGIN) * D * (now + t_draft)) {
        for (int i = 0; i < n_jobs; i++)
            sp->k[i] = 0;
        T = n_base, now = base;
    }
    /* a certain draft's worth against its cost decides whether probing
     * can pay at all here */
    const double t_probe = model ? (sp->draft_seen ? sp->t_draft : 0.5 * now) : 0.0;
    bool probe = !fitted || now > SP_SPEC_PROBE_PAYS * D * (slope + t_probe);
    const double stretch = model && sp->draft_seen ? 1.0 + 8.0 * sp->t_draft / now : 1.0;
    for (int i = 0; i < n_jobs; i++) {
        struct sp_spec_seq *ss = jobs[i].ss;
        if (sp->k[i]) {
            ss->idle = 0;
        } else if (++ss->idle >= ss->probe * stretch && jobs[i].cap && probe && T + 1 <= sp->t.n_batch) {
            sp->k[i] = 1;
            ss->idle = 0;
            probe = false;
        }
    }
}

sp_status sp_spec_draft(struct sp_spec *sp, struct sp_spec_job *jobs, int n_jobs, int n_decode, int n_base)
{
    if (n_jobs > sp->t.n_rows)
        n_jobs = sp->t.n_rows;
    for (int i = 0; i < n_jobs; i++) {
        if (jobs[i].cap > (uint32_t)sp->c.k)
            jobs[i].cap = (uint32_t)sp->c.k;
        if (sp->c.kind == SP_SPEC_NGRAM)
            jobs[i].cap = sp_spec_ngram(jobs[i].tokens, jobs[i].n_tokens, jobs[i].cap,
                                        jobs[i].tokens + jobs[i].n_tokens);
        jobs[i].n_draft = 0;
        memset(jobs[i].ss->q_n, 0, sizeof jobs[i].ss->q_n);
    }
    sp_spec_plan(sp, jobs, n_jobs, n_decode, n_base);
    if (sp->dm)
        sp_spec_model_draft(sp, jobs, n_jobs);
    else
        for (int i = 0; i < n_jobs; i++)
            jobs[i].n_draft = sp->k[i];
    return SP_OK;
}

/* ---- verification ---- */

sp_token sp_spec_rule(const struct sp_candidate *p, size_t n_p, const sp_token *q_id, const float *q_p, uint32_t n_q,
                      sp_token x, struct sp_rng *rng, float *scratch, bool *accepted)
{
    float px = 0.0f, qx = 0.0f;
    for (size_t i = 0; i < n_p; i++)
        if (p[i].id == x) {
            px = p[i].p;
            break;
        }
    for (uint32_t i = 0; i < n_q; i++)
        if (q_id[i] == x) {
            qx = q_p[i];
            break;
        }
    *accepted = qx > 0.0f && sp_rng_uniform(rng) * qx < px;
    if (*accepted)
        return x;
    /* the residual norm(max(0, p - q)); when p <= q everywhere (p == q but
     * for rounding) p itself */
    for (uint32_t i = 0; i < n_q; i++)
        scratch[q_id[i]] = q_p[i];
    double z = 0.0;
    for (size_t i = 0; i < n_p; i++)
        z += p[i].p > scratch[p[i].id] ? p[i].p - scratch[p[i].id] : 0.0;
    const bool residual = z > 0.0;
    double u = sp_rng_uniform(rng) * (residual ? z : 1.0), cum = 0.0;
    sp_token t = -1;
    for (size_t i = 0; i < n_p; i++) {
        double w = residual ? (p[i].p > scratch[p[i].id] ? p[i].p - scratch[p[i].id] : 0.0) : p[i].p;
        if (w <= 0.0)
            continue;
        cum += w;
        t = p[i].id;
        if (u < cum)
            break;
    }
    for (uint32_t i = 0; i < n_q; i++)
        scratch[q_id[i]] = 0.0f;
    return t;
}

sp_token sp_spec_verify(struct sp_spec *sp, struct sp_spec_seq *ss, struct sp_sampler *target, const float *logits,
                        const sp_token *tokens, uint32_t n_hist, uint32_t j, uint32_t n_draft,
                        struct sp_token_logprobs *lp, bool *accepted)
{
    *accepted = false;
    if (j >= n_draft || !ss->q_n[j]) { /* a point guess, or no draft: the target's own draw */
        sp_token t = sp_sampler_sample(target, logits, tokens, n_hist, lp);
        *accepted = j < n_draft && t == tokens[n_hist];
        return t;
    }
    const struct sp_candidate *p;
    size_t n_p;
    double logz;
    if (sp_sampler_dist(target, logits, tokens, n_hist, lp, &p, &n_p, &logz) != SP_OK)
        return -1;
    sp_token t = sp_spec_rule(p, n_p, ss->q_id + (size_t)j * SP_SPEC_Q_MAX, ss->q_p + (size_t)j * SP_SPEC_Q_MAX,
                              ss->q_n[j], tokens[n_hist], &ss->rng, sp->scratch, accepted);
    for (size_t i = 0; lp && i < n_p; i++)
        if (p[i].id == t)
            lp->logprob = (float)((double)p[i].logit - logz);
    return t;
}

void sp_spec_seq_done(struct sp_spec *sp, struct sp_spec_seq *ss, uint32_t n_draft, uint32_t n_accepted,
                      uint32_t n_valid)
{
    if (!n_draft)
        return;
    sp->drafted += n_draft;
    sp->accepted += n_accepted;
    ss->acc_hit = ss->acc_hit * SP_SPEC_DECAY + n_accepted;
    ss->acc_try = ss->acc_try * SP_SPEC_DECAY + n_accepted + (n_accepted < n_draft);
    if (n_accepted)
        ss->probe = SP_SPEC_PROBE_MIN;
    else if (ss->probe < SP_SPEC_PROBE_MAX)
        ss->probe *= 2;
    if (sp->own_mem)
        sp_memory_seq_truncate(sp->own_mem, &ss->dseq, n_valid);
}

void sp_spec_totals(const struct sp_spec *sp, uint64_t *drafted, uint64_t *accepted)
{
    *drafted = sp->drafted;
    *accepted = sp->accepted;
}
