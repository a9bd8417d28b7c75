/* Packed 16-row tiles for aarch64, baseline AdvSIMD (every aarch64 CPU): widening multiplies
 * (packed_neon.inc).  The file-layout dots stay the scalar oracle's. */
#include "quant/quant_isa.h"

#if defined(__aarch64__)
#define KFN(name) name##_neon
#define SP_NEON_SDOT 0
#define SP_NEON_MMLA 0
#include "quant/packed_neon.inc"

void sp_quant_register_neon(struct sp_type_traits *table) { register_packed_neon(table); }

/* sp_f16_store's NEON row (four conversions of 4 per step). */
void sp_f16_store_neon(uint16_t *dst, size_t stride, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16_t h[16];
        uint16_t *p = stride == 1 ? dst + i : h;
        for (int k = 0; k < 4; k++)
            vst1_u16(p + 4 * k, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i + 4 * k))));
        if (stride != 1)
            for (int k = 0; k < 16; k++)
                dst[(size_t)(i + k) * stride] = h[k];
    }
    if (i < n)
        sp_f16_store_scalar(dst + (size_t)i * stride, stride, src + i, n - i);
}
#endif
