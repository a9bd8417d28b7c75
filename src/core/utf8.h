/* UTF-8 helpers for text that must be valid (JSON output). */
#ifndef SP_CORE_UTF8_H
#define SP_CORE_UTF8_H

#include <stddef.h>

#include "spindle.h"

/* Copies in[0..n) to out, replacing each invalid byte sequence with U+FFFD.
 * out needs 3 * n bytes; returns the bytes written (no terminator). */
size_t sp_utf8_sanitize(const char *in, size_t n, char *out);

#endif
