/* The NEON row of the kernel table: vec.inc on four 128-bit vectors per 16
 * floats, lane masks as 16-bit integers.  Masked loads and stores of a
 * partial vector go lane by lane (AdvSIMD has none that leave memory
 * outside the lanes untouched), so they only ever touch the lanes asked
 * for. */
#include "kernels/exp.h"
#include "kernels/kernels_isa.h"

#if defined(__aarch64__)
#include <arm_neon.h>

typedef struct {
    float32x4_t v[4];
} vf;
typedef unsigned vm;
#define VM_ALL 0xFFFFu
#define VEC_QK_QUERIES 4
#define VEC_PV_CV 1

#define VF_EACH(expr)                                                          \
    vf r_;                                                                     \
    for (int k_ = 0; k_ < 4; k_++)                                             \
        r_.v[k_] = (expr);                                                     \
    return r_
static inline vf vf_zero(void) { VF_EACH(vdupq_n_f32(0.0f)); }
static inline vf vf_set1(float x) { VF_EACH(vdupq_n_f32(x)); }
static inline vf vf_load(const float *p) { VF_EACH(vld1q_f32(p + 4 * k_)); }
static inline void vf_store(float *p, vf v)
{
    for (int k = 0; k < 4; k++)
        vst1q_f32(p + 4 * k, v.v[k]);
}
static inline vf vf_add(vf a, vf b) { VF_EACH(vaddq_f32(a.v[k_], b.v[k_])); }
static inline vf vf_sub(vf a, vf b) { VF_EACH(vsubq_f32(a.v[k_], b.v[k_])); }
static inline vf vf_mul(vf a, vf b) { VF_EACH(vmulq_f32(a.v[k_], b.v[k_])); }
static inline vf vf_div(vf a, vf b) { VF_EACH(vdivq_f32(a.v[k_], b.v[k_])); }
static inline vf vf_fmadd(vf a, vf b, vf c) { VF_EACH(vfmaq_f32(c.v[k_], a.v[k_], b.v[k_])); }
static inline vf vf_neg(vf a) { VF_EACH(vnegq_f32(a.v[k_])); }
/* a < b ? a : b, NaN included (fmin would pick the number) */
static inline vf vf_lt_sel(vf a, vf b) { VF_EACH(vbslq_f32(vcltq_f32(a.v[k_], b.v[k_]), a.v[k_], b.v[k_])); }
static inline uint32x4_t vm4(vm in, int k)
{
    const uint32x4_t bit = {1, 2, 4, 8};
    return vtstq_u32(vdupq_n_u32((in >> (4 * k)) & 0xF), bit);
}
static inline vf vf_load_h(const uint16_t *p, vm in)
{
    (void)in; /* the tile's other lanes are read and ignored */
    float16x8_t a = vreinterpretq_f16_u16(vld1q_u16(p)), b = vreinterpretq_f16_u16(vld1q_u16(p + 8));
    return (vf){{vcvt_f32_f16(vget_low_f16(a)), vcvt_high_f32_f16(a), vcvt_f32_f16(vget_low_f16(b)),
                 vcvt_high_f32_f16(b)}};
}
static inline vf vf_load_i8(const int8_t *p)
{
    int8x16_t b = vld1q_s8(p);
    int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
    return (vf){{vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vcvtq_f32_s32(vmovl_high_s16(lo)),
                 vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vcvtq_f32_s32(vmovl_high_s16(hi))}};
}
static inline vf vf_load_nib(const uint8_t *p, int hi)
{
    uint8x16_t b = vld1q_u8(p);
    b = hi ? vshrq_n_u8(b, 4) : vandq_u8(b, vdupq_n_u8(15));
    uint16x8_t lo = vmovl_u8(vget_low_u8(b)), h8 = vmovl_high_u8(b);
    return (vf){{vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))), vcvtq_f32_u32(vmovl_high_u16(lo)),
                 vcvtq_f32_u32(vmovl_u16(vget_low_u16(h8))), vcvtq_f32_u32(vmovl_high_u16(h8))}};
}
static inline vf vf_load_in(const float *p, vm in)
{
    if (in == VM_ALL)
        return vf_load(p);
    float t[16];
    for (int i = 0; i < 16; i++)
        t[i] = in >> i & 1 ? p[i] : 0.0f;
    return vf_load(t);
}
static inline void vf_store_in(float *p, vm in, vf v)
{
    if (in == VM_ALL) {
        vf_store(p, v);
        return;
    }
    float t[16];
    vf_store(t, v);
    for (int i = 0; i < 16; i++)
        if (in >> i & 1)
            p[i] = t[i];
}
static inline vf vf_keep(vm in, vf v) { VF_EACH(vreinterpretq_f32_u32(vandq_u32(vm4(in, k_), vreinterpretq_u32_f32(v.v[k_])))); }
static inline vf vf_max_in(vf mx, vm in, vf x)
{
    VF_EACH(vbslq_f32(vandq_u32(vm4(in, k_), vcgtq_f32(x.v[k_], mx.v[k_])), x.v[k_], mx.v[k_]));
}
static inline float vf_reduce_max(vf v)
{
    return vmaxvq_f32(vmaxq_f32(vmaxq_f32(v.v[0], v.v[1]), vmaxq_f32(v.v[2], v.v[3])));
}
static inline vf vf_round_h(vf v) { VF_EACH(vcvt_f32_f16(vcvt_f16_f32(v.v[k_]))); }
static inline vm vm_lanes(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 15 ? 15 : hi;
    return hi < lo ? 0 : (0xFFFFu >> (15 - hi + lo)) << lo;
}
/* sp_exp1 (exp.h) on 4 lanes, step for step */
static inline float32x4_t exp4(float32x4_t x)
{
    uint32x4_t ok = vcgeq_f32(x, vdupq_n_f32(SP_EXP_MIN));
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(SP_EXP_LOG2E)));
    float32x4_t r = vfmaq_f32(x, n, vdupq_n_f32(-SP_EXP_LN2_HI));
    r = vfmaq_f32(r, n, vdupq_n_f32(-SP_EXP_LN2_LO));
    float32x4_t p = vdupq_n_f32(sp_exp_c[7]);
    for (int k = 6; k >= 0; k--)
        p = vfmaq_f32(vdupq_n_f32(sp_exp_c[k]), p, r);
    int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vreinterpretq_f32_u32(vandq_u32(ok, vreinterpretq_u32_f32(vmulq_f32(p, vreinterpretq_f32_s32(bits)))));
}
static inline vf vf_exp(vf x) { VF_EACH(exp4(x.v[k_])); }

#include "kernels/vec.inc"
#include "kernels/scan_vec.inc"

/* ops.c's contract: part[i % 8] over i ascending; four float64x2 lanes
 * pairs. */
static void neon_sumsq8(const float *x, int64_t n, double part[8])
{
    float64x2_t acc[4] = {vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0)};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        float64x2_t v[4] = {vcvt_f64_f32(vget_low_f32(a)), vcvt_high_f64_f32(a), vcvt_f64_f32(vget_low_f32(b)),
                            vcvt_high_f64_f32(b)};
        for (int k = 0; k < 4; k++)
            acc[k] = vfmaq_f64(acc[k], v[k], v[k]);
    }
    for (int k = 0; k < 4; k++)
        vst1q_f64(part + 2 * k, acc[k]);
    for (; i < n; i++)
        part[i % 8] += (double)x[i] * x[i];
}

const struct sp_kernels_isa sp_kernels_neon = {
    .isa = SP_ISA_NEON,
    .sumsq8 = neon_sumsq8,
    .swiglu = vec_swiglu,
    .geglu = sp_geglu_scalar, /* the table lookups are the work */
    .rope = vec_rope,
    .attn_group = vec_attn_group,
    .attn_block = vec_attn_block,
    .conv_causal = vec_conv_causal,
    .dot16 = vec_dot16,
    .ssd_state = vec_ssd_state,
    .ssd_out = vec_ssd_out,
};
#endif
