/* Quantized matrix × activation-rows products over the thread pool. */
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

/* Rows per thread chunk: a multiple of the tile height. */
#define SP_MM_ROW_ALIGN 16
#define SP_MM_TILE_R 4
#define SP_MM_TILE_C 4

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
    const struct sp_tensor *w;
    const struct sp_type_traits *tt;
    const uint8_t *q;
    size_t q_stride;
    int n_tok;
    float *out;
    size_t out_stride;
};

static void sp_mm_job_run(void *arg, int ith, int nth)
{
    const struct sp_mm_job *j = arg;
    const struct sp_tensor *w = j->w;
    const uint8_t *wd = w->data;
    long lo, hi;
    sp_pool_split(w->ne1, SP_MM_ROW_ALIGN, ith, nth, &lo, &hi);
    if (j->tt->gemm) {
        for (long r = lo; r < hi; r += SP_MM_TILE_R) {
            int nr = hi - r < SP_MM_TILE_R ? (int)(hi - r) : SP_MM_TILE_R;
            for (int c = 0; c < j->n_tok; c += SP_MM_TILE_C) {
                int nc = j->n_tok - c < SP_MM_TILE_C ? j->n_tok - c : SP_MM_TILE_C;
                j->tt->gemm(w->ne0, j->out + (size_t)c * j->out_stride + r, j->out_stride,
                            wd + (size_t)r * w->row_bytes, w->row_bytes, nr,
                            j->q + (size_t)c * j->q_stride, j->q_stride, nc);
            }
        }
        return;
    }
    for (int c = 0; c < j->n_tok; c++)
        for (long r = lo; r < hi; r++)
            j->tt->vec_dot(w->ne0, j->out + (size_t)c * j->out_stride + r, wd + (size_t)r * w->row_bytes,
                           j->q + (size_t)c * j->q_stride);
}

void sp_matmul(struct sp_pool *pool, const struct sp_tensor *w, const void *q, int n_tok, float *out,
               size_t out_stride)
{
    struct sp_mm_job j = {w, sp_type_get(w->type), q, sp_act_row_bytes(w), n_tok, out, out_stride};
    sp_pool_run(pool, sp_mm_job_run, &j);
}

void sp_tensor_row(const struct sp_tensor *w, int64_t row, float *y)
{
    sp_type_get(w->type)->to_float((const uint8_t *)w->data + (size_t)row * w->row_bytes, y, w->ne0);
}
