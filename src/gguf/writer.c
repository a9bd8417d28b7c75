/* GGUF writer (see writer.h).  Key/values are kept encoded (type + value
 * bytes, as they go into the file); tensor offsets are assigned as tensors
 * are added. */
#include "gguf/writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/error.h"
#include "quant/quant.h"

#define SP_GGUF_VERSION 3

struct sp_gguf_wkv {
    char *key;
    uint8_t *val; /* u32 type, then the value */
    size_t val_len;
};

struct sp_gguf_wtensor {
    char *name;
    uint32_t n_dims, type;
    int64_t ne[SP_GGUF_MAX_DIMS];
    uint64_t offset, nbytes;
};

struct sp_gguf_writer {
    uint32_t alignment;
    struct sp_gguf_wkv *kv;
    size_t n_kv, cap_kv;
    struct sp_gguf_wtensor *t;
    size_t n_t, cap_t;
    uint64_t data_size;
    FILE *f;
    char *path, *tmp_path;
    size_t cur;          /* tensor being written */
    uint64_t cur_done;   /* its bytes written so far */
    int finished;
};

/* ---- a growable byte buffer for encoding values ---- */

struct sp_buf {
    uint8_t *p;
    size_t n, cap;
    int failed;
};

static void sp_buf_put(struct sp_buf *b, const void *src, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void sp_buf_u32(struct sp_buf *b, uint32_t v) { sp_buf_put(b, &v, 4); }
static void sp_buf_u64(struct sp_buf *b, uint64_t v) { sp_buf_put(b, &v, 8); }
static void sp_buf_str(struct sp_buf *b, const void *s, uint64_t len)
{
    sp_buf_u64(b, len);
    sp_buf_put(b, s, len);
}

static uint64_t sp_gguf_scalar_size(uint32_t t)
{
    static const uint8_t size[SP_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < SP_GGUF_VTYPE_COUNT ? size[t] : 0;
}

sp_status sp_gguf_writer_init(struct sp_gguf_writer **out, uint32_t alignment)
{
    *out = NULL;
    if (alignment == 0)
        alignment = 32;
    if (alignment & (alignment - 1))
        return sp_error_set(SP_ERR_ARG, "alignment %u is not a power of two", alignment);
    struct sp_gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return sp_error_set(SP_ERR_NOMEM, "no memory for a GGUF writer");
    w->alignment = alignment;
    *out = w;
    return SP_OK;
}

void sp_gguf_writer_free(struct sp_gguf_writer *w)
{
    if (!w)
        return;
    if (w->f)
        fclose(w->f);
    if (w->tmp_path && !w->finished)
        unlink(w->tmp_path);
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

/* Stores an encoded value under key (takes b's bytes). */
static sp_status sp_gguf_writer_put(struct sp_gguf_writer *w, const char *key, size_t key_len, struct sp_buf *b)
{
    if (b->failed) {
        free(b->p);
        return sp_error_set(SP_ERR_NOMEM, "no memory for the value of a key");
    }
    if (w->f) {
        free(b->p);
        return sp_error_set(SP_ERR_INTERNAL, "GGUF writer: key added after the header was written");
    }
    for (size_t i = 0; i < w->n_kv; i++)
        if (strlen(w->kv[i].key) == key_len && !memcmp(w->kv[i].key, key, key_len)) {
            /* an existing key moves to the end, as ggml's gguf writer does it */
            free(w->kv[i].key);
            free(w->kv[i].val);
            memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *w->kv);
            w->n_kv--;
            break;
        }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        struct sp_gguf_wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            free(b->p);
            return sp_error_set(SP_ERR_NOMEM, "no memory for key/values");
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = malloc(key_len + 1);
    if (!k) {
        free(b->p);
        return sp_error_set(SP_ERR_NOMEM, "no memory for a key");
    }
    memcpy(k, key, key_len);
    k[key_len] = '\0';
    w->kv[w->n_kv++] = (struct sp_gguf_wkv){k, b->p, b->n};
    return SP_OK;
}

sp_status sp_gguf_writer_copy_kv(struct sp_gguf_writer *w, const struct sp_gguf_kv *kv)
{
    struct sp_buf b = {0};
    sp_buf_u32(&b, kv->type);
    if (kv->type == SP_GGUF_STRING) {
        sp_buf_str(&b, kv->str.ptr, kv->str.len);
    } else if (kv->type == SP_GGUF_ARRAY) {
        sp_buf_u32(&b, kv->arr_type);
        sp_buf_u64(&b, kv->arr_n);
        if (kv->arr_type == SP_GGUF_STRING)
            for (uint64_t i = 0; i < kv->arr_n; i++)
                sp_buf_str(&b, kv->arr_strs[i].ptr, kv->arr_strs[i].len);
        else
            sp_buf_put(&b, kv->arr_data, kv->arr_n * sp_gguf_scalar_size(kv->arr_type));
    } else {
        sp_buf_put(&b, kv->value, sp_gguf_scalar_size(kv->type));
    }
    if (sp_gguf_str_eq(kv->key, "general.alignment")) {
        uint32_t a;
        if (kv->type != SP_GGUF_UINT32 || (memcpy(&a, kv->value, 4), a != w->alignment)) {
            free(b.p);
            return sp_error_set(SP_ERR_ARG, "general.alignment does not match the writer's %u", w->alignment);
        }
    }
    return sp_gguf_writer_put(w, kv->key.ptr, kv->key.len, &b);
}

sp_status sp_gguf_writer_set_u32(struct sp_gguf_writer *w, const char *key, uint32_t v)
{
    struct sp_buf b = {0};
    sp_buf_u32(&b, SP_GGUF_UINT32);
    sp_buf_u32(&b, v);
    return sp_gguf_writer_put(w, key, strlen(key), &b);
}

sp_status sp_gguf_writer_set_str(struct sp_gguf_writer *w, const char *key, const char *s)
{
    struct sp_buf b = {0};
    sp_buf_u32(&b, SP_GGUF_STRING);
    sp_buf_str(&b, s, strlen(s));
    return sp_gguf_writer_put(w, key, strlen(key), &b);
}

sp_status sp_gguf_writer_set_strs(struct sp_gguf_writer *w, const char *key, const char *const *s, uint64_t n)
{
    struct sp_buf b = {0};
    sp_buf_u32(&b, SP_GGUF_ARRAY);
    sp_buf_u32(&b, SP_GGUF_STRING);
    sp_buf_u64(&b, n);
    for (uint64_t i = 0; i < n; i++)
        sp_buf_str(&b, s[i], strlen(s[i]));
    return sp_gguf_writer_put(w, key, strlen(key), &b);
}

sp_status sp_gguf_writer_add_tensor(struct sp_gguf_writer *w, const char *name, uint32_t n_dims,
                                    const int64_t *ne, uint32_t type)
{
    size_t row, len = strlen(name);
    uint64_t rows = 1, nbytes, offset, end;
    if (w->f)
        return sp_error_set(SP_ERR_INTERNAL, "GGUF writer: tensor added after the header was written");
    if (len == 0 || len >= 64)
        return sp_error_set(SP_ERR_ARG, "tensor name '%s': length %zu, expected 1..63", name, len);
    if (n_dims == 0 || n_dims > SP_GGUF_MAX_DIMS)
        return sp_error_set(SP_ERR_ARG, "tensor '%s': rank %u, expected 1..%d", name, n_dims, SP_GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return sp_error_set(SP_ERR_ARG, "tensor '%s': dimension %u is %lld", name, d, (long long)ne[d]);
        if (d > 0 && !sp_mul_u64(rows, (uint64_t)ne[d], &rows))
            return sp_error_set(SP_ERR_ARG, "tensor '%s': element count overflows", name);
    }
    if (!sp_type_row_size(type, ne[0], &row))
        return sp_error_set(SP_ERR_ARG, "tensor '%s': rows of %lld cannot be stored as type %u", name,
                            (long long)ne[0], type);
    offset = (w->data_size + w->alignment - 1) & ~(uint64_t)(w->alignment - 1);
    if (offset < w->data_size || !sp_mul_u64(rows, row, &nbytes) || !sp_add_u64(offset, nbytes, &end))
        return sp_error_set(SP_ERR_ARG, "tensor '%s': data size overflows", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        struct sp_gguf_wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            return sp_error_set(SP_ERR_NOMEM, "no memory for tensor infos");
        w->t = t;
        w->cap_t = cap;
    }
    struct sp_gguf_wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return sp_error_set(SP_ERR_NOMEM, "no memory for a tensor name");
    t->n_dims = n_dims;
    t->type = type;
    for (uint32_t d = 0; d < SP_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->offset = offset;
    t->nbytes = nbytes;
    w->n_t++;
    w->data_size = end;
    return SP_OK;
}

uint64_t sp_gguf_writer_data_size(const struct sp_gguf_writer *w) { return w->data_size; }

static sp_status sp_gguf_writer_io(struct sp_gguf_writer *w, const char *what)
{
    return sp_error_set(SP_ERR_IO, "%s: %s: %s", w->path, what, strerror(errno ? errno : EIO));
}

static sp_status sp_gguf_writer_zeros(struct sp_gguf_writer *w, size_t n)
{
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        if (fwrite(zeros, 1, k, w->f) != k)
            return sp_gguf_writer_io(w, "write failed");
        n -= k;
    }
    return SP_OK;
}

sp_status sp_gguf_writer_open(struct sp_gguf_writer *w, const char *path)
{
    struct sp_buf b = {0};
    sp_status st = SP_OK;
    if (w->f || w->path)
        return sp_error_set(SP_ERR_INTERNAL, "GGUF writer opened twice");
    size_t n = strlen(path);
    w->path = strdup(path);
    w->tmp_path = malloc(n + 16);
    if (!w->path || !w->tmp_path)
        return sp_error_set(SP_ERR_NOMEM, "no memory for a path");
    snprintf(w->tmp_path, n + 16, "%s.part-XXXXXX", path);
    int fd = mkstemp(w->tmp_path);
    if (fd < 0) {
        st = sp_error_set(SP_ERR_IO, "cannot create '%s': %s", w->tmp_path, strerror(errno));
        free(w->tmp_path);
        w->tmp_path = NULL; /* nothing to remove */
        return st;
    }
    (void)fchmod(fd, 0644);
    if (!(w->f = fdopen(fd, "wb"))) {
        close(fd);
        return sp_gguf_writer_io(w, "cannot open the temporary file");
    }
    sp_buf_put(&b, "GGUF", 4);
    sp_buf_u32(&b, SP_GGUF_VERSION);
    sp_buf_u64(&b, w->n_t);
    sp_buf_u64(&b, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        sp_buf_str(&b, w->kv[i].key, strlen(w->kv[i].key));
        sp_buf_put(&b, w->kv[i].val, w->kv[i].val_len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct sp_gguf_wtensor *t = &w->t[i];
        sp_buf_str(&b, t->name, strlen(t->name));
        sp_buf_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            sp_buf_u64(&b, (uint64_t)t->ne[d]);
        sp_buf_u32(&b, t->type);
        sp_buf_u64(&b, t->offset);
    }
    if (b.failed)
        st = sp_error_set(SP_ERR_NOMEM, "no memory for the GGUF header");
    else if (fwrite(b.p, 1, b.n, w->f) != b.n)
        st = sp_gguf_writer_io(w, "write failed");
    else
        st = sp_gguf_writer_zeros(w, (w->alignment - b.n % w->alignment) % w->alignment);
    free(b.p);
    return st;
}

sp_status sp_gguf_writer_write(struct sp_gguf_writer *w, const void *data, size_t n)
{
    if (!w->f)
        return sp_error_set(SP_ERR_INTERNAL, "GGUF writer: data before open");
    while (n) {
        if (w->cur >= w->n_t)
            return sp_error_set(SP_ERR_INTERNAL, "GGUF writer: more data than the tensors hold");
        const struct sp_gguf_wtensor *t = &w->t[w->cur];
        uint64_t left = t->nbytes - w->cur_done;
        size_t k = n < left ? n : (size_t)left;
        if (fwrite(data, 1, k, w->f) != k)
            return sp_gguf_writer_io(w, "write failed");
        data = (const uint8_t *)data + k;
        n -= k;
        w->cur_done += k;
        if (w->cur_done == t->nbytes) {
            /* the last tensor is padded too, as llama.cpp's writer does */
            uint64_t end = t->offset + t->nbytes;
            uint64_t next = w->cur + 1 < w->n_t ? w->t[w->cur + 1].offset
                                                : (end + w->alignment - 1) & ~(uint64_t)(w->alignment - 1);
            if (next < end)
                return sp_error_set(SP_ERR_ARG, "GGUF writer: data size overflows");
            sp_status st = sp_gguf_writer_zeros(w, (size_t)(next - end));
            if (st != SP_OK)
                return st;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return SP_OK;
}

sp_status sp_gguf_writer_finish(struct sp_gguf_writer *w)
{
    if (!w->f)
        return sp_error_set(SP_ERR_INTERNAL, "GGUF writer: finish before open");
    if (w->cur != w->n_t)
        return sp_error_set(SP_ERR_INTERNAL, "GGUF writer: tensor '%s' got %llu of %llu bytes", w->t[w->cur].name,
                            (unsigned long long)w->cur_done, (unsigned long long)w->t[w->cur].nbytes);
    errno = 0;
    int bad = fflush(w->f) != 0 || fsync(fileno(w->f)) != 0;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (bad)
        return sp_gguf_writer_io(w, "write failed");
    if (rename(w->tmp_path, w->path) != 0)
        return sp_error_set(SP_ERR_IO, "cannot rename '%s' to '%s': %s", w->tmp_path, w->path, strerror(errno));
    w->finished = 1;
    return SP_OK;
}
