/* Thread pool: every chunk of every run runs exactly once, back to back
 * (workers spinning), after idle gaps (workers asleep, so the caller takes
 * their chunks) and with a chunk that is slow (the others must wait for
 * it, never run it twice); chunk ith mostly runs on thread ith. */
#include <pthread.h>
#include <stdatomic.h>
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

static void check_pool(int n_threads)
{
    struct sp_pool *pool;
    CHECK(sp_pool_init(&pool, n_threads) == SP_OK, "pool of %d", n_threads);
    const int nth = sp_pool_chunks_for(n_threads);
    int bad = 0, same = 0, total = 0;
    pthread_t caller = pthread_self();
    for (int r = 0; r < 3000; r++) {
        struct job j = {.slow = r % 7 == 3 ? r % nth : -1};
        for (int c = 0; c < MAXC; c++)
            atomic_init(&j.runs[c], 0);
        if (r % 500 == 499) { /* idle long enough for the workers to sleep */
            struct timespec ts = {0, 30 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        sp_pool_run(pool, job_fn, &j);
        for (int c = 0; c < nth; c++)
            bad += atomic_load(&j.runs[c]) != 1 || j.nth_seen[c] != nth;
        same += pthread_equal(j.owner[0], caller) != 0;
        total++;
    }
    CHECK(bad == 0, "%d threads: %d chunks did not run exactly once", n_threads, bad);
    /* the caller runs chunk 0 itself: no other thread can claim it first
     * unless the caller was descheduled right after publishing the run */
    CHECK(same * 10 >= total * 9, "%d threads: chunk 0 ran on the caller in %d of %d runs", n_threads, same, total);
    sp_pool_free(pool);
}

/* Runs of different splits back to back: chunks past a run's count must
 * not be claimable by a late worker of that run, nor missing from a later
 * run that has more. */
static void check_split(int n_threads)
{
    struct sp_pool *pool;
    CHECK(sp_pool_init(&pool, n_threads) == SP_OK, "pool of %d", n_threads);
    int bad = 0, mine = 0, total = 0;
    for (int r = 0; r < 3000; r++) {
        const int split = 1 + (r * 7) % SP_POOL_MAX_SPLIT, nth = n_threads * split;
        struct job j = {.slow = r % 5 == 2 ? r % nth : -1};
        for (int c = 0; c < MAXC; c++)
            atomic_init(&j.runs[c], 0);
        if (r % 700 == 699) {
            struct timespec ts = {0, 30 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        pthread_t caller = pthread_self();
        sp_pool_run_split(pool, job_fn, &j, split);
        for (int c = 0; c < MAXC; c++)
            bad += atomic_load(&j.runs[c]) != (c < nth) || (c < nth && j.nth_seen[c] != nth);
        mine += pthread_equal(j.owner[0], caller) != 0;
        total++;
    }
    CHECK(bad == 0, "%d threads, splits 1..%d: %d chunks did not run exactly once", n_threads, SP_POOL_MAX_SPLIT,
          bad);
    CHECK(mine * 10 >= total * 9, "%d threads, split: chunk 0 ran on the caller in %d of %d runs", n_threads, mine,
          total);
    sp_pool_free(pool);
}

int main(void)
{
    check_pool(1);
    check_pool(2);
    check_pool(3);
    check_pool(8);
    check_split(1);
    check_split(2);
    check_split(3);
    return sp_check_report("pool");
}
