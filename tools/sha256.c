/* SHA-256 over OpenSSL's EVP interface (libcrypto from Debian's libssl). */
#include "sha256.h"

#include <openssl/evp.h>
#include <stdio.h>

bool sp_sha256_init(struct sp_sha256 *s)
{
    if (!s->ctx)
        s->ctx = EVP_MD_CTX_new();
    return s->ctx && EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) == 1;
}

void sp_sha256_update(struct sp_sha256 *s, const void *data, size_t len)
{
    if (s->ctx)
        EVP_DigestUpdate(s->ctx, data, len);
}

void sp_sha256_hex(struct sp_sha256 *s, char out[65])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    out[0] = '\0';
    if (!s->ctx || EVP_DigestFinal_ex(s->ctx, d, &n) != 1 || n != 32)
        return;
    for (unsigned int i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

void sp_sha256_free(struct sp_sha256 *s)
{
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
}
