/* Engines made from a public sp_model, text prompts, and the memory
 * bandwidth probe.  The engine and its requests are the engine room's own
 * (src/engine); this file only connects them to sp_model. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"
#include "core/error.h"
#include "core/pool.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

sp_status sp_engine_create(const sp_model *m, const sp_engine_params *p, sp_engine **out)
{
    sp_engine_params ep;
    if (!out)
        return sp_error_set(SP_ERR_ARG, "sp_engine_create: out is NULL");
    *out = NULL;
    if (!m->weights)
        return sp_error_set(SP_ERR_ARG, "%s: loaded with vocab_only: it has no weights to run", m->path);
    if (p)
        ep = *p;
    else
        sp_engine_params_default(&ep);
    if (ep.n_threads <= 0)
        ep.n_threads = m->n_threads;
    const sp_model *d = ep.draft_model;
    if (d && !d->weights)
        return sp_error_set(SP_ERR_ARG, "%s: loaded with vocab_only: it cannot draft", d->path);
    return sp_engine_init(out, m->weights, m->vocab, &ep, d ? d->weights : NULL, d ? d->vocab : NULL);
}

sp_status sp_request_submit_text(sp_engine *e, const char *text, size_t len, bool parse_special,
                                 const sp_gen_params *gp, sp_event_fn fn, void *user, sp_request **out)
{
    sp_token *toks = NULL;
    size_t n = 0;
    if (out)
        *out = NULL;
    sp_status st = sp_tokenize_alloc(sp_engine_vocab(e), text, len, true, parse_special, &toks, &n);
    if (st == SP_OK)
        st = sp_request_submit(e, toks, n, gp, fn, user, out);
    free(toks);
    return st;
}

/* ---- memory read bandwidth ---- */

struct sp_bw_job {
    const uint64_t *buf;
    size_t n;
    uint64_t sink[64 * 8];
};

static void sp_bw_run(void *arg, int ith, int nth)
{
    struct sp_bw_job *j = arg;
    long lo, hi;
    sp_pool_split((long)j->n, 64, ith, nth, &lo, &hi);
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (long i = lo; i + 4 <= hi; i += 4) {
        a0 += j->buf[i];
        a1 += j->buf[i + 1];
        a2 += j->buf[i + 2];
        a3 += j->buf[i + 3];
    }
    j->sink[(ith % 64) * 8] = a0 + a1 + a2 + a3;
}

static double sp_bw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

sp_status sp_memory_read_bandwidth(int n_threads, double *gb_s)
{
    size_t bytes = (size_t)1 << 30, n = bytes / sizeof(uint64_t);
    struct sp_pool *pool = NULL;
    *gb_s = 0.0;
    uint64_t *buf = aligned_alloc(64, bytes);
    if (!buf)
        return sp_error_set(SP_ERR_NOMEM, "bandwidth: cannot allocate 1 GiB");
    sp_status st = sp_pool_init(&pool, n_threads);
    if (st != SP_OK) {
        free(buf);
        return st;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    struct sp_bw_job j = {buf, n, {0}};
    for (int r = 0; r < 5; r++) {
        double t0 = sp_bw_now();
        sp_pool_run(pool, sp_bw_run, &j);
        double gbs = bytes / (sp_bw_now() - t0) / 1e9;
        *gb_s = gbs > *gb_s ? gbs : *gb_s;
    }
    sp_pool_free(pool);
    free(buf);
    return SP_OK;
}
