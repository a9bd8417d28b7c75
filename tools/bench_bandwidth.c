/* spindle bench --bandwidth: memory read bandwidth, the ceiling for decode
 * speed.  Each of n threads sums its share of a 1 GiB buffer; the best of
 * five passes counts. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "spindle.h"
#include "tools.h"

#define SP_BW_BYTES ((size_t)1 << 30)
#define SP_BW_MAX_THREADS 256

struct sp_bw_part {
    const uint64_t *buf;
    size_t lo, hi;
    uint64_t sum; /* kept, so the reads are not optimised away */
};

static void *sp_bw_part_run(void *arg)
{
    struct sp_bw_part *p = arg;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = p->lo; i + 4 <= p->hi; i += 4) {
        a0 += p->buf[i];
        a1 += p->buf[i + 1];
        a2 += p->buf[i + 2];
        a3 += p->buf[i + 3];
    }
    p->sum = a0 + a1 + a2 + a3;
    return NULL;
}

static double sp_bw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

sp_status sp_bench_bandwidth(int n_threads, double *gb_s)
{
    size_t n = SP_BW_BYTES / sizeof(uint64_t);
    struct sp_bw_part parts[SP_BW_MAX_THREADS];
    pthread_t th[SP_BW_MAX_THREADS];
    sp_status st = SP_OK;
    *gb_s = 0.0;
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    if (n_threads > SP_BW_MAX_THREADS)
        n_threads = SP_BW_MAX_THREADS;
    uint64_t *buf = aligned_alloc(64, SP_BW_BYTES);
    if (!buf)
        return sp_error_set(SP_ERR_NOMEM, "bandwidth: cannot allocate 1 GiB");
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    for (int t = 0; t < n_threads; t++) /* 64-byte aligned shares */
        parts[t] = (struct sp_bw_part){buf, n * t / n_threads / 8 * 8, n * (t + 1) / n_threads / 8 * 8, 0};
    parts[n_threads - 1].hi = n;
    for (int r = 0; r < 5 && st == SP_OK; r++) {
        int started = 0;
        double t0 = sp_bw_now();
        for (; started < n_threads; started++)
            if (pthread_create(&th[started], NULL, sp_bw_part_run, &parts[started]) != 0) {
                st = sp_error_set(SP_ERR_NOMEM, "bandwidth: cannot start thread %d", started);
                break;
            }
        for (int t = 0; t < started; t++)
            pthread_join(th[t], NULL);
        double gbs = (double)SP_BW_BYTES / (sp_bw_now() - t0) / 1e9;
        if (st == SP_OK && gbs > *gb_s)
            *gb_s = gbs;
    }
    free(buf);
    return st;
}
