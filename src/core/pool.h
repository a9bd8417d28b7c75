/* Persistent compute thread pool.
 *
 * sp_pool_run(pool, fn, arg) splits the work into nth = sp_pool_chunks_for(size)
 * chunks, one per thread, and calls fn(arg, ith, nth) exactly once for every
 * chunk ith in [0, nth), and returns when all chunks are done.  Chunk ith
 * belongs to thread ith (the caller is thread 0), so runs that split their
 * work the same way find their data in the same core's caches; a thread
 * that has finished its own chunk takes any chunk still unclaimed (a late
 * or descheduled thread's).  One chunk per thread by default, because
 * every claim and completion moves a cache line between cores and a
 * forward pass makes a few hundred runs per token; long runs, where a
 * descheduled worker would hold up a whole share, ask for more
 * (sp_pool_run_split).  fn must derive its work from (ith, nth) only;
 * per-chunk scratch is indexed by ith (never used by two threads at
 * once).
 * Between runs the workers spin briefly on an atomic generation counter (a
 * forward pass issues hundreds of runs back to back) and then sleep on a
 * condition variable, so an idle engine costs no CPU.
 *
 * Only one thread may call sp_pool_run at a time: the engine's owner, or,
 * in a pool several engines share, the one whose turn it is (sp_pool_hold).
 */
#ifndef SP_CORE_POOL_H
#define SP_CORE_POOL_H

#include "spindle.h"

struct sp_pool;

typedef void (*sp_pool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0: one per online core. */
sp_status sp_pool_init(struct sp_pool **out, int n_threads);
void sp_pool_free(struct sp_pool *p);
/* A pool several engines share (sp_threads_create): a forward pass holds
 * it for all its runs, sp_pool_hold waiting first come, first served until
 * the passes before it release it.  On a pool of sp_pool_init, holding is
 * free (its one engine never waits). */
sp_status sp_pool_init_shared(struct sp_pool **out, int n_threads);
void sp_pool_hold(struct sp_pool *p);
void sp_pool_release(struct sp_pool *p);
int sp_pool_size(const struct sp_pool *p);
/* Chunks per run for a pool of n_threads (1 for a single thread). */
static inline int sp_pool_chunks_for(int n_threads) { return n_threads > 1 ? n_threads : 1; }
void sp_pool_run(struct sp_pool *p, sp_pool_fn fn, void *arg);
/* The same with `split` chunks per thread (clamped to 1..SP_POOL_MAX_SPLIT;
 * nth = threads x split, 1 thread included), thread t's own ones being
 * chunks [t x split, (t + 1) x split), taken in order: for long runs whose
 * work divides finely at little cost, so that a thread the machine slows
 * down hands its later chunks to the others instead of making them wait
 * (a prompt's matmuls: src/kernels/matmul.c). */
#define SP_POOL_MAX_SPLIT 8
void sp_pool_run_split(struct sp_pool *p, sp_pool_fn fn, void *arg, int split);

/* Splits [0, n) into nth near-equal chunks aligned to `align`; chunk ith. */
static inline void sp_pool_split(long n, long align, int ith, int nth, long *lo, long *hi)
{
    long blocks = (n + align - 1) / align;
    long per = blocks / nth, extra = blocks % nth;
    long b0 = ith * per + (ith < extra ? ith : extra);
    long b1 = b0 + per + (ith < extra ? 1 : 0);
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

#endif
