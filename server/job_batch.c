/* The jobs of one HTTP request: one per prompt of a completions batch (a
 * list of prompts), each with the request's n choices.  They run as
 * independent jobs of the scheduler (admission, batching, cancellation and
 * deadlines as any other), wake the connection's thread through one shared
 * eventfd, and their events are merged into one buffer whose choice
 * indices follow OpenAI's batch indexing (prompt i's choices are i*n ..
 * i*n+n-1).  A single prompt is the batch of one. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "server/server.h"

sp_status sp_jobs_make(sp_api_parse_fn parse, enum sp_api_kind kind, const char *body, size_t len,
                       const sp_model *model, const struct sp_api_limits *lim, double default_timeout,
                       struct sp_job ***jobs, size_t *n, struct sp_api_error *err)
{
    struct sp_api_request api;
    struct sp_job **js = NULL;
    size_t n_jobs = 1, made = 0;
    *jobs = NULL;
    *n = 0;
    for (size_t i = 0; i < n_jobs; i++) {
        if (parse(&api, kind, body, len, i, model, lim, err) != SP_OK)
            goto fail;
        if (i == 0) {
            n_jobs = api.n_batch > 0 ? api.n_batch : 1;
            if (!(js = calloc(n_jobs, sizeof *js))) {
                sp_api_request_free(&api);
                goto nomem;
            }
        }
        if (!api.seed_set && getrandom(&api.gp.sampling.seed, sizeof api.gp.sampling.seed, GRND_NONBLOCK) < 0)
            api.gp.sampling.seed = (uint64_t)sp_now() + i;
        double timeout = api.timeout_s > 0 ? api.timeout_s : default_timeout;
        if (!(js[i] = sp_job_new(&api, timeout))) {
            sp_api_request_free(&api);
            goto nomem;
        }
        made = i + 1;
        if (i && sp_job_share_wakeup(js[i], js[0]) != SP_OK)
            goto nomem;
    }
    *jobs = js;
    *n = n_jobs;
    return SP_OK;
nomem:
    if (errno == EMFILE || errno == ENFILE) /* no descriptor for a job's wakeup */
        sp_api_fail(err, 503, "server_error", "server_busy", NULL,
                    "The server has no file descriptor left for this request; retry later.");
    else
        sp_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
fail:
    sp_jobs_unref(js, made);
    return SP_ERR_ARG;
}

void sp_jobs_unref(struct sp_job **jobs, size_t n)
{
    for (size_t i = 0; jobs && i < n; i++)
        sp_job_unref(jobs[i]);
    free(jobs);
}

sp_status sp_job_share_wakeup(struct sp_job *j, const struct sp_job *with)
{
    int fd = dup(with->efd);
    if (fd < 0)
        return SP_ERR_NOMEM;
    close(j->efd);
    j->efd = fd;
    return SP_OK;
}

sp_status sp_jobs_submit(struct sp_sched *s, struct sp_job *const *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sp_status st = sp_sched_submit(s, jobs[i]);
        if (st != SP_OK) {
            for (size_t k = 0; k < i; k++)
                sp_sched_cancel(s, jobs[k]);
            return st;
        }
    }
    return SP_OK;
}

enum sp_job_state sp_jobs_state(struct sp_job *const *jobs, size_t n, size_t *failed)
{
    enum sp_job_state all = SP_JOB_DONE;
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&jobs[i]->mu);
        enum sp_job_state st = jobs[i]->state;
        pthread_mutex_unlock(&jobs[i]->mu);
        if (st == SP_JOB_FAILED) {
            *failed = i;
            return SP_JOB_FAILED;
        }
        if (st == SP_JOB_QUEUED)
            all = SP_JOB_QUEUED;
        else if (st == SP_JOB_RUNNING && all != SP_JOB_QUEUED)
            all = SP_JOB_RUNNING;
    }
    return all;
}

/* Appends src's events to dst with their choices moved up by `shift`. */
static bool sp_buf_append(struct sp_job_buf *dst, const struct sp_job_buf *src, int shift)
{
    size_t n_ev = dst->n_ev + src->n_ev, n_text = dst->n_text + src->n_text, n_xp = dst->n_xp + src->n_xp;
    if (n_ev > dst->cap_ev) {
        struct sp_job_event *ev = realloc(dst->ev, n_ev * sizeof *ev);
        if (!ev)
            return false;
        dst->ev = ev;
        dst->cap_ev = n_ev;
    }
    if (n_text + 1 > dst->cap_text) {
        char *t = realloc(dst->text, n_text + 1);
        if (!t)
            return false;
        dst->text = t;
        dst->cap_text = n_text + 1;
    }
    if (n_xp > dst->cap_xp) {
        struct sp_sampler_explain *xp = realloc(dst->xp, n_xp * sizeof *xp);
        if (!xp)
            return false;
        dst->xp = xp;
        dst->cap_xp = n_xp;
    }
    for (size_t i = 0; i < src->n_ev; i++) {
        struct sp_job_event e = src->ev[i];
        e.choice += shift;
        e.text_off += (uint32_t)dst->n_text;
        e.err_off += (uint32_t)dst->n_text;
        if (e.explain >= 0)
            e.explain += (int32_t)dst->n_xp;
        dst->ev[dst->n_ev++] = e;
    }
    if (src->n_text)
        memcpy(dst->text + dst->n_text, src->text, src->n_text);
    dst->n_text = n_text;
    dst->text[n_text] = '\0';
    if (src->n_xp)
        memcpy(dst->xp + dst->n_xp, src->xp, src->n_xp * sizeof *src->xp);
    dst->n_xp = n_xp;
    return true;
}

enum sp_job_state sp_jobs_take(struct sp_job *const *jobs, size_t n, int n_choices, struct sp_job_buf *mine,
                               struct sp_job_buf *scratch, bool *timed_out, bool *lost)
{
    bool ended = true, failed = false, queued = false;
    *timed_out = false;
    for (size_t i = 0; i < n; i++) {
        bool t = false;
        enum sp_job_state s = sp_job_take(jobs[i], i ? scratch : mine, &t);
        *timed_out = *timed_out || t;
        if (i && !sp_buf_append(mine, scratch, (int)i * n_choices))
            *lost = true;
        failed = failed || s == SP_JOB_FAILED;
        queued = queued || s == SP_JOB_QUEUED;
        ended = ended && (s == SP_JOB_DONE || s == SP_JOB_FAILED);
    }
    if (!ended)
        return queued ? SP_JOB_QUEUED : SP_JOB_RUNNING;
    return failed ? SP_JOB_FAILED : SP_JOB_DONE;
}

void sp_jobs_cancel(struct sp_sched *s, struct sp_job *const *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sp_sched_cancel(s, jobs[i]);
}

bool sp_jobs_shut_down(struct sp_job *const *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (sp_job_shut_down(jobs[i]))
            return true;
    return false;
}
