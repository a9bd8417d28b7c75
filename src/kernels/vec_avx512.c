/* The AVX-512 row of the kernel table: vec.inc on one zmm per 16 floats,
 * opmask registers for lane masks. */
#include "kernels/exp.h"
#include "kernels/kernels_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

typedef __m512 vf;
typedef __mmask16 vm;
#define VM_ALL ((vm)0xFFFF)
#define VEC_QK_QUERIES 16
#define VEC_PV_CV 4

static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_neg(vf a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))); }
static inline vf vf_lt_sel(vf a, vf b) { return _mm512_min_ps(a, b); } /* a < b ? a : b */
static inline vf vf_load_h(const uint16_t *p, vm in) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, p)); }
static inline vf vf_load_i8(const int8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
static inline vf vf_load_nib(const uint8_t *p, int hi)
{
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p);
    b = _mm_and_si128(hi ? _mm_srli_epi16(b, 4) : b, _mm_set1_epi8(15));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
}
static inline vf vf_load_in(const float *p, vm in) { return _mm512_maskz_loadu_ps(in, p); }
static inline void vf_store_in(float *p, vm in, vf v) { _mm512_mask_storeu_ps(p, in, v); }
static inline vf vf_keep(vm in, vf v) { return _mm512_maskz_mov_ps(in, v); }
static inline vf vf_max_in(vf mx, vm in, vf x) { return _mm512_mask_max_ps(mx, in, x, mx); }
static inline float vf_reduce_max(vf v) { return _mm512_reduce_max_ps(v); }
static inline vf vf_round_h(vf v)
{
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline vm vm_lanes(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 15 ? 15 : hi;
    return hi < lo ? 0 : (vm)((0xFFFFu >> (15 - hi + lo)) << lo);
}
/* sp_exp1 (exp.h) on 16 lanes, step for step */
static inline vf vf_exp(vf x)
{
    __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(SP_EXP_MIN), _CMP_GE_OQ);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(SP_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-SP_EXP_LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-SP_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(sp_exp_c[7]);
    for (int k = 6; k >= 0; k--)
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(sp_exp_c[k]));
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(bits));
}

#include "kernels/vec.inc"
#include "kernels/scan_vec.inc"

/* ops.c's contract: the sum of squares in eight partial sums (element i
 * into part[i % 8], ascending), here the eight lanes of a zmm of doubles. */
static void avx512_sumsq8(const float *x, int64_t n, double part[8])
{
    __m512d acc = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        acc = _mm512_fmadd_pd(v, v, acc);
    }
    _mm512_storeu_pd(part, acc);
    for (; i < n; i++)
        part[i % 8] += (double)x[i] * x[i];
}

/* ops.c's sp_geglu contract: the f16 table looked up 16 at a time with
 * 32-bit gathers at the entries, low halves kept. */
static void avx512_geglu(const float *g, const float *u, float *y, int64_t n)
{
    sp_gelu_table_warm();
    int64_t i = 0;
    const __m512 lo = _mm512_set1_ps(-10.0f), hi = _mm512_set1_ps(10.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(g + i), uv = u ? _mm512_loadu_ps(u + i) : _mm512_set1_ps(1.0f);
        __m512i h = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m512 t = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(h, sp_gelu_table, 2)));
        __m512 y16 = _mm512_maskz_mul_ps(~_mm512_cmp_ps_mask(x, lo, _CMP_LE_OQ), t, uv);
        _mm512_storeu_ps(y + i, _mm512_mask_mul_ps(y16, _mm512_cmp_ps_mask(x, hi, _CMP_GE_OQ), x, uv));
    }
    if (i < n)
        sp_kernels_scalar.geglu(g + i, u ? u + i : NULL, y + i, n - i);
}

const struct sp_kernels_isa sp_kernels_avx512 = {
    .isa = SP_ISA_AVX512,
    .sumsq8 = avx512_sumsq8,
    .swiglu = vec_swiglu,
    .geglu = avx512_geglu,
    .rope = vec_rope,
    .attn_group = vec_attn_group,
    .attn_block = vec_attn_block,
    .conv_causal = vec_conv_causal,
    .dot16 = vec_dot16,
    .ssd_state = vec_ssd_state,
    .ssd_out = vec_ssd_out,
};
#endif
