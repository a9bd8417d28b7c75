/* The listening socket of the HTTP front end, owned here rather than by
 * libmicrohttpd.  libmicrohttpd 0.9.75 (Debian 12), running a thread per
 * connection, keeps accepting at its connection limit and closes what it
 * cannot take, which a client sees as a reset or as a close with no answer.
 * Here a connection is accepted only while fewer than `limit` handed
 * connections are open; past that the socket is not polled, so new clients
 * wait in the kernel's listen backlog until one closes.  When accept()
 * finds no descriptor (EMFILE and the like) the thread waits a moment or
 * for a close instead of retrying at once. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/server.h"

/* How long the thread waits when accept() finds no descriptor. */
#define SP_LISTENER_BACKOFF_MS 50

struct sp_listener {
    int fd;             /* the listening socket */
    int wake;           /* eventfd: a connection closed, or stop */
    int port;
    unsigned limit;
    atomic_uint n_open; /* handed and not yet reported closed */
    atomic_bool quit;
    sp_listener_hand_fn hand;
    void *arg;
    pthread_t thread;
    bool started;
};

/* A socket bound to ai and listening; -1 with errno set otherwise. */
static int sp_listener_bind(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The port fd is bound to; `fallback` when the system does not say. */
static int sp_listener_bound_port(int fd, int fallback)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return fallback;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return fallback;
}

sp_status sp_listener_open(struct sp_listener **out, const struct addrinfo *addrs, const char *host, int port)
{
    struct sp_listener *l = calloc(1, sizeof *l);
    *out = NULL;
    if (!l)
        return sp_error_set(SP_ERR_NOMEM, "http: out of memory");
    l->fd = -1;
    l->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int e = l->wake < 0 ? errno : 0;
    for (const struct addrinfo *ai = addrs; ai && l->wake >= 0 && l->fd < 0; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        if ((l->fd = sp_listener_bind(ai)) < 0)
            e = errno;
    }
    if (l->fd < 0) {
        sp_listener_free(l);
        return sp_error_set(SP_ERR_IO, "cannot listen on %s:%d: %s", host, port,
                            e ? strerror(e) : "no IPv4 or IPv6 address");
    }
    l->port = sp_listener_bound_port(l->fd, port);
    *out = l;
    return SP_OK;
}

int sp_listener_port(const struct sp_listener *l)
{
    return l->port;
}

static void sp_listener_poke(struct sp_listener *l)
{
    uint64_t one = 1;
    ssize_t w = write(l->wake, &one, sizeof one);
    (void)w; /* the counter is already non-zero when this fails (EAGAIN) */
}

/* Accepts one connection when the socket is ready and hands it on. */
static void sp_listener_accept(struct sp_listener *l, bool *backoff)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        *backoff = errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
        return;
    }
    atomic_fetch_add(&l->n_open, 1);
    if (!l->hand(l->arg, fd, (const struct sockaddr *)&ss, len))
        atomic_fetch_sub(&l->n_open, 1);
}

static void *sp_listener_main(void *arg)
{
    struct sp_listener *l = arg;
    bool backoff = false;
    while (!atomic_load(&l->quit)) {
        struct pollfd p[2] = {{.fd = l->wake, .events = POLLIN}, {.fd = l->fd, .events = POLLIN}};
        nfds_t n = !backoff && atomic_load(&l->n_open) < l->limit ? 2 : 1;
        int r = poll(p, n, backoff ? SP_LISTENER_BACKOFF_MS : -1);
        backoff = false;
        if (r < 0)
            continue; /* EINTR; poll() fails otherwise only on bad arguments */
        if (p[0].revents & POLLIN) {
            uint64_t v;
            ssize_t got = read(l->wake, &v, sizeof v);
            (void)got;
        }
        if (n == 2 && (p[1].revents & POLLIN) && !atomic_load(&l->quit))
            sp_listener_accept(l, &backoff);
    }
    return NULL;
}

sp_status sp_listener_start(struct sp_listener *l, unsigned limit, sp_listener_hand_fn hand, void *arg)
{
    l->limit = limit;
    l->hand = hand;
    l->arg = arg;
    int e = pthread_create(&l->thread, NULL, sp_listener_main, l);
    if (e != 0)
        return sp_error_set(SP_ERR_IO, "http: cannot start the listener thread: %s", strerror(e));
    l->started = true;
    return SP_OK;
}

void sp_listener_closed(struct sp_listener *l)
{
    if (!l)
        return;
    atomic_fetch_sub(&l->n_open, 1);
    sp_listener_poke(l);
}

void sp_listener_stop(struct sp_listener *l)
{
    if (!l || !l->started)
        return;
    atomic_store(&l->quit, true);
    sp_listener_poke(l);
    pthread_join(l->thread, NULL);
    l->started = false;
}

void sp_listener_free(struct sp_listener *l)
{
    if (!l)
        return;
    sp_listener_stop(l);
    if (l->fd >= 0)
        close(l->fd);
    if (l->wake >= 0)
        close(l->wake);
    free(l);
}
