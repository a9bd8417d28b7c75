/* The AVX2 row of the kernel table: vec.inc on two ymm per 16 floats
 * (lanes 0-7, 8-15), lane masks as 16-bit integers turned into vector
 * masks where an instruction needs one. */
#include "kernels/exp.h"
#include "kernels/kernels_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

typedef struct {
    __m256 lo, hi;
} vf;
typedef unsigned vm;
#define VM_ALL 0xFFFFu
#define VEC_QK_QUERIES 4
#define VEC_PV_CV 1

#define VF_MAP1(f, a) ((vf){f((a).lo), f((a).hi)})
#define VF_MAP2(f, a, b) ((vf){f((a).lo, (b).lo), f((a).hi, (b).hi)})
static inline vf vf_zero(void) { return (vf){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline vf vf_set1(float x) { return (vf){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
static inline vf vf_load(const float *p) { return (vf){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline void vf_store(float *p, vf v)
{
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
}
static inline vf vf_add(vf a, vf b) { return VF_MAP2(_mm256_add_ps, a, b); }
static inline vf vf_sub(vf a, vf b) { return VF_MAP2(_mm256_sub_ps, a, b); }
static inline vf vf_mul(vf a, vf b) { return VF_MAP2(_mm256_mul_ps, a, b); }
static inline vf vf_div(vf a, vf b) { return VF_MAP2(_mm256_div_ps, a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c)
{
    return (vf){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
static inline __m256 neg8(__m256 a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
static inline vf vf_neg(vf a) { return VF_MAP1(neg8, a); }
static inline vf vf_lt_sel(vf a, vf b) { return VF_MAP2(_mm256_min_ps, a, b); } /* a < b ? a : b */
/* lanes 8h.. of a mask as an all-ones / zero vector per lane */
static inline __m256 vm8(vm in, int h)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i m = _mm256_set1_epi32((int)((in >> (8 * h)) & 0xFF));
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(m, bit), bit));
}
static inline vf vf_load_h(const uint16_t *p, vm in)
{
    (void)in; /* the tile's other lanes are read and ignored */
    return (vf){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)))};
}
static inline vf vf_load_i8(const int8_t *p)
{
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p);
    return (vf){_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)))};
}
static inline vf vf_load_nib(const uint8_t *p, int hi)
{
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p);
    b = _mm_and_si128(hi ? _mm_srli_epi16(b, 4) : b, _mm_set1_epi8(15));
    return (vf){_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)))};
}
static inline vf vf_load_in(const float *p, vm in)
{
    if (in == VM_ALL)
        return vf_load(p);
    return (vf){_mm256_maskload_ps(p, _mm256_castps_si256(vm8(in, 0))),
                _mm256_maskload_ps(p + 8, _mm256_castps_si256(vm8(in, 1)))};
}
static inline void vf_store_in(float *p, vm in, vf v)
{
    if (in == VM_ALL) {
        vf_store(p, v);
        return;
    }
    _mm256_maskstore_ps(p, _mm256_castps_si256(vm8(in, 0)), v.lo);
    _mm256_maskstore_ps(p + 8, _mm256_castps_si256(vm8(in, 1)), v.hi);
}
static inline vf vf_keep(vm in, vf v) { return (vf){_mm256_and_ps(vm8(in, 0), v.lo), _mm256_and_ps(vm8(in, 1), v.hi)}; }
static inline vf vf_max_in(vf mx, vm in, vf x)
{
    return (vf){_mm256_blendv_ps(mx.lo, _mm256_max_ps(x.lo, mx.lo), vm8(in, 0)),
                _mm256_blendv_ps(mx.hi, _mm256_max_ps(x.hi, mx.hi), vm8(in, 1))};
}
static inline float vf_reduce_max(vf v)
{
    __m256 m = _mm256_max_ps(v.lo, v.hi);
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline __m256 round_h8(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
static inline vf vf_round_h(vf v) { return VF_MAP1(round_h8, v); }
static inline vm vm_lanes(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 15 ? 15 : hi;
    return hi < lo ? 0 : (0xFFFFu >> (15 - hi + lo)) << lo;
}
/* sp_exp1 (exp.h) on 8 lanes, step for step */
static inline __m256 exp8(__m256 x)
{
    __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(SP_EXP_MIN), _CMP_GE_OQ);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(SP_EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-SP_EXP_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-SP_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(sp_exp_c[7]);
    for (int k = 6; k >= 0; k--)
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(sp_exp_c[k]));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(ok, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}
static inline vf vf_exp(vf x) { return VF_MAP1(exp8, x); }

#include "kernels/vec.inc"
#include "kernels/scan_vec.inc"

/* ops.c's contract: part[i % 8] over i ascending; lanes 0-3 and 4-7 of two
 * ymm of doubles. */
static void avx2_sumsq8(const float *x, int64_t n, double part[8])
{
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        a0 = _mm256_fmadd_pd(v0, v0, a0);
        a1 = _mm256_fmadd_pd(v1, v1, a1);
    }
    _mm256_storeu_pd(part, a0);
    _mm256_storeu_pd(part + 4, a1);
    for (; i < n; i++)
        part[i % 8] += (double)x[i] * x[i];
}

/* ops.c's sp_geglu contract: the f16 table looked up 8 at a time with
 * 32-bit gathers at the entries, low halves kept. */
static void avx2_geglu(const float *g, const float *u, float *y, int64_t n)
{
    sp_gelu_table_warm();
    int64_t i = 0;
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    const __m256i low16 = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9,
                                           12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i), uv = u ? _mm256_loadu_ps(u + i) : _mm256_set1_ps(1.0f);
        __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        __m256i e = _mm256_shuffle_epi8(_mm256_i32gather_epi32((const int *)sp_gelu_table, h, 2), low16);
        __m256 t = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(e, 0x08)));
        __m256 y8 = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), _mm256_mul_ps(t, uv));
        _mm256_storeu_ps(y + i, _mm256_blendv_ps(y8, _mm256_mul_ps(x, uv), _mm256_cmp_ps(x, hi, _CMP_GE_OQ)));
    }
    if (i < n)
        sp_kernels_scalar.geglu(g + i, u ? u + i : NULL, y + i, n - i);
}

const struct sp_kernels_isa sp_kernels_avx2 = {
    .isa = SP_ISA_AVX2,
    .sumsq8 = avx2_sumsq8,
    .swiglu = vec_swiglu,
    .geglu = avx2_geglu,
    .rope = vec_rope,
    .attn_group = vec_attn_group,
    .attn_block = vec_attn_block,
    .conv_causal = vec_conv_causal,
    .dot16 = vec_dot16,
    .ssd_state = vec_ssd_state,
    .ssd_out = vec_ssd_out,
};
#endif
