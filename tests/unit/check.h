/* Minimal unit-test support: CHECK counts failures and keeps going; main
 * returns sp_check_report(), which prints "N passed, N failed". */
#ifndef SP_TEST_CHECK_H
#define SP_TEST_CHECK_H

#include <stdbool.h>
#include <stdio.h>

#include "core/cpu.h"

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

/* One line per kernel family and ISA level: "exercised" when the test ran
 * that level's kernels against the scalar reference, else why not (the
 * level is another architecture's, or this CPU lacks it).  scripts/run-tests
 * gathers these lines into its summary. */
static inline void sp_check_isa_path(const char *family, enum sp_isa isa, bool ran)
{
    const char *why = "exercised";
    if (!ran) {
#if defined(__x86_64__)
        bool here = isa <= SP_ISA_AVX512;
#elif defined(__aarch64__)
        bool here = isa == SP_ISA_SCALAR || isa >= SP_ISA_NEON;
#else
        bool here = isa == SP_ISA_SCALAR;
#endif
        why = here ? "skipped (this CPU lacks it)" : "skipped (another architecture)";
    }
    printf("isa-path %s %s: %s\n", family, sp_isa_name(isa), why);
}

#endif
