/* sp_server_main: wiring, signals and the graceful drain. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    c->drain_timeout_s = 60;
}

static const char sp_replica_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-";

bool sp_server_replica_id_valid(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    return n >= 1 && n <= SP_REPLICA_ID_MAX && strspn(id, sp_replica_chars) == n;
}

/* The default replica id: the host name (a pod's name under Kubernetes),
 * with characters a replica id cannot hold replaced by '-'. */
static void sp_default_replica_id(char out[SP_REPLICA_ID_MAX + 1])
{
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "spindle");
    size_t n = strnlen(host, SP_REPLICA_ID_MAX);
    memcpy(out, host, n);
    out[n] = '\0';
    for (char *p = out; *p; p++)
        if (!strchr(sp_replica_chars, *p))
            *p = '-';
}

#define SP_DRAIN_POLL_NS (50 * 1000 * 1000)
/* Requests the drain ended still need their threads to send the error. */
#define SP_ABORT_GRACE_S 10.0

/* Waits until no request is in flight (true), or until timeout_s passes
 * (0: no limit) or another SIGINT/SIGTERM arrives (false). */
static bool sp_wait_idle(struct sp_http *http, const sigset_t *sigs, double timeout_s)
{
    double deadline = timeout_s > 0 ? sp_now() + timeout_s : 0;
    while (sp_http_active(http) > 0) {
        if (deadline > 0 && sp_now() >= deadline)
            return false;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = SP_DRAIN_POLL_NS};
        int sig = sigtimedwait(sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM)
            return false;
    }
    return true;
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

    struct sp_server_config c = *cfg;
    char replica[SP_REPLICA_ID_MAX + 1];
    if (!c.replica_id) {
        sp_default_replica_id(replica);
        c.replica_id = replica;
    }
    if (!sp_server_replica_id_valid(c.replica_id)) {
        fprintf(stderr, "spindle: replica id '%s' is not 1-%d characters of [A-Za-z0-9._:-]\n",
                c.replica_id, SP_REPLICA_ID_MAX);
        return 1;
    }
    char *model_id = sp_model_id(cfg->model_path);
    if (!model_id) {
        fprintf(stderr, "spindle: out of memory\n");
        return 1;
    }
    sp_metrics_init(&metrics, c.replica_id);

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
    if (sp_http_start(&http, &c, sched, &metrics, model_id) != SP_OK) {
        fprintf(stderr, "spindle: %s\n", sp_error_message());
        goto stop_sched;
    }
    fprintf(stderr, "spindle: listening on http://%s:%d (replica '%s', model '%s' loading)\n",
            cfg->host ? cfg->host : "127.0.0.1", sp_http_port(http), c.replica_id, model_id);

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
    sp_http_drain(http);
    fprintf(stderr, "spindle: draining: finishing %d request(s) in flight\n",
            sp_http_active(http));
    if (!sp_wait_idle(http, &sigs, cfg->drain_timeout_s)) {
        fprintf(stderr, "spindle: drain cut short: ending %d request(s) still in flight\n",
                sp_http_active(http));
        sp_sched_abort(sched);
        if (!sp_wait_idle(http, &sigs, SP_ABORT_GRACE_S))
            fprintf(stderr, "spindle: %d request(s) still sending; closing their connections\n",
                    sp_http_active(http));
    }
    fprintf(stderr, "spindle: drained\n");
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
