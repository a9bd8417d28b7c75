/* GGUF parser.  Layout (little-endian):
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv × { str key, u32 vtype, value }
 *   n_tensors × { str name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset }
 *   padding to `general.alignment` (default 32), then the tensor data.
 * A str is u64 length + bytes; an array is u32 element type + u64 count +
 * elements.  Version 1 (u32 counts) is refused.
 *
 * Every read goes through struct sp_gguf_reader, which refuses to move past
 * the end of the buffer; every count is bounded by the bytes left before any
 * allocation, so a hostile file can make us allocate at most a small multiple
 * of its own size. */
#include "gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "quant/quant.h"

#define SP_GGUF_MAGIC "GGUF"
#define SP_GGUF_DEFAULT_ALIGNMENT 32
#define SP_GGUF_MAX_NAME 64        /* tensor names, as ggml's GGML_MAX_NAME */
#define SP_GGUF_MAX_KEY 65536      /* keys: generous, but bounded */

struct sp_gguf_reader {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
};

static uint64_t sp_reader_left(const struct sp_gguf_reader *r) { return r->size - r->pos; }

static bool sp_reader_bytes(struct sp_gguf_reader *r, uint64_t n, const uint8_t **out)
{
    if (n > sp_reader_left(r))
        return false;
    *out = r->base + r->pos;
    r->pos += n;
    return true;
}

static bool sp_reader_u32(struct sp_gguf_reader *r, uint32_t *v)
{
    const uint8_t *p;
    if (!sp_reader_bytes(r, 4, &p))
        return false;
    memcpy(v, p, 4);
    return true;
}

static bool sp_reader_u64(struct sp_gguf_reader *r, uint64_t *v)
{
    const uint8_t *p;
    if (!sp_reader_bytes(r, 8, &p))
        return false;
    memcpy(v, p, 8);
    return true;
}

static bool sp_reader_str(struct sp_gguf_reader *r, struct sp_gguf_str *s)
{
    const uint8_t *p;
    uint64_t len;
    if (!sp_reader_u64(r, &len) || !sp_reader_bytes(r, len, &p))
        return false;
    s->ptr = (const char *)p;
    s->len = len;
    return true;
}

/* Size in bytes of a fixed-size value type; 0 for STRING/ARRAY/unknown. */
static uint64_t sp_gguf_vtype_size(uint32_t t)
{
    switch (t) {
    case SP_GGUF_UINT8: case SP_GGUF_INT8: case SP_GGUF_BOOL: return 1;
    case SP_GGUF_UINT16: case SP_GGUF_INT16: return 2;
    case SP_GGUF_UINT32: case SP_GGUF_INT32: case SP_GGUF_FLOAT32: return 4;
    case SP_GGUF_UINT64: case SP_GGUF_INT64: case SP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

const char *sp_gguf_vtype_name(enum sp_gguf_vtype t)
{
    static const char *const names[SP_GGUF_VTYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < SP_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

bool sp_gguf_str_eq(struct sp_gguf_str a, const char *s)
{
    size_t n = strlen(s);
    return a.len == n && memcmp(a.ptr, s, n) == 0;
}

/* Printable, bounded rendering of a key or name for messages. */
static const char *sp_gguf_show(struct sp_gguf_str s, char *buf, size_t cap)
{
    size_t n = s.len < cap - 4 ? (size_t)s.len : cap - 4;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (n < s.len)
        memcpy(buf + n, "...", 3), n += 3;
    buf[n] = '\0';
    return buf;
}

/* ---- name index: open addressing over FNV-1a, built once at parse time ---- */

static uint64_t sp_gguf_hash(const char *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

/* Slots hold index+1 (0 = empty).  Capacity is a power of two >= 2n. */
struct sp_gguf_index {
    uint64_t *slots;
    uint64_t mask;
};

static uint64_t sp_gguf_index_cap(uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    return cap;
}

static const void *sp_gguf_lookup(const uint64_t *slots, uint64_t mask, const void *items,
                                  size_t item_size, size_t name_off, const char *name)
{
    if (!slots)
        return NULL;
    size_t n = strlen(name);
    for (uint64_t h = sp_gguf_hash(name, n) & mask;; h = (h + 1) & mask) {
        if (!slots[h])
            return NULL;
        const uint8_t *item = (const uint8_t *)items + (slots[h] - 1) * item_size;
        struct sp_gguf_str s;
        memcpy(&s, item + name_off, sizeof s);
        if (s.len == n && memcmp(s.ptr, name, n) == 0)
            return item;
    }
}

/* Inserts item i; false if an equal name is present already. */
static bool sp_gguf_insert(uint64_t *slots, uint64_t mask, const void *items, size_t item_size,
                           size_t name_off, uint64_t i)
{
    struct sp_gguf_str s, t;
    memcpy(&s, (const uint8_t *)items + i * item_size + name_off, sizeof s);
    for (uint64_t h = sp_gguf_hash(s.ptr, s.len) & mask;; h = (h + 1) & mask) {
        if (!slots[h]) {
            slots[h] = i + 1;
            return true;
        }
        memcpy(&t, (const uint8_t *)items + (slots[h] - 1) * item_size + name_off, sizeof t);
        if (t.len == s.len && memcmp(t.ptr, s.ptr, s.len) == 0)
            return false;
    }
}

/* The index lives right after the kv and tensor arrays' bookkeeping in
 * struct sp_gguf; kept private by storing it in a side allocation. */
struct sp_gguf_private {
    uint64_t *kv_slots, kv_mask;
    uint64_t *t_slots, t_mask;
};

/* ---- key/value section ---- */

static sp_status sp_gguf_read_kv(struct sp_gguf_reader *r, struct sp_gguf_kv *kv, uint64_t idx)
{
    char show[80];
    uint32_t vtype;
    if (!sp_reader_str(r, &kv->key))
        return sp_error_set(SP_ERR_FORMAT, "key %llu: key length past the end of the file",
                            (unsigned long long)idx);
    if (kv->key.len == 0)
        return sp_error_set(SP_ERR_FORMAT, "key %llu: empty key", (unsigned long long)idx);
    if (kv->key.len > SP_GGUF_MAX_KEY)
        return sp_error_set(SP_ERR_FORMAT, "key %llu: key length %llu over the limit %d",
                            (unsigned long long)idx, (unsigned long long)kv->key.len, SP_GGUF_MAX_KEY);
    sp_gguf_show(kv->key, show, sizeof show);
    if (!sp_reader_u32(r, &vtype))
        return sp_error_set(SP_ERR_FORMAT, "key '%s': value type past the end of the file", show);
    if (vtype >= SP_GGUF_VTYPE_COUNT)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': unknown value type %u", show, vtype);
    kv->type = (enum sp_gguf_vtype)vtype;

    if (vtype == SP_GGUF_STRING) {
        if (!sp_reader_str(r, &kv->str))
            return sp_error_set(SP_ERR_FORMAT, "key '%s': string length past the end of the file", show);
        return SP_OK;
    }
    if (vtype != SP_GGUF_ARRAY) {
        uint64_t sz = sp_gguf_vtype_size(vtype);
        if (!sp_reader_bytes(r, sz, &kv->value))
            return sp_error_set(SP_ERR_FORMAT, "key '%s': %s value past the end of the file", show,
                                sp_gguf_vtype_name(kv->type));
        if (vtype == SP_GGUF_BOOL && kv->value[0] > 1)
            return sp_error_set(SP_ERR_FORMAT, "key '%s': bool value %u is not 0 or 1", show, kv->value[0]);
        return SP_OK;
    }

    uint32_t etype;
    if (!sp_reader_u32(r, &etype) || !sp_reader_u64(r, &kv->arr_n))
        return sp_error_set(SP_ERR_FORMAT, "key '%s': array header past the end of the file", show);
    if (etype == SP_GGUF_ARRAY)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': nested arrays are not supported", show);
    if (etype >= SP_GGUF_VTYPE_COUNT)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': unknown array element type %u", show, etype);
    kv->arr_type = (enum sp_gguf_vtype)etype;
    if (etype == SP_GGUF_STRING) {
        /* each element takes at least its 8-byte length */
        if (kv->arr_n > sp_reader_left(r) / 8)
            return sp_error_set(SP_ERR_FORMAT, "key '%s': array of %llu strings past the end of the file",
                                show, (unsigned long long)kv->arr_n);
        if (kv->arr_n) {
            kv->arr_strs = malloc(kv->arr_n * sizeof *kv->arr_strs);
            if (!kv->arr_strs)
                return sp_error_set(SP_ERR_NOMEM, "key '%s': no memory for %llu strings", show,
                                    (unsigned long long)kv->arr_n);
        }
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (!sp_reader_str(r, &kv->arr_strs[i]))
                return sp_error_set(SP_ERR_FORMAT, "key '%s': string %llu of %llu past the end of the file",
                                    show, (unsigned long long)i, (unsigned long long)kv->arr_n);
        return SP_OK;
    }
    uint64_t bytes;
    if (!sp_mul_u64(kv->arr_n, sp_gguf_vtype_size(etype), &bytes) || !sp_reader_bytes(r, bytes, &kv->arr_data))
        return sp_error_set(SP_ERR_FORMAT, "key '%s': array of %llu %s past the end of the file", show,
                            (unsigned long long)kv->arr_n, sp_gguf_vtype_name(kv->arr_type));
    if (etype == SP_GGUF_BOOL)
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (kv->arr_data[i] > 1)
                return sp_error_set(SP_ERR_FORMAT, "key '%s': bool element %llu is not 0 or 1", show,
                                    (unsigned long long)i);
    return SP_OK;
}

/* ---- tensor info section ---- */

static sp_status sp_gguf_read_tensor(struct sp_gguf_reader *r, struct sp_gguf_tensor *t, uint64_t idx)
{
    char show[80];
    if (!sp_reader_str(r, &t->name))
        return sp_error_set(SP_ERR_FORMAT, "tensor %llu: name length past the end of the file",
                            (unsigned long long)idx);
    sp_gguf_show(t->name, show, sizeof show);
    if (t->name.len == 0)
        return sp_error_set(SP_ERR_FORMAT, "tensor %llu: empty name", (unsigned long long)idx);
    if (t->name.len >= SP_GGUF_MAX_NAME)
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': name length %llu, expected under %d", show,
                            (unsigned long long)t->name.len, SP_GGUF_MAX_NAME);
    if (!sp_reader_u32(r, &t->n_dims))
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': rank past the end of the file", show);
    if (t->n_dims == 0 || t->n_dims > SP_GGUF_MAX_DIMS)
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': rank %u, expected 1..%d", show, t->n_dims,
                            SP_GGUF_MAX_DIMS);
    uint64_t n_elem = 1;
    for (int d = 0; d < SP_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (!sp_reader_u64(r, &ne))
            return sp_error_set(SP_ERR_FORMAT, "tensor '%s': dimension %u past the end of the file", show, d);
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return sp_error_set(SP_ERR_FORMAT, "tensor '%s': dimension %u is %llu, expected 1..2^63-1", show,
                                d, (unsigned long long)ne);
        if (!sp_mul_u64(n_elem, ne, &n_elem) || n_elem > (uint64_t)INT64_MAX)
            return sp_error_set(SP_ERR_FORMAT, "tensor '%s': element count overflows", show);
        t->ne[d] = (int64_t)ne;
    }
    if (!sp_reader_u32(r, &t->type) || !sp_reader_u64(r, &t->offset))
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': type/offset past the end of the file", show);
    const struct sp_type_traits *tt = sp_type_get(t->type);
    if (!tt || !tt->is_weight)
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': unknown or unsupported type id %u", show, t->type);
    size_t row;
    if (!sp_type_row_size(t->type, t->ne[0], &row))
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': row length %lld is not a multiple of the %s block size %u",
                            show, (long long)t->ne[0], tt->name, tt->block_size);
    uint64_t rows = n_elem / (uint64_t)t->ne[0];
    if (!sp_mul_u64(rows, row, &t->nbytes))
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': byte size overflows", show);
    return SP_OK;
}

static sp_status sp_gguf_check_alignment(struct sp_gguf *g)
{
    const struct sp_gguf_kv *kv = sp_gguf_find(g, "general.alignment");
    g->alignment = SP_GGUF_DEFAULT_ALIGNMENT;
    if (!kv)
        return SP_OK;
    if (kv->type != SP_GGUF_UINT32)
        return sp_error_set(SP_ERR_FORMAT, "key 'general.alignment': expected uint32, found %s",
                            sp_gguf_vtype_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->value, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return sp_error_set(SP_ERR_FORMAT, "key 'general.alignment': %u is not a power of two", a);
    g->alignment = a;
    return SP_OK;
}

/* Data placement: aligned offsets, in file order, without overlap, inside
 * the file. */
static sp_status sp_gguf_place_tensors(struct sp_gguf *g)
{
    char show[80];
    uint64_t data_size = g->size - g->data_offset, end_prev = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct sp_gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        sp_gguf_show(t->name, show, sizeof show);
        if (t->offset % g->alignment)
            return sp_error_set(SP_ERR_FORMAT, "tensor '%s': offset %llu is not a multiple of the alignment %llu",
                                show, (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (t->offset < end_prev)
            return sp_error_set(SP_ERR_FORMAT,
                                "tensor '%s': offset %llu is before the end of the previous tensor (%llu): "
                                "tensor data must be in order, without overlap",
                                show, (unsigned long long)t->offset, (unsigned long long)end_prev);
        if (!sp_add_u64(t->offset, t->nbytes, &end) || end > data_size)
            return sp_error_set(SP_ERR_FORMAT,
                                "tensor '%s': data [%llu, +%llu) lies past the end of the data section (%llu bytes)",
                                show, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                                (unsigned long long)data_size);
        t->data = g->base + g->data_offset + t->offset;
        end_prev = end;
    }
    return SP_OK;
}

sp_status sp_gguf_init(struct sp_gguf *g, const void *buf, size_t size)
{
    struct sp_gguf_reader r = {buf, size, 0};
    struct sp_gguf_private *priv = NULL;
    const uint8_t *magic;
    uint64_t n_tensors, n_kv, cap;
    sp_status st = SP_OK;
    char show[80];

    memset(g, 0, sizeof *g);
    g->base = buf;
    g->size = size;
    if (!sp_reader_bytes(&r, 4, &magic) || memcmp(magic, SP_GGUF_MAGIC, 4) != 0)
        return sp_error_set(SP_ERR_FORMAT, "not a GGUF file: bad magic (expected \"GGUF\")");
    if (!sp_reader_u32(&r, &g->version))
        return sp_error_set(SP_ERR_FORMAT, "header: version past the end of the file");
    if (g->version != 2 && g->version != 3)
        return sp_error_set(SP_ERR_FORMAT, "header: GGUF version %u, expected 2 or 3", g->version);
    if (!sp_reader_u64(&r, &n_tensors) || !sp_reader_u64(&r, &n_kv))
        return sp_error_set(SP_ERR_FORMAT, "header: counts past the end of the file");
    /* a kv takes >= 8 (key len) + 4 (type) + 1 bytes; a tensor >= 8+4+8+4+8 */
    if (n_kv > sp_reader_left(&r) / 13)
        return sp_error_set(SP_ERR_FORMAT, "header: key count %llu cannot fit in a %zu-byte file",
                            (unsigned long long)n_kv, size);
    if (n_tensors > sp_reader_left(&r) / 32)
        return sp_error_set(SP_ERR_FORMAT, "header: tensor count %llu cannot fit in a %zu-byte file",
                            (unsigned long long)n_tensors, size);

    priv = calloc(1, sizeof *priv);
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!priv || !g->kv || !g->tensors) {
        st = sp_error_set(SP_ERR_NOMEM, "gguf: no memory for %llu keys and %llu tensors",
                          (unsigned long long)n_kv, (unsigned long long)n_tensors);
        goto fail;
    }

    cap = sp_gguf_index_cap(n_kv);
    priv->kv_slots = calloc(cap, sizeof *priv->kv_slots);
    priv->kv_mask = cap - 1;
    cap = sp_gguf_index_cap(n_tensors);
    priv->t_slots = calloc(cap, sizeof *priv->t_slots);
    priv->t_mask = cap - 1;
    if (!priv->kv_slots || !priv->t_slots) {
        st = sp_error_set(SP_ERR_NOMEM, "gguf: no memory for the name index");
        goto fail;
    }

    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = i + 1; /* so a failure frees this entry's arrays */
        st = sp_gguf_read_kv(&r, &g->kv[i], i);
        if (st != SP_OK)
            goto fail;
        if (!sp_gguf_insert(priv->kv_slots, priv->kv_mask, g->kv, sizeof *g->kv,
                            offsetof(struct sp_gguf_kv, key), i)) {
            st = sp_error_set(SP_ERR_FORMAT, "key '%s': duplicate key", sp_gguf_show(g->kv[i].key, show, sizeof show));
            goto fail;
        }
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        st = sp_gguf_read_tensor(&r, &g->tensors[i], i);
        if (st != SP_OK)
            goto fail;
        g->n_tensors = i + 1;
        if (!sp_gguf_insert(priv->t_slots, priv->t_mask, g->tensors, sizeof *g->tensors,
                            offsetof(struct sp_gguf_tensor, name), i)) {
            st = sp_error_set(SP_ERR_FORMAT, "tensor '%s': duplicate tensor name",
                              sp_gguf_show(g->tensors[i].name, show, sizeof show));
            goto fail;
        }
    }
    g->priv_ = priv;
    st = sp_gguf_check_alignment(g);
    if (st != SP_OK)
        goto fail;
    uint64_t pad = (g->alignment - r.pos % g->alignment) % g->alignment;
    if (!sp_add_u64(r.pos, pad, &g->data_offset) || (g->n_tensors && g->data_offset > g->size)) {
        st = sp_error_set(SP_ERR_FORMAT, "data section: starts at %llu, past the end of the %zu-byte file",
                          (unsigned long long)g->data_offset, size);
        goto fail;
    }
    if (g->data_offset > g->size)
        g->data_offset = g->size; /* vocabulary-only file without padding */
    st = sp_gguf_place_tensors(g);
    if (st != SP_OK)
        goto fail;
    return SP_OK;

fail:
    g->priv_ = priv;
    sp_gguf_free(g);
    return st;
}

void sp_gguf_free(struct sp_gguf *g)
{
    struct sp_gguf_private *priv = g->priv_;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].arr_strs);
    free(g->kv);
    free(g->tensors);
    if (priv) {
        free(priv->kv_slots);
        free(priv->t_slots);
        free(priv);
    }
    memset(g, 0, sizeof *g);
}

sp_status sp_gguf_append(struct sp_gguf *g, const struct sp_gguf *more, uint32_t part)
{
    struct sp_gguf_private *priv = g->priv_;
    uint64_t n, cap, *slots;
    char show[80];
    if (!priv || !sp_add_u64(g->n_tensors, more->n_tensors, &n) || n > SIZE_MAX / 2 / sizeof *g->tensors)
        return sp_error_set(SP_ERR_FORMAT, "%llu tensors more than %llu: too many",
                            (unsigned long long)more->n_tensors, (unsigned long long)g->n_tensors);
    struct sp_gguf_tensor *t = realloc(g->tensors, (n ? n : 1) * sizeof *t);
    if (!t)
        return sp_error_set(SP_ERR_NOMEM, "gguf: no memory for %llu tensors", (unsigned long long)n);
    g->tensors = t; /* the old entries stay as they were */
    cap = sp_gguf_index_cap(n);
    if (!(slots = calloc(cap, sizeof *slots)))
        return sp_error_set(SP_ERR_NOMEM, "gguf: no memory for the name index");
    for (uint64_t i = 0; i < more->n_tensors; i++) {
        t[g->n_tensors + i] = more->tensors[i];
        t[g->n_tensors + i].part = part;
    }
    for (uint64_t i = 0; i < n; i++)
        if (!sp_gguf_insert(slots, cap - 1, t, sizeof *t, offsetof(struct sp_gguf_tensor, name), i)) {
            free(slots);
            return sp_error_set(SP_ERR_FORMAT, "tensor '%s': in two files of the model",
                                sp_gguf_show(t[i].name, show, sizeof show));
        }
    free(priv->t_slots);
    priv->t_slots = slots;
    priv->t_mask = cap - 1;
    g->n_tensors = n;
    return SP_OK;
}

const struct sp_gguf_kv *sp_gguf_find(const struct sp_gguf *g, const char *key)
{
    const struct sp_gguf_private *priv = g->priv_;
    if (!priv)
        return NULL;
    return sp_gguf_lookup(priv->kv_slots, priv->kv_mask, g->kv, sizeof *g->kv,
                          offsetof(struct sp_gguf_kv, key), key);
}

const struct sp_gguf_tensor *sp_gguf_tensor_find(const struct sp_gguf *g, const char *name)
{
    const struct sp_gguf_private *priv = g->priv_;
    if (!priv)
        return NULL;
    return sp_gguf_lookup(priv->t_slots, priv->t_mask, g->tensors, sizeof *g->tensors,
                          offsetof(struct sp_gguf_tensor, name), name);
}

/* ---- typed getters ---- */

static sp_status sp_gguf_missing(const char *key, bool required)
{
    return required ? sp_error_set(SP_ERR_FORMAT, "missing key '%s'", key) : SP_OK;
}

static sp_status sp_gguf_wrong_type(const char *key, const char *expected, const struct sp_gguf_kv *kv)
{
    return sp_error_set(SP_ERR_FORMAT, "key '%s': expected %s, found %s", key, expected,
                        kv->type == SP_GGUF_ARRAY ? "array" : sp_gguf_vtype_name(kv->type));
}

/* Any integer kv as a signed 128-bit-safe pair (value, is_negative). */
static bool sp_gguf_int_value(const struct sp_gguf_kv *kv, uint64_t *mag, bool *neg)
{
    *neg = false;
    switch (kv->type) {
    case SP_GGUF_UINT8: *mag = kv->value[0]; return true;
    case SP_GGUF_UINT16: { uint16_t v; memcpy(&v, kv->value, 2); *mag = v; return true; }
    case SP_GGUF_UINT32: { uint32_t v; memcpy(&v, kv->value, 4); *mag = v; return true; }
    case SP_GGUF_UINT64: { uint64_t v; memcpy(&v, kv->value, 8); *mag = v; return true; }
    case SP_GGUF_INT8: case SP_GGUF_INT16: case SP_GGUF_INT32: case SP_GGUF_INT64: {
        int64_t v;
        if (kv->type == SP_GGUF_INT8) v = (int8_t)kv->value[0];
        else if (kv->type == SP_GGUF_INT16) { int16_t x; memcpy(&x, kv->value, 2); v = x; }
        else if (kv->type == SP_GGUF_INT32) { int32_t x; memcpy(&x, kv->value, 4); v = x; }
        else memcpy(&v, kv->value, 8);
        *neg = v < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        return true;
    }
    default: return false;
    }
}

/* Element i of an array of fixed-size integers, as sp_gguf_int_value. */
static bool sp_gguf_int_elem(const struct sp_gguf_kv *kv, uint64_t i, uint64_t *mag, bool *neg)
{
    static const uint8_t size[SP_GGUF_VTYPE_COUNT] = {
        [SP_GGUF_UINT8] = 1, [SP_GGUF_INT8] = 1, [SP_GGUF_UINT16] = 2, [SP_GGUF_INT16] = 2, [SP_GGUF_UINT32] = 4,
        [SP_GGUF_INT32] = 4, [SP_GGUF_UINT64] = 8, [SP_GGUF_INT64] = 8,
    };
    if ((unsigned)kv->arr_type >= SP_GGUF_VTYPE_COUNT || !size[kv->arr_type])
        return false;
    struct sp_gguf_kv one = {.type = kv->arr_type, .value = kv->arr_data + i * size[kv->arr_type]};
    return sp_gguf_int_value(&one, mag, neg);
}

sp_status sp_gguf_get_u32_at(const struct sp_gguf *g, const char *key, uint64_t i, uint64_t n, bool required,
                             uint32_t *out)
{
    const struct sp_gguf_kv *kv = sp_gguf_find(g, key);
    uint64_t mag;
    bool neg;
    if (!kv || kv->type != SP_GGUF_ARRAY)
        return sp_gguf_get_u32(g, key, required, out);
    if (kv->arr_n != n)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': %llu values, expected one or %llu (one per layer)", key,
                            (unsigned long long)kv->arr_n, (unsigned long long)n);
    if (i >= n || !sp_gguf_int_elem(kv, i, &mag, &neg))
        return sp_error_set(SP_ERR_FORMAT, "key '%s': an array of %s, expected integers", key,
                            sp_gguf_vtype_name(kv->arr_type));
    if (neg || mag > UINT32_MAX)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': value %llu: %s%llu out of range 0..%u", key,
                            (unsigned long long)i, neg ? "-" : "", (unsigned long long)mag, UINT32_MAX);
    *out = (uint32_t)mag;
    return SP_OK;
}

sp_status sp_gguf_get_u32(const struct sp_gguf *g, const char *key, bool required, uint32_t *out)
{
    const struct sp_gguf_kv *kv = sp_gguf_find(g, key);
    uint64_t mag;
    bool neg;
    if (!kv)
        return sp_gguf_missing(key, required);
    if (!sp_gguf_int_value(kv, &mag, &neg))
        return sp_gguf_wrong_type(key, "an integer", kv);
    if (neg || mag > UINT32_MAX)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': value %s%llu out of range 0..%u", key, neg ? "-" : "",
                            (unsigned long long)mag, UINT32_MAX);
    *out = (uint32_t)mag;
    return SP_OK;
}

sp_status sp_gguf_get_f32(const struct sp_gguf *g, const char *key, bool required, float *out)
{
    const struct sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (!kv)
        return sp_gguf_missing(key, required);
    if (kv->type == SP_GGUF_FLOAT32) {
        memcpy(out, kv->value, 4);
    } else if (kv->type == SP_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->value, 8);
        *out = (float)d;
    } else {
        return sp_gguf_wrong_type(key, "float32", kv);
    }
    if (*out != *out)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': value is NaN", key);
    return SP_OK;
}

sp_status sp_gguf_get_bool(const struct sp_gguf *g, const char *key, bool required, bool *out)
{
    const struct sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (!kv)
        return sp_gguf_missing(key, required);
    if (kv->type != SP_GGUF_BOOL)
        return sp_gguf_wrong_type(key, "bool", kv);
    *out = kv->value[0] != 0;
    return SP_OK;
}

sp_status sp_gguf_get_str(const struct sp_gguf *g, const char *key, bool required, struct sp_gguf_str *out)
{
    const struct sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (!kv)
        return sp_gguf_missing(key, required);
    if (kv->type != SP_GGUF_STRING)
        return sp_gguf_wrong_type(key, "string", kv);
    *out = kv->str;
    return SP_OK;
}

sp_status sp_gguf_get_arr(const struct sp_gguf *g, const char *key, bool required, enum sp_gguf_vtype elem,
                          const struct sp_gguf_kv **kv_out)
{
    const struct sp_gguf_kv *kv = sp_gguf_find(g, key);
    *kv_out = NULL;
    if (!kv)
        return sp_gguf_missing(key, required);
    if (kv->type != SP_GGUF_ARRAY)
        return sp_gguf_wrong_type(key, "array", kv);
    if (kv->arr_type != elem)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': expected an array of %s, found an array of %s", key,
                            sp_gguf_vtype_name(elem), sp_gguf_vtype_name(kv->arr_type));
    *kv_out = kv;
    return SP_OK;
}
