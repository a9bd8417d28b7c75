/* AVX-VNNI kernels (Intel Alder Lake and later, AMD Zen 5): the AVX2
 * level's 256-bit kernels with the u8 x s8 -> int32 dots done by the VEX
 * vpdpbusd / vpdpwssd, one instruction and no int16 saturation (see
 * kern_x86.inc, packed_x86.inc). */
#include "quant/quant_isa.h"

#if defined(__x86_64__)
#define KFN(name) name##_avxvnni
#define DOT_US_ADD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define DOT_US_ACC(acc, u, s, sc16) _mm256_dpwssd_avx_epi32((acc), _mm256_maddubs_epi16((u), (s)), (sc16))
#define SP_KERN_AVX512 0
#define SP_KERN_VNNI 1
#include "quant/kern_x86.inc"
#define SP_P8_VNNI 1
#include "quant/packed_x86.inc"

void sp_quant_register_avxvnni(struct sp_type_traits *table)
{
    register_avxvnni(table);
    register_packed_avxvnni(table);
}
#endif
