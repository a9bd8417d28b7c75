/* The models of --models-dir (one per DIR/NAME.gguf, named NAME) or of the
 * application's list (cfg->models_list: the model store's), each loaded on
 * the first request that names it and given its own engine and scheduler
 * thread (scheduler.c), as llama-server's router mode does.
 *
 * At most max_loaded models are loaded (or loading) at once; to load
 * another, the least recently used one that no request holds is unloaded,
 * and when every loaded model is in use the request waits until one is
 * released.  A model loads on the thread of the request that needs it,
 * with the router's lock released, so requests to other models go on
 * meanwhile; requests for the model being loaded wait for that load.  A
 * file that fails to load keeps its one-line error (listed, and answered
 * to the requests naming it) until the file changes.
 *
 * The directory (or list) is read again whenever the models are listed and whenever
 * a request needs a model that is not loaded: new files appear, a deleted
 * file's model disappears from the list and is refused from then on (and
 * unloaded once its last request is done).  A loaded model keeps serving
 * what it loaded until it is unloaded, also when its file is replaced.
 *
 * A loaded model that no request holds is unloaded once it has been idle
 * for its keep-alive (--keep-alive, or the idle time the last request that
 * got it asked for: Ollama's keep_alive; < 0: never), by the router's
 * reaper thread, which sleeps until the next model's time is up.
 *
 * With --memory-budget, the loaded (and loading) models' memory stays
 * within it: each model counts what its engine holds (sp_router_mem,
 * measured when it loads; before its first load, its file's size), and
 * the least recently used idle models are unloaded to make room.  A model
 * that needs more than the whole budget is refused (507) and listed with
 * that error. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/server.h"

/* The most models one directory lists; files past it are left out. */
#define SP_ROUTER_MAX_MODELS 1024

enum sp_router_state { SP_ROUTER_UNLOADED, SP_ROUTER_LOADING, SP_ROUTER_LOADED };

static const char *const sp_router_state_names[] = {"unloaded", "loading", "loaded"};

struct sp_router_model {
    char *id;   /* the file name without .gguf */
    char *path; /* its file (DIR/ID.gguf); changed only while no request holds it */
    /* the file as last seen: a change clears error */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    bool seen, gone; /* seen in this scan; its file was gone at the last scan */
    enum sp_router_state state;
    sp_model *model;      /* LOADED */
    struct sp_sched *sched;
    int n_held;           /* requests using it or waiting for it */
    double last_used;     /* sp_now() when a request last got or released it */
    double keep_alive;    /* idle seconds before it is unloaded (< 0: never) */
    uint64_t mem;         /* its engine's memory at its last load (sp_router_mem); 0: not measured */
    uint64_t counted;     /* LOADING or LOADED: its part of --memory-budget (mem, or while it
                             is first measured the file's size) */
    bool too_big;         /* error says it needs more than --memory-budget */
    char *error;          /* the last load's error; NULL: none */
};

struct sp_router {
    pthread_mutex_t mu; /* guards everything below but the immutable fields */
    pthread_cond_t cv;  /* a load ended, a model was released, or the router aborted */
    pthread_cond_t reap_cv; /* a model was released, or the router closes (the reaper waits on it) */
    pthread_t reaper;
    bool reaper_started, closing;
    struct sp_server_config cfg;
    struct sp_metrics *metrics;
    char *dir; /* read when cfg.models_list is NULL */
    int max_loaded;
    uint64_t budget; /* --memory-budget in bytes; 0: none */
    sp_threads *threads; /* the compute threads every model's engine shares */
    bool aborted;
    struct sp_router_model **models;
    size_t n_models;
};

static struct sp_router_model *sp_router_find(struct sp_router *r, const char *id, size_t n)
{
    for (size_t i = 0; i < r->n_models; i++)
        if (strlen(r->models[i]->id) == n && !memcmp(r->models[i]->id, id, n))
            return r->models[i];
    return NULL;
}

/* Stops its scheduler (nothing of it runs: no request holds it) and frees
 * the model.  Under r->mu. */
static void sp_router_unload(struct sp_router_model *e, const char *why)
{
    sp_sched_stop(e->sched);
    sp_model_free(e->model);
    e->sched = NULL;
    e->model = NULL;
    e->state = SP_ROUTER_UNLOADED;
    fprintf(stderr, "spindle: unloaded model '%s' (%s)\n", e->id, why);
}

static void sp_router_model_free(struct sp_router_model *e)
{
    free(e->id);
    free(e->path);
    free(e->error);
    free(e);
}

/* Drops e from the list when its file is gone and nothing holds it.
 * Under r->mu. */
static void sp_router_settle(struct sp_router *r, struct sp_router_model *e)
{
    if (!e->gone || e->n_held > 0)
        return;
    if (e->state == SP_ROUTER_LOADED)
        sp_router_unload(e, "its file is gone");
    for (size_t i = 0; i < r->n_models; i++) {
        if (r->models[i] == e) {
            r->models[i] = r->models[--r->n_models];
            break;
        }
    }
    sp_router_model_free(e);
}

/* One model of the directory or list: marks it seen, adds it when new
 * (when there is room), and clears its error when the file changed.  A
 * name that cannot be a model's (sp_server_alias_valid) or a path that is
 * no file is passed over.  Under r->mu. */
static void sp_router_see(void *ctx, const char *id, const char *path)
{
    struct sp_router *r = ctx;
    struct stat st;
    if (!sp_server_alias_valid(id) || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    struct sp_router_model *e = sp_router_find(r, id, strlen(id));
    if (!e) {
        if (r->n_models == SP_ROUTER_MAX_MODELS || !(e = calloc(1, sizeof *e)))
            return;
        if (!(e->id = strdup(id)) || !(e->path = strdup(path))) {
            sp_router_model_free(e);
            return;
        }
        r->models[r->n_models++] = e;
    }
    e->seen = true;
    e->gone = false;
    if (strcmp(e->path, path) && e->n_held == 0) { /* a list's model moved (loaders read path unlocked) */
        char *p = strdup(path);
        if (p) {
            free(e->path);
            e->path = p;
        }
    }
    if (e->dev != st.st_dev || e->ino != st.st_ino || e->size != st.st_size ||
        e->mtime.tv_sec != st.st_mtim.tv_sec || e->mtime.tv_nsec != st.st_mtim.tv_nsec) {
        e->dev = st.st_dev;
        e->ino = st.st_ino;
        e->size = st.st_size;
        e->mtime = st.st_mtim;
        free(e->error);
        e->error = NULL;
        e->too_big = false;
        e->mem = 0;
    }
}

size_t sp_router_model_name(const char *name, size_t n, bool *later_part)
{
    *later_part = false;
    if (n <= 20)
        return n - 5;
    const char *s = name + n - 20; /* "-00001-of-00003.gguf" */
    if (s[0] != '-' || strncmp(s + 6, "-of-", 4))
        return n - 5;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)s[1 + i]) || !isdigit((unsigned char)s[10 + i]))
            return n - 5;
    *later_part = strncmp(s + 1, "00001", 5) != 0;
    return n - 20;
}

/* Every NAME.gguf of the directory, as the model NAME, and every split
 * model NAME-00001-of-0000K.gguf ... once, as NAME (a name starting with
 * '.' is passed over). */
static void sp_router_read_dir(struct sp_router *r)
{
    DIR *d = opendir(r->dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        const char *name = de->d_name;
        size_t n = strlen(name), id_len;
        bool later_part;
        if (name[0] == '.' || n <= 5 || n - 5 > 128 || strcmp(name + n - 5, ".gguf") ||
            (id_len = sp_router_model_name(name, n, &later_part), later_part) || id_len == 0)
            continue;
        char *id = strndup(name, id_len), *path = NULL;
        if (id && asprintf(&path, "%s/%s", r->dir, name) >= 0) {
            sp_router_see(r, id, path);
            free(path);
        }
        free(id);
    }
    if (d)
        closedir(d);
}

/* Reads the directory or list again: new models are added, a changed
 * file's error is cleared, and a model no longer there is marked gone (and
 * dropped when nothing holds it).  Under r->mu. */
static void sp_router_scan(struct sp_router *r)
{
    for (size_t i = 0; i < r->n_models; i++)
        r->models[i]->seen = false;
    if (r->cfg.models_list)
        r->cfg.models_list(r->cfg.models_user, sp_router_see, r);
    else
        sp_router_read_dir(r);
    for (size_t i = r->n_models; i-- > 0;) {
        struct sp_router_model *e = r->models[i];
        if (!e->seen) {
            e->gone = true;
            sp_router_settle(r, e);
        }
    }
}

/* sp_now()'s time t (CLOCK_MONOTONIC) for pthread_cond_timedwait. */
static struct timespec sp_router_deadline(double t)
{
    struct timespec ts;
    double sec = floor(t);
    ts.tv_sec = (time_t)sec;
    ts.tv_nsec = (long)((t - sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* When e's keep-alive unloads it (INFINITY: never, or not now: it is held
 * or not loaded).  Under r->mu. */
static double sp_router_expiry(const struct sp_router_model *e)
{
    if (e->state != SP_ROUTER_LOADED || e->n_held > 0 || e->keep_alive < 0)
        return INFINITY;
    return e->last_used + e->keep_alive;
}

/* The reaper: unloads each idle model whose keep-alive is up, then sleeps
 * until the next one's is (or until a model is released). */
static void *sp_router_reap(void *arg)
{
    struct sp_router *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->closing) {
        double now = sp_now(), next = INFINITY;
        for (size_t i = 0; i < r->n_models; i++) {
            struct sp_router_model *e = r->models[i];
            double at = sp_router_expiry(e);
            if (at <= now) {
                char why[96];
                snprintf(why, sizeof why, "idle for its keep-alive of %g s", e->keep_alive);
                sp_router_unload(e, why);
                pthread_cond_broadcast(&r->cv);
            } else if (at < next) {
                next = at;
            }
        }
        if (isinf(next)) {
            pthread_cond_wait(&r->reap_cv, &r->mu);
        } else {
            struct timespec ts = sp_router_deadline(next);
            pthread_cond_timedwait(&r->reap_cv, &r->mu, &ts);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* The conditions wait on CLOCK_MONOTONIC (sp_now's clock). */
static void sp_router_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

sp_status sp_router_open(struct sp_router **out, const struct sp_server_config *cfg, struct sp_metrics *m)
{
    struct stat st;
    *out = NULL;
    if (!cfg->models_list && (stat(cfg->models_dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        return sp_error_set(SP_ERR_ARG, "--models-dir '%s' is not a directory", cfg->models_dir);
    struct sp_router *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(cfg->models_dir ? cfg->models_dir : "")) ||
        !(r->models = calloc(SP_ROUTER_MAX_MODELS, sizeof *r->models))) {
        if (r)
            free(r->dir);
        free(r);
        return sp_error_set(SP_ERR_NOMEM, "router: out of memory");
    }
    r->cfg = *cfg;
    r->metrics = m;
    r->max_loaded = cfg->models_max > 0 ? cfg->models_max : 1;
    r->budget = cfg->memory_budget;
    sp_status ts = sp_threads_create(cfg->n_threads, &r->threads);
    if (ts != SP_OK) {
        free(r->models);
        free(r->dir);
        free(r);
        return ts;
    }
    pthread_mutex_init(&r->mu, NULL);
    sp_router_cond_init(&r->cv);
    sp_router_cond_init(&r->reap_cv);
    sp_router_scan(r);
    /* the reaper takes no signal: the server's thread waits for them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    r->reaper_started = pthread_create(&r->reaper, NULL, sp_router_reap, r) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!r->reaper_started) {
        sp_router_close(r);
        return sp_error_set(SP_ERR_NOMEM, "router: cannot start its thread");
    }
    *out = r;
    return SP_OK;
}

size_t sp_router_count(struct sp_router *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->n_models;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* An engine's memory as `spindle info` counts it: weights, KV cache and
 * scratch, and the recurrent state and its snapshots (allocated as
 * requests start, so counted from the start). */
static uint64_t sp_router_mem(const sp_engine *engine)
{
    sp_engine_stats es;
    sp_engine_stats_get(engine, &es);
    return es.mem_weights + es.mem_kv + es.mem_scratch + es.mem_state + es.mem_state_snapshots;
}

/* Loads e's file into a model with its engine and scheduler (on the
 * calling thread, without r->mu; e's path is immutable); *mem its memory
 * (sp_router_mem).  On failure the error is set and nothing is left. */
static sp_status sp_router_load(struct sp_router *r, const struct sp_router_model *e, sp_model **model,
                                struct sp_sched **sched, uint64_t *mem)
{
    sp_model_params mp = r->cfg.model_params;
    mp.path = e->path;
    mp.n_threads = r->cfg.n_threads;
    mp.progress = NULL; /* loads run side by side: a redrawn line would mix them */
    struct sp_engine_params ep;
    sp_server_engine_params(&r->cfg, &ep);
    ep.threads = r->threads; /* models take turns on the cores instead of each spinning up its own threads */
    sp_engine *engine = NULL;
    sp_status st = sp_model_load(&mp, model);
    if (st == SP_OK && (st = sp_engine_create(*model, &ep, &engine)) == SP_OK) {
        *mem = sp_router_mem(engine);
        st = sp_sched_start(sched, *model, engine, r->cfg.max_queue, r->cfg.n_parallel, &r->cfg.sampling,
                            r->metrics, e->id); /* it frees the engine if it fails */
    }
    if (st != SP_OK) {
        sp_model_free(*model);
        *model = NULL;
    }
    return st;
}

/* What loading e counts against --memory-budget: its measured memory, or
 * before its first load its file's size (the weights; the KV cache and
 * scratch are known once it is loaded). */
static uint64_t sp_router_need(const struct sp_router_model *e)
{
    return e->mem ? e->mem : (uint64_t)e->size;
}

/* Makes room for e (not loaded) beside the other loaded or loading models:
 * fewer than --models-max of them, and with --memory-budget their memory
 * and e's need within it, unloading the least recently used idle ones as
 * needed.  False when the models that would have to go are held.  Under
 * r->mu. */
static bool sp_router_make_room(struct sp_router *r, const struct sp_router_model *e, uint64_t need)
{
    for (;;) {
        int used = 0;
        uint64_t bytes = 0;
        struct sp_router_model *victim = NULL;
        for (size_t i = 0; i < r->n_models; i++) {
            struct sp_router_model *x = r->models[i];
            if (x == e || x->state == SP_ROUTER_UNLOADED)
                continue;
            used++;
            bytes += x->counted;
            if (x->state == SP_ROUTER_LOADED && x->n_held == 0 && (!victim || x->last_used < victim->last_used))
                victim = x;
        }
        bool over_count = used >= r->max_loaded, over_bytes = r->budget && bytes + need > r->budget;
        if (!over_count && !over_bytes)
            return true;
        if (!victim)
            return false;
        char why[96];
        if (over_count)
            snprintf(why, sizeof why, "least recently used; --models-max %d", r->max_loaded);
        else
            snprintf(why, sizeof why, "least recently used; --memory-budget %.1f MiB", r->budget / 1048576.0);
        sp_router_unload(victim, why);
        pthread_cond_broadcast(&r->cv);
    }
}

/* Marks e as needing more than the budget (its error from now on).  Under r->mu. */
static void sp_router_too_big(struct sp_router *r, struct sp_router_model *e, uint64_t need)
{
    char *msg = NULL;
    if (asprintf(&msg, "it needs %.1f MiB of memory (weights, KV cache and scratch%s), more than --memory-budget "
                       "%.1f MiB", need / 1048576.0, e->mem ? "" : ": its file alone", r->budget / 1048576.0) < 0)
        msg = NULL;
    free(e->error);
    e->error = msg ? msg : strdup("it needs more memory than --memory-budget");
    e->too_big = true;
    fprintf(stderr, "spindle: model '%s' cannot be loaded: %s\n", e->id, e->error ? e->error : "too big");
}

/* Loads e (held by the caller, with room made for it).  Under r->mu,
 * released while the file loads.  With --memory-budget, a model whose
 * measured memory turns out not to fit is unloaded again: marked too big
 * when it cannot fit alone, else left to wait for room (its need now
 * known) when the idle models are not enough to make it. */
static void sp_router_load_entry(struct sp_router *r, struct sp_router_model *e)
{
    e->state = SP_ROUTER_LOADING;
    e->counted = sp_router_need(e);
    fprintf(stderr, "spindle: loading model '%s'\n", e->id);
    pthread_mutex_unlock(&r->mu);
    double t0 = sp_now();
    sp_model *model = NULL;
    struct sp_sched *sched = NULL;
    uint64_t mem = 0;
    sp_status st = sp_router_load(r, e, &model, &sched, &mem);
    double dt = sp_now() - t0;
    char *msg = st == SP_OK ? NULL : strdup(sp_error_message());
    pthread_mutex_lock(&r->mu);
    if (st == SP_OK) {
        e->model = model;
        e->sched = sched;
        e->state = SP_ROUTER_LOADED;
        e->mem = e->counted = mem;
        fprintf(stderr, "spindle: loaded model '%s' in %.2f s (%.1f MiB)\n", e->id, dt, mem / 1048576.0);
        if (r->budget && mem > r->budget) {
            sp_router_unload(e, "more than --memory-budget");
            sp_router_too_big(r, e, mem);
        } else if (r->budget && !sp_router_make_room(r, e, mem)) {
            sp_router_unload(e, "no room under --memory-budget while the other models are in use; it waits");
        }
    } else {
        e->state = SP_ROUTER_UNLOADED;
        free(e->error);
        e->error = msg ? msg : strdup("out of memory");
        fprintf(stderr, "spindle: model '%s' cannot be loaded: %s\n", e->id, e->error ? e->error : "out of memory");
    }
    pthread_cond_broadcast(&r->cv);
}

/* The model name names (ID or ID:latest), the directory read again when
 * it is not loaded; NULL with a 404 in *err.  Under r->mu. */
static struct sp_router_model *sp_router_lookup(struct sp_router *r, const char *name, struct sp_api_error *err)
{
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ":latest"))
        n -= 7; /* Ollama's clients add the tag */
    struct sp_router_model *e = sp_router_find(r, name, n);
    if (!e || e->gone || e->state == SP_ROUTER_UNLOADED) {
        sp_router_scan(r);
        e = sp_router_find(r, name, n);
    }
    if (!e || e->gone) {
        sp_api_fail(err, 404, "invalid_request_error", "model_not_found", "model",
                    "The model '%.100s' does not exist (GET /v1/models lists the models served).", name);
        return NULL;
    }
    return e;
}

/* How often a request waiting for its model checks whether its client is gone. */
#define SP_ROUTER_GONE_CHECK_S 0.2

/* Waits for the router's state to change; true when the client of the
 * waiting request has gone meanwhile (checked every SP_ROUTER_GONE_CHECK_S).
 * *counted: the request is counted in spindle_requests_waiting_for_model.
 * Under r->mu. */
static bool sp_router_wait(struct sp_router *r, bool (*gone)(void *), void *ctx, bool *counted)
{
    if (!*counted) {
        *counted = true;
        sp_metrics_add_waiting(r->metrics, 1);
    }
    if (!gone) {
        pthread_cond_wait(&r->cv, &r->mu);
        return false;
    }
    struct timespec ts = sp_router_deadline(sp_now() + SP_ROUTER_GONE_CHECK_S);
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    return gone(ctx);
}

struct sp_router_model *sp_router_acquire(struct sp_router *r, const char *name, double keep_alive,
                                          bool (*gone)(void *), void *ctx, struct sp_api_error *err)
{
    pthread_mutex_lock(&r->mu);
    struct sp_router_model *e = sp_router_lookup(r, name, err);
    if (!e) {
        pthread_mutex_unlock(&r->mu);
        return NULL;
    }
    e->n_held++;
    bool counted = false;
    for (;;) {
        if (r->aborted) {
            sp_api_fail(err, 503, "server_error", "shutting_down", NULL, "The server is shutting down.");
            break;
        }
        if (e->state == SP_ROUTER_LOADED) {
            e->last_used = sp_now();
            e->keep_alive = isnan(keep_alive) ? r->cfg.keep_alive_s : keep_alive;
            pthread_mutex_unlock(&r->mu);
            if (counted)
                sp_metrics_add_waiting(r->metrics, -1);
            return e;
        }
        if (e->state == SP_ROUTER_UNLOADED && !e->error && r->budget && sp_router_need(e) > r->budget)
            sp_router_too_big(r, e, sp_router_need(e));
        if (e->error) {
            sp_api_fail(err, e->too_big ? 507 : 500, "server_error", e->too_big ? "model_too_large" : "model_load_failed",
                        "model", "The model '%.100s' cannot be loaded: %.300s", e->id, e->error);
            break;
        }
        if (e->state != SP_ROUTER_LOADING && sp_router_make_room(r, e, sp_router_need(e))) {
            sp_router_load_entry(r, e);
        } else if (sp_router_wait(r, gone, ctx, &counted)) {
            fprintf(stderr, "spindle: a request waiting for model '%s' is cancelled: its client hung up\n", e->id);
            sp_api_fail(err, 499, "invalid_request_error", "client_closed_request", NULL, "The client hung up.");
            break;
        }
    }
    e->n_held--;
    sp_router_settle(r, e);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (counted)
        sp_metrics_add_waiting(r->metrics, -1);
    return NULL;
}

struct sp_sched *sp_router_sched(const struct sp_router_model *e)
{
    return e->sched;
}

const char *sp_router_id(const struct sp_router_model *e)
{
    return e->id;
}

void sp_router_release(struct sp_router *r, struct sp_router_model *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&r->mu);
    e->n_held--;
    e->last_used = sp_now();
    sp_router_settle(r, e);
    pthread_cond_broadcast(&r->cv);
    pthread_cond_signal(&r->reap_cv);
    pthread_mutex_unlock(&r->mu);
}

sp_status sp_router_unload_idle(struct sp_router *r, const char *name, struct sp_api_error *err)
{
    pthread_mutex_lock(&r->mu);
    struct sp_router_model *e = sp_router_lookup(r, name, err);
    if (e) {
        e->keep_alive = 0;
        e->last_used = sp_now();
        if (e->state == SP_ROUTER_LOADED && e->n_held == 0) {
            sp_router_unload(e, "keep_alive 0");
            pthread_cond_broadcast(&r->cv);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return e ? SP_OK : SP_ERR_ARG;
}

bool sp_router_servable(struct sp_router *r)
{
    pthread_mutex_lock(&r->mu);
    sp_router_scan(r);
    bool any = false;
    for (size_t i = 0; i < r->n_models && !any; i++)
        any = !r->models[i]->gone && !r->models[i]->error;
    pthread_mutex_unlock(&r->mu);
    return any;
}

static int sp_router_entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sp_router_entry *)a)->id, ((const struct sp_router_entry *)b)->id);
}

sp_status sp_router_list(struct sp_router *r, struct sp_router_entry **out, size_t *n)
{
    pthread_mutex_lock(&r->mu);
    sp_router_scan(r);
    struct sp_router_entry *v = calloc(r->n_models ? r->n_models : 1, sizeof *v);
    *n = 0;
    for (size_t i = 0; v && i < r->n_models; i++) {
        const struct sp_router_model *e = r->models[i];
        if (e->gone)
            continue;
        struct sp_router_entry *x = &v[(*n)++];
        snprintf(x->id, sizeof x->id, "%s", e->id);
        snprintf(x->error, sizeof x->error, "%s", e->error ? e->error : "");
        x->state = sp_router_state_names[e->state];
        x->failed = e->error != NULL;
        x->bytes = (uint64_t)e->size;
        x->mem = e->mem;
        x->n_ctx = e->sched ? sp_sched_n_ctx(e->sched) : 0;
        double at = sp_router_expiry(e);
        x->expires_in = e->state != SP_ROUTER_LOADED || e->keep_alive < 0 ? -1
                        : e->n_held > 0                                   ? e->keep_alive
                                                                           : fmax(0, at - sp_now());
    }
    pthread_mutex_unlock(&r->mu);
    *out = v;
    if (!v)
        return sp_error_set(SP_ERR_NOMEM, "router: out of memory");
    qsort(v, *n, sizeof *v, sp_router_entry_cmp);
    return SP_OK;
}

bool sp_router_body_model(const char *body, size_t len, char *buf, size_t cap)
{
    json_t *root = body ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *name = json_object_get(root, "model");
    if (!name)
        name = json_object_get(root, "name"); /* Ollama's /api/show, older clients */
    const char *s = json_string_value(name);
    bool ok = s && s[0] && strlen(s) < cap;
    if (ok)
        memcpy(buf, s, strlen(s) + 1);
    json_decref(root);
    return ok;
}

void sp_router_abort(struct sp_router *r)
{
    pthread_mutex_lock(&r->mu);
    r->aborted = true;
    for (size_t i = 0; i < r->n_models; i++)
        if (r->models[i]->state == SP_ROUTER_LOADED)
            sp_sched_abort(r->models[i]->sched);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void sp_router_close(struct sp_router *r)
{
    if (!r)
        return;
    if (r->reaper_started) {
        pthread_mutex_lock(&r->mu);
        r->closing = true;
        pthread_cond_signal(&r->reap_cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->reaper, NULL);
    }
    for (size_t i = 0; i < r->n_models; i++) {
        struct sp_router_model *e = r->models[i];
        if (e->state == SP_ROUTER_LOADED)
            sp_router_unload(e, "the server stops");
        sp_router_model_free(e);
    }
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->reap_cv);
    pthread_mutex_destroy(&r->mu);
    sp_threads_free(r->threads);
    free(r->models);
    free(r->dir);
    free(r);
}
