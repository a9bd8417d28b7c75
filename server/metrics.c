/* Prometheus metrics (text exposition format 0.0.4).  All updates take one
 * short mutex: the scheduler's callback calls the observe functions once per
 * token, which is cheap next to a forward pass. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

/* Time to first token: queueing + prefill, so up to a minute. */
static const double sp_ttft_bounds[SP_METRICS_BUCKETS] = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60};
/* Per-token latency: one decode step of the whole batch. */
static const double sp_itl_bounds[SP_METRICS_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5};

void sp_metrics_init(struct sp_metrics *m, const char *replica)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    snprintf(m->replica, sizeof m->replica, "%s", replica);
    m->ttft.bounds = sp_ttft_bounds;
    m->itl.bounds = sp_itl_bounds;
}

void sp_metrics_free(struct sp_metrics *m)
{
    free(m->engines);
    pthread_mutex_destroy(&m->mu);
}

void sp_metrics_count_status(struct sp_metrics *m, int http_status)
{
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SP_METRICS_MAX_STATUS; i++) {
        if (m->status_code[i] == http_status || m->status_code[i] == 0) {
            m->status_code[i] = http_status;
            m->status_count[i]++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

static const char *const sp_outcome_names[SP_OUTCOME_N] = {"cancelled", "timeout", "shutdown",
                                                           "aborted"};

const char *sp_outcome_name(enum sp_outcome o)
{
    return o < SP_OUTCOME_N ? sp_outcome_names[o] : "aborted";
}

void sp_metrics_count_unanswered(struct sp_metrics *m, enum sp_outcome o)
{
    pthread_mutex_lock(&m->mu);
    m->unanswered[o < SP_OUTCOME_N ? o : SP_OUTCOME_ABORTED]++;
    pthread_mutex_unlock(&m->mu);
}

void sp_metrics_count_tokens(struct sp_metrics *m, uint64_t prompt, uint64_t cached,
                             uint64_t generated)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += prompt;
    m->cached_tokens += cached;
    m->generated_tokens += generated;
    pthread_mutex_unlock(&m->mu);
}

static void sp_histogram_observe(struct sp_histogram *h, double v)
{
    int b = 0;
    while (b < SP_METRICS_BUCKETS && v > h->bounds[b])
        b++;
    h->counts[b]++;
    h->sum += v;
    h->n++;
}

void sp_metrics_observe_ttft(struct sp_metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    sp_histogram_observe(&m->ttft, seconds);
    pthread_mutex_unlock(&m->mu);
}

void sp_metrics_observe_itl(struct sp_metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    sp_histogram_observe(&m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

int sp_metrics_engine_add(struct sp_metrics *m, const char *model)
{
    pthread_mutex_lock(&m->mu);
    int slot = -1;
    for (size_t i = 0; i < m->n_engines && slot < 0; i++)
        if (!m->engines[i].used)
            slot = (int)i;
    if (slot < 0 && m->n_engines < SP_METRICS_MAX_ENGINES) {
        struct sp_metrics_engine *v = realloc(m->engines, (m->n_engines + 1) * sizeof *v);
        if (v) {
            m->engines = v;
            slot = (int)m->n_engines++;
        }
    }
    if (slot >= 0) {
        struct sp_metrics_engine *x = &m->engines[slot];
        memset(x, 0, sizeof *x);
        x->used = true;
        snprintf(x->model, sizeof x->model, "%s", model ? model : "");
    }
    pthread_mutex_unlock(&m->mu);
    return slot;
}

void sp_metrics_engine_remove(struct sp_metrics *m, int slot)
{
    pthread_mutex_lock(&m->mu);
    if (slot >= 0 && (size_t)slot < m->n_engines)
        m->engines[slot].used = false;
    pthread_mutex_unlock(&m->mu);
}

void sp_metrics_set_load(struct sp_metrics *m, int slot, const struct sp_engine_stats *st,
                         uint64_t running, uint64_t queued)
{
    pthread_mutex_lock(&m->mu);
    if (slot >= 0 && (size_t)slot < m->n_engines) {
        struct sp_metrics_engine *x = &m->engines[slot];
        if (st)
            x->engine = *st;
        x->running = running;
        x->queued = queued;
    }
    pthread_mutex_unlock(&m->mu);
}

void sp_metrics_set_connections(struct sp_metrics *m, uint64_t open, uint64_t gave_way, uint64_t timed_out)
{
    pthread_mutex_lock(&m->mu);
    m->conns_open = open;
    m->conns_gave_way = gave_way;
    m->conns_timed_out = timed_out;
    pthread_mutex_unlock(&m->mu);
}

void sp_metrics_add_waiting(struct sp_metrics *m, int delta)
{
    pthread_mutex_lock(&m->mu);
    m->waiting_for_model += (uint64_t)(int64_t)delta;
    pthread_mutex_unlock(&m->mu);
}

/* A growable text buffer; on allocation failure it stops growing and the
 * render returns NULL. */
struct sp_text {
    char *s;
    size_t len, cap;
    bool failed;
};

static void sp_text_printf(struct sp_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sp_text_printf(struct sp_text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n + 256;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->failed = true;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

static void sp_render_histogram(struct sp_text *t, const char *name, const char *help,
                                const struct sp_histogram *h)
{
    sp_text_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b < SP_METRICS_BUCKETS; b++) {
        cum += h->counts[b];
        sp_text_printf(t, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[b],
                       (unsigned long long)cum);
    }
    cum += h->counts[SP_METRICS_BUCKETS];
    sp_text_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    sp_text_printf(t, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name,
                   (unsigned long long)h->n);
}

static void sp_render_scalar(struct sp_text *t, const char *name, const char *type,
                             const char *help, unsigned long long v)
{
    sp_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

/* The gauges and counters of each model's engine, in this order (and the
 * process's resident memory among them). */
static const struct {
    const char *name, *type, *help;
    bool process; /* one line for the process (sp_process_memory) */
} sp_engine_metrics[] = {
    {"spindle_requests_running", "gauge", "Requests admitted to the engine.", false},
    {"spindle_requests_queued", "gauge", "Requests waiting for admission.", false},
    {"spindle_kv_blocks_total", "gauge", "KV cache blocks in the pool.", false},
    {"spindle_kv_blocks_used", "gauge", "KV cache blocks held by running requests.", false},
    {"spindle_kv_blocks_free", "gauge",
     "KV cache blocks not held by running requests (idle cached ones included).", false},
    {"spindle_kv_blocks_cached", "gauge", "Idle KV cache blocks kept for prefix reuse.", false},
    {"spindle_prefix_cache_hits_total", "counter", "Requests that reused cached prefix blocks.", false},
    {"spindle_prefix_cache_tokens_reused_total", "counter", "Prompt tokens reused from the prefix cache.", false},
    {"spindle_memory_weights_bytes", "gauge",
     "Model weights in memory (repacked copies and file data read in place).", false},
    {"spindle_memory_kv_bytes", "gauge", "KV cache pool and sliding-window rings.", false},
    {"spindle_memory_state_bytes", "gauge",
     "Linear layers' recurrent state, a slot per parallel request (0 without linear layers).", false},
    {"spindle_state_bytes_per_sequence", "gauge", "One sequence's recurrent state slot (0 without linear layers).",
     false},
    {"spindle_state_slots_used", "gauge", "Recurrent state slots held by sequences.", false},
    {"spindle_state_snapshots", "gauge", "Prefix-cache snapshots of recurrent state held.", false},
    {"spindle_memory_state_snapshots_bytes", "gauge", "Budget of the prefix cache's recurrent-state snapshots.",
     false},
    {"spindle_memory_scratch_bytes", "gauge", "Forward scratch, logits and step buffers.", false},
    {"spindle_memory_resident_bytes", "gauge", "Resident memory of the process.", true},
    {"spindle_spec_drafted_tokens_total", "counter", "Speculative decoding: draft tokens verified.", false},
    {"spindle_spec_accepted_tokens_total", "counter", "Speculative decoding: draft tokens the model kept.", false},
};

/* x's value of sp_engine_metrics[k]. */
static unsigned long long sp_engine_metric(const struct sp_metrics_engine *x, size_t k)
{
    const struct sp_engine_stats *e = &x->engine;
    const unsigned long long v[] = {
        x->running, x->queued, e->kv_blocks_total, e->kv_blocks_used,
        e->kv_blocks_total >= e->kv_blocks_used ? e->kv_blocks_total - e->kv_blocks_used : 0,
        e->kv_blocks_cached, e->prefix_hits, e->prefix_tokens_reused, e->mem_weights, e->mem_kv, e->mem_state,
        e->state_bytes_per_seq, e->state_slots_used, e->state_snapshots, e->mem_state_snapshots, e->mem_scratch,
        0, e->spec_drafted, e->spec_accepted,
    };
    _Static_assert(sizeof v / sizeof v[0] == sizeof sp_engine_metrics / sizeof sp_engine_metrics[0],
                   "a value per engine metric");
    return v[k];
}

/* A label value: backslash and double quote escaped (a model's name is
 * printable ASCII without spaces: sp_server_alias_valid). */
static void sp_label_escape(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; *src && n + 2 < cap; src++) {
        if (*src == '"' || *src == '\\')
            dst[n++] = '\\';
        dst[n++] = *src;
    }
    dst[n] = '\0';
}

/* sp_engine_metrics[k]: a line per engine, labelled model="NAME" for the
 * models of a router (the one model of -m has no label). */
static void sp_render_engines(struct sp_text *t, const struct sp_metrics *m, size_t k)
{
    const char *name = sp_engine_metrics[k].name;
    sp_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, sp_engine_metrics[k].help, name,
                   sp_engine_metrics[k].type);
    if (sp_engine_metrics[k].process) {
        uint64_t rss = 0, peak = 0;
        sp_process_memory(&rss, &peak);
        sp_text_printf(t, "%s %llu\n", name, (unsigned long long)rss);
        return;
    }
    for (size_t i = 0; i < m->n_engines; i++) {
        const struct sp_metrics_engine *x = &m->engines[i];
        if (!x->used)
            continue;
        char label[2 * sizeof x->model];
        sp_label_escape(label, sizeof label, x->model);
        if (x->model[0])
            sp_text_printf(t, "%s{model=\"%s\"} %llu\n", name, label, sp_engine_metric(x, k));
        else
            sp_text_printf(t, "%s %llu\n", name, sp_engine_metric(x, k));
    }
}

char *sp_metrics_render(struct sp_metrics *m)
{
    struct sp_text t = {.s = malloc(4096), .cap = 4096};
    if (!t.s)
        return NULL;
    t.s[0] = '\0';
    pthread_mutex_lock(&m->mu);
    /* The id needs no escaping: sp_server_replica_id_valid admits no quote,
     * backslash or newline. */
    sp_text_printf(&t, "# HELP spindle_replica_info This replica's id (--replica-id).\n"
                       "# TYPE spindle_replica_info gauge\n"
                       "spindle_replica_info{replica=\"%s\"} 1\n", m->replica);
    sp_text_printf(&t, "# HELP spindle_requests_total HTTP requests ended, by status (499: the client "
                       "went away or no response was sent).\n"
                       "# TYPE spindle_requests_total counter\n");
    for (int i = 0; i < SP_METRICS_MAX_STATUS && m->status_code[i]; i++)
        sp_text_printf(&t, "spindle_requests_total{status=\"%d\"} %llu\n", m->status_code[i],
                       (unsigned long long)m->status_count[i]);
    sp_text_printf(&t, "# HELP spindle_requests_unanswered_total Requests that ended before any "
                       "response, by outcome (each also counts as status 499 above).\n"
                       "# TYPE spindle_requests_unanswered_total counter\n");
    for (int o = 0; o < SP_OUTCOME_N; o++)
        sp_text_printf(&t, "spindle_requests_unanswered_total{outcome=\"%s\"} %llu\n",
                       sp_outcome_names[o], (unsigned long long)m->unanswered[o]);
    sp_render_scalar(&t, "spindle_prompt_tokens_total", "counter",
                     "Prompt tokens of finished requests.", m->prompt_tokens);
    sp_render_scalar(&t, "spindle_prompt_tokens_cached_total", "counter",
                     "Prompt tokens served from the prefix cache.", m->cached_tokens);
    sp_render_scalar(&t, "spindle_generated_tokens_total", "counter", "Tokens generated.",
                     m->generated_tokens);
    sp_render_histogram(&t, "spindle_time_to_first_token_seconds",
                        "From request submission to its first generated token.", &m->ttft);
    sp_render_histogram(&t, "spindle_time_per_output_token_seconds",
                        "Gap between consecutive tokens of one request.", &m->itl);
    sp_render_scalar(&t, "spindle_connections_open", "gauge", "HTTP connections open.", m->conns_open);
    sp_text_printf(&t, "# HELP spindle_connections_closed_by_server_total Connections the server shut down "
                       "before their request was in: to give way to a new one when the connection limit is "
                       "full, or at --recv-timeout.\n"
                       "# TYPE spindle_connections_closed_by_server_total counter\n"
                       "spindle_connections_closed_by_server_total{reason=\"gave_way\"} %llu\n"
                       "spindle_connections_closed_by_server_total{reason=\"recv_timeout\"} %llu\n",
                   (unsigned long long)m->conns_gave_way, (unsigned long long)m->conns_timed_out);
    sp_render_scalar(&t, "spindle_requests_waiting_for_model", "gauge",
                     "Requests waiting for their model to load, or for room to load it (--models-dir).",
                     m->waiting_for_model);
    for (size_t k = 0; k < sizeof sp_engine_metrics / sizeof sp_engine_metrics[0]; k++)
        sp_render_engines(&t, m, k);
    pthread_mutex_unlock(&m->mu);
    if (t.failed) {
        free(t.s);
        return NULL;
    }
    return t.s;
}
