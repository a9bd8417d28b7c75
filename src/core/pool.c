#define _GNU_SOURCE /* pthread_setname_np */
#include "core/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SP_PAUSE() _mm_pause()
#else
#define SP_PAUSE() ((void)0)
#endif

/* Waiting: SP_POOL_SPIN pause-spins (the gap between two kernels of one
 * forward pass is microseconds), then yields, so an oversubscribed machine
 * still makes progress; a worker sleeps on the condition variable after
 * SP_POOL_YIELD yields, so an idle engine costs no CPU. */
#define SP_POOL_SPIN 4000
#define SP_POOL_YIELD 2000

struct sp_pool_worker {
    struct sp_pool *pool;
    int ith;
    pthread_t thread;
};

/* Chunk c's claim: the number of the last run that claimed it, alone on
 * its cache line (its owner claims it every run; others only read it). */
struct sp_pool_claim {
    _Alignas(64) _Atomic unsigned gen;
};

struct sp_pool {
    int n;
    struct sp_pool_worker *workers; /* [n - 1] */
    struct sp_pool_claim *claims;   /* [SP_POOL_MAX_SPLIT * n] */
    /* the current run: written by the caller before gen is bumped (release),
     * read by workers after they see the new gen (acquire) */
    _Atomic(sp_pool_fn) fn;
    void *_Atomic arg;
    _Atomic int n_chunks;
    _Atomic unsigned gen;     /* bumped per run */
    _Atomic int done;         /* chunks finished in this run */
    _Atomic int sleepers;
    _Atomic bool stop;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    /* shared pools: whose turn it is (sp_pool_hold), in ticket order */
    bool shared;
    pthread_mutex_t turn_mu;
    pthread_cond_t turn_cv;
    uint64_t turn_next, turn_now;
};

/* Runs the chunks of run `g` that thread `self` can claim: its own ones
 * first (n / threads consecutive chunks from self * n / threads: chunk
 * self when there is one per thread), then any other not yet claimed (a
 * late, descheduled or slowed thread's).  Every chunk was claimed in
 * every run before g (the caller marks those past a run's count claimed
 * before it publishes the run), so a claim moves it from g - 1 to g; a
 * late worker holding an older run's g (and fn/arg, read after it saw
 * that g published) finds every chunk at g or later and claims nothing,
 * and the caller rewrites fn/arg only once every chunk of g is done. */
static void sp_pool_work(struct sp_pool *p, unsigned g, sp_pool_fn fn, void *arg, int n, int self)
{
    const int first = (int)((long)self * n / p->n);
    for (int i = 0; i < n; i++) {
        int c = (first + i) % n;
        unsigned want = g - 1;
        if (atomic_load_explicit(&p->claims[c].gen, memory_order_relaxed) != want ||
            !atomic_compare_exchange_strong_explicit(&p->claims[c].gen, &want, g, memory_order_acq_rel,
                                                     memory_order_relaxed))
            continue;
        fn(arg, c, n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
    }
}

static void *sp_pool_main(void *vp)
{
    struct sp_pool_worker *w = vp;
    struct sp_pool *p = w->pool;
    unsigned seen = 0;
    pthread_setname_np(pthread_self(), "sp-compute"); /* as top -H and /proc/PID/task/N/comm show it */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_acquire))
                return NULL;
            if (++spins < SP_POOL_SPIN) {
                SP_PAUSE();
                continue;
            }
            if (spins < SP_POOL_SPIN + SP_POOL_YIELD) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        sp_pool_work(p, g, atomic_load_explicit(&p->fn, memory_order_relaxed),
                     atomic_load_explicit(&p->arg, memory_order_relaxed),
                     atomic_load_explicit(&p->n_chunks, memory_order_relaxed), w->ith);
    }
}

sp_status sp_pool_init(struct sp_pool **out, int n_threads)
{
    struct sp_pool *p;
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 512)
        return sp_error_set(SP_ERR_ARG, "threads: %d is more than 512", n_threads);
    p = calloc(1, sizeof *p);
    if (!p)
        return sp_error_set(SP_ERR_NOMEM, "thread pool: no memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_mutex_init(&p->turn_mu, NULL);
    pthread_cond_init(&p->turn_cv, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    p->claims = aligned_alloc(64, sizeof *p->claims * (size_t)SP_POOL_MAX_SPLIT * (size_t)n_threads);
    if (!p->workers || !p->claims)
        goto free_pool;
    for (int c = 0; c < SP_POOL_MAX_SPLIT * n_threads; c++)
        atomic_init(&p->claims[c].gen, 0);
    for (int i = 1; i < n_threads; i++) {
        struct sp_pool_worker *w = &p->workers[i - 1];
        w->pool = p;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, sp_pool_main, w) != 0) {
            p->n = i; /* join only those started */
            sp_pool_free(p);
            return sp_error_set(SP_ERR_NOMEM, "thread pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return SP_OK;
free_pool:
    free(p->workers);
    free(p->claims);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->turn_mu);
    pthread_cond_destroy(&p->turn_cv);
    free(p);
    return sp_error_set(SP_ERR_NOMEM, "thread pool: no memory");
}

void sp_pool_free(struct sp_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->workers[i - 1].thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->turn_mu);
    pthread_cond_destroy(&p->turn_cv);
    free(p->workers);
    free(p->claims);
    free(p);
}

int sp_pool_size(const struct sp_pool *p) { return p->n; }

sp_status sp_pool_init_shared(struct sp_pool **out, int n_threads)
{
    sp_status st = sp_pool_init(out, n_threads);
    if (st == SP_OK)
        (*out)->shared = true;
    return st;
}

void sp_pool_hold(struct sp_pool *p)
{
    if (!p->shared)
        return;
    pthread_mutex_lock(&p->turn_mu);
    uint64_t mine = p->turn_next++;
    while (p->turn_now != mine)
        pthread_cond_wait(&p->turn_cv, &p->turn_mu);
    pthread_mutex_unlock(&p->turn_mu);
}

void sp_pool_release(struct sp_pool *p)
{
    if (!p->shared)
        return;
    pthread_mutex_lock(&p->turn_mu);
    p->turn_now++;
    pthread_cond_broadcast(&p->turn_cv);
    pthread_mutex_unlock(&p->turn_mu);
}

void sp_pool_run(struct sp_pool *p, sp_pool_fn fn, void *arg)
{
    sp_pool_run_split(p, fn, arg, 1);
}

void sp_pool_run_split(struct sp_pool *p, sp_pool_fn fn, void *arg, int split)
{
    split = split < 1 ? 1 : split > SP_POOL_MAX_SPLIT ? SP_POOL_MAX_SPLIT : split;
    const int n = p->n * split;
    if (p->n == 1) {
        for (int c = 0; c < n; c++)
            fn(arg, c, n);
        return;
    }
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    for (int c = n; c < SP_POOL_MAX_SPLIT * p->n; c++) /* not in this run: as if claimed */
        atomic_store_explicit(&p->claims[c].gen, g, memory_order_relaxed);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->n_chunks, n, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store(&p->gen, g); /* seq_cst: pairs with the sleepers count */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    sp_pool_work(p, g, fn, arg, n, 0);
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n; spins++) {
        if (spins < SP_POOL_SPIN)
            SP_PAUSE();
        else
            sched_yield();
    }
}
