/* The chat page served at `/`: files compiled into the binary (the Makefile
 * turns server/webui/ and the Debian packages' marked and DOMPurify into
 * C arrays with xxd), so the page needs no network and no files at run time. */
#ifndef SP_SERVER_WEBUI_H
#define SP_SERVER_WEBUI_H

#include <stdbool.h>
#include <stddef.h>

struct sp_webui_asset {
    const char *path;          /* "/", "/app.js", ... */
    const char *content_type;
    const unsigned char *data; /* static */
    size_t len;
};

/* Fills *out with the asset served at `path` (exact match); false if none. */
bool sp_webui_find(const char *path, struct sp_webui_asset *out);

#endif
