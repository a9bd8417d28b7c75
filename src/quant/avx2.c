/* AVX2 + FMA + F16C kernels: the file-layout dots (kern_x86.inc) and the
 * packed 16-row tiles (packed_x86.inc).  u8 x s8 products via vpmaddubsw
 * (pairs to int16: at most 2*63*127, no saturation for our unsigned
 * ranges) then vpmaddwd to int32. */
#include "quant/isa.h"

#if defined(__x86_64__)
#define KFN(name) name##_avx2
#define DOT_US_ADD(acc, u, s) \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#define DOT_US_ACC(acc, u, s, sc16)                                            \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), (sc16)))
#define SP_KERN_AVX512 0
#define SP_KERN_VNNI 0
#include "quant/kern_x86.inc"
#define SP_P8_VNNI 0
#include "quant/packed_x86.inc"

void sp_quant_register_avx2(struct sp_type_traits *table)
{
    register_avx2(table);
    register_packed_avx2(table);
}
#endif
