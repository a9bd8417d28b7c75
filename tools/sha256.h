/* SHA-256 through OpenSSL's libcrypto, for checking downloaded model files
 * against the hub's LFS object ids (tools/pull.c). */
#ifndef SP_TOOLS_SHA256_H
#define SP_TOOLS_SHA256_H

#include <stdbool.h>
#include <stddef.h>

struct sp_sha256 {
    void *ctx; /* EVP_MD_CTX; NULL before the first init */
};

/* Starts (or restarts) a digest; false when libcrypto cannot (out of memory). */
bool sp_sha256_init(struct sp_sha256 *s);
void sp_sha256_update(struct sp_sha256 *s, const void *data, size_t len);
/* The digest as 64 lowercase hex digits and a NUL ("" when it failed). */
void sp_sha256_hex(struct sp_sha256 *s, char out[65]);
/* Frees what init made (a zeroed or freed struct is fine). */
void sp_sha256_free(struct sp_sha256 *s);

#endif
