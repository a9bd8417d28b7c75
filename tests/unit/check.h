/* Minimal unit-test support: CHECK counts failures and keeps going; main
 * returns sp_check_report(), which prints "N passed, N failed". */
#ifndef SP_TEST_CHECK_H
#define SP_TEST_CHECK_H

#include <stdio.h>

static int sp_check_pass, sp_check_fail;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            sp_check_pass++;                                               \
        } else {                                                           \
            sp_check_fail++;                                               \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static inline int sp_check_report(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, sp_check_pass, sp_check_fail);
    return sp_check_fail ? 1 : 0;
}

#endif
