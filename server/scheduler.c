/* The scheduler thread: the only thread that touches the engine.
 *
 * Loop: end the queued jobs that are cancelled or expired wherever they
 * are queued, admit queued jobs in FIFO order while slots are free (one
 * the KV cache cannot take yet may be passed by a bounded number of later
 * ones: sp_admit), run one chunk of the next embedding request, forward
 * cancellations and expired deadlines with sp_request_cancel(), run one
 * sp_engine_step(), publish stats.  It sleeps on a condition variable only
 * when nothing is queued or running.  Token events are copied into the
 * job's buffer under the job's mutex, and the HTTP thread is woken through
 * the job's eventfd. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"

struct sp_sched {
    struct sp_metrics *metrics;
    int metrics_slot;   /* its gauges in metrics (sp_metrics_engine_add) */
    struct sp_server_sampling overrides;
    int max_queue;
    int n_parallel;
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu;       /* guards the queue and quit */
    pthread_cond_t cv;
    struct sp_job *q_head, *q_tail;
    size_t n_queued;
    struct sp_embed_work *e_head, *e_tail; /* embedding requests, a chunk each per turn in turn */
    pthread_cond_t e_cv;          /* an embedding request is done */
    atomic_size_t n_jobs;     /* submitted and not yet released by the scheduler */
    bool quit;
    bool abort;               /* sp_sched_abort: end every job as shut down */

    /* set before the thread starts; immutable afterwards */
    struct sp_engine *engine;
    const sp_model *model;
    sp_grammar_cache *gcache;
    int n_ctx, embed_max_tokens, n_embd;
    struct sp_sampler_params sampling;

    /* scheduler thread only */
    struct sp_job *run_head;
    size_t n_running;
};

double sp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- jobs ---- */

struct sp_job *sp_job_new(struct sp_api_request *api, double timeout_s)
{
    struct sp_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (j->efd < 0) {
        int e = errno;
        free(j);
        errno = e;
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->api = *api;
    memset(api, 0, sizeof *api);
    j->t_submit = sp_now();
    j->deadline = timeout_s > 0 ? j->t_submit + timeout_s : 0;
    atomic_init(&j->cancel, false);
    atomic_init(&j->refs, 1);
    return j;
}

void sp_job_buf_free(struct sp_job_buf *b)
{
    free(b->ev);
    free(b->text);
    free(b->xp);
    memset(b, 0, sizeof *b);
}

void sp_job_unref(struct sp_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    close(j->efd);
    pthread_mutex_destroy(&j->mu);
    sp_job_buf_free(&j->buf);
    sp_api_request_free(&j->api);
    free(j);
}

static void sp_job_signal(struct sp_job *j)
{
    uint64_t one = 1;
    /* EAGAIN only when the counter would overflow: already signalled. */
    if (write(j->efd, &one, sizeof one) < 0 && errno != EAGAIN)
        perror("spindle serve: eventfd");
}

enum sp_job_state sp_job_take(struct sp_job *j, struct sp_job_buf *mine, bool *timed_out)
{
    mine->n_ev = 0;
    mine->n_text = 0;
    mine->n_xp = 0;
    pthread_mutex_lock(&j->mu);
    *timed_out = j->timed_out;
    struct sp_job_buf t = j->buf;
    j->buf = *mine;
    *mine = t;
    enum sp_job_state st = j->state;
    pthread_mutex_unlock(&j->mu);
    return st;
}

bool sp_job_shut_down(struct sp_job *j)
{
    pthread_mutex_lock(&j->mu);
    bool v = j->shut_down;
    pthread_mutex_unlock(&j->mu);
    return v;
}

/* Ends a job that never reached the engine (or failed admission). */
static void sp_job_finish_unrun(struct sp_job *j, enum sp_job_state state, sp_status st,
                                const char *msg, bool timed_out, bool shut_down)
{
    pthread_mutex_lock(&j->mu);
    j->state = state;
    j->fail_status = st;
    snprintf(j->fail_msg, sizeof j->fail_msg, "%s", msg ? msg : "");
    j->timed_out = timed_out;
    j->shut_down = shut_down;
    pthread_mutex_unlock(&j->mu);
    sp_job_signal(j);
}

static bool sp_buf_reserve(struct sp_job_buf *b, size_t text_len)
{
    if (b->n_ev == b->cap_ev) {
        size_t cap = b->cap_ev ? b->cap_ev * 2 : 16;
        struct sp_job_event *ev = realloc(b->ev, cap * sizeof *ev);
        if (!ev)
            return false;
        b->ev = ev;
        b->cap_ev = cap;
    }
    if (b->n_text + text_len + 1 > b->cap_text) {
        size_t cap = b->cap_text ? b->cap_text : 256;
        while (cap < b->n_text + text_len + 1)
            cap *= 2;
        char *t = realloc(b->text, cap);
        if (!t)
            return false;
        b->text = t;
        b->cap_text = cap;
    }
    return true;
}

/* Appends a copy of *x to b's explain records (false on allocation failure). */
static bool sp_buf_add_explain(struct sp_job_buf *b, const struct sp_sampler_explain *x)
{
    if (b->n_xp == b->cap_xp) {
        size_t cap = b->cap_xp ? b->cap_xp * 2 : 16;
        struct sp_sampler_explain *xp = realloc(b->xp, cap * sizeof *xp);
        if (!xp)
            return false;
        b->xp = xp;
        b->cap_xp = cap;
    }
    b->xp[b->n_xp++] = *x;
    return true;
}

static void sp_run_remove(struct sp_sched *s, struct sp_job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        s->run_head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    j->next = j->prev = NULL;
    s->n_running--;
}

/* The engine's callback (scheduler thread, inside sp_engine_step). */
static void sp_on_event(void *user, const struct sp_token_event *ev)
{
    struct sp_job *j = user;
    struct sp_sched *s = NULL;
    double now = sp_now();
    int n_choices = j->api.gp.n > 0 ? j->api.gp.n : 1;
    bool done = false;

    pthread_mutex_lock(&j->mu);
    struct sp_job_buf *b = &j->buf;
    size_t err_len = ev->error ? strlen(ev->error) : 0;
    if (sp_buf_reserve(b, ev->len + err_len + 1)) {
        struct sp_job_event *e = &b->ev[b->n_ev++];
        e->choice = ev->choice;
        e->id = ev->id;
        e->text_off = (uint32_t)b->n_text;
        e->text_len = (uint32_t)ev->len;
        e->finish = ev->finish;
        e->n_prompt = ev->n_prompt;
        e->n_cached = ev->n_cached;
        e->n_generated = ev->n_generated;
        e->has_lp = ev->lp != NULL;
        e->explain = -1;
        if (ev->explain && sp_buf_add_explain(b, ev->explain))
            e->explain = (int32_t)(b->n_xp - 1);
        if (ev->lp)
            e->lp = *ev->lp;
        if (ev->len)
            memcpy(b->text + b->n_text, ev->text, ev->len);
        b->n_text += ev->len;
        e->attempt = ev->attempt;
        e->retry = ev->retry;
        e->valid = ev->valid;
        e->err_off = (uint32_t)b->n_text;
        e->err_len = (uint32_t)err_len;
        if (err_len)
            memcpy(b->text + b->n_text, ev->error, err_len);
        b->n_text += err_len;
        b->text[b->n_text] = '\0';
    } else {
        j->lost_events = true;
    }
    if (ev->id >= 0) {
        if (j->t_first == 0)
            j->t_first = now;
        j->t_last = now;
    }
    /* Only a choice the abort actually cut short counts as shut down. */
    if (ev->finish == SP_FINISH_CANCELLED && j->abort_sent)
        j->shut_down = true;
    if (ev->finish != SP_FINISH_NONE && ++j->n_final >= n_choices) {
        j->state = SP_JOB_DONE;
        done = true;
    }
    pthread_mutex_unlock(&j->mu);

    sp_job_signal(j);
    s = j->sched;
    if (ev->id >= 0) {
        if (!j->first_token_seen) {
            j->first_token_seen = true;
            sp_metrics_observe_ttft(s->metrics, now - j->t_submit);
        } else {
            sp_metrics_observe_itl(s->metrics, now - j->t_last_token);
        }
        j->t_last_token = now;
        sp_metrics_count_tokens(s->metrics, 0, 0, 1);
    }
    if (done) {
        sp_metrics_count_tokens(s->metrics, ev->n_prompt, ev->n_cached, 0);
        sp_run_remove(s, j);
        j->er = NULL;
        atomic_fetch_sub(&s->n_jobs, 1);
        sp_job_unref(j); /* the scheduler's reference */
    }
}

/* ---- the loop ---- */

static void sp_queue_remove(struct sp_sched *s, struct sp_job *j, struct sp_job *prev)
{
    if (prev)
        prev->next = j->next;
    else
        s->q_head = j->next;
    if (s->q_tail == j)
        s->q_tail = prev;
    j->next = NULL;
    s->n_queued--;
}

/* Ends the queued jobs that are cancelled or past their deadline, wherever
 * they stand in the queue, and all of them after sp_sched_abort (s->mu
 * held): they leave the queue (and the count sp_sched_submit's 429 reads)
 * at the next turn, not when they reach its head. */
static void sp_queue_drop_ended(struct sp_sched *s, double now)
{
    struct sp_job *prev = NULL, *j = s->q_head;
    while (j) {
        struct sp_job *next = j->next;
        bool expired = j->deadline > 0 && now >= j->deadline;
        if (atomic_load(&j->cancel) || expired || s->abort) {
            sp_queue_remove(s, j, prev);
            sp_job_finish_unrun(j, SP_JOB_DONE, SP_OK, NULL, expired, s->abort);
            atomic_fetch_sub(&s->n_jobs, 1);
            sp_job_unref(j);
        } else {
            prev = j;
        }
        j = next;
    }
}

/* Admits queued jobs in FIFO order while running slots are free (s->mu
 * held).  A job the KV cache cannot take yet (SP_ERR_FULL while others run:
 * blocks come back as they finish) keeps its place, and later jobs that fit
 * are admitted past it, but only n_parallel of them: after that admission
 * waits for it, so a large request is not starved by a stream of small
 * ones. */
static void sp_admit(struct sp_sched *s, double now)
{
    sp_queue_drop_ended(s, now);
    struct sp_job *prev = NULL, *j = s->q_head, *blocked = NULL;
    while (j && s->n_running < (size_t)s->n_parallel) {
        struct sp_job *next = j->next;
        struct sp_request *er = NULL;
        j->sched = s;
        sp_status st = sp_request_submit(s->engine, j->api.prompt, j->api.n_prompt, &j->api.gp,
                                         sp_on_event, j, &er);
        if (st == SP_ERR_FULL && s->n_running > 0) {
            if (!blocked)
                blocked = j;
            if (blocked->n_passed >= s->n_parallel)
                break;
            prev = j;
            j = next;
            continue;
        }
        sp_queue_remove(s, j, prev);
        if (st != SP_OK) {
            /* FULL with nothing running means the pool is held elsewhere:
             * treat it as a refusal rather than wait forever. */
            sp_job_finish_unrun(j, SP_JOB_FAILED, st, sp_error_message(), false, false);
            atomic_fetch_sub(&s->n_jobs, 1);
            sp_job_unref(j);
        } else {
            if (blocked)
                blocked->n_passed++;
            j->er = er;
            pthread_mutex_lock(&j->mu);
            if (j->state == SP_JOB_QUEUED)
                j->state = SP_JOB_RUNNING;
            pthread_mutex_unlock(&j->mu);
            sp_job_signal(j);
            j->prev = NULL;
            j->next = s->run_head;
            if (s->run_head)
                s->run_head->prev = j;
            s->run_head = j;
            s->n_running++;
        }
        j = next;
    }
}

/* The model's recommended sampling, then the command line's overrides. */
static void sp_sched_sampling_init(struct sp_sched *s)
{
    struct sp_sampler_params *p = &s->sampling;
    const struct sp_server_sampling *o = &s->overrides;
    int n_model = 0;
    if (sp_model_sampling_defaults(s->model, p, &n_model) != SP_OK)
        fprintf(stderr, "spindle: ignoring a sampling recommendation of the model: %s\n",
                sp_error_message());
    if (!isnan(o->temperature))
        p->temperature = o->temperature;
    if (!isnan(o->top_p))
        p->top_p = o->top_p;
    if (!isnan(o->min_p))
        p->min_p = o->min_p;
    if (!isnan(o->repeat_penalty))
        p->repeat_penalty = o->repeat_penalty;
    if (o->top_k != INT32_MIN)
        p->top_k = o->top_k;
    if (o->repeat_last_n != INT32_MIN)
        p->repeat_last_n = o->repeat_last_n;
    fprintf(stderr,
            "spindle: sampling defaults: temperature %g, top_k %d, top_p %g, min_p %g, "
            "repeat_penalty %g (%d from the model's metadata)\n",
            (double)p->temperature, (int)p->top_k, (double)p->top_p, (double)p->min_p,
            (double)p->repeat_penalty, n_model);
}

/* ---- embeddings ---- */

static void sp_embed_signal(struct sp_embed_work *w)
{
    uint64_t one = 1;
    if (write(w->efd, &one, sizeof one) < 0 && errno != EAGAIN)
        perror("spindle serve: eventfd");
}

/* Ends w (s->mu held): the HTTP thread may read it from now on. */
static void sp_embed_end(struct sp_sched *s, struct sp_embed_work *w, bool shut_down)
{
    w->done = true;
    w->shut_down = shut_down;
    atomic_fetch_sub(&s->n_jobs, 1);
    pthread_cond_broadcast(&s->e_cv);
    sp_embed_signal(w);
}

/* Takes the next embedding request to run a chunk of, or NULL (s->mu
 * held).  Cancelled requests, and all of them after sp_sched_abort, end
 * here wherever they are in the line. */
static struct sp_embed_work *sp_embed_next(struct sp_sched *s)
{
    struct sp_embed_work **pp = &s->e_head, *last = NULL;
    while (*pp) {
        struct sp_embed_work *w = *pp;
        if (s->abort || atomic_load(&w->cancel)) {
            *pp = w->next;
            sp_embed_end(s, w, s->abort);
            continue;
        }
        last = w;
        pp = &w->next;
    }
    s->e_tail = last;
    struct sp_embed_work *w = s->e_head;
    if (w) {
        s->e_head = w->next;
        if (!s->e_head)
            s->e_tail = NULL;
        w->next = NULL;
    }
    return w;
}

/* Embeds the next chunk of w: the inputs from w->n_done on that fit in
 * embed_max_tokens tokens together (at least one), one forward pass.  A
 * vector does not depend on what it is batched with, so the chunking does
 * not change the answer.  Then, under s->mu, ends w or puts it at the back
 * of the line. */
static void sp_embed_chunk(struct sp_sched *s, struct sp_embed_work *w)
{
    size_t first = w->n_done, k = 0, n_tok = 0; /* n_done changes only on this thread */
    while (first + k < w->n_inputs && (k == 0 || n_tok + w->n_tokens[first + k] <= (size_t)s->embed_max_tokens))
        n_tok += w->n_tokens[first + k++];
    sp_status st = sp_engine_embed(s->engine, w->inputs + first, w->n_tokens + first, k, NULL,
                                   w->out + first * (size_t)s->n_embd);
    if (st == SP_OK)
        sp_metrics_count_tokens(s->metrics, n_tok, 0, 0);
    pthread_mutex_lock(&s->mu);
    w->n_done = first + k;
    if (st != SP_OK) {
        w->st = st;
        /* the message counts inputs from the chunk's first */
        snprintf(w->msg, sizeof w->msg, "inputs %zu to %zu: %s", first, first + k - 1, sp_error_message());
        sp_embed_end(s, w, false);
    } else if (w->n_done == w->n_inputs || s->abort || atomic_load(&w->cancel)) {
        sp_embed_end(s, w, w->n_done < w->n_inputs && s->abort);
    } else if (s->e_tail) {
        s->e_tail->next = w;
        s->e_tail = w;
    } else {
        s->e_head = s->e_tail = w;
    }
    pthread_mutex_unlock(&s->mu);
}

static void *sp_sched_main(void *arg)
{
    struct sp_sched *s = arg;
    struct sp_engine *e = s->engine;
    struct sp_engine_stats stats;
    pthread_mutex_lock(&s->mu);

    for (;;) {
        /* s->mu is held here */
        while (!s->quit && !s->q_head && !s->run_head && !s->e_head)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit && !s->q_head && !s->run_head && !s->e_head)
            break;
        double now = sp_now();
        sp_admit(s, now);
        size_t n_queued = s->n_queued;
        bool abort = s->abort;
        struct sp_embed_work *ew = sp_embed_next(s);
        pthread_mutex_unlock(&s->mu);

        if (ew)
            sp_embed_chunk(s, ew);
        for (struct sp_job *j = s->run_head; j; j = j->next) {
            if (j->cancel_sent)
                continue;
            bool expired = j->deadline > 0 && now >= j->deadline;
            if (atomic_load(&j->cancel) || expired || abort) {
                if (expired) {
                    pthread_mutex_lock(&j->mu);
                    j->timed_out = true;
                    pthread_mutex_unlock(&j->mu);
                }
                sp_request_cancel(j->er);
                j->cancel_sent = true;
                j->abort_sent = abort;
            }
        }
        if (s->run_head && sp_engine_step(e) < 0)
            fprintf(stderr, "spindle serve: engine step failed: %s\n", sp_error_message());
        sp_engine_stats_get(e, &stats);
        sp_metrics_set_load(s->metrics, s->metrics_slot, &stats, s->n_running, n_queued);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

sp_status sp_sched_start(struct sp_sched **out, const sp_model *model, sp_engine *e, int max_queue, int n_parallel,
                         const struct sp_server_sampling *sampling,
                         struct sp_metrics *m, const char *label)
{
    struct sp_sched *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) {
        sp_engine_free(e);
        return sp_error_set(SP_ERR_NOMEM, "scheduler: out of memory");
    }
    s->engine = e;
    s->model = model;
    s->n_ctx = sp_engine_n_ctx(e);
    s->embed_max_tokens = sp_engine_embed_max_tokens(e);
    s->n_embd = sp_engine_n_embd(e);
    s->overrides = *sampling;
    sp_sched_sampling_init(s);
    /* grammars bound to the vocabulary, kept for the requests repeating them */
    sp_status st = sp_grammar_cache_create(model, SP_SCHED_GRAMMARS, &s->gcache);
    if (st != SP_OK) {
        sp_engine_free(e);
        free(s);
        return st;
    }
    struct sp_engine_stats stats;
    sp_engine_stats_get(e, &stats);
    s->metrics = m;
    s->metrics_slot = sp_metrics_engine_add(m, label);
    sp_metrics_set_load(m, s->metrics_slot, &stats, 0, 0);
    s->max_queue = max_queue;
    s->n_parallel = n_parallel > 0 ? n_parallel : 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->e_cv, NULL);
    atomic_init(&s->n_jobs, 0);
    int rc = pthread_create(&s->thread, NULL, sp_sched_main, s);
    if (rc != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_cond_destroy(&s->e_cv);
        pthread_mutex_destroy(&s->mu);
        sp_grammar_cache_free(s->gcache);
        sp_metrics_engine_remove(m, s->metrics_slot);
        sp_engine_free(e);
        free(s);
        return sp_error_set(SP_ERR_NOMEM, "scheduler: cannot start a thread: %s", strerror(rc));
    }
    s->thread_started = true;
    *out = s;
    return SP_OK;
}

const sp_model *sp_sched_model(const struct sp_sched *s) { return s->model; }

int sp_sched_n_ctx(const struct sp_sched *s) { return s->n_ctx; }

const struct sp_sampler_params *sp_sched_sampling(const struct sp_sched *s)
{
    return &s->sampling;
}

sp_grammar_cache *sp_sched_grammar_cache(const struct sp_sched *s) { return s->gcache; }
/* Counts one more job, unless as many as the queue allows are waiting
 * (false, s->mu unlocked).  Called with s->mu held.  Waiting = jobs beyond
 * the running slots, so --queue 0 still admits while a slot is free. */
static bool sp_sched_count_job(struct sp_sched *s)
{
    if (atomic_load(&s->n_jobs) >= (size_t)s->n_parallel + (size_t)s->max_queue) {
        pthread_mutex_unlock(&s->mu);
        return false;
    }
    atomic_fetch_add(&s->n_jobs, 1);
    return true;
}

sp_status sp_sched_submit(struct sp_sched *s, struct sp_job *j)
{
    pthread_mutex_lock(&s->mu);
    if (!sp_sched_count_job(s))
        return SP_ERR_FULL;
    atomic_fetch_add(&j->refs, 1);
    j->next = NULL;
    if (s->q_tail)
        s->q_tail->next = j;
    else
        s->q_head = j;
    s->q_tail = j;
    s->n_queued++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return SP_OK;
}

int sp_sched_embed_max_tokens(const struct sp_sched *s) { return s->embed_max_tokens; }

sp_status sp_embed_work_init(struct sp_embed_work *w, const sp_token *const *inputs, const size_t *n_tokens,
                             size_t n_inputs, float *out)
{
    memset(w, 0, sizeof *w);
    w->inputs = inputs;
    w->n_tokens = n_tokens;
    w->n_inputs = n_inputs;
    w->out = out;
    atomic_init(&w->cancel, false);
    w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->efd < 0)
        return sp_error_set(SP_ERR_IO, "eventfd: %s", strerror(errno));
    return SP_OK;
}

void sp_embed_work_free(struct sp_embed_work *w)
{
    if (w->efd >= 0)
        close(w->efd);
    w->efd = -1;
}

sp_status sp_sched_embed_submit(struct sp_sched *s, struct sp_embed_work *w)
{
    pthread_mutex_lock(&s->mu);
    if (!sp_sched_count_job(s))
        return SP_ERR_FULL;
    w->done = false;
    w->next = NULL;
    if (s->e_tail)
        s->e_tail->next = w;
    else
        s->e_head = w;
    s->e_tail = w;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return SP_OK;
}

bool sp_sched_embed_done(struct sp_sched *s, struct sp_embed_work *w)
{
    pthread_mutex_lock(&s->mu);
    bool done = w->done;
    pthread_mutex_unlock(&s->mu);
    return done;
}

void sp_sched_embed_cancel(struct sp_sched *s, struct sp_embed_work *w)
{
    atomic_store(&w->cancel, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    while (!w->done)
        pthread_cond_wait(&s->e_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void sp_sched_cancel(struct sp_sched *s, struct sp_job *j)
{
    atomic_store(&j->cancel, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sp_sched_abort(struct sp_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->abort = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sp_sched_stop(struct sp_sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    sp_engine_free(s->engine);
    sp_metrics_engine_remove(s->metrics, s->metrics_slot);
    sp_grammar_cache_free(s->gcache);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->e_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
