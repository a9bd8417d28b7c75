/* Quantized matrix × activation-rows products over the thread pool. */
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

/* Rows per thread chunk: a multiple of the tile height. */
#define SP_MM_ROW_ALIGN 16
/* Columns (tokens) per chunk of a long batch: the kernels' column chunk
 * (P16_COL_CHUNK), a multiple of their tile width. */
#define SP_MM_COLS 64
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

void sp_act_quantize_row(const struct sp_tensor *w, const float *x, void *q)
{
    sp_type_get(sp_type_get(w->type)->vec_dot_type)->from_float(x, q, w->ne0);
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
    int col_parts; /* chunks per thread, each a run of columns */
};

/* Rows [lo, hi) of w against nc activation rows q (q_stride apart):
 * out[c * os + r]. */
static void sp_mm_block(const struct sp_tensor *w, const struct sp_type_traits *tt, long lo, long hi,
                        const uint8_t *q, size_t q_stride, int nc, float *out, size_t os)
{
    const uint8_t *wd = w->data;
    if (tt->gemm) {
        /* the chunk's rows against its tokens: the kernel picks the order */
        tt->gemm(w->ne0, out + lo, os, wd + (size_t)lo * w->row_bytes, w->row_bytes, (int)(hi - lo), q, q_stride,
                 nc);
        return;
    }
    for (int c = 0; c < nc; c++)
        for (long r = lo; r < hi; r++)
            tt->vec_dot(w->ne0, out + (size_t)c * os + r, wd + (size_t)r * w->row_bytes, q + (size_t)c * q_stride);
}

/* Rows [lo, hi) of one matrix against tokens [c0, c1). */
static void sp_mm_rows(const struct sp_mm_job *j, int m, long lo, long hi, int c0, int c1)
{
    size_t os = j->out_stride[m];
    sp_mm_block(j->w[m], j->tt[m], lo, hi, j->q + (size_t)c0 * j->q_stride, j->q_stride, c1 - c0,
                j->out[m] + (size_t)c0 * os, os);
}

/* Chunk ith of nth = threads x col_parts: thread part ith / col_parts of
 * every matrix's rows (the same fraction of each) against column part
 * ith % col_parts.  A thread's own chunks are its rows against the
 * columns in order, the order its kernels took them in one call, so its
 * rows' weights stay in its L2 and each column part is read once; a
 * thread that finishes first takes the other's later column parts.
 * Every output is computed the same way whichever chunk holds it. */
static void sp_mm_job_run(void *arg, int ith, int nth)
{
    const struct sp_mm_job *j = arg;
    const int parts = nth / j->col_parts;
    long c0, c1;
    sp_pool_split(j->n_tok, 8, ith % j->col_parts, j->col_parts, &c0, &c1);
    for (int m = 0; m < j->n_mat; m++) {
        long lo, hi;
        sp_pool_split(j->w[m]->ne1, SP_MM_ROW_ALIGN, ith / j->col_parts, parts, &lo, &hi);
        sp_mm_rows(j, m, lo, hi, (int)c0, (int)c1);
    }
}

void sp_matmul_multi(struct sp_pool *pool, int n_mat, const struct sp_tensor *const *w, const void *q, int n_tok,
                     float *const *out, const size_t *out_stride)
{
    /* a long batch (a prompt) in column parts of SP_MM_COLS tokens, so a
     * thread the machine slows down hands its later parts to the others
     * instead of holding up the run with a whole share */
    int parts = n_tok / SP_MM_COLS < SP_POOL_MAX_SPLIT ? n_tok / SP_MM_COLS : SP_POOL_MAX_SPLIT;
    struct sp_mm_job j = {.n_mat = n_mat, .q = q, .q_stride = sp_act_row_bytes(w[0]), .n_tok = n_tok,
                          .col_parts = parts > 1 ? parts : 1};
    for (int m = 0; m < n_mat; m++) {
        j.w[m] = w[m];
        j.tt[m] = sp_type_get(w[m]->type);
        j.out[m] = out[m];
        j.out_stride[m] = out_stride[m];
    }
    sp_pool_run_split(pool, sp_mm_job_run, &j, j.col_parts);
}

void sp_matmul(struct sp_pool *pool, const struct sp_tensor *w, const void *q, int n_tok, float *out,
               size_t out_stride)
{
    sp_matmul_multi(pool, 1, &w, q, n_tok, &out, &out_stride);
}

struct sp_mm_grouped_job {
    int n;
    const struct sp_mm_group *g;
};

/* Every thread takes the same fraction of every group's rows, against all
 * of the group's tokens. */
static void sp_mm_grouped_run(void *arg, int ith, int nth)
{
    const struct sp_mm_grouped_job *j = arg;
    for (int i = 0; i < j->n; i++) {
        const struct sp_mm_group *g = &j->g[i];
        long lo, hi;
        sp_pool_split(g->w->ne1, SP_MM_ROW_ALIGN, ith, nth, &lo, &hi);
        if (lo < hi && g->n_tok > 0)
            sp_mm_block(g->w, sp_type_get(g->w->type), lo, hi, g->q, sp_act_row_bytes(g->w), g->n_tok, g->out,
                        g->out_stride);
    }
}

void sp_matmul_grouped(struct sp_pool *pool, int n, const struct sp_mm_group *g)
{
    struct sp_mm_grouped_job j = {n, g};
    sp_pool_run(pool, sp_mm_grouped_run, &j);
}

void sp_tensor_row(const struct sp_tensor *w, int64_t row, float *y)
{
    sp_type_get(w->type)->to_float((const uint8_t *)w->data + (size_t)row * w->row_bytes, y, w->ne0);
}
