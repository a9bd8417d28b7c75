/* SHA-256 (FIPS 180-4), for checking downloaded model files against the
 * hub's LFS object ids (tools/pull.c). */
#ifndef SP_TOOLS_SHA256_H
#define SP_TOOLS_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sp_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;     /* bytes fed so far */
    unsigned char buf[64];
    size_t n_buf;         /* bytes of buf waiting for a full block */
};

void sp_sha256_init(struct sp_sha256 *s);
void sp_sha256_update(struct sp_sha256 *s, const void *data, size_t len);
/* The digest as 64 lowercase hex digits and a NUL. */
void sp_sha256_hex(struct sp_sha256 *s, char out[65]);

#endif
