/* Connection accounting for the HTTP front end (http.c): which connections
 * are waiting for a request, how long they may take to send it, and which
 * one gives way when the connection limit is reached.
 *
 * A connection is "receiving" from its start until its request's headers
 * and body are in, and again from the end of each answer until the next
 * request is in (an idle keep-alive connection cannot be told from one
 * sending its headers a byte at a time: both hold a connection and send
 * nothing complete).  A receiving connection
 *   - is shut down once it has been receiving for recv_timeout_s in all,
 *     however steadily it trickles bytes (libmicrohttpd's own timeout only
 *     counts inactivity, which one byte every few seconds resets);
 *   - gives way to a new connection when the limit is full: the one that
 *     has been receiving longest, if for at least SP_PEERS_EVICT_AGE_S, is
 *     shut down, so clients that hold connections without sending a
 *     request (slowloris) cannot lock others out, and a client that just
 *     connected is never the one cut.
 * Connections whose request runs or whose answer is being sent are never
 * cut here (the request's deadline and libmicrohttpd's idle timeout on
 * writes bound them).  When the limit is full and no connection can give
 * way, the new one is marked overflow.  Once its request's headers are in
 * (sp_peer_overflow) it waits, at most SP_PEERS_EVICT_AGE_S, for another
 * receiving connection to become old enough to give way or for one to
 * close, so a client with a complete request displaces those that have
 * none; when every other connection runs a request, or on a probe,
 * http.c answers only /health and /metrics on it and 503 to the rest.
 *
 * Shutting a socket down (never closing it) wakes the connection's thread,
 * which closes it; every list operation and the shutdown hold the mutex,
 * and libmicrohttpd reports a connection closed before it closes its
 * socket, so a shutdown never reaches a descriptor reused by another. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server.h"

/* A receiving connection younger than this never gives way. */
#define SP_PEERS_EVICT_AGE_S 1.0

struct sp_peer {
    int fd;
    double since;     /* monotonic: receiving since */
    bool receiving;
    bool overflow;
    bool cut;         /* shut down here: its deadline passed, or it gave way */
    bool timed_out;   /* cut by its deadline */
    struct sp_peer *prev, *next;
};

struct sp_peers {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* the reaper: a deadline may have moved, or quit */
    struct sp_peer *head;
    unsigned n, max;
    unsigned n_cut;           /* shut down here and not yet closed */
    uint64_t gave_way, timed_out; /* shut down here since the start, by cause */
    double recv_timeout_s;
    bool quit;
    pthread_t thread;
    bool thread_started;
};

/* Shuts p down (mu held). */
static void sp_peer_cut(struct sp_peers *ps, struct sp_peer *p, bool timed_out)
{
    if (p->cut)
        return;
    p->cut = true;
    ps->n_cut++;
    p->timed_out = timed_out;
    p->receiving = false;
    if (timed_out)
        ps->timed_out++;
    else
        ps->gave_way++;
    shutdown(p->fd, SHUT_RDWR);
}

/* The connection other than `except` that has been receiving longest, if
 * for at least SP_PEERS_EVICT_AGE_S at `now` (mu held); NULL: none.
 * *next_at: when the oldest receiving one reaches that age (0: none
 * receiving). */
static struct sp_peer *sp_peers_victim(struct sp_peers *ps, const struct sp_peer *except, double now,
                                       double *next_at)
{
    struct sp_peer *oldest = NULL;
    for (struct sp_peer *q = ps->head; q; q = q->next)
        if (q != except && q->receiving && (!oldest || q->since < oldest->since))
            oldest = q;
    *next_at = oldest ? oldest->since + SP_PEERS_EVICT_AGE_S : 0;
    return oldest && now - oldest->since >= SP_PEERS_EVICT_AGE_S ? oldest : NULL;
}

/* Waits on the reaper's condition variable until `at` (monotonic), mu held. */
static void sp_peers_wait_until(struct sp_peers *ps, double at)
{
    double wait = at - sp_now() + 0.01;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)wait;
    ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&ps->cv, &ps->mu, &ts);
}

/* Cuts receiving connections past their deadline, and while more than
 * `max` are open, the longest receiving ones (the limit can be passed by
 * connections that arrived while nobody could give way yet: they hold
 * libmicrohttpd's spare slots, SP_HTTP_OVERFLOW, and new clients wait in
 * the listen backlog until one goes). */
static void *sp_peers_reaper(void *arg)
{
    struct sp_peers *ps = arg;
    pthread_mutex_lock(&ps->mu);
    while (!ps->quit) {
        double now = sp_now(), next = 0, at = 0;
        for (struct sp_peer *p = ps->head; p && ps->recv_timeout_s > 0; p = p->next) {
            if (!p->receiving)
                continue;
            double deadline = p->since + ps->recv_timeout_s;
            if (now >= deadline)
                sp_peer_cut(ps, p, true);
            else if (next == 0 || deadline < next)
                next = deadline;
        }
        while (ps->n - ps->n_cut > ps->max) {
            struct sp_peer *v = sp_peers_victim(ps, NULL, now, &at);
            if (!v)
                break;
            sp_peer_cut(ps, v, false);
        }
        if (ps->n - ps->n_cut > ps->max && at > 0 && (next == 0 || at < next))
            next = at;
        if (next == 0) {
            pthread_cond_wait(&ps->cv, &ps->mu);
            continue;
        }
        sp_peers_wait_until(ps, next);
    }
    pthread_mutex_unlock(&ps->mu);
    return NULL;
}

sp_status sp_peers_start(struct sp_peers **out, unsigned max_connections, double recv_timeout_s)
{
    struct sp_peers *ps = calloc(1, sizeof *ps);
    *out = NULL;
    if (!ps)
        return sp_error_set(SP_ERR_NOMEM, "http: out of memory");
    ps->max = max_connections;
    ps->recv_timeout_s = recv_timeout_s;
    pthread_mutex_init(&ps->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ps->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&ps->thread, NULL, sp_peers_reaper, ps);
    if (rc != 0) {
        sp_peers_stop(ps);
        return sp_error_set(SP_ERR_NOMEM, "http: cannot start a thread: %s", strerror(rc));
    }
    ps->thread_started = true;
    *out = ps;
    return SP_OK;
}

void sp_peers_stop(struct sp_peers *ps)
{
    if (!ps)
        return;
    pthread_mutex_lock(&ps->mu);
    ps->quit = true;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
    if (ps->thread_started)
        pthread_join(ps->thread, NULL);
    for (struct sp_peer *p = ps->head, *next; p; p = next) {
        next = p->next;
        free(p);
    }
    pthread_cond_destroy(&ps->cv);
    pthread_mutex_destroy(&ps->mu);
    free(ps);
}

struct sp_peer *sp_peers_open(struct sp_peers *ps, int fd)
{
    struct sp_peer *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->fd = fd;
    p->since = sp_now();
    p->receiving = true;
    pthread_mutex_lock(&ps->mu);
    if (ps->n - ps->n_cut >= ps->max) {
        double at;
        struct sp_peer *victim = sp_peers_victim(ps, NULL, p->since, &at);
        if (victim)
            sp_peer_cut(ps, victim, false);
        else
            p->overflow = true;
    }
    p->next = ps->head;
    if (ps->head)
        ps->head->prev = p;
    ps->head = p;
    ps->n++;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
    return p;
}

void sp_peers_close(struct sp_peers *ps, struct sp_peer *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&ps->mu);
    if (p->prev)
        p->prev->next = p->next;
    else
        ps->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    ps->n--;
    ps->n_cut -= p->cut;
    pthread_cond_broadcast(&ps->cv); /* an overflow connection may fit now */
    pthread_mutex_unlock(&ps->mu);
    free(p);
}

void sp_peers_busy(struct sp_peers *ps, struct sp_peer *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&ps->mu);
    p->receiving = false;
    pthread_mutex_unlock(&ps->mu);
}

void sp_peers_idle(struct sp_peers *ps, struct sp_peer *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&ps->mu);
    if (!p->cut) {
        p->receiving = true;
        p->since = sp_now();
        pthread_cond_broadcast(&ps->cv);
    }
    pthread_mutex_unlock(&ps->mu);
}

bool sp_peer_overflow(struct sp_peers *ps, struct sp_peer *p)
{
    if (!p)
        return false;
    pthread_mutex_lock(&ps->mu);
    while (p->overflow && !p->cut && !ps->quit) {
        if (ps->n - ps->n_cut - 1 < ps->max) { /* room was made since it arrived */
            p->overflow = false;
            break;
        }
        double at;
        struct sp_peer *v = sp_peers_victim(ps, p, sp_now(), &at);
        if (v) {
            sp_peer_cut(ps, v, false);
            p->overflow = false;
            break;
        }
        if (at == 0) /* every other connection runs a request or sends its answer */
            break;
        sp_peers_wait_until(ps, at);
    }
    bool v = p->overflow;
    pthread_mutex_unlock(&ps->mu);
    return v;
}

bool sp_peer_timed_out(struct sp_peers *ps, struct sp_peer *p)
{
    if (!p)
        return false;
    pthread_mutex_lock(&ps->mu);
    bool v = p->timed_out;
    pthread_mutex_unlock(&ps->mu);
    return v;
}

void sp_peers_counts(struct sp_peers *ps, uint64_t *open, uint64_t *gave_way, uint64_t *timed_out)
{
    pthread_mutex_lock(&ps->mu);
    *open = ps->n;
    *gave_way = ps->gave_way;
    *timed_out = ps->timed_out;
    pthread_mutex_unlock(&ps->mu);
}
