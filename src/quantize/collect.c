/* Collecting importance matrices (see imatrix.h): per layer matrix, the
 * sum over tokens of each input column's squared value, in double, written
 * as llama.cpp's imatrix GGUF. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gguf/writer.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quantize/imatrix.h"

struct sp_imatrix_mat {
    const struct sp_tensor *w;
    char name[64];
    double *sum;    /* [w->ne0] */
    double count;   /* rows seen */
};

struct sp_imatrix_acc {
    struct sp_imatrix_mat *mat;
    uint32_t n;
};

/* The layer matrices and their GGUF names (the same for every
 * architecture in the table). */
static const struct {
    size_t off;
    const char *name;
} sp_imatrix_layer_mats[] = {
    {offsetof(struct sp_layer, wq), "attn_q"},     {offsetof(struct sp_layer, wk), "attn_k"},
    {offsetof(struct sp_layer, wv), "attn_v"},     {offsetof(struct sp_layer, wo), "attn_output"},
    {offsetof(struct sp_layer, w_gate), "ffn_gate"}, {offsetof(struct sp_layer, w_up), "ffn_up"},
    {offsetof(struct sp_layer, w_down), "ffn_down"},
};
#define SP_IMATRIX_PER_LAYER (sizeof sp_imatrix_layer_mats / sizeof sp_imatrix_layer_mats[0])

void sp_imatrix_acc_free(struct sp_imatrix_acc *a)
{
    if (!a)
        return;
    for (uint32_t i = 0; i < a->n; i++)
        free(a->mat[i].sum);
    free(a->mat);
    free(a);
}

sp_status sp_imatrix_acc_init(struct sp_imatrix_acc **out, const struct sp_model *m)
{
    struct sp_imatrix_acc *a = calloc(1, sizeof *a);
    size_t n = (size_t)m->hp.n_layer * SP_IMATRIX_PER_LAYER;
    *out = NULL;
    if (!a || !(a->mat = calloc(n, sizeof *a->mat))) {
        free(a);
        return sp_error_set(SP_ERR_NOMEM, "no memory for the imatrix");
    }
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        for (size_t k = 0; k < SP_IMATRIX_PER_LAYER; k++) {
            struct sp_imatrix_mat *x = &a->mat[a->n++];
            x->w = (const struct sp_tensor *)((const char *)&m->layers[l] + sp_imatrix_layer_mats[k].off);
            snprintf(x->name, sizeof x->name, "blk.%u.%s.weight", l, sp_imatrix_layer_mats[k].name);
            if (!(x->sum = calloc((size_t)x->w->ne0, sizeof *x->sum))) {
                sp_imatrix_acc_free(a);
                return sp_error_set(SP_ERR_NOMEM, "no memory for the imatrix");
            }
        }
    *out = a;
    return SP_OK;
}

void sp_imatrix_acc_observe(void *acc, const struct sp_tensor *w, const float *x, size_t x_stride, int n)
{
    struct sp_imatrix_acc *a = acc;
    for (uint32_t i = 0; i < a->n; i++) {
        struct sp_imatrix_mat *m = &a->mat[i];
        if (m->w != w)
            continue;
        for (int r = 0; r < n; r++) {
            const float *row = x + (size_t)r * x_stride;
            for (int64_t j = 0; j < w->ne0; j++)
                m->sum[j] += (double)row[j] * row[j];
        }
        m->count += n;
        return;
    }
}

sp_status sp_imatrix_acc_write(const struct sp_imatrix_acc *a, const char *path, const char *dataset,
                               uint32_t n_chunks, uint32_t chunk_size)
{
    struct sp_gguf_writer *w = NULL;
    float *row = NULL;
    size_t max_cols = 1;
    char name[80];
    sp_status st = sp_gguf_writer_init(&w, 32);
    if (st != SP_OK)
        return st;
    const char *ds[1] = {dataset};
    if ((st = sp_gguf_writer_set_str(w, "general.type", "imatrix")) != SP_OK ||
        (st = sp_gguf_writer_set_strs(w, "imatrix.datasets", ds, 1)) != SP_OK ||
        (st = sp_gguf_writer_set_u32(w, "imatrix.chunk_count", n_chunks)) != SP_OK ||
        (st = sp_gguf_writer_set_u32(w, "imatrix.chunk_size", chunk_size)) != SP_OK)
        goto done;
    for (uint32_t i = 0; i < a->n; i++) {
        const struct sp_imatrix_mat *m = &a->mat[i];
        int64_t sums_ne[2] = {m->w->ne0, 1}, count_ne[2] = {1, 1};
        max_cols = (size_t)m->w->ne0 > max_cols ? (size_t)m->w->ne0 : max_cols;
        snprintf(name, sizeof name, "%s.in_sum2", m->name);
        if ((st = sp_gguf_writer_add_tensor(w, name, 2, sums_ne, SP_TYPE_F32)) != SP_OK)
            goto done;
        snprintf(name, sizeof name, "%s.counts", m->name);
        if ((st = sp_gguf_writer_add_tensor(w, name, 2, count_ne, SP_TYPE_F32)) != SP_OK)
            goto done;
    }
    if (!(row = malloc(max_cols * sizeof *row))) {
        st = sp_error_set(SP_ERR_NOMEM, "no memory");
        goto done;
    }
    if ((st = sp_gguf_writer_open(w, path)) != SP_OK)
        goto done;
    for (uint32_t i = 0; i < a->n; i++) {
        const struct sp_imatrix_mat *m = &a->mat[i];
        float count = (float)m->count;
        for (int64_t j = 0; j < m->w->ne0; j++)
            row[j] = (float)m->sum[j];
        if ((st = sp_gguf_writer_write(w, row, (size_t)m->w->ne0 * sizeof *row)) != SP_OK ||
            (st = sp_gguf_writer_write(w, &count, sizeof count)) != SP_OK)
            goto done;
    }
    st = sp_gguf_writer_finish(w);
done:
    free(row);
    sp_gguf_writer_free(w);
    return st;
}
