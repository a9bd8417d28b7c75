/* GGUF: parse and validate a model file held in memory (usually a mapping).
 *
 * The parser never trusts a size: every count, length, rank, dimension, type,
 * offset and the alignment is checked against the buffer with overflow-safe
 * arithmetic before anything is allocated or read.  Strings, arrays and tensor
 * data are borrowed views into the buffer, valid while the buffer is.
 *
 * Errors: SP_ERR_FORMAT (malformed), SP_ERR_UNSUPPORTED (valid but unknown
 * tensor type), SP_ERR_NOMEM; the message names the key or tensor, what was
 * expected and what was found.
 */
#ifndef SP_GGUF_H
#define SP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

enum sp_gguf_vtype {
    SP_GGUF_UINT8 = 0,
    SP_GGUF_INT8 = 1,
    SP_GGUF_UINT16 = 2,
    SP_GGUF_INT16 = 3,
    SP_GGUF_UINT32 = 4,
    SP_GGUF_INT32 = 5,
    SP_GGUF_FLOAT32 = 6,
    SP_GGUF_BOOL = 7,
    SP_GGUF_STRING = 8,
    SP_GGUF_ARRAY = 9,
    SP_GGUF_UINT64 = 10,
    SP_GGUF_INT64 = 11,
    SP_GGUF_FLOAT64 = 12,
    SP_GGUF_VTYPE_COUNT
};

/* A length-delimited string view into the buffer (not NUL-terminated). */
struct sp_gguf_str {
    const char *ptr;
    uint64_t len;
};

struct sp_gguf_kv {
    struct sp_gguf_str key;
    enum sp_gguf_vtype type;
    /* Scalars (type != STRING/ARRAY): raw little-endian bytes of the value. */
    const uint8_t *value;
    struct sp_gguf_str str;       /* type == STRING */
    enum sp_gguf_vtype arr_type;  /* type == ARRAY: element type (never ARRAY) */
    uint64_t arr_n;               /* type == ARRAY: element count */
    const uint8_t *arr_data;      /* fixed-size elements: packed in the buffer */
    struct sp_gguf_str *arr_strs; /* string elements: owned index of views */
};

#define SP_GGUF_MAX_DIMS 4

struct sp_gguf_tensor {
    struct sp_gguf_str name;
    uint32_t n_dims;
    int64_t ne[SP_GGUF_MAX_DIMS]; /* ne[0] = row length (contiguous); unused = 1 */
    uint32_t type;                /* ggml type id, known to src/quant */
    uint64_t offset;              /* relative to the data section */
    uint64_t nbytes;
    const void *data;             /* view into the buffer */
    uint32_t part;                /* the buffer: 0 for g's own, i for the i-th sp_gguf_append */
};

struct sp_gguf {
    const uint8_t *base;
    size_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset; /* start of the tensor data section */
    uint64_t n_kv;
    struct sp_gguf_kv *kv;
    uint64_t n_tensors;
    struct sp_gguf_tensor *tensors;
    void *priv_; /* name index (gguf.c) */
};

/* Parses `buf` (`size` bytes; borrowed).  On failure *g is left freed. */
sp_status sp_gguf_init(struct sp_gguf *g, const void *buf, size_t size);
void sp_gguf_free(struct sp_gguf *g);

/* Appends the tensors of `more` (another file of the same model: a
 * gguf-split part, parsed; borrowed, it must outlive g) to g's table with
 * part `part`: g->tensors, n_tensors and sp_gguf_tensor_find then cover
 * both, each tensor's data a view into its own buffer.  SP_ERR_FORMAT
 * naming the tensor when a name is already in g (g is then unchanged). */
sp_status sp_gguf_append(struct sp_gguf *g, const struct sp_gguf *more, uint32_t part);

/* Lookup by exact key / tensor name (NULL when absent). */
const struct sp_gguf_kv *sp_gguf_find(const struct sp_gguf *g, const char *key);
const struct sp_gguf_tensor *sp_gguf_tensor_find(const struct sp_gguf *g, const char *name);

/* True when the view equals the NUL-terminated `s`. */
bool sp_gguf_str_eq(struct sp_gguf_str a, const char *s);

/* Typed getters.  `key` absent: returns SP_OK leaving *out untouched when
 * `required` is false, else SP_ERR_FORMAT "missing key".  A present key of the
 * wrong type is SP_ERR_FORMAT naming expected and found types.  Integer getters
 * accept any integer type whose value fits. */
sp_status sp_gguf_get_u32(const struct sp_gguf *g, const char *key, bool required, uint32_t *out);
/* A per-layer integer: a scalar key (every layer's), or an array of exactly
 * n integers (element i). */
sp_status sp_gguf_get_u32_at(const struct sp_gguf *g, const char *key, uint64_t i, uint64_t n, bool required,
                             uint32_t *out);
sp_status sp_gguf_get_f32(const struct sp_gguf *g, const char *key, bool required, float *out);
sp_status sp_gguf_get_bool(const struct sp_gguf *g, const char *key, bool required, bool *out);
/* *out is a view into the buffer; left untouched when absent and optional. */
sp_status sp_gguf_get_str(const struct sp_gguf *g, const char *key, bool required, struct sp_gguf_str *out);
/* An array key whose elements have type `elem`; *kv_out NULL when absent and
 * optional. */
sp_status sp_gguf_get_arr(const struct sp_gguf *g, const char *key, bool required,
                          enum sp_gguf_vtype elem, const struct sp_gguf_kv **kv_out);

const char *sp_gguf_vtype_name(enum sp_gguf_vtype t);

/* Little-endian element readers for fixed-size array data (no alignment assumed). */
static inline float sp_gguf_arr_f32(const struct sp_gguf_kv *kv, uint64_t i)
{
    float f;
    __builtin_memcpy(&f, kv->arr_data + i * 4, 4);
    return f;
}
static inline int32_t sp_gguf_arr_i32(const struct sp_gguf_kv *kv, uint64_t i)
{
    int32_t v;
    __builtin_memcpy(&v, kv->arr_data + i * 4, 4);
    return v;
}

#endif
