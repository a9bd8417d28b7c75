/* sp_model_quantize: plan, then convert tensor by tensor in slabs of rows
 * (bounded memory whatever the tensor size), each slab's rows split over
 * the thread pool, each slab written as soon as it is done. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mmap.h"
#include "core/pool.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/quant_rows.h"
#include "quantize/imatrix.h"
#include "quantize/quantize.h"

#define SP_QUANTIZE_QNT_VERSION 2           /* general.quantization_version */
#define SP_QUANTIZE_SLAB (1u << 22)         /* elements converted per slab */

/* What one slab's workers share. */
struct sp_slab {
    const struct sp_gguf_tensor *t;
    uint32_t type;
    const uint8_t *src;       /* the slab's first input row */
    size_t src_row, dst_row;  /* row bytes in and out */
    int64_t row0, n_rows;     /* global index of the first row; rows in the slab */
    float *f32;               /* n_rows x ne[0] scratch */
    uint8_t *dst;
    const float *imatrix;     /* ne[0] x ne[2] weights, or NULL */
    sp_status *status;        /* per chunk */
    int64_t *bad_row;         /* per chunk: first row with a non-finite value, or -1 */
};

static void sp_slab_work(void *arg, int ith, int nth)
{
    struct sp_slab *s = arg;
    const struct sp_type_traits *in = sp_type_get_ref(s->t->type);
    int64_t ne0 = s->t->ne[0], rows_per_mat = s->t->ne[1];
    long lo, hi;
    sp_pool_split((long)s->n_rows, 1, ith, nth, &lo, &hi);
    s->status[ith] = SP_OK;
    s->bad_row[ith] = -1;
    for (long r = lo; r < hi; r++) {
        float *x = s->f32 + r * ne0;
        in->to_float(s->src + (size_t)r * s->src_row, x, ne0);
        for (int64_t j = 0; j < ne0; j++)
            if (!isfinite(x[j])) {
                s->bad_row[ith] = s->row0 + r;
                return;
            }
        int64_t g = s->row0 + r;
        const float *im = s->imatrix ? s->imatrix + (g / rows_per_mat) * ne0 : NULL;
        s->status[ith] = sp_quant_rows(s->type, x, s->dst + (size_t)r * s->dst_row, 1, ne0, im);
        if (s->status[ith] != SP_OK)
            return;
    }
}

struct sp_qrun {
    const char *in_path, *out_path;
    const sp_quantize_params *p;
    const struct sp_quantize_ftype *ftype;
    struct sp_imatrix *imatrix;   /* NULL: none */
    sp_quantize_stats *stats;
    struct sp_mapping map;
    struct sp_gguf g;
    struct sp_gguf_parts parts; /* a split input's other parts */
    bool have_g;
    uint64_t *order;
    uint32_t *types;
    struct sp_gguf_writer *w;
    struct sp_pool *pool;
    float *f32;
    uint8_t *dst;
    sp_status *status;   /* per pool chunk */
    int64_t *bad_row;    /* per pool chunk */
};

static void sp_tensor_name(const struct sp_gguf_tensor *t, char name[64])
{
    snprintf(name, 64, "%.*s", (int)t->name.len, t->name.ptr);
}

/* Refuses conversions llama.cpp refuses; adds every tensor to the writer. */
static sp_status sp_qrun_layout(struct sp_qrun *q)
{
    const struct sp_gguf *g = &q->g;
    char name[64];
    sp_status st;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct sp_gguf_kv *kv = &g->kv[i];
        if (sp_gguf_str_eq(kv->key, "split.no") || sp_gguf_str_eq(kv->key, "split.count") ||
            sp_gguf_str_eq(kv->key, "split.tensors.count"))
            continue;
        if ((st = sp_gguf_writer_copy_kv(q->w, kv)) != SP_OK)
            return st;
    }
    if ((st = sp_gguf_writer_set_u32(q->w, "general.quantization_version", SP_QUANTIZE_QNT_VERSION)) != SP_OK ||
        (st = sp_gguf_writer_set_u32(q->w, "general.file_type", q->ftype->id)) != SP_OK)
        return st;
    const struct sp_imatrix *im = q->imatrix;
    if (im && ((st = sp_gguf_writer_set_str(q->w, "quantize.imatrix.file", sp_imatrix_path(im))) != SP_OK ||
               (st = sp_gguf_writer_set_str(q->w, "quantize.imatrix.dataset", sp_imatrix_dataset(im))) != SP_OK ||
               (st = sp_gguf_writer_set_u32(q->w, "quantize.imatrix.entries_count", sp_imatrix_count(im))) != SP_OK ||
               (st = sp_gguf_writer_set_u32(q->w, "quantize.imatrix.chunks_count", sp_imatrix_chunks(im))) != SP_OK))
        return st;
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        const struct sp_gguf_tensor *t = &g->tensors[q->order[k]];
        uint32_t type = q->types[q->order[k]];
        sp_tensor_name(t, name);
        if (type != t->type && sp_type_get(t->type)->block_size > 1 && !q->p->allow_requantize)
            return sp_error_set(SP_ERR_ARG, "tensor '%s' is %s: requantizing is disabled (--allow-requantize enables it)",
                                name, sp_type_get(t->type)->name);
        if ((st = sp_gguf_writer_add_tensor(q->w, name, t->n_dims, t->ne, type)) != SP_OK)
            return st;
    }
    return SP_OK;
}

static sp_status sp_qrun_convert(struct sp_qrun *q, const struct sp_gguf_tensor *t, uint32_t type)
{
    char name[64];
    sp_tensor_name(t, name);
    struct sp_slab s = {.t = t, .type = type, .f32 = q->f32, .dst = q->dst, .status = q->status,
                        .bad_row = q->bad_row};
    int64_t n_rows, ne0 = t->ne[0];
    uint64_t im_n = (uint64_t)ne0 * (uint64_t)t->ne[2];
    if (!sp_type_row_size(t->type, ne0, &s.src_row) || !sp_type_row_size(type, ne0, &s.dst_row))
        return sp_error_set(SP_ERR_INTERNAL, "tensor '%s': row size", name);
    n_rows = (int64_t)(t->nbytes / s.src_row);
    uint64_t have = 0;
    s.imatrix = q->imatrix ? sp_imatrix_find(q->imatrix, name, &have) : NULL;
    if (s.imatrix && have != im_n) {
        /* as llama.cpp: a wrong size is an error, except for the embeddings */
        if (strcmp(name, "token_embd.weight") && strcmp(name, "per_layer_token_embd.weight"))
            return sp_error_set(SP_ERR_ARG, "tensor '%s': the imatrix has %llu weights, the tensor %llu columns", name,
                                (unsigned long long)have, (unsigned long long)im_n);
        s.imatrix = NULL;
    }
    if (s.imatrix)
        q->stats->n_imatrix++;
    int64_t slab = ne0 >= SP_QUANTIZE_SLAB ? 1 : SP_QUANTIZE_SLAB / ne0;
    for (int64_t r0 = 0; r0 < n_rows; r0 += slab) {
        s.row0 = r0;
        s.n_rows = n_rows - r0 < slab ? n_rows - r0 : slab;
        s.src = (const uint8_t *)t->data + (size_t)r0 * s.src_row;
        sp_pool_run(q->pool, sp_slab_work, &s);
        for (int c = 0; c < sp_pool_chunks_for(sp_pool_size(q->pool)); c++) {
            if (q->bad_row[c] >= 0)
                return sp_error_set(SP_ERR_FORMAT, "tensor '%s': row %lld holds a value that is not finite", name,
                                    (long long)q->bad_row[c]);
            if (q->status[c] != SP_OK)
                return sp_error_wrap(q->status[c], "tensor '%s'", name);
        }
        sp_status st = sp_gguf_writer_write(q->w, q->dst, (size_t)s.n_rows * s.dst_row);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

static sp_status sp_qrun_alloc(struct sp_qrun *q)
{
    size_t f32_bytes = 0, dst_bytes = 0;
    for (uint64_t i = 0; i < q->g.n_tensors; i++) {
        const struct sp_gguf_tensor *t = &q->g.tensors[i];
        size_t row;
        if (q->types[i] == t->type || !sp_type_row_size(q->types[i], t->ne[0], &row))
            continue;
        uint64_t rows = SP_QUANTIZE_SLAB / (uint64_t)t->ne[0];
        rows = rows ? rows : 1;
        if (rows * (uint64_t)t->ne[0] * 4 > f32_bytes)
            f32_bytes = rows * (uint64_t)t->ne[0] * 4;
        if (rows * row > dst_bytes)
            dst_bytes = rows * row;
    }
    q->f32 = malloc(f32_bytes ? f32_bytes : 1);
    q->dst = malloc(dst_bytes ? dst_bytes : 1);
    if (!q->f32 || !q->dst)
        return sp_error_set(SP_ERR_NOMEM, "no memory for conversion buffers (%zu bytes)", f32_bytes + dst_bytes);
    return SP_OK;
}

static sp_status sp_qrun_all(struct sp_qrun *q)
{
    const sp_quantize_params *p = q->p;
    sp_status st;
    uint64_t done = 0, total = 0;
    if ((st = sp_model_open_gguf(&q->map, &q->g, &q->parts, q->in_path, 0)) != SP_OK)
        return st;
    q->have_g = true;
    q->types = calloc(q->g.n_tensors ? q->g.n_tensors : 1, sizeof *q->types);
    if (!q->types)
        return sp_error_set(SP_ERR_NOMEM, "no memory for the tensor plan");
    if ((st = sp_quantize_order(&q->g, &q->order)) != SP_OK ||
        (st = sp_quantize_plan(&q->g, q->ftype, q->imatrix != NULL, q->order, q->types, &q->stats->n_fallback)) != SP_OK)
        return sp_error_wrap(st, "%s", q->in_path);
    if ((st = sp_gguf_writer_init(&q->w, (uint32_t)q->g.alignment)) != SP_OK || (st = sp_qrun_layout(q)) != SP_OK ||
        (st = sp_qrun_alloc(q)) != SP_OK)
        return st;
    if ((st = sp_pool_init(&q->pool, p->n_threads > 0 ? p->n_threads : 0)) != SP_OK)
        return st;
    size_t chunks = (size_t)sp_pool_chunks_for(sp_pool_size(q->pool));
    q->status = calloc(chunks, sizeof *q->status);
    q->bad_row = calloc(chunks, sizeof *q->bad_row);
    if (!q->status || !q->bad_row)
        return sp_error_set(SP_ERR_NOMEM, "no memory");
    if ((st = sp_gguf_writer_open(q->w, q->out_path)) != SP_OK)
        return st;
    for (uint64_t i = 0; i < q->g.n_tensors; i++)
        total += q->g.tensors[i].nbytes;
    for (uint64_t k = 0; k < q->g.n_tensors; k++) {
        const struct sp_gguf_tensor *t = &q->g.tensors[q->order[k]];
        uint32_t type = q->types[q->order[k]];
        uint64_t n_el = t->nbytes / sp_type_get(t->type)->type_size * sp_type_get(t->type)->block_size;
        if (type == t->type)
            st = sp_gguf_writer_write(q->w, t->data, t->nbytes);
        else
            st = sp_qrun_convert(q, t, type);
        if (st != SP_OK)
            return st;
        size_t row;
        sp_type_row_size(type, t->ne[0], &row);
        q->stats->n_tensors++;
        q->stats->n_converted += type != t->type;
        q->stats->n_elements += n_el;
        q->stats->bytes_in += t->nbytes;
        q->stats->bytes_out += row * (n_el / (uint64_t)t->ne[0]);
        done += t->nbytes;
        if (p->progress)
            p->progress(p->progress_user, "quantizing", done, total);
    }
    return sp_gguf_writer_finish(q->w);
}

void sp_quantize_params_default(sp_quantize_params *p) { memset(p, 0, sizeof *p); }

const char *sp_quantize_type_name(size_t i, const char **about)
{
    const struct sp_quantize_ftype *ft = i < INT32_MAX ? sp_quantize_ftype_at((int)i) : NULL;
    if (about)
        *about = ft ? ft->about : NULL;
    return ft ? ft->name : NULL;
}

sp_status sp_model_quantize(const char *in_path, const char *out_path, const sp_quantize_params *p,
                            sp_quantize_stats *stats)
{
    sp_quantize_stats unused;
    struct sp_qrun q = {.in_path = in_path, .out_path = out_path, .p = p, .stats = stats ? stats : &unused};
    sp_status st = SP_OK;
    memset(q.stats, 0, sizeof *q.stats);
    if (!in_path || !out_path || !p || !p->type)
        return sp_error_set(SP_ERR_ARG, "sp_model_quantize: an input path, an output path and a type are required");
    if (!(q.ftype = sp_quantize_ftype_find(p->type))) {
        char known[256] = "";
        for (int i = 0; sp_quantize_ftype_at(i); i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     sp_quantize_ftype_at(i)->name);
        return sp_error_set(SP_ERR_ARG, "unknown type '%s' (known: %s)", p->type, known);
    }
    if (p->imatrix && (st = sp_imatrix_load(&q.imatrix, p->imatrix)) != SP_OK)
        return sp_error_wrap(st, "imatrix");
    st = sp_qrun_all(&q);
    sp_gguf_writer_free(q.w); /* removes the temporary file unless finished */
    sp_pool_free(q.pool);
    sp_imatrix_free(q.imatrix);
    free(q.f32);
    free(q.dst);
    free(q.order);
    free(q.types);
    free(q.status);
    free(q.bad_row);
    if (q.have_g) {
        sp_gguf_free(&q.g);
        sp_mapping_free(&q.map);
        sp_gguf_parts_free(&q.parts);
    }
    return st;
}
