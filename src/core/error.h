/* Errors: a status plus a thread-local one-line message.
 * sp_error_set() (public: include/spindle.h) formats the message and returns
 * the status, so failing code reads
 * `return sp_error_set(SP_ERR_FORMAT, "tensor '%s': ...", name);`. */
#ifndef SP_CORE_ERROR_H
#define SP_CORE_ERROR_H

#include "spindle.h"

/* Prefix the current message with "context: " (keeps the status). */
sp_status sp_error_wrap(sp_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sp_error_clear(void);

#endif
