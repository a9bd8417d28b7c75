/* The one e^x of the kernels (softmax, SiLU): the scalar form; each vector
 * row (vec_*.c) has vf_exp, the same steps on its lanes. */
#ifndef SP_KERNELS_EXP_H
#define SP_KERNELS_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* e^x for x <= 88 (softmax arguments are <= 0; SiLU clamps), the same
 * value in the scalar and the vector forms: n = round(x log2 e), r = x -
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

#endif
