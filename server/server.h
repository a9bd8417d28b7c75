/* `spindle serve`: an OpenAI-compatible HTTP server over one engine
 * (sp_server_run and struct sp_server_config, what the CLI calls: server_entry.h).
 *
 * Threads:
 *   - libmicrohttpd's listener plus one thread per connection (http.c).  A
 *     connection thread parses, validates and tokenizes, enqueues a job, and
 *     then blocks in poll() on the job's eventfd and the client socket, so it
 *     wakes for new text or for a client that went away, and never spins.
 *   - the scheduler (scheduler.c), the only thread that touches the engine
 *     once it runs: it admits queued jobs, embeds one chunk of an embedding
 *     request per turn, calls sp_engine_step() and copies each token event
 *     into the job's buffer.
 *   - the connection reaper (peers.c): shuts down connections that took
 *     longer than --recv-timeout to send a request, and on a full server
 *     the one that has waited longest for its request.
 *   - the calling thread makes the engine before anything listens, then
 *     waits for SIGINT/SIGTERM/SIGHUP and drains (sp_server_run).
 *
 * Behind a load balancer: nothing listens until the model is loaded (a
 * balancer's health check fails as it would on a 503), /health answers 503
 * {"status":"draining"} from SIGTERM on, every response carries
 * `X-Spindle-Replica: <replica id>` (with --api-key, only responses to
 * requests that carry the key), and /metrics has
 * spindle_replica_info{replica="<id>"} 1.
 */
#ifndef SP_SERVER_SERVER_H
#define SP_SERVER_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server_entry.h"
#include "server/server_schema.h"

/* The longest replica id (sp_server_replica_id_valid). */
#define SP_REPLICA_ID_MAX 64
/* ---- metrics.c: Prometheus counters, gauges and histograms ---- */

#define SP_METRICS_MAX_STATUS 24
#define SP_METRICS_BUCKETS 16

struct sp_histogram {
    const double *bounds; /* SP_METRICS_BUCKETS upper bounds, ascending */
    uint64_t counts[SP_METRICS_BUCKETS + 1];
    double sum;
    uint64_t n;
};

/* How a request ended that got no response at all (counted in
 * spindle_requests_unanswered_total{outcome=...} and logged as status 499
 * with outcome=...). */
enum sp_outcome {
    SP_OUTCOME_CANCELLED, /* the client hung up (while queued, in prefill, or before its body) */
    SP_OUTCOME_TIMEOUT,   /* its deadline or the connection's idle timeout passed */
    SP_OUTCOME_SHUTDOWN,  /* the server stopped */
    SP_OUTCOME_ABORTED,   /* anything else (out of memory, a write error) */
    SP_OUTCOME_N,
};
/* The outcome's label value ("cancelled", ...). */
const char *sp_outcome_name(enum sp_outcome o);

/* One engine's gauges (a scheduler's), labelled by its model's name with
 * several models. */
struct sp_metrics_engine {
    bool used;
    char model[129]; /* "": the one model of -m (no label) */
    struct sp_engine_stats engine;
    uint64_t running, queued;
};
#define SP_METRICS_MAX_ENGINES 1025

struct sp_metrics {
    pthread_mutex_t mu;
    char replica[SP_REPLICA_ID_MAX + 1];
    int status_code[SP_METRICS_MAX_STATUS];
    uint64_t status_count[SP_METRICS_MAX_STATUS];
    uint64_t unanswered[SP_OUTCOME_N];
    uint64_t prompt_tokens, cached_tokens, generated_tokens;
    struct sp_histogram ttft, itl;
    uint64_t waiting_for_model; /* requests waiting for their model to load or for room (router.c) */
    struct sp_metrics_engine *engines; /* a slot per scheduler (sp_metrics_engine_add) */
    size_t n_engines;
    uint64_t conns_open, conns_gave_way, conns_timed_out;
};
/* replica: a valid replica id (sp_server_replica_id_valid), copied. */
void sp_metrics_init(struct sp_metrics *m, const char *replica);
void sp_metrics_free(struct sp_metrics *m);
void sp_metrics_count_status(struct sp_metrics *m, int http_status);
void sp_metrics_count_unanswered(struct sp_metrics *m, enum sp_outcome o);
void sp_metrics_count_tokens(struct sp_metrics *m, uint64_t prompt, uint64_t cached,
                             uint64_t generated);
void sp_metrics_observe_ttft(struct sp_metrics *m, double seconds);
void sp_metrics_observe_itl(struct sp_metrics *m, double seconds);
/* A slot for one engine's gauges (model NULL or "": unlabelled); -1 when
 * none can be had (its gauges are then left out).  Removed when the engine
 * goes, its lines with it. */
int sp_metrics_engine_add(struct sp_metrics *m, const char *model);
void sp_metrics_engine_remove(struct sp_metrics *m, int slot);
void sp_metrics_set_load(struct sp_metrics *m, int slot, const struct sp_engine_stats *st,
                         uint64_t running, uint64_t queued);
void sp_metrics_set_connections(struct sp_metrics *m, uint64_t open, uint64_t gave_way, uint64_t timed_out);
void sp_metrics_add_waiting(struct sp_metrics *m, int delta);
/* The text exposition format; malloc'd. */
char *sp_metrics_render(struct sp_metrics *m);

/* ---- scheduler.c: jobs and the loop that owns the engine ---- */

/* One token event, copied out of the engine's callback. */
struct sp_job_event {
    int choice;
    sp_token id;              /* -1 on a final event */
    uint32_t text_off, text_len; /* into the buffer's text */
    enum sp_finish finish;
    uint32_t n_prompt, n_cached, n_generated;
    bool has_lp;
    struct sp_token_logprobs lp;
    int32_t explain;          /* index into the buffer's xp, or -1 */
    /* constrained output (see sp_token_event): the error text, if any, is
     * at err_off/err_len in the buffer's text */
    int attempt;
    bool retry, valid;
    uint32_t err_off, err_len;
};

/* Events not yet taken by the HTTP thread.  The HTTP thread swaps its own
 * (emptied) buffer with the job's, so neither side copies or frees. */
struct sp_job_buf {
    struct sp_job_event *ev;
    size_t n_ev, cap_ev;
    char *text;
    size_t n_text, cap_text;
    struct sp_sampler_explain *xp; /* explain records of events that asked for them */
    size_t n_xp, cap_xp;
};
void sp_job_buf_free(struct sp_job_buf *b);

enum sp_job_state {
    SP_JOB_QUEUED = 0,
    SP_JOB_RUNNING,
    SP_JOB_DONE,   /* every choice has its final event (or the job never ran) */
    SP_JOB_FAILED, /* refused at admission: fail_status / fail_msg */
};

struct sp_job {
    struct sp_api_request api; /* owned; immutable once submitted */
    double t_submit;           /* monotonic seconds */
    double deadline;           /* monotonic; 0: none */
    int efd;                   /* eventfd: the scheduler signals new state */

    pthread_mutex_t mu;        /* guards the fields down to n_final */
    enum sp_job_state state;
    sp_status fail_status;
    char fail_msg[256];
    struct sp_job_buf buf;
    bool timed_out;
    bool shut_down;            /* ended by the drain timeout (sp_sched_abort) */
    bool lost_events;          /* allocation failed while copying an event */
    int n_final;

    atomic_bool cancel;        /* set by the HTTP thread */
    atomic_int refs;

    /* scheduler thread only */
    struct sp_sched *sched;
    struct sp_request *er;
    struct sp_job *next, *prev;
    bool cancel_sent;
    bool abort_sent;           /* the cancel came from sp_sched_abort */
    bool first_token_seen;
    double t_last_token;
    int n_passed;              /* later jobs admitted past it while the KV cache was short */

    /* guarded by mu: for the request log */
    double t_first, t_last;    /* monotonic times of the first and last token; 0: none */
};

/* A new job owning `api` (moved in; *api is zeroed).  NULL with errno set
 * when it cannot be made (ENOMEM; EMFILE or ENFILE: no descriptor for its
 * eventfd). One reference, the caller's. */
struct sp_job *sp_job_new(struct sp_api_request *api, double timeout_s);
void sp_job_unref(struct sp_job *j);
/* Swaps the job's pending events into *mine (emptied first) and returns
 * the job's state at that moment (*timed_out: the deadline fired). */
enum sp_job_state sp_job_take(struct sp_job *j, struct sp_job_buf *mine, bool *timed_out);
/* True once the job has ended because the server shut down before it
 * finished (a job that finished by itself first never reports it). */
bool sp_job_shut_down(struct sp_job *j);
double sp_now(void);

struct sp_sched;
/* Starts the scheduler thread, which owns `e` from then on (and frees it in
 * sp_sched_stop, also when starting fails).  label: the model's name on its
 * gauges in m (NULL: none, the one model of -m). */
sp_status sp_sched_start(struct sp_sched **out, const sp_model *model, sp_engine *e, int max_queue, int n_parallel,
                         const struct sp_server_sampling *sampling, struct sp_metrics *m, const char *label);
/* The model served (the engine's); immutable, safe to read from any thread. */
const sp_model *sp_sched_model(const struct sp_sched *s);
/* Grammars bound to it, kept by their text for the requests that repeat
 * them (thread-safe; at most SP_SCHED_GRAMMARS). */
#define SP_SCHED_GRAMMARS 32
sp_grammar_cache *sp_sched_grammar_cache(const struct sp_sched *s);
int sp_sched_n_ctx(const struct sp_sched *s);
/* The sampling a request gets for the fields it leaves unset (see
 * sp_model_sampling_defaults and struct sp_server_sampling). */
const struct sp_sampler_params *sp_sched_sampling(const struct sp_sched *s);
/* Enqueues j (taking a reference).  SP_ERR_FULL when max_queue jobs are
 * already waiting. */
sp_status sp_sched_submit(struct sp_sched *s, struct sp_job *j);
/* An embedding request for the scheduler's thread.  The HTTP thread fills
 * the inputs and out ([n_inputs][n_embd]), submits it and waits on efd
 * until sp_sched_embed_done; the scheduler embeds it a chunk at a time
 * between generation steps (inputs of at most sp_sched_embed_max_tokens
 * tokens together: one forward pass), taking turns with the other
 * embedding requests, so neither running streams nor other requests wait
 * for a large batch. */
struct sp_embed_work {
    const sp_token *const *inputs;
    const size_t *n_tokens;
    size_t n_inputs;
    float *out;
    int efd;                   /* eventfd: the scheduler signals the end */
    atomic_bool cancel;        /* set by sp_sched_embed_cancel */
    /* guarded by the scheduler's mutex */
    sp_status st;              /* sp_engine_embed's */
    char msg[256];             /* its message when st != SP_OK */
    bool done;
    bool shut_down;            /* ended by the drain timeout (sp_sched_abort) */
    size_t n_done;             /* inputs embedded so far */
    struct sp_embed_work *next;
};
/* Zeroes w, sets its inputs and output and makes its eventfd (SP_ERR_IO
 * when none can be made). */
sp_status sp_embed_work_init(struct sp_embed_work *w, const sp_token *const *inputs, const size_t *n_tokens,
                             size_t n_inputs, float *out);
void sp_embed_work_free(struct sp_embed_work *w);
/* Queues w behind the other embedding requests; SP_ERR_FULL without
 * queueing when as many jobs as sp_sched_submit allows are already waiting. */
sp_status sp_sched_embed_submit(struct sp_sched *s, struct sp_embed_work *w);
/* Whether the scheduler is done with w: every input embedded (w->st
 * SP_OK), an error (w->st, w->msg), cancelled, or shut down (w->shut_down). */
bool sp_sched_embed_done(struct sp_sched *s, struct sp_embed_work *w);
/* Stops w at the next chunk (client gone) and returns once the scheduler
 * no longer touches it. */
void sp_sched_embed_cancel(struct sp_sched *s, struct sp_embed_work *w);
/* The most tokens one embedding input may have (sp_engine_embed_max_tokens). */
int sp_sched_embed_max_tokens(const struct sp_sched *s);

/* job_batch.c: the jobs of one HTTP request, one per prompt of a
 * completions batch (jobs[0] the first prompt's). */
/* Parses the body (parse) once per prompt into one job each (*jobs: n of
 * them, malloc'd; jobs[0] holds the first prompt's request), each with its
 * own random seed unless the request sets one and its time limit (the
 * request's `timeout`, else default_timeout), all waking jobs[0]'s
 * eventfd.  On failure *err says what to answer and nothing is left. */
sp_status sp_jobs_make(sp_api_parse_fn parse, enum sp_api_kind kind, const char *body, size_t len,
                       const sp_model *model, const struct sp_api_limits *lim, double default_timeout,
                       struct sp_job ***jobs, size_t *n, struct sp_api_error *err);
void sp_jobs_unref(struct sp_job **jobs, size_t n);
/* Makes j wake whoever waits on with's eventfd (instead of its own). */
sp_status sp_job_share_wakeup(struct sp_job *j, const struct sp_job *with);
/* Submits every job; on failure (sp_sched_submit's status) the ones
 * already submitted are cancelled. */
sp_status sp_jobs_submit(struct sp_sched *s, struct sp_job *const *jobs, size_t n);
/* SP_JOB_FAILED (with *failed its index) if any job failed admission,
 * else QUEUED while any is queued, else RUNNING while any runs, else DONE. */
enum sp_job_state sp_jobs_state(struct sp_job *const *jobs, size_t n, size_t *failed);
/* sp_job_take over every job: their events in *mine, job i's choices
 * moved up by i * n_choices (scratch: a buffer of the caller's).  DONE (or
 * FAILED) once every job has ended.  *lost: events were dropped for want
 * of memory. */
enum sp_job_state sp_jobs_take(struct sp_job *const *jobs, size_t n, int n_choices, struct sp_job_buf *mine,
                               struct sp_job_buf *scratch, bool *timed_out, bool *lost);
void sp_jobs_cancel(struct sp_sched *s, struct sp_job *const *jobs, size_t n);
bool sp_jobs_shut_down(struct sp_job *const *jobs, size_t n);

/* Asks the scheduler to end j (client gone); safe in any state. */
void sp_sched_cancel(struct sp_sched *s, struct sp_job *j);
/* Ends every queued and running job now, marked shut down (the drain ran
 * out of time); jobs submitted afterwards end the same way. */
void sp_sched_abort(struct sp_sched *s);
/* Ends the loop once nothing is queued or running, joins it, frees the engine. */
void sp_sched_stop(struct sp_sched *s);

/* ---- peers.c: connection accounting (limits, receive deadlines, eviction) ---- */

struct sp_peers;
struct sp_peer;
/* max_connections: connections served before new ones make the longest
 * receiving one give way (or are marked overflow); recv_timeout_s: the
 * total time a connection may take to send a request (0: none). */
sp_status sp_peers_start(struct sp_peers **out, unsigned max_connections, double recv_timeout_s);
void sp_peers_stop(struct sp_peers *ps);
/* A new connection on socket fd (libmicrohttpd's connection-started
 * notice); NULL when out of memory (it is then not accounted). */
struct sp_peer *sp_peers_open(struct sp_peers *ps, int fd);
/* Its connection-closed notice, before the socket is closed; p NULL: nothing. */
void sp_peers_close(struct sp_peers *ps, struct sp_peer *p);
/* The request is in (or answered from its headers): no receive deadline
 * while it runs and is answered. */
void sp_peers_busy(struct sp_peers *ps, struct sp_peer *p);
/* The answer is done: waiting for the next request, under the deadline again. */
void sp_peers_idle(struct sp_peers *ps, struct sp_peer *p);
/* Its request's headers are in: true when it arrived with the limit full
 * and still nobody gives way (probes only).  An overflow connection waits
 * here for a receiving one to reach the age at which it gives way, or for
 * one to close; it waits not at all when no other connection is receiving. */
bool sp_peer_overflow(struct sp_peers *ps, struct sp_peer *p);
/* It was shut down because its receive deadline passed. */
bool sp_peer_timed_out(struct sp_peers *ps, struct sp_peer *p);
/* Connections open now, and those shut down here since the start: to
 * give way to a new one, or at their receive deadline. */
void sp_peers_counts(struct sp_peers *ps, uint64_t *open, uint64_t *gave_way, uint64_t *timed_out);

/* ---- listener.c: the listening socket (accepts only below a limit) ---- */

struct sp_listener;
struct addrinfo;
struct sockaddr;
/* Takes an accepted, non-blocking socket: true when it took it (and will
 * report its close through sp_listener_closed), false when it did not
 * (the socket is closed either way). */
typedef bool (*sp_listener_hand_fn)(void *arg, int fd, const struct sockaddr *addr, unsigned addr_len);
/* Binds the first of addrs that binds and listens on it; SP_ERR_IO with
 * the error set (naming host and port) when none does. */
sp_status sp_listener_open(struct sp_listener **out, const struct addrinfo *addrs, const char *host, int port);
/* The bound port (the one the system chose for port 0). */
int sp_listener_port(const struct sp_listener *l);
/* Accepts in a thread of its own while fewer than `limit` handed
 * connections are open, handing each to hand(arg, ...). */
sp_status sp_listener_start(struct sp_listener *l, unsigned limit, sp_listener_hand_fn hand, void *arg);
/* One handed connection closed (any thread). */
void sp_listener_closed(struct sp_listener *l);
/* Stops accepting; waits for the thread. */
void sp_listener_stop(struct sp_listener *l);
/* Stops, closes the socket, frees; NULL is a no-op. */
void sp_listener_free(struct sp_listener *l);

/* ---- http.c ---- */

/* Connections accepted beyond --max-connections, for /health and /metrics
 * (everything else gets 503 on them). */
#define SP_HTTP_OVERFLOW 8u

struct sp_http;
struct sp_router;
/* The addresses of host (a numeric IPv4/IPv6 address or a name getaddrinfo
 * resolves, in the order it returns them) with port, for sp_http_start;
 * the caller frees them with freeaddrinfo.  SP_ERR_ARG with the error set
 * (and *out NULL) when host does not resolve. */
sp_status sp_http_resolve(const char *host, int port, struct addrinfo **out);
/* Listens on the first of addrs that binds (SP_ERR_IO with the error set
 * when none does) and serves the API from it: the one model of sched
 * (named model_id), or with router (sched and model_id NULL) the model
 * each request names. */
sp_status sp_http_start(struct sp_http **out, const struct sp_server_config *cfg, const struct addrinfo *addrs,
                        struct sp_sched *sched, struct sp_router *router, struct sp_metrics *m,
                        const char *model_id);
int sp_http_port(const struct sp_http *h);
/* New requests get 503 from now on. */
void sp_http_drain(struct sp_http *h);
/* Generation requests accepted and not yet completed. */
int sp_http_active(struct sp_http *h);
/* Seconds since the last connection was accepted or request begun (1e9 if none). */
double sp_http_quiet_s(struct sp_http *h);
void sp_http_stop(struct sp_http *h);

/* ---- router.c: the models of --models-dir, each loaded on demand ---- */

struct sp_router;
struct sp_router_model;
/* Reads cfg->models_dir (SP_ERR_ARG when it is not a directory), or
 * cfg->models_list; loads nothing yet.  Each model it loads gets an engine made as sp_server_run
 * makes the one of -m (sp_server_engine_params) and a scheduler counting
 * into m. */
/* The length of a model's name in the file name `name` (n > 5 bytes,
 * ending in .gguf): NAME of NAME.gguf, or of gguf-split's
 * NAME-0000i-of-0000K.gguf (*later_part: i > 1; the first part stands for
 * the model). */
size_t sp_router_model_name(const char *name, size_t n, bool *later_part);
sp_status sp_router_open(struct sp_router **out, const struct sp_server_config *cfg, struct sp_metrics *m);
/* The models listed at the last read of the directory. */
size_t sp_router_count(struct sp_router *r);
/* Reads the directory (or list) again: whether any model of it can be
 * served (is loaded, or has not failed to load since its file changed). */
bool sp_router_servable(struct sp_router *r);
/* The model `name` names (ID, or ID:latest as Ollama's clients send it),
 * held (never unloaded) until sp_router_release: loaded first if it is not,
 * the call blocking while it loads or waits for room under --models-max
 * and --memory-budget.  keep_alive: its idle time from now on (seconds;
 * < 0: never unloaded for idleness; NAN: the server's --keep-alive).  NULL
 * with *err set: 404 model_not_found, 500 model_load_failed (the file's
 * one-line error), 507 model_too_large (it needs more than
 * --memory-budget), 503 shutting_down (sp_router_abort), 499 (nothing to
 * answer) when gone(ctx) says the client left while the request waited
 * for room (gone NULL: never asked). */
struct sp_router_model *sp_router_acquire(struct sp_router *r, const char *name, double keep_alive,
                                          bool (*gone)(void *), void *ctx, struct sp_api_error *err);
/* Ollama's keep_alive 0 without a prompt: the model `name` names is
 * unloaded now, or when its last request ends if one holds it (and stays
 * loaded if a request gets it meanwhile).  SP_ERR_ARG with a 404 in *err
 * when there is no such model. */
sp_status sp_router_unload_idle(struct sp_router *r, const char *name, struct sp_api_error *err);
struct sp_sched *sp_router_sched(const struct sp_router_model *m);
/* Its name: the file name without .gguf. */
const char *sp_router_id(const struct sp_router_model *m);
/* The request holding m is done (m NULL: nothing). */
void sp_router_release(struct sp_router *r, struct sp_router_model *m);
/* One model of the directory as the lists show it. */
struct sp_router_entry {
    char id[129];
    const char *state; /* "unloaded", "loading" or "loaded" */
    bool failed;       /* its last load failed: error says why */
    char error[512];
    uint64_t bytes;    /* the file's size */
    uint64_t mem;      /* its memory when last loaded (weights, KV cache, scratch); 0: never loaded */
    int n_ctx;         /* loaded: its context per request; else 0 */
    double expires_in; /* loaded: seconds until its keep-alive unloads it (its whole keep-alive
                          while a request holds it); -1: never, or not loaded */
};
/* Reads the directory (or list) again and lists its models, sorted by
 * name (*out malloc'd, *n entries). */
sp_status sp_router_list(struct sp_router *r, struct sp_router_entry **out, size_t *n);
/* The model a request body names (`model`, else Ollama's older `name`),
 * copied into buf; false when it names none (or it does not fit). */
bool sp_router_body_model(const char *body, size_t len, char *buf, size_t cap);
/* The drain ran out of time: every loaded model's jobs end now
 * (sp_sched_abort), and requests waiting for a model get 503. */
void sp_router_abort(struct sp_router *r);
/* Unloads every model and frees r (no request may hold one); NULL: nothing. */
void sp_router_close(struct sp_router *r);

/* server.c: the engine parameters of the configuration (threads, context,
 * KV cache, speculative decoding), for each model served. */
void sp_server_engine_params(const struct sp_server_config *c, struct sp_engine_params *ep);

/* ---- reasoning.c: thinking between <think> and </think> ---- */

enum sp_think_mode {
    SP_THINK_OFF = 0, /* no separation: everything is the answer */
    SP_THINK_START,   /* the output may open a block at its start */
    SP_THINK_INSIDE,  /* the prompt opened the block: the output starts in it */
    SP_THINK_AFTER,   /* the block is over (or never opened) */
    SP_THINK_HARMONY, /* gpt-oss's messages: the analysis channel is the reasoning */
};
#define SP_THINK_HEAD 192 /* Harmony: the longest message header read */
struct sp_think {
    enum sp_think_mode mode;
    unsigned matched;  /* bytes of a tag matched so far (held) */
    char space[16];    /* SP_THINK_START: whitespace before a possible tag (held) */
    unsigned n_space;
    bool trim;         /* drop whitespace before the next text */
    /* SP_THINK_HARMONY: the message being read */
    int part;                 /* its header, or the kind of its body (reasoning.c) */
    char head[SP_THINK_HEAD]; /* the header up to <|message|> (held) */
    unsigned n_head;
    char tag[16];             /* body: the start of a possible <|end|>, <|call|>, <|return|>, <|start|> (held) */
    unsigned n_tag;
};
void sp_think_init(struct sp_think *t, enum sp_think_mode mode);
typedef sp_status (*sp_think_fn)(void *user, bool reasoning, const char *text, size_t len);
/* Splits the next piece of output into reasoning and answer, in order, for
 * fn; `last`: the output ends here (held bytes are released).
 * SP_THINK_HARMONY reads gpt-oss's messages (header<|message|>body<|end|>,
 * the next one after <|start|>assistant): an analysis message's body is
 * reasoning, a final or commentary one's the answer, and a message to a
 * recipient (a tool call) goes to the answer from its " to=" on, header
 * and body as written, for the tool-call parser; the tokens between are
 * dropped. */
sp_status sp_think_feed(struct sp_think *t, const char *text, size_t len, bool last, sp_think_fn fn, void *user);

/* ---- sse.c: response bodies and stream chunks ---- */

struct sp_choice_acc;
struct sp_resp_ops;
/* Per-response state: ids, model name, per-choice accumulators. */
struct sp_resp {
    const struct sp_api_request *api;
    const struct sp_resp_ops *ops; /* the dialect's shapes (dialect.h); NULL: OpenAI's */
    void *state;                   /* the dialect's own */
    bool started;                  /* streaming: ops->start ran */
    bool errored;                  /* streaming: an error event went out (no end follows) */
    const sp_model *served;  /* token texts for logprobs; NULL: none */
    char id[48];
    const char *model;
    long long created;
    int n_choices;
    struct sp_choice_acc *acc;
    struct sp_api_usage usage;
    bool timed_out;
    bool hold;      /* streaming a checked output that may be retried: chunks wait for the verdict */
};
/* model: the name answers give when the request names none (a request
 * that names the model, or an alias of it, gets that name back). */
sp_status sp_resp_init(struct sp_resp *r, const struct sp_api_request *api,
                       const sp_model *served, const char *model, const struct sp_resp_ops *ops);
void sp_resp_free(struct sp_resp *r);
/* Streaming: appends "data: {...}\n\n" lines for the events in b to *out. */
sp_status sp_resp_stream_events(struct sp_resp *r, const struct sp_job_buf *b, char **out,
                                size_t *len, size_t *cap);
/* Streaming: the end of the stream (final chunks for choices the engine never
 * finished, the usage chunk when asked, "data: [DONE]"). */
sp_status sp_resp_stream_end(struct sp_resp *r, char **out, size_t *len, size_t *cap);
/* Streaming: an error event (`data: {"error": {...}}`, or the dialect's)
 * that ends a stream the server could not finish; clients raise it.  No
 * [DONE] follows. */
sp_status sp_resp_stream_error(struct sp_resp *r, const struct sp_api_error *err, char **out, size_t *len,
                               size_t *cap);
/* Non-streaming: accumulate, then build the whole body (malloc'd). */
sp_status sp_resp_collect(struct sp_resp *r, const struct sp_job_buf *b);
char *sp_resp_body(struct sp_resp *r);
/* A choice ended in error (grammar dead end, every attempt invalid): fills
 * *err (422) and returns true. */
bool sp_resp_failed(const struct sp_resp *r, struct sp_api_error *err);

#endif
