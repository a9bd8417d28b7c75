/* AVX2 + FMA + F16C kernels: the file-layout dots (kern_x86.inc), the
 * packed 16-row tiles (packed_x86.inc) and sp_f16_store's row (F16C's
 * vcvtps2ph).  u8 x s8 products via vpmaddubsw
 * (pairs to int16: at most 2*63*127, no saturation for our unsigned
 * ranges) then vpmaddwd to int32. */
#include "quant/quant_isa.h"

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

/* sp_f16_store's AVX2 row (F16C: two halves of 8 per step). */
void sp_f16_store_avx2(uint16_t *dst, size_t stride, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        const __m128i hi = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
        if (stride == 1) {
            _mm_storeu_si128((__m128i *)(dst + i), lo);
            _mm_storeu_si128((__m128i *)(dst + i + 8), hi);
            continue;
        }
        uint16_t h[16];
        _mm_storeu_si128((__m128i *)h, lo);
        _mm_storeu_si128((__m128i *)(h + 8), hi);
        for (int k = 0; k < 16; k++)
            dst[(size_t)(i + k) * stride] = h[k];
    }
    if (i < n)
        sp_f16_store_scalar(dst + (size_t)i * stride, stride, src + i, n - i);
}

void sp_quant_register_avx2(struct sp_type_traits *table)
{
    register_avx2(table);
    register_packed_avx2(table);
}
#endif
