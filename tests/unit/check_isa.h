/* The ISA-path lines of the kernel tests (test_kernels, test_quant): an
 * internal header (core/cpu.h's levels), apart from check.h, which the
 * public-API test includes too. */
#ifndef SP_TEST_CHECK_ISA_H
#define SP_TEST_CHECK_ISA_H

#include <stdbool.h>
#include <stdio.h>

#include "core/cpu.h"

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
