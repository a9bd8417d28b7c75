/* sp_server_run: wiring, signals and the graceful drain. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/server.h"

void sp_server_config_default(struct sp_server_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->n_parallel = 4;
    c->max_queue = 64;
    c->max_body = 4u << 20;
    c->max_n = 8;
    c->sampling = (struct sp_server_sampling){NAN, NAN, NAN, NAN, INT32_MIN, INT32_MIN};
}

/* The id clients send as `model`: the file name without directory or .gguf. */
static char *sp_model_id(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    return strndup(base, n);
}

sp_status sp_server_run(const sp_model *model, const struct sp_server_config *cfg)
{
    sp_status st;
    struct sp_metrics metrics;
    struct sp_sched *sched = NULL;
    struct sp_http *http = NULL;
    struct sp_engine *engine = NULL;
    sigset_t sigs, old_sigs;
    sp_model_info info;

    sp_model_info_get(model, &info);
    char *model_id = sp_model_id(info.path);
    if (!model_id)
        return sp_error_set(SP_ERR_NOMEM, "server: out of memory");
    struct sp_engine_params ep;
    sp_engine_params_default(&ep);
    ep.n_threads = cfg->n_threads;
    ep.n_ctx = cfg->n_ctx;
    ep.n_parallel = cfg->n_parallel;
    ep.kv_mem_mib = cfg->kv_mem_mib;
    ep.spec = cfg->spec;
    ep.spec_k = cfg->spec_k ? cfg->spec_k : ep.spec_k;
    ep.spec_fixed = cfg->spec_fixed;
    ep.draft_model = cfg->draft_model;
    ep.spec_layers = cfg->spec_layers;
    /* Everything that can refuse the configuration happens before the
     * port is bound: a server that listens can serve. */
    if ((st = sp_engine_create(model, &ep, &engine)) != SP_OK)
        goto free_id;

    /* Every thread started below inherits this mask, so SIGINT/SIGTERM are
     * only ever taken by sigtimedwait() here. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, &old_sigs);
    signal(SIGPIPE, SIG_IGN);

    sp_metrics_init(&metrics);
    if ((st = sp_sched_start(&sched, engine, cfg->max_queue, cfg->n_parallel, &cfg->sampling, &metrics)) !=
        SP_OK)
        goto free_metrics; /* the scheduler freed the engine */
    if ((st = sp_http_start(&http, cfg, sched, &metrics, model_id)) != SP_OK)
        goto stop_sched;
    fprintf(stderr, "spindle: listening on http://%s:%d (model '%s', context %d tokens, %d parallel)\n",
            cfg->host ? cfg->host : "127.0.0.1", sp_http_port(http), model_id, sp_sched_n_ctx(sched),
            cfg->n_parallel);
    for (;;) {
        int sig = sigwaitinfo(&sigs, NULL);
        if (sig == SIGINT || sig == SIGTERM)
            break;
    }
    fprintf(stderr, "spindle: shutting down: finishing requests in flight\n");
    sp_http_drain(http);
    sp_http_wait_idle(http);
    sp_http_stop(http);
stop_sched:
    sp_sched_stop(sched);
free_metrics:
    sp_metrics_free(&metrics);
    pthread_sigmask(SIG_SETMASK, &old_sigs, NULL);
free_id:
    free(model_id);
    return st;
}
