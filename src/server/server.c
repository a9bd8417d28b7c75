/* sp_server_main: wiring, signals and the graceful drain. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    c->max_retries = 4;
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

int sp_server_main(const struct sp_server_config *cfg)
{
    int rc = 1;
    struct sp_metrics metrics;
    struct sp_sched *sched = NULL;
    struct sp_http *http = NULL;
    sigset_t sigs;

    /* Every thread started below inherits this mask, so SIGINT/SIGTERM are
     * only ever taken by sigtimedwait() here. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char *model_id = sp_model_id(cfg->model_path);
    if (!model_id) {
        fprintf(stderr, "spindle: out of memory\n");
        return 1;
    }
    sp_metrics_init(&metrics);

    struct sp_engine_params ep = {
        .model_path = cfg->model_path,
        .n_threads = cfg->n_threads,
        .n_ctx = cfg->n_ctx,
        .n_parallel = cfg->n_parallel,
        .kv_mem_mib = cfg->kv_mem_mib,
    };
    if (sp_sched_start(&sched, &ep, cfg->max_queue, cfg->n_parallel, &metrics) != SP_OK) {
        fprintf(stderr, "spindle: %s\n", sp_error_message());
        goto free_metrics;
    }
    /* Listen at once: /health says 503 until the model is loaded. */
    if (sp_http_start(&http, cfg, sched, &metrics, model_id) != SP_OK) {
        fprintf(stderr, "spindle: %s\n", sp_error_message());
        goto stop_sched;
    }
    fprintf(stderr, "spindle: listening on http://%s:%d (model '%s' loading)\n",
            cfg->host ? cfg->host : "127.0.0.1", sp_http_port(http), model_id);

    bool announced = false;
    for (;;) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 200 * 1000 * 1000};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM)
            break;
        const char *fail = sp_sched_failed(sched);
        if (fail) {
            fprintf(stderr, "spindle: %s\n", fail);
            goto stop_http;
        }
        if (!announced && sp_sched_ready(sched)) {
            fprintf(stderr, "spindle: ready (context %d tokens, %d parallel)\n",
                    sp_sched_n_ctx(sched), cfg->n_parallel);
            announced = true;
        }
    }
    fprintf(stderr, "spindle: shutting down: finishing requests in flight\n");
    sp_http_drain(http);
    sp_http_wait_idle(http);
    rc = 0;
stop_http:
    sp_http_stop(http);
stop_sched:
    sp_sched_stop(sched);
free_metrics:
    sp_metrics_free(&metrics);
    free(model_id);
    return rc;
}
