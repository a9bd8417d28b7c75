/* Packed 16-row tiles for aarch64, baseline AdvSIMD (every aarch64 CPU): widening multiplies
 * (packed_neon.inc).  The file-layout dots stay the scalar oracle's, but for MXFP4's (a
 * table lookup per nibble, which the oracle does a value at a time). */
#include "quant/quant_isa.h"

#if defined(__aarch64__)
#define KFN(name) name##_neon
#define SP_NEON_SDOT 0
#define SP_NEON_MMLA 0
#include "quant/packed_neon.inc"

/* MXFP4 x Q8_0: per block the exact integer sum of doubled code points
 * (vqtbl1q_s8 on the nibbles) times activation quants, then the oracle's
 * float arithmetic (its rounding order too). */
static void mxfp4_vec_dot_neon(int64_t n, float *s, const void *vw, const void *va)
{
    const struct sp_block_mxfp4 *x = vw;
    const struct sp_block_q8_0 *a = va;
    const int8x16_t lut = vld1q_s8(sp_mxfp4_values);
    float sum = 0;
    for (int64_t i = 0; i < n / SP_QK; i++) {
        const uint8x16_t q = vld1q_u8(x[i].qs);
        const int8x16_t lo = vqtbl1q_s8(lut, vandq_u8(q, vdupq_n_u8(0xF)));
        const int8x16_t hi = vqtbl1q_s8(lut, vshrq_n_u8(q, 4));
        const int8x16_t a0 = vld1q_s8(a[i].qs), a1 = vld1q_s8(a[i].qs + 16);
        int32x4_t acc = vdupq_n_s32(0);
        acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(lo), vget_low_s8(a0)));
        acc = vpadalq_s16(acc, vmull_high_s8(lo, a0));
        acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(hi), vget_low_s8(a1)));
        acc = vpadalq_s16(acc, vmull_high_s8(hi, a1));
        const int si = vaddvq_s32(acc);
        sum += si * (sp_e8m0_half(x[i].e) * sp_f16_to_f32(a[i].d));
    }
    *s = sum;
}

void sp_quant_register_neon(struct sp_type_traits *table)
{
    register_packed_neon(table);
    table[SP_TYPE_MXFP4].vec_dot = mxfp4_vec_dot_neon;
}

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
