/* The scalar row of the linear layers' kernels (scan.h's contracts) and
 * their entry points, which call the active row (kernels_isa.h). */
#include "kernels/scan.h"

#include <math.h>

#include "kernels/exp.h"
#include "kernels/kernels_isa.h"

void sp_conv_causal_scalar(float *y, const float *const *rows, const float *w, const float *bias, int ch, int k,
                           bool silu)
{
    for (int c = 0; c < ch; c++) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++)
            if (rows[j])
                acc = fmaf(rows[j][c], w[(size_t)j * ch + c], acc);
        if (bias)
            acc += bias[c];
        if (silu) {
            float n = -acc;
            acc = acc / (1.0f + sp_exp1(n < 88.0f ? n : 88.0f));
        }
        y[c] = acc;
    }
}

float sp_dot16_scalar(const float *a, const float *b, int n)
{
    float part[16] = {0};
    for (int i = 0; i < n; i++)
        part[i % 16] = fmaf(a[i], b[i], part[i % 16]);
    return sp_attn_tree16(part);
}

void sp_ssd_state_scalar(float *h, const float *h0, float decay, int n, const float *u, const float *const *B,
                         const float *const *x, int ds, int hd)
{
    for (int d = 0; d < ds; d++) {
        float *hd_row = h + (size_t)d * hd;
        for (int i = 0; i < hd; i++)
            hd_row[i] = h0 ? decay * h0[(size_t)d * hd + i] : 0.0f;
        for (int s = 0; s < n; s++) {
            const float c = u[s] * B[s][d];
            for (int i = 0; i < hd; i++)
                hd_row[i] = fmaf(c, x[s][i], hd_row[i]);
        }
    }
}

void sp_ssd_out_scalar(float *y, const float *h0, const float *c, float decay, int n, const float *w,
                       const float *const *x, int ds, int hd)
{
    for (int i = 0; i < hd; i++) {
        float acc = 0.0f;
        for (int d = 0; h0 && d < ds; d++)
            acc = fmaf(c[d], h0[(size_t)d * hd + i], acc);
        y[i] = h0 ? decay * acc : 0.0f;
    }
    for (int s = 0; s < n; s++)
        for (int i = 0; i < hd; i++)
            y[i] = fmaf(w[s], x[s][i], y[i]);
}

/* A row without these kernels uses the scalar row's. */
static const struct sp_kernels_isa *sp_scan_row(void)
{
    const struct sp_kernels_isa *k = sp_kernels_active();
    return k->ssd_state ? k : &sp_kernels_scalar;
}

void sp_conv_causal(float *y, const float *const *rows, const float *w, const float *bias, int ch, int k, bool silu)
{
    sp_scan_row()->conv_causal(y, rows, w, bias, ch, k, silu);
}

float sp_dot16(const float *a, const float *b, int n) { return sp_scan_row()->dot16(a, b, n); }

void sp_ssd_state(float *h, const float *h0, float decay, int n, const float *u, const float *const *B,
                  const float *const *x, int ds, int hd)
{
    sp_scan_row()->ssd_state(h, h0, decay, n, u, B, x, ds, hd);
}

void sp_ssd_out(float *y, const float *h0, const float *c, float decay, int n, const float *w,
                const float *const *x, int ds, int hd)
{
    sp_scan_row()->ssd_out(y, h0, c, decay, n, w, x, ds, hd);
}
