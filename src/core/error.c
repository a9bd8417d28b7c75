#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char sp_error_buf[1024];

const char *sp_error_message(void) { return sp_error_buf; }

void sp_error_clear(void) { sp_error_buf[0] = '\0'; }

sp_status sp_error_set(sp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sp_error_buf, sizeof sp_error_buf, fmt, ap);
    va_end(ap);
    return st;
}

sp_status sp_error_wrap(sp_status st, const char *fmt, ...)
{
    char prefix[512], old[sizeof sp_error_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, sp_error_buf, sizeof old);
    if (snprintf(sp_error_buf, sizeof sp_error_buf, "%.500s: %.500s", prefix, old) < 0)
        sp_error_buf[0] = '\0';
    return st;
}

const char *sp_status_name(sp_status st)
{
    switch (st) {
    case SP_OK: return "ok";
    case SP_ERR_IO: return "i/o error";
    case SP_ERR_FORMAT: return "format error";
    case SP_ERR_UNSUPPORTED: return "unsupported";
    case SP_ERR_NOMEM: return "out of memory";
    case SP_ERR_ARG: return "invalid argument";
    case SP_ERR_CONTEXT: return "context exceeded";
    case SP_ERR_FULL: return "no free KV blocks";
    case SP_ERR_CANCELLED: return "cancelled";
    case SP_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
