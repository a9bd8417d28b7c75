/* Reading imatrix GGUF files (see imatrix.h). */
#include "quantize/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mmap.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

struct sp_imatrix_entry {
    char *name;
    uint64_t n;
    float *w;
};

struct sp_imatrix {
    struct sp_imatrix_entry *e;
    uint32_t n;
    uint32_t chunks;
    char *dataset, *path;
};

void sp_imatrix_free(struct sp_imatrix *im)
{
    if (!im)
        return;
    for (uint32_t i = 0; i < im->n; i++) {
        free(im->e[i].name);
        free(im->e[i].w);
    }
    free(im->e);
    free(im->dataset);
    free(im->path);
    free(im);
}

static bool sp_str_suffix(struct sp_gguf_str s, const char *suffix, uint64_t *stem)
{
    size_t n = strlen(suffix);
    if (s.len <= n || memcmp(s.ptr + s.len - n, suffix, n))
        return false;
    *stem = s.len - n;
    return true;
}

/* Turns one in_sum2 tensor and its counts into weights. */
static sp_status sp_imatrix_entry(struct sp_imatrix_entry *e, const struct sp_gguf *g,
                                  const struct sp_gguf_tensor *sums, uint64_t stem)
{
    char cname[80];
    snprintf(cname, sizeof cname, "%.*s.counts", (int)stem, sums->name.ptr);
    const struct sp_gguf_tensor *counts = sp_gguf_tensor_find(g, cname);
    if (!counts)
        return sp_error_set(SP_ERR_FORMAT, "tensor '%.*s.in_sum2' has no '%s'", (int)stem, sums->name.ptr, cname);
    int64_t ne0 = sums->ne[0], n_mat = sums->ne[1];
    if (sums->type != SP_TYPE_F32 || counts->type != SP_TYPE_F32 || sums->ne[2] != 1 || sums->ne[3] != 1 ||
        counts->ne[0] != 1 || counts->ne[1] != n_mat || counts->ne[2] != 1 || counts->ne[3] != 1)
        return sp_error_set(SP_ERR_FORMAT, "'%s': expected F32 [%lld, %lld] sums and [1, %lld] counts", cname,
                            (long long)ne0, (long long)n_mat, (long long)n_mat);
    e->n = (uint64_t)ne0 * (uint64_t)n_mat; /* the parser bounded this by the file size */
    if (!(e->w = malloc(e->n * sizeof *e->w)) || !(e->name = malloc(stem + 1)))
        return sp_error_set(SP_ERR_NOMEM, "no memory for imatrix '%s'", cname);
    memcpy(e->name, sums->name.ptr, stem);
    e->name[stem] = '\0';
    for (int64_t j = 0; j < n_mat; j++) {
        float c, s;
        memcpy(&c, (const uint8_t *)counts->data + 4 * j, 4);
        if (!isfinite(c) || c < 0)
            return sp_error_set(SP_ERR_FORMAT, "'%s': count %lld is %g", cname, (long long)j, c);
        for (int64_t i = 0; i < ne0; i++) {
            memcpy(&s, (const uint8_t *)sums->data + 4 * (j * ne0 + i), 4);
            if (!isfinite(s) || s < 0)
                return sp_error_set(SP_ERR_FORMAT, "'%s.in_sum2': value %lld is %g", e->name,
                                    (long long)(j * ne0 + i), s);
            e->w[j * ne0 + i] = c > 0.0f ? s / c : 1; /* a matrix no token reached: even weights */
        }
    }
    return SP_OK;
}

static sp_status sp_imatrix_read(struct sp_imatrix *im, const struct sp_gguf *g)
{
    struct sp_gguf_str type = {0};
    const struct sp_gguf_kv *ds = NULL;
    uint64_t stem;
    sp_status st;
    if ((st = sp_gguf_get_str(g, "general.type", true, &type)) != SP_OK)
        return st;
    if (!sp_gguf_str_eq(type, "imatrix"))
        return sp_error_set(SP_ERR_FORMAT, "general.type is '%.*s', expected 'imatrix'", (int)(type.len < 40 ? type.len : 40),
                            type.ptr);
    if ((st = sp_gguf_get_u32(g, "imatrix.chunk_count", true, &im->chunks)) != SP_OK ||
        (st = sp_gguf_get_arr(g, "imatrix.datasets", false, SP_GGUF_STRING, &ds)) != SP_OK)
        return st;
    if (ds && ds->arr_n) {
        if (!(im->dataset = malloc(ds->arr_strs[0].len + 1)))
            return sp_error_set(SP_ERR_NOMEM, "no memory");
        memcpy(im->dataset, ds->arr_strs[0].ptr, ds->arr_strs[0].len);
        im->dataset[ds->arr_strs[0].len] = '\0';
    }
    if (!(im->e = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *im->e)))
        return sp_error_set(SP_ERR_NOMEM, "no memory for %llu imatrix entries", (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (sp_str_suffix(g->tensors[i].name, ".in_sum2", &stem) &&
            (st = sp_imatrix_entry(&im->e[im->n++], g, &g->tensors[i], stem)) != SP_OK)
            return st;
    if (im->n == 0)
        return sp_error_set(SP_ERR_FORMAT, "no .in_sum2 tensors");
    return SP_OK;
}

sp_status sp_imatrix_load(struct sp_imatrix **out, const char *path)
{
    struct sp_mapping map;
    struct sp_gguf g;
    *out = NULL;
    sp_status st = sp_model_open_gguf(&map, &g, NULL, path, 0);
    if (st != SP_OK)
        return st;
    struct sp_imatrix *im = calloc(1, sizeof *im);
    st = im ? sp_imatrix_read(im, &g) : sp_error_set(SP_ERR_NOMEM, "no memory");
    if (st == SP_OK && !(im->path = strdup(path)))
        st = sp_error_set(SP_ERR_NOMEM, "no memory");
    sp_gguf_free(&g);
    sp_mapping_free(&map);
    if (st != SP_OK) {
        sp_imatrix_free(im);
        return sp_error_wrap(st, "%s", path);
    }
    *out = im;
    return SP_OK;
}

const float *sp_imatrix_find(const struct sp_imatrix *im, const char *name, uint64_t *n)
{
    for (uint32_t i = 0; i < im->n; i++)
        if (!strcmp(im->e[i].name, name)) {
            *n = im->e[i].n;
            return im->e[i].w;
        }
    return NULL;
}

uint32_t sp_imatrix_count(const struct sp_imatrix *im) { return im->n; }
uint32_t sp_imatrix_chunks(const struct sp_imatrix *im) { return im->chunks; }
const char *sp_imatrix_dataset(const struct sp_imatrix *im) { return im->dataset ? im->dataset : ""; }
const char *sp_imatrix_path(const struct sp_imatrix *im) { return im->path; }
