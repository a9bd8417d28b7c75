/* Quantized matrix × activation-rows products over the thread pool. */
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

/* Rows per thread chunk: a multiple of the tile height. */
#define SP_MM_ROW_ALIGN 16
#define SP_MM_MAX SP_MATMUL_MAX

size_t sp_act_row_bytes(const struct sp_tensor *w)
{
    const struct sp_type_traits *tt = sp_type_get(w->type);
    size_t n = 0;
    sp_type_row_size(tt->vec_dot_type, w->ne0, &n);
    return n;
}

struct sp_act_job {
    const struct sp_type_traits *at;
    const float *x;
    size_t x_stride;
    int n_tok;
    int64_t n;
    uint8_t *q;
    size_t q_stride;
};

static void sp_act_job_run(void *arg, int ith, int nth)
{
    struct sp_act_job *j = arg;
    long lo, hi;
    sp_pool_split(j->n_tok, 1, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++)
        j->at->from_float(j->x + t * j->x_stride, j->q + t * j->q_stride, j->n);
}

void sp_act_quantize(struct sp_pool *pool, const struct sp_tensor *w, const float *x, size_t x_stride,
                     int n_tok, void *q)
{
    const struct sp_type_traits *tt = sp_type_get(w->type);
    struct sp_act_job j = {sp_type_get(tt->vec_dot_type), x, x_stride, n_tok, w->ne0, q, sp_act_row_bytes(w)};
    if (n_tok == 1)
        sp_act_job_run(&j, 0, 1);
    else
        sp_pool_run(pool, sp_act_job_run, &j);
}

struct sp_mm_job {
    int n_mat;
    const struct sp_tensor *w[SP_MM_MAX];
    const struct sp_type_traits *tt[SP_MM_MAX];
    float *out[SP_MM_MAX];
    size_t out_stride[SP_MM_MAX];
    const uint8_t *q;
    size_t q_stride;
    int n_tok;
};

/* Rows [lo, hi) of one matrix against every token. */
static void sp_mm_rows(const struct sp_mm_job *j, int m, long lo, long hi)
{
    const struct sp_tensor *w = j->w[m];
    const struct sp_type_traits *tt = j->tt[m];
    const uint8_t *wd = w->data;
    float *out = j->out[m];
    size_t os = j->out_stride[m];
    if (tt->gemm) {
        /* the chunk's rows against every token: the kernel picks the order */
        tt->gemm(w->ne0, out + lo, os, wd + (size_t)lo * w->row_bytes, w->row_bytes, (int)(hi - lo), j->q,
                 j->q_stride, j->n_tok);
        return;
    }
    for (int c = 0; c < j->n_tok; c++)
        for (long r = lo; r < hi; r++)
            tt->vec_dot(w->ne0, out + (size_t)c * os + r, wd + (size_t)r * w->row_bytes,
                        j->q + (size_t)c * j->q_stride);
}

/* Chunk ith of nth covers the same fraction of every matrix's rows. */
static void sp_mm_job_run(void *arg, int ith, int nth)
{
    const struct sp_mm_job *j = arg;
    for (int m = 0; m < j->n_mat; m++) {
        long lo, hi;
        sp_pool_split(j->w[m]->ne1, SP_MM_ROW_ALIGN, ith, nth, &lo, &hi);
        sp_mm_rows(j, m, lo, hi);
    }
}

void sp_matmul_multi(struct sp_pool *pool, int n_mat, const struct sp_tensor *const *w, const void *q, int n_tok,
                     float *const *out, const size_t *out_stride)
{
    struct sp_mm_job j = {.n_mat = n_mat, .q = q, .q_stride = sp_act_row_bytes(w[0]), .n_tok = n_tok};
    for (int m = 0; m < n_mat; m++) {
        j.w[m] = w[m];
        j.tt[m] = sp_type_get(w[m]->type);
        j.out[m] = out[m];
        j.out_stride[m] = out_stride[m];
    }
    sp_pool_run(pool, sp_mm_job_run, &j);
}

void sp_matmul(struct sp_pool *pool, const struct sp_tensor *w, const void *q, int n_tok, float *out,
               size_t out_stride)
{
    sp_matmul_multi(pool, 1, &w, q, n_tok, &out, &out_stride);
}

void sp_tensor_row(const struct sp_tensor *w, int64_t row, float *y)
{
    sp_type_get(w->type)->to_float((const uint8_t *)w->data + (size_t)row * w->row_bytes, y, w->ne0);
}
