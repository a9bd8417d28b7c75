/* The engine: admission, the step (one batched forward for every running
 * request), sampling, streaming text and finishing.  See engine.h. */
#include "engine/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/mem.h"
#include "core/pool.h"
#include "engine/stop.h"
#include "grammar/grammar.h"
#include "memory/memory.h"
#include "model/forward.h"
#include "model/model.h"
#include "quant/quant.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"
#include "engine/engine_internal.h"

double sp_engine_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *sp_finish_name(enum sp_finish f)
{
    switch (f) {
    case SP_FINISH_NONE: return "none";
    case SP_FINISH_STOP: return "stop";
    case SP_FINISH_LENGTH: return "length";
    case SP_FINISH_CANCELLED: return "cancelled";
    case SP_FINISH_ERROR: return "error";
    }
    return "unknown";
}

void sp_gen_params_default(struct sp_gen_params *gp)
{
    memset(gp, 0, sizeof *gp);
    sp_sampler_params_default(&gp->sampling);
    gp->max_tokens = -1;
    gp->n = 1;
    gp->length_penalty = 1.0f;
    gp->logprobs = -1;
}

void sp_engine_params_default(struct sp_engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->spec_k = 8;
}

/* Sequence memory by the model's layer kinds: full-attention layers in
 * paged blocks, sliding-window layers in a ring of window + batch positions
 * per sequence, linear layers in a state slot per sequence (as many slots
 * as rings: every choice of every parallel request). */
static sp_status sp_engine_memory_new(struct sp_engine *e, const struct sp_engine_params *p)
{
    const struct sp_hparams *hp = &e->model->hp;
    const uint32_t n_seqs = (uint32_t)e->n_parallel * 2 * SP_MAX_CHOICES;
    sp_status st;
    bool *local = calloc(hp->n_layer, sizeof *local), *stateless = calloc(hp->n_layer, sizeof *stateless);
    struct sp_state_layer *lin = calloc(hp->n_layer, sizeof *lin);
    uint32_t *source = calloc(3 * (size_t)hp->n_layer, sizeof *source); /* then heads_kv, head_dims */
    if (!local || !stateless || !lin || !source) {
        st = sp_error_set(SP_ERR_NOMEM, "engine: no memory");
        goto done;
    }
    uint32_t ring_len = 0;
    if (hp->n_swa && !p->swa_full && hp->n_swa + (uint32_t)e->n_batch < (uint32_t)e->n_ctx) {
        for (uint32_t l = 0; l < hp->n_layer; l++)
            local[l] = e->model->layers[l].swa;
        ring_len = hp->n_swa + (uint32_t)e->n_batch;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        sp_forward_state_layer(e->model, l, &lin[l]);
        stateless[l] = e->model->layers[l].mixer != SP_MIXER_ATTN;
        source[l] = e->model->layers[l].kv_src; /* shared_kv_layers: another layer's cache */
        source[hp->n_layer + l] = e->model->layers[l].n_head_kv;
        source[2 * hp->n_layer + l] = e->model->layers[l].head_dim;
    }
    struct sp_memory_shape shape = {
        .kv = {.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .local = local,
               .stateless = stateless, .source = source, .heads_kv = source + hp->n_layer,
               .head_dims = source + 2 * hp->n_layer, .ring_len = ring_len, .n_rings = n_seqs, .type_k = p->cache_type_k,
               .type_v = p->cache_type_v,
               /* multi-head latent attention: the latent row is the value too (f16 caches) */
               .v_in_k = e->model->arch->mla && p->cache_type_k == SP_CACHE_F16 && p->cache_type_v == SP_CACHE_F16},
        /* snapshots: a few per parallel request, within 256 MiB */
        .state = {.n_layer = hp->n_layer, .layers = lin, .n_slots = n_seqs,
                  .n_snapshots = 8 + 4 * (uint32_t)e->n_parallel, .snapshot_budget = (uint64_t)256 << 20},
    };
    uint64_t n_blocks, block_bytes = sp_kv_block_bytes(&shape.kv);
    if (p->kv_mem_mib && block_bytes)
        n_blocks = ((uint64_t)p->kv_mem_mib << 20) / block_bytes;
    else
        n_blocks = sp_kv_blocks_for((uint64_t)e->n_ctx * e->n_parallel) +
                   (uint64_t)e->n_parallel; /* one spare per request for copy-on-write */
    if (n_blocks < 1 || n_blocks > UINT32_MAX / 2) {
        st = sp_error_set(SP_ERR_ARG, "KV cache of %llu blocks is out of range", (unsigned long long)n_blocks);
        goto done;
    }
    shape.n_blocks = (uint32_t)n_blocks;
    st = sp_memory_new(&e->mem, &shape);
done:
    free(local);
    free(stateless);
    free(source);
    free(lin);
    return st;
}

sp_status sp_engine_init(struct sp_engine **out, const struct sp_model *m, const struct sp_vocab *v,
                         const struct sp_engine_params *p, const struct sp_model *draft,
                         const struct sp_vocab *draft_vocab)
{
    struct sp_engine *e;
    sp_status st;
    *out = NULL;
    e = calloc(1, sizeof *e);
    if (!e)
        return sp_error_set(SP_ERR_NOMEM, "engine: no memory");
    e->model = m;
    e->vocab = v;
    const struct sp_hparams *hp = &e->model->hp;
    e->n_ctx = p->n_ctx > 0 ? p->n_ctx : (int)(hp->n_ctx_train < 8192 ? hp->n_ctx_train : 8192);
    if ((uint32_t)e->n_ctx > hp->n_ctx_train && p->n_ctx > 0 && (uint32_t)p->n_ctx > hp->n_ctx_train) {
        st = sp_error_set(SP_ERR_ARG, "--ctx %d is larger than the model's training context %u", p->n_ctx,
                          hp->n_ctx_train);
        goto free_engine;
    }
    if (e->n_ctx < 2 || e->n_ctx > (1 << 20)) {
        st = sp_error_set(SP_ERR_ARG, "context %d out of range 2..1048576", e->n_ctx);
        goto free_engine;
    }
    e->n_parallel = p->n_parallel > 0 ? p->n_parallel : 1;
    e->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    e->n_out_max = e->n_parallel * 4 > SP_BEAM_MAX ? e->n_parallel * 4 : SP_BEAM_MAX;
    if (p->n_outputs > e->n_out_max)
        e->n_out_max = p->n_outputs;
    if (p->spec != SP_SPEC_NONE) /* rows for the drafts of 8 sequences */
        e->n_out_max += (p->spec_k > 0 && p->spec_k <= SP_SPEC_K_MAX ? p->spec_k : 8) * 8;
    if (e->n_out_max > e->n_batch)
        e->n_out_max = e->n_batch;
    e->pool_owned = !p->threads;
    if (p->threads)
        e->pool = p->threads;
    else if ((st = sp_pool_init(&e->pool, p->n_threads)) != SP_OK)
        goto free_engine;
    if ((st = sp_engine_memory_new(e, p)) != SP_OK)
        goto free_pool;
    if ((st = sp_forward_scratch_init(&e->fs, e->model, e->n_batch, e->n_ctx, sp_pool_size(e->pool))) != SP_OK)
        goto free_mem;
    size_t B = (size_t)e->n_batch;
    e->b_tokens = malloc(B * sizeof *e->b_tokens);
    e->b_pos = malloc(B * sizeof *e->b_pos);
    e->b_out_idx = malloc(B * sizeof *e->b_out_idx);
    e->b_seqs = malloc(B * sizeof *e->b_seqs);
    e->b_out_choice = malloc((size_t)e->n_out_max * sizeof *e->b_out_choice);
    e->logits = malloc((size_t)e->n_out_max * hp->n_vocab * sizeof(float));
    e->text = malloc(SP_TEXT_CAP);
    e->text2 = malloc(SP_TEXT_CAP + SP_STOP_MAX_LEN);
    if (!e->b_tokens || !e->b_pos || !e->b_out_idx || !e->b_seqs || !e->b_out_choice || !e->logits || !e->text ||
        !e->text2) {
        st = sp_error_set(SP_ERR_NOMEM, "engine: no memory for step buffers");
        sp_engine_free(e);
        return st;
    }
    if ((st = sp_engine_spec_init(e, p, draft, draft_vocab)) != SP_OK) {
        sp_engine_free(e);
        return st;
    }
    /* resident from the start, as spindle info reports it */
    sp_memory_touch(e->mem);
    memset(e->logits, 0, (size_t)e->n_out_max * hp->n_vocab * sizeof(float));
    *out = e;
    return SP_OK;

free_mem:
    sp_memory_free(e->mem);
free_pool:
    if (e->pool_owned)
        sp_pool_free(e->pool);
free_engine:
    free(e);
    return st;
}

static void sp_request_release(struct sp_request *r);
static void sp_request_destroy(struct sp_request *r);

void sp_engine_free(struct sp_engine *e)
{
    if (!e)
        return;
    while (e->active) {
        struct sp_request *r = e->active;
        e->active = r->next;
        if (!r->fn)
            sp_request_release(r); /* the caller still holds it: sp_request_free */
        else
            sp_request_destroy(r);
    }
    free(e->b_tokens); free(e->b_pos); free(e->b_out_idx); free(e->b_seqs); free(e->b_out_choice);
    free(e->logits); free(e->text); free(e->text2);
    sp_engine_spec_free(e);
    sp_forward_scratch_free(&e->fs);
    sp_memory_free(e->mem);
    if (e->pool_owned)
        sp_pool_free(e->pool);
    free(e);
}

const struct sp_vocab *sp_engine_vocab(const struct sp_engine *e) { return e->vocab; }
const struct sp_model *sp_engine_model(const struct sp_engine *e) { return e->model; }
int sp_engine_n_ctx(const struct sp_engine *e) { return e->n_ctx; }
int sp_engine_n_threads(const struct sp_engine *e) { return sp_pool_size(e->pool); }

void sp_engine_stats_get(const struct sp_engine *e, struct sp_engine_stats *o)
{
    struct sp_memory_stats ms;
    sp_memory_stats(e->mem, (uint32_t)e->n_parallel, &ms);
    const struct sp_kv_stats ks = ms.kv;
    memset(o, 0, sizeof *o);
    o->kv_blocks_total = ks.blocks_total;
    o->kv_blocks_used = ks.blocks_used;
    o->kv_blocks_cached = ks.blocks_cached;
    o->kv_block_tokens = ks.block_tokens;
    o->kv_bytes = ks.bytes;
    o->prefix_hits = ks.prefix_hits;
    o->prefix_tokens_reused = ks.prefix_tokens_reused;
    o->n_running = e->n_running;
    struct sp_engine_memory m;
    sp_engine_memory(e, &m);
    o->mem_weights = m.weights;
    o->mem_kv = m.kv;
    o->mem_scratch = m.scratch;
    o->mem_kv_rings = m.kv_rings;
    o->state_bytes_per_seq = ms.state.slot_bytes;
    o->mem_state = m.state;
    o->state_slots_used = ms.state.slots_used;
    o->state_snapshots = ms.state.snapshots_used;
    o->state_snapshot_bytes = ms.state.snapshot_bytes;
    o->mem_state_snapshots = m.state_snapshots;
    o->mem_resident = sp_mem_rss();
    if (e->spec)
        sp_spec_totals(e->spec, &o->spec_drafted, &o->spec_accepted);
}

void sp_engine_memory(const struct sp_engine *e, struct sp_engine_memory *o)
{
    const struct sp_model *m = e->model;
    o->weights = m->resident_bytes;
    struct sp_memory_stats all, paged;
    sp_memory_stats(e->mem, (uint32_t)e->n_parallel, &all);
    sp_memory_stats(e->mem, 0, &paged);
    o->kv = all.kv.bytes;
    o->kv_rings = all.kv.bytes - paged.kv.bytes;
    o->state = all.state.slot_bytes * (uint64_t)e->n_parallel;
    o->state_snapshots = all.state.snapshot_bytes * all.state.snapshots_max;
    size_t B = (size_t)e->n_batch;
    o->scratch = e->fs.bytes + (uint64_t)e->n_out_max * m->hp.n_vocab * sizeof(float) +
                 B * (sizeof *e->b_tokens + sizeof *e->b_pos + sizeof *e->b_out_idx + sizeof *e->b_seqs) +
                 (uint64_t)e->n_out_max * sizeof *e->b_out_choice + 2 * SP_TEXT_CAP + SP_STOP_MAX_LEN;
}

void sp_engine_timing_get(const struct sp_engine *e, struct sp_engine_timing *out) { *out = e->timing; }

/* ---- requests ---- */

/* Gives back what the request holds in its engine (blocks, budget,
 * samplers, token arrays) and leaves the engine; the struct and its event
 * queue stay for a polled request's caller. */
static void sp_request_release(struct sp_request *r)
{
    struct sp_engine *e = r->e;
    if (!e)
        return;
    for (int i = 0; i < r->n_choices; i++) {
        struct sp_choice *c = &r->choices[i];
        sp_memory_seq_release(e->mem, &c->seq);
        sp_sampler_free(c->sampler);
        sp_spec_seq_free(e->spec, c->spec);
        free(c->tokens);
        free(c->out);
    }
    sp_memory_seq_release(e->mem, &r->pseq);
    free(r->plogits);
    e->committed_blocks -= r->budget_blocks;
    if (r->width)
        sp_beam_request_free(r);
    free(r->choices);
    r->choices = NULL;
    r->n_choices = r->n_open = 0;
    r->e = NULL;
}

static void sp_request_destroy(struct sp_request *r)
{
    sp_request_release(r);
    sp_evq_free(&r->q);
    free(r);
}

/* Choice i's sampler: the first choice's chain is built from sp and the
 * request's own stages, the others are its clones (a copy of every
 * stage's state each); each gets sp->seed. */
static sp_status sp_choice_sampler(struct sp_engine *e, struct sp_request *r, int i,
                                   const struct sp_sampler_params *sp, const struct sp_gen_params *gp)
{
    struct sp_choice *c = &r->choices[i];
    sp_status st = i == 0 ? sp_sampler_init_stages(&c->sampler, sp, gp->stages, gp->n_stages, e->model->hp.n_vocab)
                          : sp_sampler_clone(r->choices[0].sampler, &c->sampler);
    if (st == SP_OK)
        sp_sampler_set_seed(c->sampler, sp->seed);
    return st;
}

/* The request's arguments against the engine: one error naming what is
 * wrong, checked before anything is allocated (delivered: it has a
 * callback or an `out` to be polled through). */
static sp_status sp_request_check(const struct sp_engine *e, const sp_token *prompt, size_t n_prompt,
                                  const struct sp_gen_params *gp, int n, int width, bool delivered)
{
    if (e->model->arch->bidirectional)
        return sp_error_set(SP_ERR_UNSUPPORTED, "a %s model computes embeddings only (no text generation)",
                            e->model->arch->name);
    if (!delivered)
        return sp_error_set(SP_ERR_ARG, "a polled request (no callback) needs `out`");
    if (gp->max_tokens == 0)
        return sp_error_set(SP_ERR_ARG, "max_tokens = 0 generates nothing (< 0: until the context is full)");
    if (n_prompt == 0)
        return sp_error_set(SP_ERR_ARG, "the prompt is empty");
    if (n > SP_MAX_CHOICES)
        return sp_error_set(SP_ERR_ARG, "n = %d is more than %d", n, SP_MAX_CHOICES);
    if (width > SP_BEAM_MAX)
        return sp_error_set(SP_ERR_ARG, "beams = %d is more than %d", width, SP_BEAM_MAX);
    if (width && n > width)
        return sp_error_set(SP_ERR_ARG, "n = %d is more than the beam width %d", n, width);
    if (width && gp->n_stages > 0)
        return sp_error_set(SP_ERR_ARG, "stages: beam search (beams = %d) ranks the model's own log-probabilities "
                                        "and runs no sampler stages", width);
    if (gp->logprobs > SP_SAMPLER_MAX_LOGPROBS)
        return sp_error_set(SP_ERR_ARG, "logprobs = %d is more than %d", gp->logprobs, SP_SAMPLER_MAX_LOGPROBS);
    if (gp->max_retries < 0 || gp->max_retries > SP_MAX_RETRIES)
        return sp_error_set(SP_ERR_ARG, "max_retries = %d is outside 0..%d", gp->max_retries, SP_MAX_RETRIES);
    if (gp->grammar && sp_grammar_n_vocab(gp->grammar) != e->model->hp.n_vocab)
        return sp_error_set(SP_ERR_ARG, "grammar: made for a vocabulary of %u tokens, not this model's %u",
                            sp_grammar_n_vocab(gp->grammar), e->model->hp.n_vocab);
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= e->model->hp.n_vocab)
            return sp_error_set(SP_ERR_ARG, "prompt token %zu: id %d out of range 0..%u", i, prompt[i],
                                e->model->hp.n_vocab - 1);
    if (n_prompt + 1 > (size_t)e->n_ctx)
        return sp_error_set(SP_ERR_CONTEXT, "the prompt has %zu tokens; the context holds %d (prompt + 1 generated)",
                            n_prompt, e->n_ctx);
    return SP_OK;
}

/* Admission: the KV blocks the request commits (*budget) and the position
 * its choices stop at (*max_pos).  Every block a request can need is
 * committed at admission, so no choice finds the pool empty mid-answer:
 * the choices share the prompt's blocks (forked after the prefill), and
 * each has its own copy of the prompt's last partial block (`extra`) and
 * its own blocks for the positions after the prompt's.  n_seqs sequences
 * (n choices, or two sets of beams). */
static sp_status sp_request_admit(const struct sp_engine *e, size_t n_prompt, const struct sp_gen_params *gp, int n,
                                  int n_seqs, bool retries, uint32_t *budget_out, uint32_t *max_pos_out)
{
    uint64_t total = n_prompt + (gp->max_tokens > 0 ? (uint64_t)gp->max_tokens : (uint64_t)e->n_ctx);
    if (total > (uint64_t)e->n_ctx)
        total = (uint64_t)e->n_ctx;
    struct sp_memory_stats ms;
    sp_memory_stats(e->mem, 0, &ms);
    const struct sp_kv_stats ks = ms.kv;
    const uint32_t kv_blocks = ks.blocks_total;
    const uint32_t bt = ks.block_tokens, p_blocks = (uint32_t)sp_kv_blocks_for(n_prompt);
    const uint32_t extra = n_seqs > 1 || retries ? (uint32_t)n_seqs : 0;
    uint32_t own = (uint32_t)sp_kv_blocks_for(total) - p_blocks;
    uint32_t budget = p_blocks + extra + own * (uint32_t)n_seqs;
    uint32_t min_budget = p_blocks + extra + (n_prompt % bt == 0 ? (uint32_t)n_seqs : 0);
    uint32_t max_pos = (uint32_t)total;
    if (min_budget > kv_blocks)
        return sp_error_set(SP_ERR_CONTEXT, "the prompt (%zu tokens, %d choices) can never fit the KV cache of %u tokens",
                            n_prompt, n, kv_blocks * bt);
    if (budget > kv_blocks) {
        own = (kv_blocks - p_blocks - extra) / (uint32_t)n_seqs;
        uint32_t fits = (p_blocks + own) * bt;
        if (gp->max_tokens > 0)
            return sp_error_set(SP_ERR_CONTEXT,
                                "%d sequence(s) of up to %llu tokens each (prompt + max_tokens) do not fit the KV "
                                "cache of %u tokens (each could have %u); lower n or max_tokens",
                                n_seqs, (unsigned long long)total, kv_blocks * bt, fits);
        /* until the context is full: a choice's share of the pool is its context */
        max_pos = fits < max_pos ? fits : max_pos;
        budget = p_blocks + extra + own * (uint32_t)n_seqs;
    }
    if (e->n_running >= (uint32_t)e->n_parallel || e->committed_blocks + budget > kv_blocks)
        return sp_error_set(SP_ERR_FULL, "busy: %u requests running, %u of %u KV blocks committed", e->n_running,
                            e->committed_blocks, kv_blocks);
    *budget_out = budget;
    *max_pos_out = max_pos;
    return SP_OK;
}

/* Choice i of r: its sampler (sp with the choice's seed; none for beams),
 * draft sequence, stop matcher, detokenizer, token array holding the
 * prompt, and grammar state. */
static sp_status sp_choice_init(struct sp_engine *e, struct sp_request *r, int i, struct sp_sampler_params *sp,
                                const struct sp_gen_params *gp, const sp_token *prompt, size_t n_prompt)
{
    struct sp_choice *c = &r->choices[i];
    sp_status st;
    c->req = r;
    c->idx = i;
    sp->seed = gp->sampling.seed + (uint64_t)i;
    if (!r->width && (st = sp_choice_sampler(e, r, i, sp, gp)) != SP_OK)
        return st;
    /* drafts are verified against the sampler alone: requests whose
     * tokens also pass a grammar mask or stages of their own decode
     * without them */
    if (e->spec && !r->width && !gp->explain && !gp->grammar && !gp->n_stages &&
        (st = sp_spec_seq_new(e->spec, sp, &c->spec)) != SP_OK)
        return st;
    if ((st = sp_stop_init(&c->stop, gp->stop, gp->n_stop)) != SP_OK)
        return st;
    sp_detok_init(&c->detok, e->vocab, false);
    c->tokens = malloc((size_t)e->n_ctx * sizeof *c->tokens);
    if (!c->tokens)
        return sp_error_set(SP_ERR_NOMEM, "request: no memory");
    memcpy(c->tokens, prompt, n_prompt * sizeof *prompt);
    c->n_tokens = (uint32_t)n_prompt;
    c->attempt = 1;
    if (gp->grammar) {
        c->gstate = sp_grammar_start(gp->grammar);
        if (c->gstate == SP_GRAMMAR_DEAD)
            return sp_error_set(SP_ERR_ARG, "grammar: cannot start (%s)", sp_error_message());
    }
    return SP_OK;
}

sp_status sp_request_submit(struct sp_engine *e, const sp_token *prompt, size_t n_prompt,
                            const struct sp_gen_params *gp, sp_event_fn fn, void *user, struct sp_request **out)
{
    struct sp_request *r;
    sp_status st;
    int n = gp->n > 0 ? gp->n : 1;
    int width = gp->beams > 1 ? gp->beams : 0;
    int n_seqs = width ? 2 * width : n; /* beams: the live set and the next set */
    bool retries = gp->grammar && gp->max_retries > 0 && !width;
    uint32_t budget = 0, max_pos = 0;
    if (out)
        *out = NULL;
    if ((st = sp_request_check(e, prompt, n_prompt, gp, n, width, fn || out)) != SP_OK ||
        (st = sp_request_admit(e, n_prompt, gp, n, n_seqs, retries, &budget, &max_pos)) != SP_OK)
        return st;

    r = calloc(1, sizeof *r);
    if (!r)
        return sp_error_set(SP_ERR_NOMEM, "request: no memory");
    r->e = e;
    r->gp = *gp;
    r->gp.stop = NULL;
    r->gp.n_stop = 0;
    r->gp.stages = NULL; /* each choice's sampler holds its copy */
    r->gp.n_stages = 0;
    r->gp.n = n;
    r->fn = fn;
    r->user = user;
    r->n_prompt = (uint32_t)n_prompt;
    r->t_submit = sp_engine_now();
    r->choices = calloc((size_t)n_seqs, sizeof *r->choices);
    if (!r->choices) {
        free(r);
        return sp_error_set(SP_ERR_NOMEM, "request: no memory");
    }
    r->n_choices = n_seqs;
    r->n_open = width ? 1 : n;
    r->width = width;
    r->budget_blocks = 0;
    struct sp_sampler_params sp = gp->sampling;
    if (gp->beams == 1)
        sp.temperature = 0.0f; /* a beam of width 1 is greedy search */
    sp.n_logprobs = gp->logprobs > 0 ? gp->logprobs : 0;
    for (int i = 0; i < n_seqs; i++)
        if ((st = sp_choice_init(e, r, i, &sp, gp, prompt, n_prompt)) != SP_OK)
            goto fail;
    r->retries = retries;
    r->stop0 = r->choices[0].stop;
    if (retries && !(r->plogits = malloc((size_t)e->model->hp.n_vocab * sizeof *r->plogits))) {
        st = sp_error_set(SP_ERR_NOMEM, "request: no memory");
        goto fail;
    }
    if (width && (st = sp_beam_request_init(r, prompt, (uint32_t)n_prompt)) != SP_OK)
        goto fail;
    /* reuse cached prompt blocks (never the last prompt token: its logits are needed) */
    r->n_cached = sp_memory_prefix_attach(e->mem, &r->choices[0].seq, prompt, (uint32_t)n_prompt - 1);
    r->n_prefilled = r->n_cached;
    r->budget_blocks = budget;
    r->max_pos = max_pos;
    e->committed_blocks += budget;
    e->n_running++;
    struct sp_request **tail = &e->active;
    while (*tail)
        tail = &(*tail)->next;
    *tail = r;
    if (out)
        *out = r;
    return SP_OK;

fail:
    sp_request_destroy(r);
    return st;
}

void sp_request_cancel(struct sp_request *r) { r->cancelled = true; }

bool sp_request_poll(struct sp_request *r, struct sp_token_event *ev) { return sp_evq_pop(&r->q, ev); }

bool sp_request_done(const struct sp_request *r)
{
    return (!r->e || r->q.n_final >= r->gp.n) && r->q.head == r->q.n;
}

void sp_request_free(struct sp_request *r)
{
    if (!r)
        return;
    if (r->e) { /* still running: it leaves the engine now, its slot and blocks free at once */
        struct sp_request **pp = &r->e->active;
        while (*pp != r)
            pp = &(*pp)->next;
        *pp = r->next;
        r->e->n_running--;
    }
    sp_request_destroy(r);
}

/* ---- events ---- */

void sp_choice_emit(struct sp_choice *c, sp_token id, const char *text, size_t len,
                    const struct sp_token_logprobs *lp, const struct sp_sampler_explain *explain,
                    enum sp_finish finish)
{
    struct sp_request *r = c->req;
    struct sp_token_event ev = {
        .choice = c->idx, .id = id, .text = text, .len = len, .lp = lp, .explain = explain,
        .finish = finish,
        .n_prompt = r->n_prompt, .n_cached = r->n_cached, .n_generated = c->n_generated,
        .logprob_sum = c->logprob_sum, .attempt = c->attempt > 0 ? c->attempt : 1,
        .retry = c->retry, .valid = c->valid, .error = c->err,
    };
    if (r->fn)
        r->fn(r->user, &ev);
    else
        sp_evq_push(&r->q, &ev);
}

static void sp_choice_advance(struct sp_engine *e, struct sp_choice *c, const float *logits);
static void sp_choice_restart(struct sp_engine *e, struct sp_choice *c);

bool sp_choice_record(struct sp_choice *c, const char *text, size_t len)
{
    if (!c->req->gp.grammar || !len)
        return true;
    if (c->n_out + len > c->cap_out) {
        size_t cap = c->cap_out ? c->cap_out : 1024;
        while (cap < c->n_out + len)
            cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p)
            return false;
        c->out = p;
        c->cap_out = cap;
    }
    memcpy(c->out + c->n_out, text, len);
    c->n_out += len;
    return true;
}

bool sp_choice_check(struct sp_request *r, struct sp_choice *c)
{
    struct sp_grammar *g = r->gp.grammar;
    r->why[0] = '\0';
    if (!sp_grammar_accepting(g, sp_grammar_feed(g, sp_grammar_start(g), c->out, c->n_out))) {
        snprintf(r->why, sizeof r->why, "the output ended before the grammar was complete");
        return false;
    }
    if (r->gp.validate && r->gp.validate(r->gp.validate_ctx, c->out, c->n_out, r->why, sizeof r->why) != SP_OK) {
        if (!r->why[0])
            snprintf(r->why, sizeof r->why, "the output failed validation");
        return false;
    }
    return true;
}

bool sp_choice_mask_row(struct sp_request *r, struct sp_choice *c, float *row, uint32_t n_vocab)
{
    const uint64_t *m;
    if (sp_grammar_mask(r->gp.grammar, c->gstate, &m, NULL) != SP_OK) {
        snprintf(r->why, sizeof r->why, "%s", sp_error_message());
        return false;
    }
    for (uint32_t i = 0; i < n_vocab; i++)
        if (!((m[i >> 6] >> (i & 63)) & 1))
            row[i] = -INFINITY;
    return true;
}

/* Ends c (final event).  A constrained choice that stopped is checked first
 * and, when invalid with retries left, starts over instead. */
void sp_choice_finish(struct sp_engine *e, struct sp_choice *c, enum sp_finish why)
{
    struct sp_request *r = c->req;
    size_t n = 0;
    if (c->done)
        return;
    if (why != SP_FINISH_CANCELLED && why != SP_FINISH_ERROR) {
        int k = sp_detok_flush(&c->detok, e->text, SP_TEXT_CAP);
        struct sp_stop_result sr;
        if (k > 0 && sp_stop_feed(&c->stop, e->text, (size_t)k, e->text2, &sr) == SP_OK)
            n = sr.n_emit;
        n += sp_stop_flush(&c->stop, e->text2 + n);
    }
    if (why == SP_FINISH_STOP && r->gp.grammar) {
        if (!sp_choice_record(c, e->text2, n)) {
            snprintf(r->why, sizeof r->why, "out of memory");
            why = SP_FINISH_ERROR;
        } else if (sp_choice_check(r, c)) {
            c->valid = true;
        } else if (r->retries && c->attempt <= r->gp.max_retries) {
            sp_choice_restart(e, c);
            return;
        } else {
            why = SP_FINISH_ERROR;
        }
        if (why == SP_FINISH_ERROR) {
            char msg[sizeof r->why];
            snprintf(msg, sizeof msg, "%s", r->why);
            snprintf(r->why, sizeof r->why, "attempt %d of %d: %.440s", c->attempt,
                     r->retries ? r->gp.max_retries + 1 : 1, msg);
            n = 0;
        }
    }
    c->done = true;
    r->n_open--;
    sp_memory_seq_release(e->mem, &c->seq);
    c->err = why == SP_FINISH_ERROR && r->why[0] ? r->why : NULL;
    sp_spec_seq_free(e->spec, c->spec);
    c->spec = NULL;
    sp_choice_emit(c, -1, e->text2, n, NULL, NULL, why);
    c->err = NULL;
}

/* Starts an invalid choice over from the prompt with a new seed: a retry
 * event voids what it sent, then it draws its first token again from the
 * prompt's saved logits. */
static void sp_choice_restart(struct sp_engine *e, struct sp_choice *c)
{
    struct sp_request *r = c->req;
    c->retry = true;
    c->err = r->why;
    sp_choice_emit(c, -1, "", 0, NULL, NULL, SP_FINISH_NONE);
    c->retry = false;
    c->err = NULL;
    c->attempt++;
    sp_memory_seq_release(e->mem, &c->seq);
    if (sp_memory_seq_fork(e->mem, &c->seq, &r->pseq) != SP_OK) {
        snprintf(r->why, sizeof r->why, "no KV blocks to start attempt %d", c->attempt);
        sp_choice_finish(e, c, SP_FINISH_ERROR);
        return;
    }
    c->n_tokens = r->n_prompt;
    c->n_generated = 0;
    c->logprob_sum = 0.0;
    c->n_out = 0;
    sp_detok_init(&c->detok, e->vocab, false);
    c->stop = r->stop0;
    c->gstate = sp_grammar_start(r->gp.grammar);
    sp_sampler_reset(c->sampler);
    sp_sampler_set_seed(c->sampler, r->gp.sampling.seed + (uint64_t)c->idx + 0x9E3779B97F4A7C15ull * (uint64_t)(c->attempt - 1));
    sp_choice_advance(e, c, r->plogits);
}

/* Ends every open choice of r with `why` (cancel, internal error). */
static void sp_request_end(struct sp_engine *e, struct sp_request *r, enum sp_finish why)
{
    if (!r->width) {
        for (int i = 0; i < r->n_choices; i++)
            sp_choice_finish(e, &r->choices[i], why);
        return;
    }
    if (r->n_open == 0)
        return;
    for (int i = 0; i < r->n_choices; i++) {
        sp_memory_seq_release(e->mem, &r->choices[i].seq);
        r->choices[i].done = true;
    }
    for (int k = 0; k < r->gp.n; k++) {
        r->choices[k].idx = k;
        r->choices[k].n_generated = 0;
        sp_choice_emit(&r->choices[k], -1, "", 0, NULL, NULL, why);
    }
    r->n_open = 0;
}

/* Samples from `logits` for choice c, appends, streams, checks the ends. */
static void sp_choice_advance(struct sp_engine *e, struct sp_choice *c, const float *logits)
{
    struct sp_request *r = c->req;
    struct sp_token_logprobs *lp = r->gp.logprobs >= 0 ? &e->lp : NULL;
    if (r->gp.grammar) {
        const uint64_t *m;
        if (sp_grammar_mask(r->gp.grammar, c->gstate, &m, NULL) != SP_OK) {
            snprintf(r->why, sizeof r->why, "%s", sp_error_message());
            sp_choice_finish(e, c, SP_FINISH_ERROR);
            return;
        }
        sp_sampler_set_mask(c->sampler, m);
    }
    const struct sp_sampler_explain *xp = NULL;
    if (r->gp.explain && sp_sampler_explain_data(c->sampler, logits, c->tokens, c->n_tokens,
                                                 &e->explain) == SP_OK)
        xp = &e->explain;
    sp_token t = sp_sampler_sample(c->sampler, logits, c->tokens, c->n_tokens, lp);
    if (t < 0) {
        snprintf(r->why, sizeof r->why, "%s", sp_error_message());
        sp_choice_finish(e, c, SP_FINISH_ERROR);
        return;
    }
    sp_sampler_accept(c->sampler, t);
    sp_choice_take(e, c, t, lp, xp);
}

void sp_choice_take(struct sp_engine *e, struct sp_choice *c, sp_token t, const struct sp_token_logprobs *lp,
                    const struct sp_sampler_explain *xp)
{
    struct sp_request *r = c->req;
    if (r->gp.grammar && !sp_vocab_is_eog(e->vocab, t))
        c->gstate = sp_grammar_advance(r->gp.grammar, c->gstate, t);
    if (r->t_first == 0.0)
        r->t_first = sp_engine_now();
    bool eog = !r->gp.ignore_eos && sp_vocab_is_eog(e->vocab, t);
    if (eog) {
        sp_choice_finish(e, c, SP_FINISH_STOP);
        return;
    }
    c->tokens[c->n_tokens++] = t;
    c->n_generated++;
    if (lp)
        c->logprob_sum += lp->logprob;
    int k = sp_detok_push(&c->detok, t, e->text, SP_TEXT_CAP);
    struct sp_stop_result sr = {0, false};
    if (k < 0)
        k = 0;
    sp_stop_feed(&c->stop, e->text, (size_t)k, e->text2, &sr);
    if (!sp_choice_record(c, e->text2, sr.n_emit)) {
        snprintf(r->why, sizeof r->why, "out of memory");
        sp_choice_finish(e, c, SP_FINISH_ERROR);
        return;
    }
    sp_choice_emit(c, t, e->text2, sr.n_emit, lp, xp, SP_FINISH_NONE);
    if (sr.stopped)
        sp_choice_finish(e, c, SP_FINISH_STOP);
    else if ((r->gp.max_tokens > 0 && c->n_generated >= (uint32_t)r->gp.max_tokens) || c->n_tokens >= r->max_pos)
        sp_choice_finish(e, c, SP_FINISH_LENGTH);
}

/* Prefill done for r: fork the other choices from choice 0's sequence. */
static sp_status sp_request_fork(struct sp_engine *e, struct sp_request *r)
{
    if (r->width)
        return SP_OK; /* beams fork as they are chosen */
    if (r->retries) {
        sp_status st = sp_memory_seq_fork(e->mem, &r->pseq, &r->choices[0].seq);
        if (st != SP_OK)
            return st;
    }
    for (int i = 1; i < r->n_choices; i++) {
        sp_status st = sp_memory_seq_fork(e->mem, &r->choices[i].seq, &r->choices[0].seq);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

/* ---- the step ---- */

bool sp_engine_batch_add(struct sp_engine *e, int *n, sp_token tok, int32_t pos, struct sp_memory_seq *seq)
{
    if (sp_memory_seq_reserve(e->mem, seq, (uint32_t)pos + 1) != SP_OK)
        return false;
    e->b_tokens[*n] = tok;
    e->b_pos[*n] = pos;
    e->b_seqs[*n] = seq;
    (*n)++;
    return true;
}

static void sp_engine_reap(struct sp_engine *e)
{
    struct sp_request **pp = &e->active;
    while (*pp) {
        struct sp_request *r = *pp;
        if (r->cancelled)
            sp_request_end(e, r, SP_FINISH_CANCELLED);
        if (r->n_open == 0) {
            double now = sp_engine_now();
            e->timing.t_first_token_s = r->t_first ? r->t_first - r->t_submit : 0.0;
            e->timing.t_prefill_s = r->t_prefilled ? r->t_prefilled - r->t_submit : 0.0;
            e->timing.t_decode_s = r->t_prefilled ? now - r->t_prefilled : 0.0;
            e->timing.n_prefill = r->n_prompt - r->n_cached;
            e->timing.n_decode = 0;
            for (int i = 0; i < r->n_choices; i++)
                e->timing.n_decode += r->choices[i].n_generated;
            e->timing.n_drafted = r->n_drafted;
            e->timing.n_accepted = r->n_accepted;
            *pp = r->next;
            e->n_running--;
            if (!r->fn)
                sp_request_release(r); /* the caller polls what is left, then frees it */
            else
                sp_request_destroy(r);
            continue;
        }
        pp = &r->next;
    }
}

int sp_engine_step(struct sp_engine *e)
{
    int n = 0, n_out = 0;
    sp_engine_reap(e);
    if (e->spec) {
        uint32_t waiting = 0;
        for (struct sp_request *r = e->active; r; r = r->next)
            if (r->state == SP_REQ_PREFILL && !r->cancelled)
                waiting += r->n_prompt - r->n_prefilled;
        sp_engine_spec_draft(e, waiting);
    }
    /* 1. one token for every decoding choice, then its drafts */
    for (struct sp_request *r = e->active; r; r = r->next) {
        if (r->state != SP_REQ_DECODE)
            continue;
        if (r->width && (n_out + r->n_live > e->n_out_max || n + r->n_live > e->n_batch))
            continue; /* a beam step needs every live beam's logits at once */
        for (int i = 0; i < r->n_choices; i++) {
            struct sp_choice *c = &r->choices[i];
            if (c->done)
                continue;
            if (n_out >= e->n_out_max || n >= e->n_batch) {
                sp_engine_spec_drop(e, c, 0, false); /* not in this step after all */
                continue;
            }
            if (!sp_engine_batch_add(e, &n, c->tokens[c->n_tokens - 1], (int32_t)c->n_tokens - 1, &c->seq)) {
                sp_choice_finish(e, c, SP_FINISH_LENGTH); /* KV exhausted: cannot grow */
                continue;
            }
            e->b_out_idx[n_out] = n - 1;
            e->b_out_choice[n_out++] = c;
            for (uint32_t j = 0; j < c->n_draft; j++) {
                if (n_out >= e->n_out_max || n >= e->n_batch ||
                    !sp_engine_batch_add(e, &n, c->tokens[c->n_tokens + j], (int32_t)(c->n_tokens + j), &c->seq)) {
                    sp_engine_spec_drop(e, c, j, true);
                    break;
                }
                e->b_out_idx[n_out] = n - 1;
                e->b_out_choice[n_out++] = NULL; /* verified with c's first row */
            }
        }
    }
    /* 2. prompt chunks with the remaining token budget */
    for (struct sp_request *r = e->active; r && n < e->n_batch; r = r->next) {
        if (r->state != SP_REQ_PREFILL || r->cancelled)
            continue;
        struct sp_choice *c0 = &r->choices[0];
        uint32_t take = r->n_prompt - r->n_prefilled;
        if (take > (uint32_t)(e->n_batch - n))
            take = (uint32_t)(e->n_batch - n);
        bool last = r->n_prefilled + take == r->n_prompt;
        if (last && n_out >= e->n_out_max) {
            if (take <= 1)
                continue;
            take--, last = false;
        }
        uint32_t i;
        for (i = 0; i < take; i++)
            if (!sp_engine_batch_add(e, &n, c0->tokens[r->n_prefilled + i], (int32_t)(r->n_prefilled + i), &c0->seq))
                break;
        r->n_prefilled += i;
        if (last && i == take) {
            e->b_out_idx[n_out] = n - 1;
            e->b_out_choice[n_out++] = c0;
        }
    }
    if (n == 0) {
        sp_engine_reap(e);
        return (int)e->n_running;
    }
    struct sp_forward_batch fb = {n, e->b_tokens, e->b_pos, e->b_seqs, e->b_out_idx, n_out, 0};
    double t0 = sp_engine_now();
    if (sp_forward(e->model, e->mem, &e->fs, e->pool, &fb, e->logits) != SP_OK) {
        for (struct sp_request *r = e->active; r; r = r->next)
            sp_request_end(e, r, SP_FINISH_ERROR);
        sp_engine_reap(e);
        return -1;
    }
    /* register newly completed blocks with the prefix cache (a sequence
     * with drafts in the batch does once it knows which it keeps) */
    for (struct sp_request *r = e->active; r; r = r->next)
        for (int i = 0; i < r->n_choices; i++)
            if (!r->choices[i].done && !r->choices[i].n_draft)
                sp_memory_prefix_commit(e->mem, &r->choices[i].seq, r->choices[i].tokens);
    for (int o = 0; o < n_out; o++) {
        struct sp_choice *c = e->b_out_choice[o];
        if (!c)
            continue; /* a draft's row */
        struct sp_request *r = c->req;
        const float *lg = e->logits + (size_t)o * e->model->hp.n_vocab;
        if (r->state == SP_REQ_PREFILL) {
            r->state = SP_REQ_DECODE;
            r->t_prefilled = sp_engine_now();
            if (sp_request_fork(e, r) != SP_OK) {
                sp_request_end(e, r, SP_FINISH_ERROR);
                continue;
            }
            if (r->plogits)
                memcpy(r->plogits, lg, (size_t)e->model->hp.n_vocab * sizeof *lg);
            if (r->width) {
                r->rows[0] = lg;
                sp_beam_advance(e, r);
                continue;
            }
            for (int i = 0; i < r->n_choices; i++)
                sp_choice_advance(e, &r->choices[i], lg);
        } else if (r->width) {
            r->rows[c->idx - r->live] = lg;
            if (c->idx - r->live == r->n_live - 1)
                sp_beam_advance(e, r); /* the last live beam's row: all are in */
        } else if (!c->done && c->n_draft) {
            sp_engine_spec_verify(e, c, lg);
        } else if (!c->done) {
            sp_choice_advance(e, c, lg);
        }
    }
    /* the step's whole cost, the forward and every row's sampling and
     * verification: a draft row costs both */
    if (e->spec)
        sp_spec_observe(e->spec, n, n_out, sp_engine_now() - t0);
    sp_engine_reap(e);
    return (int)e->n_running;
}

sp_status sp_engine_logits(struct sp_engine *e, const sp_token *prompt, size_t n_prompt, size_t first,
                           sp_logits_fn fn, void *user)
{
    struct sp_memory_seq seq = {0};
    sp_status st = SP_OK;
    const uint32_t n_vocab = e->model->hp.n_vocab;
    if (e->model->arch->bidirectional)
        return sp_error_set(SP_ERR_UNSUPPORTED, "a %s model computes embeddings only (no logits)",
                            e->model->arch->name);
    if (n_prompt == 0 || n_prompt > (size_t)e->n_ctx)
        return sp_error_set(SP_ERR_CONTEXT, "the prompt has %zu tokens; the context holds %d", n_prompt, e->n_ctx);
    if (first >= n_prompt)
        first = n_prompt - 1;
    for (size_t done = 0; done < n_prompt;) {
        int n = 0, n_out = 0;
        /* positions >= first want logits: keep those chunks within the output rows */
        size_t cap = done + (size_t)e->n_batch > first ? (size_t)e->n_out_max : (size_t)e->n_batch;
        size_t take = n_prompt - done < cap ? n_prompt - done : cap;
        if (done < first && done + take > first)
            take = first - done;
        for (size_t i = 0; i < take; i++) {
            if (!sp_engine_batch_add(e, &n, prompt[done + i], (int32_t)(done + i), &seq)) {
                st = sp_error_set(SP_ERR_FULL, "the KV cache cannot hold %zu tokens", n_prompt);
                goto release;
            }
            if (done + i >= first)
                e->b_out_idx[n_out++] = n - 1;
        }
        struct sp_forward_batch fb = {n, e->b_tokens, e->b_pos, e->b_seqs, e->b_out_idx, n_out, 0};
        if ((st = sp_forward(e->model, e->mem, &e->fs, e->pool, &fb, e->logits)) != SP_OK)
            goto release;
        for (int o = 0; o < n_out; o++)
            fn(user, done + (size_t)e->b_out_idx[o], e->logits + (size_t)o * n_vocab);
        done += take;
    }
release:
    sp_memory_seq_release(e->mem, &seq);
    return st;
}

void sp_engine_observe(struct sp_engine *e, sp_matmul_observer fn, void *user)
{
    e->fs.observe = fn;
    e->fs.observe_ud = user;
}
