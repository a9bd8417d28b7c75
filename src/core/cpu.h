/* Run-time CPU feature detection.
 *
 * The ISA-specific kernels (src/quant/avx2.c, avx512.c) are compiled with
 * extra -m flags and must only be called when the CPU *and* the OS (saved
 * register state, via xgetbv) support them; this module answers that.
 */
#ifndef SP_CORE_CPU_H
#define SP_CORE_CPU_H

#include <stdbool.h>

struct sp_cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    int n_cores; /* online CPUs (sysconf), at least 1 */
};

/* Detected once (thread-safe) and cached; never NULL. */
const struct sp_cpu_features *sp_cpu_features(void);

#endif
