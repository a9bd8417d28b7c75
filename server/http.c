/* HTTP front end on libmicrohttpd: routes, auth, bodies, and the blocking
 * wait between a connection and its job.
 *
 * Threading mode: MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION.
 * Each connection has its own thread, so a handler may block until its job
 * has text: it poll()s the job's eventfd together with the client socket,
 * which also tells it at once when the client hangs up (POLLRDHUP), so a
 * disconnect cancels the sequence even while no token is being produced.
 * Suspend/resume would save threads, but would need a second wake-up path
 * for disconnects; with --parallel in the tens, a thread per connection is
 * simpler and cheap enough, and MHD_OPTION_CONNECTION_LIMIT bounds it.
 *
 * Limits: request headers must fit MHD_OPTION_CONNECTION_MEMORY_LIMIT (431
 * or 413 from MHD otherwise), bodies are capped at cfg->max_body (413), and
 * the connection timeout drops clients that stall while sending a request
 * or while not reading a stream; it is switched off while this side waits
 * for the engine, which the request's own deadline bounds instead.  The
 * total time to send a request, the number of connections and which one
 * gives way on a full server are peers.c's (sp_conn_notify accounts each
 * connection there).  What
 * the headers alone refuse (ambiguous framing, a missing key, a declared
 * body over the cap) is answered before any of the body is read, and the
 * connection closed after (sp_begin).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <math.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/dialect.h"
#include "server/webui.h"

#define SP_HTTP_IDLE_TIMEOUT_S 60u
#define SP_HTTP_MEMORY_LIMIT (256u * 1024u)

struct sp_http {
    struct MHD_Daemon *daemon;
    struct sp_listener *listener; /* the listening socket; hands connections to daemon */
    struct sp_server_config cfg;
    struct sp_sched *sched;   /* the one model's; NULL with a router */
    struct sp_router *router; /* --models-dir: the model each request names; NULL: one model */
    struct sp_metrics *metrics;
    struct sp_peers *peers;
    char *model_id;
    char replica[SP_REPLICA_ID_MAX + 1]; /* sent as X-Spindle-Replica */
    int port;
    atomic_ullong n_requests; /* numbers the requests that have no completion id */

    pthread_mutex_t mu; /* guards draining, n_active and last_arrival */
    bool draining;
    int n_active;       /* generation requests accepted and not yet completed */
    double last_arrival; /* sp_now() at the last connection accepted or request begun */
};

/* Per-request state, MHD's *con_cls. */
struct sp_conn {
    struct sp_http *h;
    struct MHD_Connection *con;
    struct sp_peer *peer; /* the connection's accounting (peers.c); NULL: none */
    struct sp_sched *sched; /* the model that answers (sp_conn_pick_model); NULL: none yet */
    const char *model_id;   /* its name */
    struct sp_router_model *held; /* with a router: the model held for this request */
    int only_load;       /* with a router, Ollama's request with no prompt: 1 load, 2 unload its model */
    enum sp_route route;
    const struct sp_route_def *def;   /* the route's row (routes.c); NULL for an unknown route */
    const struct sp_dialect *dialect; /* the API whose shapes answer (never NULL) */
    char *body;
    size_t n_body, cap_body;
    bool too_big;
    bool early;          /* answered before its body was read: the connection closes after */
    int status;          /* the HTTP status answered, for the metrics */
    bool hung_up;        /* sp_conn_wait saw the client hang up before a response */
    bool http11;         /* the request is HTTP/1.1 (it may get interim responses) */
    bool half_closed;    /* the client shut down its sending side (sp_conn_half_closed) */
    bool ping;           /* a stream owes the client an SSE comment line (sp_conn_half_closed) */
    bool compile_gone;   /* a grammar compile stopped because the client left (sp_conn_stop_compile) */
    bool compile_drain;  /* ... because the server is draining */
    bool active;         /* counted in h->n_active */
    struct sp_job *job;  /* jobs[0] */
    struct sp_job **jobs; /* one per prompt of a completions batch (job_batch.c) */
    size_t n_jobs;
    struct sp_resp resp;
    bool resp_init;
    struct sp_job_buf buf, scratch;
    char *out;           /* stream bytes not yet handed to MHD */
    size_t out_len, out_cap, out_pos;
    bool stream_done;
    double t_start;      /* monotonic, for the request log */
    char method[8];
    char path[96];       /* printable ASCII only, cut at 95 bytes */
    char xrid[65];       /* the X-Request-Id header (a balancer's trace id), same rules */
};

/* The route of (url, method) from the route table, and the dialect that
 * answers it. */
static enum sp_route sp_route_of(struct sp_conn *c, const char *url, const char *method)
{
    bool known = false;
    c->def = sp_route_find(url, method, &known);
    c->dialect = c->def ? c->def->dialect : sp_route_dialect_of(url);
    if (c->def)
        return c->def->route;
    if (known)
        return SP_ROUTE_BAD_METHOD;
    struct sp_webui_asset a;
    if (sp_webui_find(url, &a))
        return strcmp(method, "GET") ? SP_ROUTE_BAD_METHOD : SP_ROUTE_PAGE;
    return SP_ROUTE_NOT_FOUND;
}

#define SP_HTTP_REPLICA_HEADER "X-Spindle-Replica"

static bool sp_auth_ok(struct sp_conn *c);

/* Adds X-Spindle-Replica (the replica id, by default the host name) to r.
 * With an API key set, only a request that carries the key gets it, so an
 * unauthenticated client (a 401, /health, the chat page) does not learn the
 * host name; without a key every response carries it. */
static void sp_add_replica_header(struct sp_conn *c, struct MHD_Response *r)
{
    if (sp_auth_ok(c))
        MHD_add_response_header(r, SP_HTTP_REPLICA_HEADER, c->h->replica);
}

/* Queues `body` (malloc'd, taken) with the given status. */
static enum MHD_Result sp_respond(struct sp_conn *c, int status, const char *content_type,
                                  char *body, const char *hdr, const char *hdr_value)
{
    if (!body) {
        status = 500;
        content_type = "application/json";
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":null}}");
        if (!body)
            return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    sp_add_replica_header(c, r);
    pthread_mutex_lock(&c->h->mu);
    bool draining = c->h->draining;
    pthread_mutex_unlock(&c->h->mu);
    /* A client must not send its next request on a connection the drain
     * is about to close, nor after a body this side did not read. */
    if (draining || c->early)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (hdr)
        MHD_add_response_header(r, hdr, hdr_value);
    c->status = status;
    enum MHD_Result ret = MHD_queue_response(c->con, (unsigned int)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result sp_respond_error(struct sp_conn *c, const struct sp_api_error *err)
{
    const char *hdr = NULL, *val = NULL;
    if (err->http_status == 429) {
        hdr = "Retry-After";
        val = "1";
    } else if (err->http_status == 401) {
        hdr = "WWW-Authenticate";
        val = "Bearer";
    }
    return sp_respond(c, err->http_status, "application/json", c->dialect->error_body(err), hdr, val);
}

static enum MHD_Result sp_fail(struct sp_conn *c, int status, const char *type, const char *code,
                               const char *msg)
{
    struct sp_api_error err;
    sp_api_fail(&err, status, type, code, NULL, "%s", msg);
    return sp_respond_error(c, &err);
}

/* A request the drain ended (sp_sched_abort).  503: nothing of it was
 * answered yet, so a balancer may replay it on another replica. */
static void sp_shutdown_error(struct sp_api_error *err)
{
    sp_api_fail(err, 503, "server_error", "shutting_down", NULL,
                "The server shut down before this request finished; retry it.");
}

/* A request this process has no file descriptor for (its eventfd: the
 * connection limit leaves room for one per connection, so only another
 * user of the descriptors can cause it).  503: nothing of it ran. */
static enum MHD_Result sp_fail_resources(struct sp_conn *c)
{
    return sp_fail(c, 503, "server_error", "server_busy",
                   "The server has no file descriptor left for this request; retry later.");
}

/* ---- waiting for the scheduler ---- */

static int sp_conn_fd(struct sp_conn *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c->con, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The client shut down its sending side (POLLRDHUP).  It may be gone, or
 * it half-closed after its request, which HTTP/1.1 allows, and waits for
 * the answer.  Only a write tells them apart: to a peer that closed, the
 * kernel answers with a reset, which the wait then sees as POLLHUP or
 * POLLERR.  Before the response, the write is an interim `100 Continue`
 * (a client must accept 1xx responses it did not ask for), written to the
 * socket directly: libmicrohttpd has written nothing yet and writes
 * nothing while this thread is in the request handler.  In a stream it is
 * an SSE comment line (c->ping), which clients ignore.  HTTP/1.0 has no
 * interim responses: such a client is taken as gone, as before.  False:
 * gone. */
static bool sp_conn_half_closed(struct sp_conn *c, int fd)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    c->half_closed = true;
    if (c->status) { /* streaming: the response has begun */
        c->ping = true;
        return true;
    }
    if (!c->http11)
        return false;
    return send(fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)(sizeof cont - 1);
}

/* Blocks until efd (a job's or an embedding request's) signals (true) or
 * the client hangs up (false).  A one-second poll timeout is only a safety
 * net: state is re-read after any return.  A client that half-closed
 * (sp_conn_half_closed) is watched for a reset only. */
static bool sp_conn_wait_on(struct sp_conn *c, int efd)
{
    struct pollfd p[2] = {
        {.fd = efd, .events = POLLIN},
        {.fd = sp_conn_fd(c), .events = c->half_closed ? 0 : POLLRDHUP},
    };
    nfds_t n = p[1].fd >= 0 ? 2 : 1;
    MHD_set_connection_option(c->con, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    for (;;) {
        int r = poll(p, n, 1000);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return true;
        if (n == 2 && (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)))
            return false;
        if (n == 2 && (p[1].revents & POLLRDHUP)) {
            if (!sp_conn_half_closed(c, p[1].fd))
                return false;
            p[1].events = 0;
            if (c->ping)
                return true; /* the stream reader sends its comment line */
            continue;
        }
        if (n == 2 && (p[1].revents & POLLIN))
            n = 1; /* the client sent more (pipelining): stop watching for now */
        if (p[0].revents & POLLIN) {
            uint64_t v;
            if (read(efd, &v, sizeof v) < 0 && errno != EAGAIN)
                return true;
            return true;
        }
    }
}

static bool sp_conn_wait(struct sp_conn *c)
{
    return sp_conn_wait_on(c, c->job->efd);
}

/* Whether c's client has hung up, without blocking (a half-close that
 * still waits for its answer is not; sp_conn_half_closed). */
static bool sp_conn_gone(void *ctx)
{
    struct sp_conn *c = ctx;
    int fd = sp_conn_fd(c);
    struct pollfd p = {.fd = fd, .events = c->half_closed ? 0 : POLLRDHUP};
    if (fd < 0 || poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
        return true;
    return (p.revents & POLLRDHUP) && !sp_conn_half_closed(c, fd);
}

/* The stop check of the grammar compiles a request's parse runs on this
 * thread (sp_grammar_stop_when, polled every 65,536 steps of work): stop
 * once the client has left, or the server drains (the request would be
 * refused with 503 once parsed). */
static bool sp_conn_stop_compile(void *ctx)
{
    struct sp_conn *c = ctx;
    pthread_mutex_lock(&c->h->mu);
    c->compile_drain = c->h->draining;
    pthread_mutex_unlock(&c->h->mu);
    if (sp_conn_gone(c))
        c->compile_gone = true;
    return c->compile_drain || c->compile_gone;
}

static enum sp_job_state sp_job_state_of(struct sp_job *j)
{
    pthread_mutex_lock(&j->mu);
    enum sp_job_state st = j->state;
    pthread_mutex_unlock(&j->mu);
    return st;
}

/* ---- streaming ---- */

static ssize_t sp_stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sp_conn *c = cls;
    (void)pos;
    for (;;) {
        if (c->out_pos < c->out_len) {
            size_t n = c->out_len - c->out_pos;
            if (n > max)
                n = max;
            memcpy(buf, c->out + c->out_pos, n);
            c->out_pos += n;
            if (c->out_pos == c->out_len)
                c->out_pos = c->out_len = 0;
            /* From 0 to non-zero restarts MHD's inactivity timer. */
            MHD_set_connection_option(c->con, MHD_CONNECTION_OPTION_TIMEOUT,
                                      SP_HTTP_IDLE_TIMEOUT_S);
            return (ssize_t)n;
        }
        if (c->stream_done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        bool timed_out = false, lost = false;
        enum sp_job_state st = sp_jobs_take(c->jobs, c->n_jobs, c->resp.n_choices / (int)c->n_jobs, &c->buf,
                                            &c->scratch, &timed_out, &lost);
        c->resp.timed_out = timed_out;
        if (sp_resp_stream_events(&c->resp, &c->buf, &c->out, &c->out_len, &c->out_cap) != SP_OK)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (st == SP_JOB_DONE || st == SP_JOB_FAILED) {
            struct sp_api_error err;
            sp_status ss;
            if (sp_jobs_shut_down(c->jobs, c->n_jobs)) {
                sp_shutdown_error(&err);
                ss = sp_resp_stream_error(&c->resp, &err, &c->out, &c->out_len, &c->out_cap);
            } else {
                ss = sp_resp_stream_end(&c->resp, &c->out, &c->out_len, &c->out_cap);
            }
            if (ss != SP_OK)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            c->stream_done = true;
            continue;
        }
        if (c->out_len)
            continue;
        if (!sp_conn_wait(c)) {
            sp_jobs_cancel(c->sched, c->jobs, c->n_jobs);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (c->ping) {
            static const char comment[] = ": the client half-closed\n\n";
            c->ping = false;
            if (c->out_cap < sizeof comment) {
                char *o = realloc(c->out, sizeof comment);
                if (!o)
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                c->out = o;
                c->out_cap = sizeof comment;
            }
            memcpy(c->out, comment, sizeof comment - 1); /* out is empty here */
            c->out_len = sizeof comment - 1;
        }
    }
}

/* ---- generation ---- */

/* Counts a request in h->n_active (the drain waits for it) unless the
 * server is draining (false). */
static bool sp_conn_activate(struct sp_conn *c)
{
    struct sp_http *h = c->h;
    pthread_mutex_lock(&h->mu);
    bool draining = h->draining;
    if (!draining) {
        h->n_active++;
        c->active = true;
    }
    pthread_mutex_unlock(&h->mu);
    return !draining;
}

static enum MHD_Result sp_fail_admission(struct sp_conn *c, struct sp_job *j)
{
    struct sp_api_error err;
    pthread_mutex_lock(&j->mu);
    sp_status st = j->fail_status;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", j->fail_msg);
    pthread_mutex_unlock(&j->mu);
    if (st == SP_ERR_CONTEXT)
        sp_api_fail(&err, 400, "invalid_request_error", "context_length_exceeded",
                    c->def->kind == SP_API_CHAT ? "messages" : "prompt", "%s", msg);
    else if (st == SP_ERR_ARG || st == SP_ERR_UNSUPPORTED)
        sp_api_fail(&err, 400, "invalid_request_error", "invalid_value", NULL, "%s", msg);
    else if (st == SP_ERR_FULL)
        sp_api_fail(&err, 503, "server_error", "kv_cache_full", NULL,
                    "The KV cache is full; retry later (%s)", msg);
    else
        sp_api_fail(&err, 500, "server_error", NULL, NULL, "%s", msg);
    return sp_respond_error(c, &err);
}

/* The aliases of the model answering (--alias names the one model of -m). */
static size_t sp_conn_aliases(struct sp_conn *c, const char *const **aliases)
{
    *aliases = c->h->router ? NULL : c->h->cfg.aliases;
    return c->h->router ? 0 : c->h->cfg.n_aliases;
}

/* What a generation request to the model answering c may ask for. */
static void sp_http_limits(struct sp_conn *c, struct sp_api_limits *lim)
{
    struct sp_http *h = c->h;
    sp_api_limits_default(lim);
    lim->model_id = c->model_id;
    lim->n_aliases = sp_conn_aliases(c, &lim->aliases);
    lim->n_ctx = sp_sched_n_ctx(c->sched);
    lim->max_n = h->cfg.max_n;
    lim->max_timeout_s = h->cfg.timeout_s;
    lim->defaults = sp_sched_sampling(c->sched);
    lim->gcache = sp_sched_grammar_cache(c->sched);
    lim->max_retries = h->cfg.max_retries;
}

/* Sets the model that answers c: the one served, or with --models-dir the
 * one its body names, loaded if it must be (router.c) and held until the
 * request completes, its idle time the one the request asks for (the
 * dialect's keep_alive); an Ollama request with no prompt only loads it or
 * unloads it (c->only_load).  False when there is none: *err says why. */
static bool sp_conn_pick_model(struct sp_conn *c, struct sp_api_error *err)
{
    struct sp_http *h = c->h;
    double keep_alive = NAN;
    bool only_load = false;
    if (c->dialect->keep_alive && (c->route == SP_ROUTE_GENERATE || c->route == SP_ROUTE_EMBEDDINGS) &&
        c->dialect->keep_alive(c->body, c->n_body, c->route, c->def->kind, &keep_alive, &only_load, err) != SP_OK)
        return false;
    if (!h->router) { /* the one model stays loaded: keep_alive is a label */
        c->sched = h->sched;
        c->model_id = h->model_id;
        return true;
    }
    char name[256];
    if (!sp_router_body_model(c->body, c->n_body, name, sizeof name)) {
        sp_api_fail(err, 400, "invalid_request_error", "missing_required_parameter", "model",
                    "This server serves several models: name one in 'model' (GET /v1/models lists them).");
        return false;
    }
    if (only_load && keep_alive == 0) {
        c->only_load = 2;
        return sp_router_unload_idle(h->router, name, err) == SP_OK;
    }
    c->only_load = only_load;
    if (!(c->held = sp_router_acquire(h->router, name, keep_alive, sp_conn_gone, c, err))) {
        c->hung_up = err->http_status == 499;
        return false;
    }
    c->sched = sp_router_sched(c->held);
    c->model_id = sp_router_id(c->held);
    return true;
}

static enum MHD_Result sp_handle_generate(struct sp_conn *c)
{
    struct sp_http *h = c->h;
    struct sp_api_limits lim;
    struct sp_api_error err;
    sp_http_limits(c, &lim);
    /* grammars compile here, on the connection's thread, stopped if the
     * client leaves or the server drains meanwhile */
    sp_grammar_stop_when(sp_conn_stop_compile, c);
    sp_status pst = sp_jobs_make(c->dialect->parse, c->def->kind, c->body, c->n_body, sp_sched_model(c->sched),
                                 &lim, h->cfg.timeout_s, &c->jobs, &c->n_jobs, &err);
    sp_grammar_stop_when(NULL, NULL);
    if (pst != SP_OK && c->compile_gone) {
        c->hung_up = true;
        return MHD_NO;
    }
    if (pst != SP_OK && c->compile_drain)
        return sp_fail(c, 503, "server_error", "shutting_down", "The server is shutting down.");
    if (pst != SP_OK)
        return sp_respond_error(c, &err);
    struct sp_job *j = c->job = c->jobs[0];
    if (sp_resp_init(&c->resp, &j->api, sp_sched_model(c->sched), c->model_id, c->dialect->resp) != SP_OK)
        return sp_fail(c, 500, "server_error", NULL, "out of memory");
    c->resp_init = true;

    if (!sp_conn_activate(c))
        return sp_fail(c, 503, "server_error", "shutting_down", "The server is shutting down.");
    if (sp_jobs_submit(c->sched, c->jobs, c->n_jobs) != SP_OK)
        return sp_fail(c, 429, "requests", "rate_limit_exceeded",
                       "Too many requests are waiting; retry later.");

    /* Wait for admission, so that a refusal is still a plain 4xx. */
    enum sp_job_state st;
    size_t failed = 0;
    while ((st = sp_jobs_state(c->jobs, c->n_jobs, &failed)) == SP_JOB_QUEUED) {
        if (!sp_conn_wait(c)) {
            sp_jobs_cancel(c->sched, c->jobs, c->n_jobs);
            c->hung_up = true;
            return MHD_NO;
        }
    }
    if (st == SP_JOB_FAILED) {
        sp_jobs_cancel(c->sched, c->jobs, c->n_jobs);
        return sp_fail_admission(c, c->jobs[failed]);
    }
    if (sp_jobs_shut_down(c->jobs, c->n_jobs)) {
        sp_shutdown_error(&err);
        return sp_respond_error(c, &err);
    }

    if (j->api.stream) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sp_stream_reader, c,
                                              NULL);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, c->dialect->stream_type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        sp_add_replica_header(c, r);
        c->status = 200;
        enum MHD_Result ret = MHD_queue_response(c->con, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    for (;;) {
        bool timed_out = false, lost = false;
        st = sp_jobs_take(c->jobs, c->n_jobs, c->resp.n_choices / (int)c->n_jobs, &c->buf, &c->scratch,
                          &timed_out, &lost);
        c->resp.timed_out = timed_out;
        if (lost || sp_resp_collect(&c->resp, &c->buf) != SP_OK)
            return sp_fail(c, 500, "server_error", NULL, "out of memory");
        if (st == SP_JOB_DONE || st == SP_JOB_FAILED)
            break;
        if (!sp_conn_wait(c)) {
            sp_jobs_cancel(c->sched, c->jobs, c->n_jobs);
            c->hung_up = true;
            return MHD_NO;
        }
    }
    MHD_set_connection_option(c->con, MHD_CONNECTION_OPTION_TIMEOUT, SP_HTTP_IDLE_TIMEOUT_S);
    if (sp_jobs_shut_down(c->jobs, c->n_jobs)) {
        sp_shutdown_error(&err);
        return sp_respond_error(c, &err);
    }
    if (sp_resp_failed(&c->resp, &err))
        return sp_respond_error(c, &err);
    return sp_respond(c, 200, "application/json", sp_resp_body(&c->resp), NULL, NULL);
}

/* ---- embeddings ---- */

/* The most inputs of one /v1/embeddings request (docs/server-api.md). */
#define SP_HTTP_EMBED_MAX_INPUTS 256

/* Parses and tokenizes on this thread, has the scheduler embed the inputs
 * a chunk at a time between generation steps, and answers the vectors.  A
 * client that hangs up stops its request at the next chunk; the drain
 * waits for it like a generation, and its timeout ends it with 503. */
static enum MHD_Result sp_handle_embeddings(struct sp_conn *c)
{
    struct sp_http *h = c->h;
    const sp_model *m = sp_sched_model(c->sched);
    sp_model_info mi;
    sp_model_info_get(m, &mi);
    struct sp_api_embed_limits lim = {c->model_id, (int)mi.n_embd, sp_sched_embed_max_tokens(c->sched),
                                      SP_HTTP_EMBED_MAX_INPUTS, NULL, 0};
    lim.n_aliases = sp_conn_aliases(c, &lim.aliases);
    struct sp_api_embed_request r;
    struct sp_api_error err;
    if ((c->dialect->embed_parse ? c->dialect->embed_parse : sp_api_embed_parse)(&r, c->body, c->n_body, m, &lim,
                                                                                &err) != SP_OK)
        return sp_respond_error(c, &err);
    enum MHD_Result ret;
    struct sp_embed_work w;
    float *out = malloc(r.n_inputs * (size_t)lim.n_embd * sizeof *out);
    sp_status st = out ? sp_embed_work_init(&w, (const sp_token *const *)r.inputs, r.n_tokens, r.n_inputs, out)
                       : SP_ERR_NOMEM;
    if (st != SP_OK) {
        ret = st == SP_ERR_IO ? sp_fail_resources(c) : sp_fail(c, 500, "server_error", NULL, "out of memory");
        goto free_out;
    }
    if (!sp_conn_activate(c)) {
        ret = sp_fail(c, 503, "server_error", "shutting_down", "The server is shutting down.");
        goto free_work;
    }
    if (sp_sched_embed_submit(c->sched, &w) != SP_OK) {
        ret = sp_fail(c, 429, "requests", "rate_limit_exceeded", "Too many requests are waiting; retry later.");
        goto free_work;
    }
    while (!sp_sched_embed_done(c->sched, &w)) {
        if (!sp_conn_wait_on(c, w.efd)) {
            sp_sched_embed_cancel(c->sched, &w);
            c->hung_up = true;
            ret = MHD_NO;
            goto free_work;
        }
    }
    MHD_set_connection_option(c->con, MHD_CONNECTION_OPTION_TIMEOUT, SP_HTTP_IDLE_TIMEOUT_S);
    char *body = w.st == SP_OK && !w.shut_down ? (c->dialect->embed_body ? c->dialect->embed_body
                                                                         : sp_api_embed_body)(
                                                     &r, c->model_id, out, lim.n_embd)
                                               : NULL;
    if (body) {
        sp_metrics_count_tokens(h->metrics, r.n_total, 0, 0);
        ret = sp_respond(c, 200, "application/json", body, NULL, NULL);
    } else if (w.shut_down) {
        sp_shutdown_error(&err);
        ret = sp_respond_error(c, &err);
    } else if (w.st == SP_ERR_FULL) {
        ret = sp_fail(c, 503, "server_error", "kv_cache_full", "The KV cache is full; retry later.");
    } else if (w.st == SP_ERR_CONTEXT) {
        sp_api_fail(&err, 400, "invalid_request_error", "context_length_exceeded", "input", "%s", w.msg);
        ret = sp_respond_error(c, &err);
    } else {
        ret = sp_fail(c, 500, "server_error", NULL, w.st == SP_OK || w.st == SP_ERR_NOMEM ? "out of memory" : w.msg);
    }
free_work:
    sp_embed_work_free(&w);
free_out:
    free(out);
    sp_api_embed_request_free(&r);
    return ret;
}

/* ---- other routes ---- */

/* A route answered without the engine (routes.c names its handler); a
 * list of models, with a router, without a model of its own. */
static enum MHD_Result sp_handle_info(struct sp_conn *c, const char *url)
{
    struct sp_api_limits lim;
    struct sp_api_error err;
    sp_api_limits_default(&lim);
    if (c->sched)
        sp_http_limits(c, &lim);
    struct sp_info_ctx ctx = {c->sched ? sp_sched_model(c->sched) : NULL, c->model_id, NULL, 0, &lim, url,
                              c->body, c->n_body, c->h->router};
    ctx.n_aliases = sp_conn_aliases(c, &ctx.aliases);
    int status = 200;
    char *body = c->def->info(&ctx, &status, &err);
    return body ? sp_respond(c, status, "application/json", body, NULL, NULL) : sp_respond_error(c, &err);
}

/* The page and its scripts, from the binary.  The policy keeps anything the
 * page renders from model output from loading or sending elsewhere. */
static enum MHD_Result sp_handle_page(struct sp_conn *c, const char *url)
{
    struct sp_webui_asset a;
    if (!sp_webui_find(url, &a))
        return sp_fail(c, 404, "invalid_request_error", "not_found", "Unknown route.");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(a.len, (void *)a.data, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a.content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                            "img-src 'self' data:");
    c->status = 200;
    enum MHD_Result ret = MHD_queue_response(c->con, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static bool sp_auth_ok(struct sp_conn *c)
{
    const char *key = c->h->cfg.api_key;
    if (!key || !key[0])
        return true;
    /* Authorization: Bearer KEY, or Anthropic's x-api-key: KEY */
    const char *v = MHD_lookup_connection_value(c->con, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    if (v && !strncmp(v, "Bearer ", 7))
        v += 7;
    else if (!(v = MHD_lookup_connection_value(c->con, MHD_HEADER_KIND, "x-api-key")))
        return false;
    size_t n = strlen(key), m = strlen(v);
    /* Compare every byte so the time does not depend on where they differ. */
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(key[i] ^ (i < m ? v[i] : 0));
    return diff == 0;
}

/* Whether the request lacks a key it needs.  The chat page and /health
 * (GET and HEAD) are served without the key; every other route
 * authenticates before routing, so a client without the key learns nothing
 * about which routes or methods exist. */
static bool sp_key_refused(struct sp_conn *c)
{
    return c->route != SP_ROUTE_PAGE && c->route != SP_ROUTE_HEALTH && !sp_auth_ok(c);
}

static enum MHD_Result sp_dispatch(struct sp_conn *c, const char *url)
{
    struct sp_http *h = c->h;
    struct sp_api_error err;
    if (c->route == SP_ROUTE_PAGE)
        return sp_handle_page(c, url);
    if (sp_key_refused(c))
        return sp_fail(c, 401, "invalid_request_error", "invalid_api_key",
                       "Incorrect or missing API key (send 'Authorization: Bearer KEY').");
    if (c->route == SP_ROUTE_NOT_FOUND)
        return sp_fail(c, 404, "invalid_request_error", "not_found", "Unknown route.");
    if (c->route == SP_ROUTE_BAD_METHOD)
        return sp_fail(c, 405, "invalid_request_error", "method_not_allowed",
                       "Method not allowed on this route.");
    if (c->too_big) {
        sp_api_fail(&err, 413, "invalid_request_error", "request_too_large", NULL,
                    "The request body is larger than %zu bytes.", h->cfg.max_body);
        return sp_respond_error(c, &err);
    }
    pthread_mutex_lock(&h->mu);
    bool draining = h->draining;
    pthread_mutex_unlock(&h->mu);
    switch (c->route) {
    case SP_ROUTE_HEALTH:
        if (draining)
            return sp_respond(c, 503, "application/json", strdup("{\"status\":\"draining\"}"),
                              NULL, NULL);
        if (h->router && !sp_router_servable(h->router)) /* no file, or none loads */
            return sp_respond(c, 503, "application/json", strdup("{\"status\":\"no_model\"}"), NULL, NULL);
        return sp_respond(c, 200, "application/json", strdup("{\"status\":\"ok\"}"), NULL, NULL);
    case SP_ROUTE_METRICS: {
        uint64_t open, gave_way, timed_out;
        sp_peers_counts(h->peers, &open, &gave_way, &timed_out);
        sp_metrics_set_connections(h->metrics, open, gave_way, timed_out);
        return sp_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8",
                          sp_metrics_render(h->metrics), NULL, NULL);
    }
    default:
        break;
    }
    if (draining)
        return sp_fail(c, 503, "server_error", "shutting_down", "The server is shutting down.");
    if (!(c->route == SP_ROUTE_INFO && c->def->lists && h->router) && !sp_conn_pick_model(c, &err))
        return c->hung_up ? MHD_NO : sp_respond_error(c, &err);
    if (c->only_load) {
        char name[256];
        if (!sp_router_body_model(c->body, c->n_body, name, sizeof name))
            name[0] = '\0';
        size_t n = strlen(name);
        if (n > 7 && !strcmp(name + n - 7, ":latest"))
            name[n - 7] = '\0';
        return sp_respond(c, 200, "application/json", c->dialect->load_body(name, c->def->kind, c->only_load == 2),
                          NULL, NULL);
    }
    switch (c->route) {
    case SP_ROUTE_INFO:
        return sp_handle_info(c, url);
    case SP_ROUTE_TOKENIZE: {
        char *body = sp_api_tokenize(c->body, c->n_body, sp_sched_model(c->sched), &err);
        return body ? sp_respond(c, 200, "application/json", body, NULL, NULL)
                    : sp_respond_error(c, &err);
    }
    case SP_ROUTE_DETOKENIZE: {
        char *body = sp_api_detokenize(c->body, c->n_body, sp_sched_model(c->sched), &err);
        return body ? sp_respond(c, 200, "application/json", body, NULL, NULL)
                    : sp_respond_error(c, &err);
    }
    case SP_ROUTE_EMBEDDINGS:
        return sp_handle_embeddings(c);
    default:
        return sp_handle_generate(c);
    }
}

/* ---- the request log: one line per request on stderr ---- */

/* Copies src, replacing bytes outside printable ASCII, spaces, quotes and
 * backslashes with '?', so a line cannot be forged or split by a client. */
static void sp_log_copy(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = (ch > 0x20 && ch < 0x7f && ch != '"' && ch != '\\') ? (char)ch : '?';
    }
    dst[i] = '\0';
}

/* id, route, status, for a request that got no response its outcome
 * (status 499), the client's X-Request-Id if it sent one, and for
 * generation requests the tokens in and out, the time to the first token
 * and the decode rate.  Probes (/health, /metrics) are not logged. */
static void sp_log_request(struct sp_http *h, struct sp_conn *c, int status, const char *outcome)
{
    if (c->route == SP_ROUTE_HEALTH || c->route == SP_ROUTE_METRICS)
        return;
    char id[48];
    if (c->resp_init)
        snprintf(id, sizeof id, "%s", c->resp.id);
    else
        snprintf(id, sizeof id, "req-%llu", (unsigned long long)atomic_fetch_add(&h->n_requests, 1));
    double now = sp_now(), t_first = 0, t_last = 0;
    if (c->job) {
        pthread_mutex_lock(&c->job->mu);
        t_first = c->job->t_first;
        t_last = c->job->t_last;
        pthread_mutex_unlock(&c->job->mu);
    }
    const struct sp_api_usage *u = &c->resp.usage;
    double ttft_ms = t_first > 0 ? (t_first - c->job->t_submit) * 1e3 : 0;
    double tok_s = u->completion_tokens > 1 && t_last > t_first
                       ? (u->completion_tokens - 1) / (t_last - t_first) : 0;
    char line[512];
    int n = 0;
    if (h->cfg.log_format == SP_LOG_JSON)
        n = snprintf(line, sizeof line,
                     "{\"event\":\"request\",\"id\":\"%s\",\"method\":\"%s\",\"path\":\"%s\","
                     "\"status\":%d,\"duration_ms\":%.1f", id, c->method, c->path, status,
                     (now - c->t_start) * 1e3);
    else
        n = snprintf(line, sizeof line, "spindle: request id=%s method=%s path=%s status=%d "
                     "duration_ms=%.1f", id, c->method, c->path, status, (now - c->t_start) * 1e3);
    if (outcome && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      h->cfg.log_format == SP_LOG_JSON ? ",\"outcome\":\"%s\"" : " outcome=%s", outcome);
    if (c->xrid[0] && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      h->cfg.log_format == SP_LOG_JSON ? ",\"request_id\":\"%s\"" : " request_id=%s", c->xrid);
    if (c->resp_init && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      h->cfg.log_format == SP_LOG_JSON
                          ? ",\"prompt_tokens\":%u,\"cached_tokens\":%u,\"completion_tokens\":%u,"
                            "\"ttft_ms\":%.1f,\"tokens_per_s\":%.1f"
                          : " prompt_tokens=%u cached_tokens=%u completion_tokens=%u ttft_ms=%.1f "
                            "tokens_per_s=%.1f",
                      u->prompt_tokens, u->cached_tokens, u->completion_tokens, ttft_ms, tok_s);
    if (n > 0 && (size_t)n < sizeof line)
        fprintf(stderr, "%s%s\n", line, h->cfg.log_format == SP_LOG_JSON ? "}" : "");
}

/* MHD_KeyValueIterator: counts the Content-Length values of a request into
 * *cls, two for one header that lists several ("5, 5"). */
static enum MHD_Result sp_count_lengths(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    unsigned *n = cls;
    (void)kind;
    if (key && !strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
        *n += value && strchr(value, ',') ? 2 : 1;
    return MHD_YES;
}

/* What is wrong with the request's framing, or NULL: headers a proxy in
 * front and this server could read differently (request smuggling). */
static const char *sp_framing_error(struct MHD_Connection *con, const char *version)
{
    unsigned n = 0;
    MHD_get_connection_values(con, MHD_HEADER_KIND, sp_count_lengths, &n);
    if (n > 1)
        return "The request has more than one Content-Length.";
    if (version && !strcmp(version, MHD_HTTP_VERSION_1_1) &&
        !MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST))
        return "An HTTP/1.1 request needs a Host header.";
    return NULL;
}

/* The first call for a request, with its headers only.  Answers at once
 * what the headers decide (400 for ambiguous framing, 401 for a missing or
 * wrong key, 413 for a declared body over --max-body), so no body is read
 * for a request that is refused; the connection closes after such an
 * answer.  MHD_YES with nothing queued otherwise. */
static enum MHD_Result sp_begin(struct sp_conn *c, const char *url, const char *version)
{
    if (c->route != SP_ROUTE_HEALTH && c->route != SP_ROUTE_METRICS && sp_peer_overflow(c->h->peers, c->peer)) {
        c->early = true;
        return sp_fail(c, 503, "server_error", "too_many_connections",
                       "The server has as many connections as it serves; retry later.");
    }
    const char *bad = sp_framing_error(c->con, version);
    if (bad) {
        c->early = true;
        return sp_fail(c, 400, "invalid_request_error", "invalid_request", bad);
    }
    const char *cl = MHD_lookup_connection_value(c->con, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    c->too_big = cl && strtoull(cl, NULL, 10) > c->h->cfg.max_body;
    if (c->too_big || sp_key_refused(c)) {
        c->early = true;
        return sp_dispatch(c, url);
    }
    return MHD_YES;
}

/* Records an arrival (a connection or a request on one), for sp_http_quiet_s. */
static void sp_arrived(struct sp_http *h)
{
    pthread_mutex_lock(&h->mu);
    h->last_arrival = sp_now();
    pthread_mutex_unlock(&h->mu);
}

static enum MHD_Result sp_access(void *cls, struct MHD_Connection *con, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **con_cls)
{
    struct sp_http *h = cls;
    struct sp_conn *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->h = h;
        c->con = con;
        c->route = sp_route_of(c, url, method);
        c->t_start = sp_now();
        sp_arrived(h);
        sp_log_copy(c->method, sizeof c->method, method);
        sp_log_copy(c->path, sizeof c->path, url);
        sp_log_copy(c->xrid, sizeof c->xrid, MHD_lookup_connection_value(con, MHD_HEADER_KIND, "X-Request-Id"));
        c->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        c->peer = ci ? ci->socket_context : NULL;
        *con_cls = c;
        enum MHD_Result ret = sp_begin(c, url, version);
        if (c->status)
            sp_peers_busy(h->peers, c->peer); /* answered from the headers */
        return ret;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (c->too_big || c->early)
            return MHD_YES; /* refused: the body is dropped unread */
        if (n > h->cfg.max_body - c->n_body) {
            c->too_big = true;
            free(c->body);
            c->body = NULL;
            c->n_body = c->cap_body = 0;
            return MHD_YES;
        }
        if (c->n_body + n + 1 > c->cap_body) {
            size_t cap = c->cap_body ? c->cap_body : 4096;
            while (cap < c->n_body + n + 1)
                cap *= 2;
            char *b = realloc(c->body, cap);
            if (!b)
                return MHD_NO;
            c->body = b;
            c->cap_body = cap;
        }
        memcpy(c->body + c->n_body, upload_data, n);
        c->n_body += n;
        c->body[c->n_body] = '\0';
        return MHD_YES;
    }
    if (c->status)
        return MHD_YES; /* already answered by sp_begin */
    sp_peers_busy(h->peers, c->peer);
    return sp_dispatch(c, url);
}

/* Why a request that got no response ended: the client hung up (seen
 * while it waited, or MHD saw it), its job's deadline or the connection's
 * idle timeout passed, the server stopped, or something else failed. */
static enum sp_outcome sp_unanswered_outcome(struct sp_conn *c, enum MHD_RequestTerminationCode toe)
{
    bool timed_out = false, shut_down = false;
    if (c->job) {
        pthread_mutex_lock(&c->job->mu);
        timed_out = c->job->timed_out;
        shut_down = c->job->shut_down;
        pthread_mutex_unlock(&c->job->mu);
    }
    if (sp_peer_timed_out(c->h->peers, c->peer))
        return SP_OUTCOME_TIMEOUT; /* cut by the receive deadline (peers.c) */
    if (c->hung_up || toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ||
        toe == MHD_REQUEST_TERMINATED_READ_ERROR)
        return SP_OUTCOME_CANCELLED;
    if (timed_out || toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
        return SP_OUTCOME_TIMEOUT;
    if (shut_down || toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN)
        return SP_OUTCOME_SHUTDOWN;
    return SP_OUTCOME_ABORTED;
}

static void sp_completed(void *cls, struct MHD_Connection *con, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct sp_http *h = cls;
    struct sp_conn *c = *con_cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    sp_peers_idle(h->peers, ci ? ci->socket_context : NULL);
    if (!c)
        return;
    *con_cls = NULL;
    for (size_t i = 0; i < c->n_jobs; i++) {
        enum sp_job_state st = sp_job_state_of(c->jobs[i]);
        if (st != SP_JOB_DONE && st != SP_JOB_FAILED)
            sp_sched_cancel(c->sched, c->jobs[i]);
    }
    if (c->status) {
        int status = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK || c->status != 200
                         ? c->status
                         : 499; /* client went away mid-response */
        sp_metrics_count_status(h->metrics, status);
        sp_log_request(h, c, status, NULL);
    } else {
        enum sp_outcome o = sp_unanswered_outcome(c, toe);
        sp_metrics_count_status(h->metrics, 499);
        sp_metrics_count_unanswered(h->metrics, o);
        sp_log_request(h, c, 499, sp_outcome_name(o));
    }
    if (c->resp_init)
        sp_resp_free(&c->resp);
    sp_jobs_unref(c->jobs, c->n_jobs);
    sp_job_buf_free(&c->buf);
    sp_job_buf_free(&c->scratch);
    free(c->out);
    free(c->body);
    if (c->active) {
        pthread_mutex_lock(&h->mu);
        h->n_active--;
        pthread_mutex_unlock(&h->mu);
    }
    sp_router_release(h->router, c->held); /* after everything that used its model */
    free(c);
}

/* Connections start and end here: accounted in h->peers (peers.c), their
 * sp_peer kept as libmicrohttpd's socket context. */
static void sp_conn_notify(void *cls, struct MHD_Connection *con, void **socket_context,
                           enum MHD_ConnectionNotificationCode code)
{
    struct sp_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        sp_arrived(h);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? sp_peers_open(h->peers, ci->connect_fd) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        sp_peers_close(h->peers, *socket_context);
        *socket_context = NULL;
        sp_listener_closed(h->listener);
    }
}

sp_status sp_http_resolve(const char *host, int port, struct addrinfo **out)
{
    struct addrinfo hints;
    char service[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(service, sizeof service, "%d", port);
    *out = NULL;
    int g = getaddrinfo(host, service, &hints, out);
    if (g != 0) {
        *out = NULL;
        return sp_error_set(SP_ERR_ARG, "--host '%s' does not resolve: %s", host,
                            g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    }
    return SP_OK;
}

/* Hands a socket the listener accepted to libmicrohttpd (which closes it
 * when it cannot take it). */
static bool sp_http_hand(void *arg, int fd, const struct sockaddr *addr, unsigned addr_len)
{
    struct sp_http *h = arg;
    return MHD_add_connection(h->daemon, fd, addr, (socklen_t)addr_len) == MHD_YES;
}

/* Starts the daemon, which takes its connections from h->listener (no
 * socket of its own).  Its limit is twice the listener's: a connection
 * reported closed holds its place in libmicrohttpd until its thread is
 * cleaned up, and the listener must never meet libmicrohttpd's limit
 * (which closes the connection). */
static struct MHD_Daemon *sp_http_daemon(struct sp_http *h, unsigned limit)
{
    unsigned int flags = MHD_USE_NO_LISTEN_SOCKET | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                         MHD_USE_POLL | MHD_USE_ITC;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, sp_access, h, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SP_HTTP_MEMORY_LIMIT,
        MHD_OPTION_CONNECTION_LIMIT, 2 * limit, MHD_OPTION_CONNECTION_TIMEOUT, SP_HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_NOTIFY_COMPLETED, sp_completed, h, MHD_OPTION_NOTIFY_CONNECTION, sp_conn_notify, h, MHD_OPTION_END);
    if (!d)
        sp_error_set(SP_ERR_IO, "http: libmicrohttpd failed to start");
    return d;
}

sp_status sp_http_start(struct sp_http **out, const struct sp_server_config *cfg, const struct addrinfo *addrs,
                        struct sp_sched *sched, struct sp_router *router, struct sp_metrics *m,
                        const char *model_id)
{
    struct sp_http *h = calloc(1, sizeof *h);
    *out = NULL;
    if (!h)
        return sp_error_set(SP_ERR_NOMEM, "http: out of memory");
    h->cfg = *cfg;
    h->sched = sched;
    h->router = router;
    h->metrics = m;
    h->model_id = strdup(model_id ? model_id : "");
    snprintf(h->replica, sizeof h->replica, "%s", cfg->replica_id ? cfg->replica_id : "");
    pthread_mutex_init(&h->mu, NULL);
    if (!h->model_id) {
        sp_http_stop(h);
        return sp_error_set(SP_ERR_NOMEM, "http: out of memory");
    }
    sp_status st = sp_peers_start(&h->peers, (unsigned)cfg->max_connections, cfg->recv_timeout_s);
    if (st != SP_OK) {
        sp_http_stop(h);
        return st;
    }
    /* connections past --max-connections, up to SP_HTTP_OVERFLOW more, are
     * accepted for probes; beyond them clients wait in the backlog */
    unsigned limit = (unsigned)cfg->max_connections + SP_HTTP_OVERFLOW;
    if ((st = sp_listener_open(&h->listener, addrs, cfg->host ? cfg->host : "127.0.0.1", cfg->port)) != SP_OK ||
        (h->daemon = sp_http_daemon(h, limit)) == NULL ||
        (st = sp_listener_start(h->listener, limit, sp_http_hand, h)) != SP_OK) {
        sp_http_stop(h);
        return st != SP_OK ? st : SP_ERR_IO;
    }
    h->port = sp_listener_port(h->listener);
    *out = h;
    return SP_OK;
}

int sp_http_port(const struct sp_http *h)
{
    return h->port;
}

void sp_http_drain(struct sp_http *h)
{
    pthread_mutex_lock(&h->mu);
    h->draining = true;
    pthread_mutex_unlock(&h->mu);
}

int sp_http_active(struct sp_http *h)
{
    pthread_mutex_lock(&h->mu);
    int n = h->n_active;
    pthread_mutex_unlock(&h->mu);
    return n;
}

double sp_http_quiet_s(struct sp_http *h)
{
    pthread_mutex_lock(&h->mu);
    double last = h->last_arrival;
    pthread_mutex_unlock(&h->mu);
    return last > 0 ? sp_now() - last : 1e9;
}

void sp_http_stop(struct sp_http *h)
{
    if (!h)
        return;
    sp_listener_stop(h->listener);
    if (h->daemon)
        MHD_stop_daemon(h->daemon);
    sp_listener_free(h->listener);
    sp_peers_stop(h->peers);
    pthread_mutex_destroy(&h->mu);
    free(h->model_id);
    free(h);
}
