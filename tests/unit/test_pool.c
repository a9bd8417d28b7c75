/* Thread pool: every chunk of every run runs exactly once, back to back
 * (workers spinning), after idle gaps (workers asleep, so the caller takes
 * their chunks) and with a chunk that is slow (the others must wait for
 * it, never run it twice); chunk ith mostly runs on thread ith; a shared
 * pool held by one caller at a time. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "core/pool.h"

#define MAXC (8 * SP_POOL_MAX_SPLIT)

struct job {
    _Atomic int runs[MAXC]; /* times chunk c ran in this run */
    _Atomic int own;        /* chunks that ran on their own thread */
    int nth_seen[MAXC];     /* the nth each chunk was given */
    pthread_t owner[MAXC];  /* the thread each chunk ran on, last run */
    int slow;               /* chunk that sleeps, or -1 */
};

static void job_fn(void *arg, int ith, int nth)
{
    struct job *j = arg;
    j->nth_seen[ith] = nth;
    if (ith == j->slow) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    j->owner[ith] = pthread_self();
    atomic_fetch_add(&j->runs[ith], 1);
}

/* split 0: plain sp_pool_run; else runs of splits 1..SP_POOL_MAX_SPLIT
 * back to back, so chunks past a run's count must not be claimable by a
 * late worker of that run, nor missing from a later run that has more. */
static void check_pool(int n_threads, bool split)
{
    struct sp_pool *pool;
    CHECK(sp_pool_init(&pool, n_threads) == SP_OK, "pool of %d", n_threads);
    int bad = 0, same = 0, total = 0;
    pthread_t caller = pthread_self();
    for (int r = 0; r < 3000; r++) {
        const int per = split ? 1 + (r * 7) % SP_POOL_MAX_SPLIT : 1;
        const int nth = split ? n_threads * per : sp_pool_chunks_for(n_threads);
        struct job j = {.slow = r % 7 == 3 ? r % nth : -1};
        for (int c = 0; c < MAXC; c++)
            atomic_init(&j.runs[c], 0);
        if (r % 500 == 499) { /* idle long enough for the workers to sleep */
            struct timespec ts = {0, 30 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (split)
            sp_pool_run_split(pool, job_fn, &j, per);
        else
            sp_pool_run(pool, job_fn, &j);
        for (int c = 0; c < MAXC; c++)
            bad += atomic_load(&j.runs[c]) != (c < nth) || (c < nth && j.nth_seen[c] != nth);
        same += pthread_equal(j.owner[0], caller) != 0;
        total++;
    }
    CHECK(bad == 0, "%d threads%s: %d chunks did not run exactly once", n_threads, split ? ", splits 1..max" : "", bad);
    /* the caller runs chunk 0 itself: no other thread can claim it first
     * unless the caller was descheduled right after publishing the run */
    CHECK(same * 10 >= total * 9, "%d threads%s: chunk 0 ran on the caller in %d of %d runs", n_threads,
          split ? ", split" : "", same, total);
    sp_pool_free(pool);
}

/* A shared pool: callers on several threads, each holding the pool for a
 * burst of runs (as a forward pass does), never overlap, and every chunk of
 * every run still runs exactly once. */
struct sharer {
    struct sp_pool *pool;
    _Atomic int *inside; /* callers between hold and release */
    int overlaps, bad;
};

static void *sharer_main(void *arg)
{
    struct sharer *sh = arg;
    for (int pass = 0; pass < 200; pass++) {
        sp_pool_hold(sh->pool);
        if (atomic_fetch_add(sh->inside, 1) != 0)
            sh->overlaps++;
        for (int r = 0; r < 5; r++) {
            struct job j = {.slow = -1};
            for (int c = 0; c < MAXC; c++)
                atomic_init(&j.runs[c], 0);
            sp_pool_run(sh->pool, job_fn, &j);
            for (int c = 0; c < sp_pool_size(sh->pool); c++)
                sh->bad += atomic_load(&j.runs[c]) != 1;
        }
        atomic_fetch_sub(sh->inside, 1);
        sp_pool_release(sh->pool);
    }
    return NULL;
}

static void check_shared(int n_threads, int n_callers)
{
    struct sp_pool *pool = NULL;
    _Atomic int inside = 0;
    struct sharer sh[4] = {0};
    pthread_t t[4];
    CHECK(sp_pool_init_shared(&pool, n_threads) == SP_OK, "shared pool of %d", n_threads);
    if (!pool)
        return;
    for (int i = 0; i < n_callers; i++) {
        sh[i] = (struct sharer){.pool = pool, .inside = &inside};
        pthread_create(&t[i], NULL, sharer_main, &sh[i]);
    }
    for (int i = 0; i < n_callers; i++) {
        pthread_join(t[i], NULL);
        CHECK(sh[i].overlaps == 0, "shared pool of %d: caller %d held it beside another %d times", n_threads, i,
              sh[i].overlaps);
        CHECK(sh[i].bad == 0, "shared pool of %d: caller %d saw %d chunks not run exactly once", n_threads, i,
              sh[i].bad);
    }
    sp_pool_free(pool);
}

int main(void)
{
    check_shared(1, 2);
    check_shared(2, 3);
    check_shared(3, 4);
    check_pool(1, false);
    check_pool(2, false);
    check_pool(3, false);
    check_pool(8, false);
    check_pool(1, true);
    check_pool(2, true);
    check_pool(3, true);
    return sp_check_report("pool");
}
