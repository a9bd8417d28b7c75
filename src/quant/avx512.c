/* AVX-512 VNNI kernels on 256-bit vectors (AVX512VL): vpdpbusd does the
 * u8 x s8 -> int32 dot in one instruction.  Zen 4 runs 512-bit ops as two
 * 256-bit halves, so ymm VNNI costs no throughput and keeps the kernels the
 * same shape as the AVX2 ones (see kern_x86.inc). */
#include "quant/isa.h"

#if defined(__x86_64__)
#define KFN(name) name##_avx512
#define DOT_US_ADD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define DOT_US_ACC(acc, u, s, sc16)                                            \
    _mm256_dpwssd_epi32((acc), _mm256_maddubs_epi16((u), (s)), (sc16))
#define SP_KERN_AVX512 1
#include "quant/kern_x86.inc"

void sp_quant_register_avx512(struct sp_type_traits *table) { register_avx512(table); }
#endif
