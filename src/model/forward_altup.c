#include "model/forward_altup.h"

#include <math.h>

#include "kernels/kernels.h"

/* normal_dist.icdf(0.95): the cutoff in standard deviations above the mean */
#define SP_ALTUP_STD_MUL 1.6448533535003662f

void sp_altup_router_in(const struct sp_model *m, const struct sp_layer *L, const float *x, float *y)
{
    const int E = (int)m->hp.n_embd;
    const float r = 1.0f / (float)E;
    sp_rmsnorm(x, L->alt_rnorm.data, y, E, m->hp.eps);
    for (int i = 0; i < E; i++)
        y[i] *= r;
}

void sp_altup_predict(const struct sp_model *m, const struct sp_layer *L, float *mod, const float *alt, float *pred)
{
    const int A = (int)m->hp.n_altup, E = (int)m->hp.n_embd;
    float row[SP_ALTUP_MAX], c[SP_ALTUP_MAX * SP_ALTUP_MAX];
    for (int k = 0; k < A; k++)
        mod[k] = tanhf(mod[k]);
    for (int r = 0; r < A * A; r++) { /* row j * A + k of the coefficients: stream k's weight in prediction j */
        sp_tensor_row(&L->alt_pred, r, row);
        float acc = 0.0f;
        for (int k = 0; k < A; k++)
            acc += row[k] * mod[k];
        c[r] = acc;
    }
    for (int j = 0; j < A; j++) {
        float *p = pred + (size_t)j * E;
        const float *cj = c + (size_t)j * A;
        for (int i = 0; i < E; i++) {
            float acc = 0.0f;
            for (int k = 0; k < A; k++)
                acc += alt[(size_t)k * E + i] * cj[k];
            p[i] = acc + alt[(size_t)j * E + i];
        }
    }
}

void sp_altup_correct(const struct sp_model *m, const struct sp_layer *L, float *mod, const float *x,
                      const float *pred, float *alt)
{
    const int A = (int)m->hp.n_altup, E = (int)m->hp.n_embd;
    const float *act = pred + (size_t)m->hp.altup_act * E;
    float row[SP_ALTUP_MAX], c[SP_ALTUP_MAX];
    for (int k = 0; k < A; k++)
        mod[k] = tanhf(mod[k]);
    for (int j = 0; j < A; j++) {
        sp_tensor_row(&L->alt_corr, j, row);
        float acc = 0.0f;
        for (int k = 0; k < A; k++)
            acc += row[k] * mod[k];
        c[j] = acc + 1.0f;
    }
    for (int j = 0; j < A; j++) {
        float *o = alt + (size_t)j * E;
        const float *p = pred + (size_t)j * E;
        for (int i = 0; i < E; i++)
            o[i] = (x[i] - act[i]) * c[j] + p[i];
    }
}

void sp_altup_rescale(float *y, const float *target, int n)
{
    double ty = 0.0, yy = 0.0;
    for (int i = 0; i < n; i++) {
        ty += (double)target[i] * target[i];
        yy += (double)y[i] * y[i];
    }
    const float t = sqrtf((float)ty), u = sqrtf((float)yy);
    for (int i = 0; i < n; i++)
        y[i] = y[i] * t / u;
}

void sp_altup_topk(float *g, int n)
{
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < n; i++)
        sum += g[i];
    const float mean = (float)(sum / n);
    for (int i = 0; i < n; i++) {
        const float d = g[i] - mean;
        sq += (double)d * d;
    }
    const float sd = sqrtf((float)sq * (1.0f / (float)(n - 1)));
    const float cut = mean + sd * SP_ALTUP_STD_MUL;
    for (int i = 0; i < n; i++) {
        const float v = g[i] - cut;
        g[i] = v > 0.0f ? v : 0.0f;
    }
}
