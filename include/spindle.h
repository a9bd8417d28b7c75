/* spindle — the one public header.
 *
 * Opaque handles, parameters and status codes shared by the CLI tools and the
 * server.  Every function that can fail returns an sp_status and leaves a
 * one-line message naming the problem, readable with sp_error_message() on the
 * same thread.  Nothing here calls exit() or abort().
 */
#ifndef SPINDLE_H
#define SPINDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sp_status {
    SP_OK = 0,
    SP_ERR_IO,          /* file missing, unreadable, mmap failed */
    SP_ERR_FORMAT,      /* malformed model file */
    SP_ERR_UNSUPPORTED, /* valid file, but an architecture/type we do not run */
    SP_ERR_NOMEM,       /* allocation failed or a size would overflow */
    SP_ERR_ARG,         /* bad argument from the caller (flag, parameter) */
    SP_ERR_CONTEXT,     /* prompt or generation does not fit the context */
    SP_ERR_FULL,        /* no free KV blocks right now (retry later) */
    SP_ERR_CANCELLED,   /* stopped by the caller */
    SP_ERR_INTERNAL,    /* a bug: an invariant did not hold */
} sp_status;

/* The message of the last error set on this thread ("" when none). */
const char *sp_error_message(void);
/* A short fixed name of a status ("format error", ...). */
const char *sp_status_name(sp_status st);

typedef int32_t sp_token;

#ifdef __cplusplus
}
#endif
#endif
