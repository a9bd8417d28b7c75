/* HTTP to the Hugging Face hub (libcurl), for `spindle pull`: a JSON GET
 * into memory, and a file GET into a descriptor that resumes with Range,
 * hashes what it writes and reports progress.  Requests follow redirects
 * (http and https only); $HF_TOKEN, when set, goes out as
 * "Authorization: Bearer ..." to the endpoint's host (libcurl drops it on
 * a redirect to another host, such as the hub's CDN) and is never printed. */
#ifndef SP_TOOLS_HUB_H
#define SP_TOOLS_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

struct sp_hub;

/* What a request came to.  NET: the connection failed or broke (worth a
 * retry); HTTP: the server answered with an unexpected status (*status);
 * WRITE: writing the local file failed (sink->write_errno); BAD: the server
 * sent more bytes than the listing says, or a Content-Range that does not
 * start where the file stands. */
enum sp_hub_rc { SP_HUB_OK, SP_HUB_NET, SP_HUB_HTTP, SP_HUB_WRITE, SP_HUB_BAD };

/* endpoint: base URL without a trailing slash; token: NULL or $HF_TOKEN.
 * NULL (with a message in err) when libcurl cannot start. */
struct sp_hub *sp_hub_open(const char *endpoint, const char *token, char *err, size_t cap);
void sp_hub_close(struct sp_hub *h);

/* GET endpoint + path (already URL-escaped) into a malloc'd, NUL-terminated
 * *body of at most max bytes (a longer one is BAD).  OK only for a 200. */
enum sp_hub_rc sp_hub_get(struct sp_hub *h, const char *path, size_t max, char **body, size_t *len, long *status,
                          char *err, size_t cap);

/* Where a download goes: the file fd, whose first `have` bytes are already
 * here (and fed to sha); the transfer appends from there (Range: bytes=have-)
 * up to `size` bytes, and starts over from 0 when the server answers a
 * ranged request with the whole file (200).  progress(ctx, have) is called
 * as bytes arrive. */
struct sp_hub_sink {
    int fd;
    uint64_t have, size;
    struct sp_sha256 *sha;
    void (*progress)(void *ctx, uint64_t have);
    void *ctx;
    int write_errno;   /* set by a WRITE failure */
};

/* GET endpoint + path into the sink.  OK when the transfer ended cleanly
 * (sink->have may still be short of size if the server sent less); a 416
 * to a request from have == size also counts as OK: the file is whole. */
enum sp_hub_rc sp_hub_fetch(struct sp_hub *h, const char *path, struct sp_hub_sink *s, long *status, char *err,
                            size_t cap);

/* s with every path segment percent-escaped ('/' kept), malloc'd; NULL when
 * out of memory. */
char *sp_hub_escape_path(struct sp_hub *h, const char *s);

#endif
