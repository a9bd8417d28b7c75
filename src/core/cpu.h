/* Run-time CPU feature detection and the ISA levels the kernels come in.
 *
 * Every kernel family (quantized dots and packed tiles in src/quant,
 * attention, norms and activations in src/kernels) has one table per ISA
 * level; the per-ISA translation units are compiled with their own -m
 * flags and are only called when the CPU *and* the OS (saved register
 * state, xgetbv; HWCAP on Linux/aarch64) support the level.  The level is
 * chosen once, at start: the best this CPU runs, or the one the
 * environment variable SP_ISA names (tests, benchmarks). */
#ifndef SP_CORE_CPU_H
#define SP_CORE_CPU_H

#include <stdbool.h>

#include "core/error.h"

struct sp_cpu_features {
    bool avx2, fma, f16c, avxvnni;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    bool neon, dotprod, i8mm;
    int n_cores; /* online CPUs (sysconf), at least 1 */
};

/* Detected once (thread-safe) and cached; never NULL. */
const struct sp_cpu_features *sp_cpu_features(void);

/* ISA levels.  A level's kernels may use what its parent's do (below);
 * a family that has no table for a level uses its parent's. */
enum sp_isa {
    SP_ISA_SCALAR,  /* portable C: the reference every other level is checked against */
    SP_ISA_AVX2,    /* x86-64: AVX2 + FMA + F16C */
    SP_ISA_AVXVNNI, /* + AVX-VNNI (256-bit vpdpbusd, VEX): Intel Alder Lake and later, AMD Zen 5 */
    SP_ISA_AVX512,  /* AVX2 level + AVX-512 F/BW/VL/DQ/VNNI: Intel Ice Lake and later servers, AMD Zen 4 */
    SP_ISA_NEON,    /* aarch64: Advanced SIMD (every aarch64 Linux CPU) */
    SP_ISA_DOTPROD, /* + the int8 dot product (sdot): Cortex-A55/A76 and later, Apple M1 */
    SP_ISA_I8MM,    /* + the int8 matrix multiply (smmla): Armv8.6 cores, Graviton 3, Apple M2 */
    SP_ISA_COUNT
};

/* "scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod", "i8mm". */
const char *sp_isa_name(enum sp_isa isa);
/* The level named `name`; false for an unknown name. */
bool sp_isa_parse(const char *name, enum sp_isa *out);
/* The level whose kernels `isa`'s builds on (scalar for the first levels). */
enum sp_isa sp_isa_parent(enum sp_isa isa);
/* Whether this build, CPU and OS can run the level's kernels. */
bool sp_isa_runs(enum sp_isa isa);
/* The level in use: the best this CPU runs, or with SP_ISA=name set, that
 * level or, when this CPU cannot run it, the nearest parent it can (an
 * unknown name is ignored).  Decided once; thread-safe. */
enum sp_isa sp_isa_active(void);
/* Fixes the level for the whole process before it is first used: NULL or
 * "auto" as sp_isa_active, else the level named.  SP_ERR_ARG for an
 * unknown name or when the process already runs another level (the first
 * choice holds); SP_ERR_UNSUPPORTED when this CPU or build cannot run it. */
sp_status sp_isa_select(const char *name);

#endif
