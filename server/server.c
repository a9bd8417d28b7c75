/* sp_server_run: wiring, signals and the graceful drain. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"

void sp_server_config_default(struct sp_server_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->n_parallel = 4;
    c->max_queue = 64;
    c->max_body = 4u << 20;
    c->max_connections = 512;
    c->recv_timeout_s = 30;
    c->max_n = 8;
    c->sampling = (struct sp_server_sampling){NAN, NAN, NAN, NAN, INT32_MIN, INT32_MIN};
    c->drain_timeout_s = 60;
    c->max_retries = 4;
    c->models_max = SP_SERVER_MODELS_MAX;
    c->keep_alive_s = SP_SERVER_KEEP_ALIVE_S;
    sp_model_params_default(&c->model_params);
}

bool sp_server_duration_parse(const char *s, double *out)
{
    static const struct {
        const char *unit;
        double seconds;
    } units[] = {{"ns", 1e-9}, {"us", 1e-6}, {"\xc2\xb5s", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
    if (!s || !*s)
        return false;
    char *end = NULL;
    double v = strtod(s, &end);
    if (*end == '\0' && end != s && isfinite(v)) { /* a number of seconds */
        *out = v < 0 ? -1 : v;
        return true;
    }
    const char *p = s;
    bool neg = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    double total = 0;
    do {
        if (!(*p >= '0' && *p <= '9') && *p != '.')
            return false;
        v = strtod(p, &end);
        if (end == p || !isfinite(v))
            return false;
        p = end;
        size_t best = 0, k = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            size_t n = strlen(units[i].unit);
            if (n > best && !strncmp(p, units[i].unit, n)) {
                best = n;
                k = i;
            }
        }
        if (!best)
            return false;
        total += v * units[k].seconds;
        p += best;
    } while (*p);
    if (!isfinite(total))
        return false;
    *out = neg && total > 0 ? -1 : total;
    return true;
}

bool sp_server_alias_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] <= 0x20 || (unsigned char)name[i] >= 0x7f)
            return false;
    return n >= 1 && n <= 128;
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

/* The signals that start the drain (and, arriving again, cut it short):
 * SIGINT, SIGTERM, and SIGHUP, which a supervisor or a closing terminal
 * sends and which would otherwise end the process without draining. */
static void sp_stop_signals(sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGHUP);
}

static bool sp_is_stop_signal(int sig)
{
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
}

#define SP_DRAIN_POLL_NS (50 * 1000 * 1000)
/* Requests the drain ended still need their threads to send the error. */
#define SP_ABORT_GRACE_S 10.0

/* Waits until no request is in flight (true), or until timeout_s passes
 * (0: no limit) or another stop signal arrives (false). */
static bool sp_wait_idle(struct sp_http *http, const sigset_t *sigs, double timeout_s)
{
    double deadline = timeout_s > 0 ? sp_now() + timeout_s : 0;
    while (sp_http_active(http) > 0) {
        if (deadline > 0 && sp_now() >= deadline)
            return false;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = SP_DRAIN_POLL_NS};
        int sig = sigtimedwait(sigs, NULL, &ts);
        if (sp_is_stop_signal(sig))
            return false;
    }
    return true;
}

/* Once nothing is in flight, a balancer may still send requests here until
 * it learns of the drain (from the first 503 it meets or a failed health
 * check).  A connection that arrives as the listening socket closes is
 * reset with its request unanswered, which a balancer must not replay (it
 * cannot tell that from a crash), so the server goes on answering 503 until
 * nothing has arrived for SP_DRAIN_QUIET_S, for at most SP_DRAIN_LINGER_S
 * or until another stop signal. */
#define SP_DRAIN_QUIET_S 0.5
#define SP_DRAIN_LINGER_S 5.0

static void sp_wait_quiet(struct sp_http *http, const sigset_t *sigs)
{
    double deadline = sp_now() + SP_DRAIN_LINGER_S;
    while (sp_http_quiet_s(http) < SP_DRAIN_QUIET_S && sp_now() < deadline) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = SP_DRAIN_POLL_NS};
        int sig = sigtimedwait(sigs, NULL, &ts);
        if (sp_is_stop_signal(sig))
            return;
    }
}

/* Descriptors kept free for the process beside the connections: the
 * listening socket, libmicrohttpd's inter-thread channel, standard
 * streams, files the server opens while it runs. */
#define SP_FD_RESERVE 8

/* The descriptors this process has open now (/proc/self/fd); 64 when that
 * cannot be read. */
static long sp_fds_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 64;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* Lowers c->max_connections to what the file descriptor limit holds: a
 * connection uses its socket and, while a request runs, an eventfd; the
 * overflow connections (SP_HTTP_OVERFLOW) a socket each.  The soft limit
 * is first raised to the hard one.  Accepting past the limit would make
 * accept() fail, which libmicrohttpd retries in a busy loop, and requests
 * that got a socket would fail for want of an eventfd.  SP_ERR_ARG when
 * the limit leaves no room for one connection. */
static sp_status sp_fit_connections(struct sp_server_config *c)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return SP_OK;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        return SP_OK;
    long room = (long)rl.rlim_cur - sp_fds_open() - SP_FD_RESERVE - (long)SP_HTTP_OVERFLOW;
    if (room < 2)
        return sp_error_set(SP_ERR_ARG, "the file descriptor limit (ulimit -n %llu) leaves no room for connections",
                            (unsigned long long)rl.rlim_cur);
    if (room / 2 < c->max_connections) {
        c->max_connections = (int)(room / 2);
        fprintf(stderr, "spindle: serving at most %d connections: the file descriptor limit is %llu (ulimit -n)\n",
                c->max_connections, (unsigned long long)rl.rlim_cur);
    }
    return SP_OK;
}

/* The id clients send as `model`: the file name without directory or
 * .gguf (or a split model's -0000i-of-0000K.gguf), as --models-dir names it. */
static char *sp_server_model_id(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    bool later_part;
    if (n > 5 && !strcmp(base + n - 5, ".gguf") && sp_router_model_name(base, n, &later_part) > 0)
        n = sp_router_model_name(base, n, &later_part);
    return strndup(base, n);
}

void sp_server_engine_params(const struct sp_server_config *c, struct sp_engine_params *ep)
{
    sp_engine_params_default(ep);
    ep->n_threads = c->n_threads;
    ep->n_ctx = c->n_ctx;
    ep->n_parallel = c->n_parallel;
    ep->kv_mem_mib = c->kv_mem_mib;
    ep->cache_type_k = c->cache_type_k;
    ep->cache_type_v = c->cache_type_v;
    ep->spec = c->spec;
    ep->spec_k = c->spec_k ? c->spec_k : ep->spec_k;
    ep->spec_fixed = c->spec_fixed;
    ep->draft_model = c->draft_model;
    ep->spec_layers = c->spec_layers;
}

/* The line printed once the server listens. */
static void sp_server_listening(const struct sp_server_config *c, struct sp_http *http, struct sp_sched *sched,
                                struct sp_router *router, const char *model_id)
{
    const char *host = c->host ? c->host : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL; /* an IPv6 address goes in brackets in a URL */
    fprintf(stderr, "spindle: listening on http://%s%s%s:%d (replica '%s', ", v6 ? "[" : "", host, v6 ? "]" : "",
            sp_http_port(http), c->replica_id);
    char budget[64] = "";
    if (c->memory_budget)
        snprintf(budget, sizeof budget, ", memory budget %.1f MiB", c->memory_budget / 1048576.0);
    if (router)
        fprintf(stderr, "%zu models in '%s', at most %d loaded%s, %d parallel each, keep-alive %g s)\n",
                sp_router_count(router), c->models_dir ? c->models_dir : "the list", c->models_max, budget,
                c->n_parallel, c->keep_alive_s);
    else
        fprintf(stderr, "model '%s', context %d tokens, %d parallel)\n", model_id, sp_sched_n_ctx(sched),
                c->n_parallel);
}

sp_status sp_server_run(const sp_model *model, const struct sp_server_config *cfg)
{
    sp_status st;
    struct sp_metrics metrics;
    struct sp_sched *sched = NULL;
    struct sp_router *router = NULL;
    struct sp_http *http = NULL;
    sp_engine *engine = NULL;
    sigset_t sigs, old_sigs;
    struct sp_server_config c = *cfg;
    char replica[SP_REPLICA_ID_MAX + 1];
    struct addrinfo *addrs = NULL;
    char *model_id = NULL;

    if (!c.replica_id) {
        sp_default_replica_id(replica);
        c.replica_id = replica;
    }
    if (!sp_server_replica_id_valid(c.replica_id))
        return sp_error_set(SP_ERR_ARG, "replica id '%s' is not 1-%d characters of [A-Za-z0-9._:-]",
                            c.replica_id, SP_REPLICA_ID_MAX);
    if (model) {
        sp_model_info info;
        sp_model_info_get(model, &info);
        if (!(model_id = sp_server_model_id(info.path)))
            return sp_error_set(SP_ERR_NOMEM, "server: out of memory");
    }
    /* A host that does not resolve is refused before the engine is made or anything is printed. */
    if ((st = sp_http_resolve(c.host ? c.host : "127.0.0.1", c.port, &addrs)) != SP_OK)
        goto free_id;
    if ((st = sp_fit_connections(&c)) != SP_OK)
        goto free_id;
    /* Everything that can refuse the configuration happens before the
     * port is bound: a server that listens can serve (a balancer's health
     * check fails on a replica still loading as it would on a 503).  With
     * --models-dir, each model loads on its first request instead. */
    sp_metrics_init(&metrics, c.replica_id);
    struct sp_engine_params ep;
    sp_server_engine_params(&c, &ep);
    if (model ? (st = sp_engine_create(model, &ep, &engine)) != SP_OK
              : (st = sp_router_open(&router, &c, &metrics)) != SP_OK)
        goto free_metrics;

    /* Every thread started below inherits this mask, so the stop signals
     * are only ever taken by sigwaitinfo()/sigtimedwait() here. */
    sp_stop_signals(&sigs);
    pthread_sigmask(SIG_BLOCK, &sigs, &old_sigs);
    signal(SIGPIPE, SIG_IGN);

    if (model &&
        (st = sp_sched_start(&sched, model, engine, c.max_queue, c.n_parallel, &c.sampling, &metrics, NULL)) != SP_OK)
        goto restore; /* the scheduler freed the engine */
    if ((st = sp_http_start(&http, &c, addrs, sched, router, &metrics, model_id)) != SP_OK)
        goto stop_sched;
    sp_server_listening(&c, http, sched, router, model_id);
    while (!sp_is_stop_signal(sigwaitinfo(&sigs, NULL)))
        ;
    sp_http_drain(http);
    fprintf(stderr, "spindle: draining: finishing %d request(s) in flight\n", sp_http_active(http));
    if (!sp_wait_idle(http, &sigs, c.drain_timeout_s)) {
        fprintf(stderr, "spindle: drain cut short: ending %d request(s) still in flight\n", sp_http_active(http));
        if (router)
            sp_router_abort(router);
        else
            sp_sched_abort(sched);
        if (!sp_wait_idle(http, &sigs, SP_ABORT_GRACE_S))
            fprintf(stderr, "spindle: %d request(s) still sending; closing their connections\n",
                    sp_http_active(http));
    }
    sp_wait_quiet(http, &sigs);
    fprintf(stderr, "spindle: drained\n");
    sp_http_stop(http);
stop_sched:
    if (sched)
        sp_sched_stop(sched);
restore:
    pthread_sigmask(SIG_SETMASK, &old_sigs, NULL);
free_metrics:
    sp_router_close(router);
    sp_metrics_free(&metrics);
free_id:
    if (addrs)
        freeaddrinfo(addrs);
    free(model_id);
    return st;
}
