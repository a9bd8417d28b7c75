#include "core/utf8.h"

#include <string.h>
#include <sys/types.h>
#include <utf8proc.h>

size_t sp_utf8_sanitize(const char *in, size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)in + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, in + i, (size_t)k);
        o += (size_t)k;
        i += (size_t)k;
    }
    return o;
}
