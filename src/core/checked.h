/* Overflow-checked size arithmetic for sizes read from untrusted files.
 * Each returns false (and leaves *out unspecified) on overflow. */
#ifndef SP_CORE_CHECKED_H
#define SP_CORE_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

static inline bool sp_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline bool sp_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

#endif
