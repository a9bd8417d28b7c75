#include "hub.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spindle.h"

struct sp_hub {
    CURL *curl;
    struct curl_slist *headers;
    char *endpoint;
    char user_agent[64];
    char errbuf[CURL_ERROR_SIZE];
};

struct sp_hub *sp_hub_open(const char *endpoint, const char *token, char *err, size_t cap)
{
    struct sp_hub *h = calloc(1, sizeof *h);
    if (!h || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, cap, "cannot start libcurl");
        free(h);
        return NULL;
    }
    h->curl = curl_easy_init();
    h->endpoint = strdup(endpoint);
    snprintf(h->user_agent, sizeof h->user_agent, "spindle/%s", sp_version());
    bool ok = h->curl && h->endpoint;
    if (ok && token && *token) {
        size_t n = strlen(token) + 32;
        char *line = malloc(n);
        if (line) {
            snprintf(line, n, "Authorization: Bearer %s", token);
            h->headers = curl_slist_append(NULL, line);
            /* the token leaves no copy behind but libcurl's */
            memset(line, 0, n);
            free(line);
        }
        ok = h->headers != NULL;
    }
    if (!ok) {
        snprintf(err, cap, "cannot start libcurl (out of memory)");
        sp_hub_close(h);
        return NULL;
    }
    return h;
}

void sp_hub_close(struct sp_hub *h)
{
    if (!h)
        return;
    curl_slist_free_all(h->headers);
    if (h->curl)
        curl_easy_cleanup(h->curl);
    free(h->endpoint);
    free(h);
    curl_global_cleanup();
}

char *sp_hub_escape_path(struct sp_hub *h, const char *s)
{
    size_t cap = strlen(s) * 3 + 1, n = 0;
    char *out = malloc(cap);
    const char *p = s;
    while (out) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        char *seg = curl_easy_escape(h->curl, p, (int)len);
        if (!seg) {
            free(out);
            return NULL;
        }
        n += (size_t)snprintf(out + n, cap - n, "%s%s", seg, slash ? "/" : "");
        curl_free(seg);
        if (!slash)
            break;
        p = slash + 1;
    }
    return out;
}

/* The options every request shares; url is endpoint + path. */
static bool sp_hub_prepare(struct sp_hub *h, const char *path)
{
    size_t n = strlen(h->endpoint) + strlen(path) + 1;
    char *url = malloc(n);
    if (!url)
        return false;
    snprintf(url, n, "%s%s", h->endpoint, path);
    CURL *c = h->curl;
    curl_easy_reset(c);
    h->errbuf[0] = '\0';
    bool ok = curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK;
    free(url);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_USERAGENT, h->user_agent);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a transfer that moves no byte for a minute has stalled */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    return ok;
}

static void sp_hub_net_error(struct sp_hub *h, CURLcode res, char *err, size_t cap)
{
    snprintf(err, cap, "%s", h->errbuf[0] ? h->errbuf : curl_easy_strerror(res));
}

struct sp_hub_buf {
    char *p;
    size_t n, max;
    bool too_long;
};

static size_t sp_hub_buf_write(char *data, size_t one, size_t n, void *ctx)
{
    struct sp_hub_buf *b = ctx;
    if (n > b->max - b->n) {
        b->too_long = true;
        return 0;
    }
    char *np = realloc(b->p, b->n + n + 1);
    if (!np)
        return 0;
    memcpy(np + b->n, data, n);
    b->p = np;
    b->n += n;
    b->p[b->n] = '\0';
    return n * one;
}

enum sp_hub_rc sp_hub_get(struct sp_hub *h, const char *path, size_t max, char **body, size_t *len, long *status,
                          char *err, size_t cap)
{
    struct sp_hub_buf b = {.p = NULL, .n = 0, .max = max};
    enum sp_hub_rc rc = SP_HUB_NET;
    *status = 0;
    if (!sp_hub_prepare(h, path)) {
        snprintf(err, cap, "out of memory");
        return SP_HUB_NET;
    }
    curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, sp_hub_buf_write);
    curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &b);
    CURLcode res = curl_easy_perform(h->curl);
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, status);
    if (b.too_long) {
        snprintf(err, cap, "the answer is longer than %zu bytes", max);
        rc = SP_HUB_BAD;
    } else if (res != CURLE_OK) {
        sp_hub_net_error(h, res, err, cap);
    } else if (*status != 200) {
        snprintf(err, cap, "HTTP %ld", *status);
        rc = SP_HUB_HTTP;
    } else if (!b.p && !(b.p = calloc(1, 1))) {
        snprintf(err, cap, "out of memory");
    } else {
        *body = b.p;
        *len = b.n;
        return SP_HUB_OK;
    }
    free(b.p);
    return rc;
}

/* The state of one fetch: the current response's status and where its
 * Content-Range starts (headers of every response, redirects included,
 * pass through here; bodies of only the last one). */
struct sp_hub_xfer {
    struct sp_hub_sink *s;
    long status;
    int64_t range_start;
    bool started;
    size_t discarded;      /* bytes of an error response's body dropped */
    enum sp_hub_rc why;    /* why the write callback stopped the transfer */
};

static size_t sp_hub_header(char *line, size_t one, size_t n, void *ctx)
{
    struct sp_hub_xfer *x = ctx;
    unsigned long long a;
    int code;
    if (n > 5 && !strncmp(line, "HTTP/", 5)) {
        const char *sp = memchr(line, ' ', n);
        x->status = sp && sscanf(sp, " %3d", &code) == 1 ? code : 0;
        x->range_start = -1;
    } else if (n > 14 && !strncasecmp(line, "content-range:", 14)) {
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%.*s", (int)(n - 14 < sizeof tmp - 1 ? n - 14 : sizeof tmp - 1), line + 14);
        if (sscanf(tmp, " bytes %llu-", &a) == 1 && a <= INT64_MAX)
            x->range_start = (int64_t)a;
    }
    return n * one;
}

/* The body's first bytes decide: 206 from where the file stands, or 200
 * (the whole file: start over).  Another status's body is not written
 * (sp_hub_sink_write drops it). */
static bool sp_hub_begin(struct sp_hub_xfer *x)
{
    struct sp_hub_sink *s = x->s;
    x->started = true;
    if (x->status == 206) {
        if (x->range_start != (int64_t)s->have) {
            x->why = SP_HUB_BAD;
            return false;
        }
        return true;
    }
    if (x->status != 200)
        return true;
    if (s->have > 0) {
        if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
            s->write_errno = errno;
            x->why = SP_HUB_WRITE;
            return false;
        }
        sp_sha256_init(s->sha);
        s->have = 0;
    }
    return true;
}

static size_t sp_hub_sink_write(char *data, size_t one, size_t n, void *ctx)
{
    struct sp_hub_xfer *x = ctx;
    struct sp_hub_sink *s = x->s;
    if (!x->started && !sp_hub_begin(x))
        return 0;
    if (x->status != 200 && x->status != 206) {
        /* an error page: dropped, up to a sane length */
        x->discarded += n;
        if (x->discarded > (1u << 16)) {
            x->why = SP_HUB_HTTP;
            return 0;
        }
        return n * one;
    }
    if (n > s->size - s->have) {
        x->why = SP_HUB_BAD;
        return 0;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(s->fd, data + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            s->write_errno = w < 0 ? errno : EIO;
            x->why = SP_HUB_WRITE;
            return 0;
        }
        done += (size_t)w;
    }
    sp_sha256_update(s->sha, data, n);
    s->have += n;
    if (s->progress)
        s->progress(s->ctx, s->have);
    return n * one;
}

enum sp_hub_rc sp_hub_fetch(struct sp_hub *h, const char *path, struct sp_hub_sink *s, long *status, char *err,
                            size_t cap)
{
    struct sp_hub_xfer x = {.s = s, .range_start = -1, .why = SP_HUB_OK};
    char range[32];
    *status = 0;
    if (!sp_hub_prepare(h, path)) {
        snprintf(err, cap, "out of memory");
        return SP_HUB_NET;
    }
    if (s->have > 0) {
        snprintf(range, sizeof range, "%" PRIu64 "-", s->have);
        curl_easy_setopt(h->curl, CURLOPT_RANGE, range);
    }
    curl_easy_setopt(h->curl, CURLOPT_HEADERFUNCTION, sp_hub_header);
    curl_easy_setopt(h->curl, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, sp_hub_sink_write);
    curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &x);
    CURLcode res = curl_easy_perform(h->curl);
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, status);
    switch (x.why) {
    case SP_HUB_WRITE:
        snprintf(err, cap, "%s", strerror(s->write_errno));
        return SP_HUB_WRITE;
    case SP_HUB_BAD:
        if (x.status == 206 && x.range_start != (int64_t)s->have)
            snprintf(err, cap, "the server answered a request from byte %" PRIu64 " with a range from %lld", s->have,
                     (long long)x.range_start);
        else
            snprintf(err, cap, "the server sent more than the %" PRIu64 " bytes the hub lists", s->size);
        return SP_HUB_BAD;
    case SP_HUB_HTTP:
        snprintf(err, cap, "HTTP %ld", *status);
        return SP_HUB_HTTP;
    default:
        break;
    }
    if (res != CURLE_OK) {
        sp_hub_net_error(h, res, err, cap);
        return SP_HUB_NET;
    }
    if (*status == 200 || *status == 206 || (*status == 416 && s->have == s->size))
        return SP_HUB_OK;
    snprintf(err, cap, "HTTP %ld", *status);
    return SP_HUB_HTTP;
}
