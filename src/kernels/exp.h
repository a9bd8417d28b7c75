/* The one e^x of the kernels (softmax in attention.c, SiLU in ops.c). */
#ifndef SP_KERNELS_EXP_H
#define SP_KERNELS_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
#include <immintrin.h>
#endif

/* e^x for x <= 88 (softmax arguments are <= 0; SiLU clamps), the same
 * value in the scalar and the 16-lane form: n = round(x log2 e), r = x -
 * n ln 2 (in two parts), a degree-7 Taylor polynomial in r (|r| <= 0.35:
 * truncation < 5e-9 relative, so ~1 ulp overall), times 2^n built in the
 * exponent bits.  x < -87 (and NaN) give 0: the largest term of a softmax
 * is e^0 = 1, so such a probability rounds to 0 in f16 anyway.  Every step
 * is one IEEE operation written out (fmaf / fmadd, no a * b + c left for
 * the compiler to contract), so both forms round identically (batch
 * invariance: a value goes through one form or the other). */
#define SP_EXP_LOG2E 1.44269504f
#define SP_EXP_LN2_HI 0.693359375f
#define SP_EXP_LN2_LO -2.12194440e-4f
#define SP_EXP_MIN -87.0f
static const float sp_exp_c[8] = {1.0f, 1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};

static inline float sp_exp1(float x)
{
    if (!(x >= SP_EXP_MIN))
        return 0.0f;
    float n = nearbyintf(x * SP_EXP_LOG2E);
    float r = fmaf(n, -SP_EXP_LN2_HI, x);
    r = fmaf(n, -SP_EXP_LN2_LO, r);
    float p = sp_exp_c[7];
    for (int k = 6; k >= 0; k--)
        p = fmaf(p, r, sp_exp_c[k]);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

#if defined(__AVX512F__) && !defined(SP_ATTN_SCALAR)
#define SP_EXP16 1
static inline __m512 sp_exp16(__m512 x)
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
#endif

#endif
