/* The KV pool (see kv.h).  Layout: the arrays are layer-major and
 * head-major with the blocks inside, v[layer][head][block][slot][row] and
 * the keys the same but in tiles (SP_KV_TILE), a row being one position's
 * head_dim values in the pool's type (sp_kv_row_bytes), so what attention reads
 * for one KV head of a block is contiguous, and a sequence holding
 * consecutive blocks (the allocator prefers the block after a sequence's
 * last one) is one stream per head, which the hardware prefetcher follows. */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/checked.h"
#include "core/error.h"
#include "quant/quant.h"

#define SP_KV_NONE UINT32_MAX
/* Positions per block: a multiple of SP_KV_TILE (blocks hold whole key
 * tiles), small enough that copy-on-write and the prefix cache's whole
 * blocks waste little. */
#define SP_KV_BLOCK 16u
_Static_assert(SP_KV_BLOCK % SP_KV_TILE == 0, "a block holds whole key tiles");

/* One layer's geometry (a layer reading another's: its source's) and where
 * its rows start in k / v (paged) or in a ring slot (local). */
struct sp_kv_layer {
    uint32_t heads, dim, krow, vrow; /* KV heads, head width, bytes of one position of one head */
    size_t koff, voff;
    bool paged;                      /* its own rows in the blocks */
};

struct sp_kv {
    uint32_t n_layer, block_tokens, n_blocks; /* block_tokens = SP_KV_BLOCK */
    struct sp_kv_layer *lay;     /* [n_layer] */
    uint32_t n_global, n_local;  /* paged layers, ring layers */
    uint32_t *layer_index;       /* [n_layer] index among its kind */
    bool *layer_local;           /* [n_layer] */
    uint32_t *layer_src;         /* [n_layer] the layer whose rows a layer reads (shape.source) */
    sp_cache_type kt, vt;  /* key and value types */
    bool v_in_k;           /* no values stored: they are the keys (sp_kv_shape); every layer's vrow is 0 */
    size_t k_bytes, v_bytes; /* bytes of k and of v */
    uint8_t *k, *v;        /* each paged layer's [heads][n_blocks][SP_KV_BLOCK][row], keys in tiles */
    /* local layers: ring slots, allocated on first use, reused after */
    uint32_t ring_len, n_rings;
    size_t ring_k_bytes, ring_v_bytes; /* of one slot */
    uint8_t **ring_k, **ring_v; /* [n_rings] -> each local layer's [heads][ring_len][row], keys in tiles */
    uint32_t *ring_free;         /* stack of free slots */
    uint32_t n_ring_free;
    uint32_t *refs;        /* [n_blocks] sequences using the block */
    uint64_t *free_bits;   /* [n_blocks / 64 rounded up] bit b set: block b unreferenced and uncached */
    uint64_t *tail_bits;   /* the same shape: block b is the last a sequence took (it may grow past it) */
    uint32_t n_free;
    /* prefix cache */
    uint64_t *hash;        /* [n_blocks] hash of a cached block (0: not cached) */
    sp_token *tokens;      /* [n_blocks][SP_KV_BLOCK] to verify a hit */
    uint32_t *gen;         /* [n_blocks] times the block was registered: names one registration */
    uint32_t *parent;      /* [n_blocks] cached block holding the tokens before (SP_KV_NONE: first) */
    uint32_t *parent_gen;  /* [n_blocks] the parent's gen when this block was registered */
    uint64_t *lru;         /* [n_blocks] last use stamp */
    uint64_t clock;
    uint32_t *table;       /* open addressing: hash -> block id (SP_KV_NONE = empty) */
    uint32_t table_mask;
    uint32_t n_cached_idle; /* cached blocks with refs == 0 */
    uint64_t hits, tokens_reused;
};

/* Holds no rows: a linear layer, or one reading another layer's. */
static bool sp_kv_is_stateless(const struct sp_kv_shape *s, uint32_t l)
{
    return (s->stateless && s->stateless[l]) || (s->source && s->source[l] != l);
}

static bool sp_kv_is_local(const struct sp_kv_shape *s, uint32_t l);

/* Every reading layer's source is an earlier layer of the same kind that
 * reads its own rows. */
static bool sp_kv_sources_ok(const struct sp_kv_shape *s)
{
    for (uint32_t l = 0; s->source && l < s->n_layer; l++) {
        const uint32_t src = s->source[l];
        if (src == l)
            continue;
        if (src > l || s->source[src] != src || (s->stateless && (s->stateless[src] || s->stateless[l])) ||
            (s->local && s->local[src] != s->local[l]))
            return false;
    }
    return true;
}

static bool sp_kv_is_local(const struct sp_kv_shape *s, uint32_t l)
{
    return s->local && s->local[l] && s->ring_len > 0 && !sp_kv_is_stateless(s, l);
}

/* Layers in the paged blocks: neither local nor stateless.  A model of
 * local layers only still gets one (its blocks are then unused, as
 * before). */
static uint32_t sp_kv_paged_layers(const struct sp_kv_shape *s)
{
    uint32_t n = 0, n_stateless = 0;
    for (uint32_t l = 0; l < s->n_layer; l++) {
        n += !sp_kv_is_local(s, l) && !sp_kv_is_stateless(s, l);
        n_stateless += sp_kv_is_stateless(s, l);
    }
    return n || n_stateless == s->n_layer ? n : 1;
}

static uint32_t sp_kv_heads(const struct sp_kv_shape *s, uint32_t l)
{
    return s->heads_kv ? s->heads_kv[l] : s->n_head_kv;
}

static uint32_t sp_kv_dim(const struct sp_kv_shape *s, uint32_t l)
{
    return s->head_dims ? s->head_dims[l] : s->head_dim;
}

/* Bytes of one position's value of one KV head at width d: none when the
 * values are the keys (v_in_k). */
static uint32_t sp_kv_vrow_bytes(const struct sp_kv_shape *s, uint32_t d)
{
    return s->v_in_k ? 0 : sp_kv_row_bytes(s->type_v, d);
}

/* Bytes of one position of the paged layers' keys and values; a model of
 * local layers only counts one layer of the shape's geometry (its blocks'
 * rows, unused). */
static uint64_t sp_kv_paged_pos_bytes(const struct sp_kv_shape *s)
{
    uint64_t n = 0;
    bool any = false;
    for (uint32_t l = 0; l < s->n_layer; l++)
        if (!sp_kv_is_local(s, l) && !sp_kv_is_stateless(s, l)) {
            const uint32_t d = sp_kv_dim(s, l);
            n += (uint64_t)sp_kv_heads(s, l) * (sp_kv_row_bytes(s->type_k, d) + sp_kv_vrow_bytes(s, d));
            any = true;
        }
    if (!any && sp_kv_paged_layers(s))
        n = (uint64_t)s->n_head_kv * (sp_kv_row_bytes(s->type_k, s->head_dim) + sp_kv_vrow_bytes(s, s->head_dim));
    return n;
}

uint64_t sp_kv_block_bytes(const struct sp_kv_shape *s)
{
    return (uint64_t)SP_KV_BLOCK * sp_kv_paged_pos_bytes(s);
}

/* Each layer's geometry and offsets; the bytes of the paged arrays and of
 * one ring slot.  False when a size overflows. */
static bool sp_kv_layout(struct sp_kv *kv, const struct sp_kv_shape *shape, uint32_t n_blocks)
{
    uint64_t kb = 0, vb = 0, rk = 0, rv = 0;
    for (uint32_t l = 0; l < shape->n_layer; l++) {
        struct sp_kv_layer *y = &kv->lay[l];
        y->heads = sp_kv_heads(shape, l);
        y->dim = sp_kv_dim(shape, l);
        y->krow = sp_kv_row_bytes(kv->kt, y->dim);
        y->vrow = sp_kv_vrow_bytes(shape, y->dim);
        if (sp_kv_is_stateless(shape, l))
            continue;
        const bool local = kv->layer_local[l];
        uint64_t *k = local ? &rk : &kb, *v = local ? &rv : &vb, rows, a, b;
        if (!sp_mul_u64(local ? kv->ring_len : (uint64_t)n_blocks * SP_KV_BLOCK, y->heads, &rows) ||
            !sp_mul_u64(rows, y->krow, &a) || !sp_mul_u64(rows, y->vrow, &b) || a + b > ((uint64_t)1 << 41) ||
            *k + a > ((uint64_t)1 << 41) || *v + b > ((uint64_t)1 << 41))
            return false;
        y->koff = (size_t)*k;
        y->voff = (size_t)*v;
        y->paged = !local;
        *k += a;
        *v += b;
    }
    if (!kb && sp_kv_paged_layers(shape)) { /* local layers only: one phantom layer's rows */
        const uint64_t pos = (uint64_t)n_blocks * SP_KV_BLOCK * shape->n_head_kv;
        kb = pos * sp_kv_row_bytes(kv->kt, shape->head_dim);
        vb = pos * sp_kv_vrow_bytes(shape, shape->head_dim);
    }
    if (kb + vb > ((uint64_t)1 << 41) || (rk + rv) * (uint64_t)kv->n_rings > ((uint64_t)1 << 42))
        return false;
    kv->k_bytes = (size_t)kb;
    kv->v_bytes = (size_t)vb;
    kv->ring_k_bytes = (size_t)rk;
    kv->ring_v_bytes = (size_t)rv;
    return true;
}

/* Every layer holding rows has a geometry the cache types take. */
static sp_status sp_kv_check_geometry(const struct sp_kv_shape *shape, bool rows)
{
    for (uint32_t l = 0; l <= shape->n_layer && rows; l++) {
        const bool phantom = l == shape->n_layer; /* the shape's own, for a phantom paged layer */
        if (!phantom && sp_kv_is_stateless(shape, l))
            continue;
        const uint32_t h = phantom ? shape->n_head_kv : sp_kv_heads(shape, l);
        const uint32_t d = phantom ? shape->head_dim : sp_kv_dim(shape, l);
        if (phantom && sp_kv_paged_pos_bytes(shape) == 0)
            continue;
        if (!h || !d || h > UINT32_MAX / d)
            return sp_error_set(SP_ERR_ARG, "kv cache: empty geometry");
        for (int i = 0; i < 2; i++) {
            const sp_cache_type t = i ? shape->type_v : shape->type_k;
            if (!sp_cache_type_name(t))
                return sp_error_set(SP_ERR_ARG, "kv cache: unknown type %d", (int)t);
            if (t != SP_CACHE_F16 && (d % SP_KV_QK || d > SP_KV_QDIM_MAX))
                return sp_error_set(SP_ERR_UNSUPPORTED,
                                    "KV cache type %s needs a head dimension that is a multiple of %d up to %d; "
                                    "this model's is %u",
                                    sp_cache_type_name(t), SP_KV_QK, SP_KV_QDIM_MAX, d);
        }
        if (shape->v_in_k && (shape->type_k != SP_CACHE_F16 || shape->type_v != SP_CACHE_F16 ||
                              (!phantom && sp_kv_is_local(shape, l)) || d > SP_KV_VK_DIM_MAX))
            return sp_error_set(SP_ERR_UNSUPPORTED, "kv cache: values read from the keys need f16 keys and values, "
                                "no sliding-window layers and a head dimension up to %d (this one: %u)",
                                SP_KV_VK_DIM_MAX, d);
    }
    return SP_OK;
}

uint64_t sp_kv_blocks_for(uint64_t n_pos) { return (n_pos + SP_KV_BLOCK - 1) / SP_KV_BLOCK; }

sp_status sp_kv_new(struct sp_kv **out, const struct sp_kv_shape *shape, uint32_t n_blocks)
{
    uint32_t n_layer = shape->n_layer, ring_len = shape->ring_len;
    *out = NULL;
    const uint32_t n_paged = sp_kv_paged_layers(shape);
    bool rows = n_paged > 0; /* else every layer is stateless: blocks without rows */
    for (uint32_t l = 0; l < n_layer; l++)
        rows = rows || sp_kv_is_local(shape, l);
    if (!n_layer || !n_blocks)
        return sp_error_set(SP_ERR_ARG, "kv cache: empty geometry");
    if (ring_len > UINT32_MAX - SP_KV_TILE)
        return sp_error_set(SP_ERR_ARG, "kv cache: rings of %u positions", ring_len);
    if (!sp_kv_sources_ok(shape))
        return sp_error_set(SP_ERR_ARG, "kv cache: a layer reads a later layer, one of another kind, or one "
                            "that reads another's");
    sp_status st = sp_kv_check_geometry(shape, rows);
    if (st != SP_OK)
        return st;
    struct sp_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return sp_error_set(SP_ERR_NOMEM, "kv cache: no memory");
    ring_len = (ring_len + SP_KV_TILE - 1) / SP_KV_TILE * SP_KV_TILE; /* whole key tiles */
    kv->layer_index = calloc(n_layer, sizeof *kv->layer_index);
    kv->layer_local = calloc(n_layer, sizeof *kv->layer_local);
    kv->layer_src = calloc(n_layer, sizeof *kv->layer_src);
    kv->lay = calloc(n_layer, sizeof *kv->lay);
    if (!kv->layer_index || !kv->layer_local || !kv->layer_src || !kv->lay) {
        sp_kv_free(kv);
        return sp_error_set(SP_ERR_NOMEM, "kv cache: no memory");
    }
    for (uint32_t l = 0; l < n_layer; l++) {
        kv->layer_src[l] = shape->source ? shape->source[l] : l;
        kv->layer_local[l] = sp_kv_is_local(shape, l);
        if (!sp_kv_is_stateless(shape, l))
            kv->layer_index[l] = kv->layer_local[l] ? kv->n_local++ : kv->n_global++;
    }
    if (kv->n_local) {
        kv->ring_len = ring_len;
        kv->n_rings = shape->n_rings ? shape->n_rings : 1;
        kv->ring_k = calloc(kv->n_rings, sizeof *kv->ring_k);
        kv->ring_v = calloc(kv->n_rings, sizeof *kv->ring_v);
        kv->ring_free = malloc(kv->n_rings * sizeof *kv->ring_free);
        if (!kv->ring_k || !kv->ring_v || !kv->ring_free) {
            sp_kv_free(kv);
            return sp_error_set(SP_ERR_NOMEM, "kv cache: no memory");
        }
        for (uint32_t i = 0; i < kv->n_rings; i++)
            kv->ring_free[i] = kv->n_rings - 1 - i;
        kv->n_ring_free = kv->n_rings;
    }
    kv->kt = shape->type_k;
    kv->vt = shape->type_v;
    kv->v_in_k = shape->v_in_k;
    if (!sp_kv_layout(kv, shape, n_blocks)) {
        sp_kv_free(kv);
        return sp_error_set(SP_ERR_NOMEM, "kv cache: size overflows");
    }
    kv->n_layer = n_layer;
    kv->block_tokens = SP_KV_BLOCK;
    kv->n_blocks = n_blocks;
    uint32_t cap = 16;
    while (cap < 2 * n_blocks)
        cap <<= 1;
    kv->table_mask = cap - 1;
    /* ordinary pages: a 2 MiB page's first touch can stall for a fault and
     * compaction, which would land on a request's first token */
    kv->k = aligned_alloc(64, (kv->k_bytes + 63) / 64 * 64);
    kv->v = aligned_alloc(64, (kv->v_bytes + 63) / 64 * 64);
    kv->refs = calloc(n_blocks, sizeof *kv->refs);
    kv->free_bits = calloc((n_blocks + 63) / 64, sizeof *kv->free_bits);
    kv->tail_bits = calloc((n_blocks + 63) / 64, sizeof *kv->tail_bits);
    kv->hash = calloc(n_blocks, sizeof *kv->hash);
    kv->tokens = malloc((size_t)n_blocks * SP_KV_BLOCK * sizeof *kv->tokens);
    kv->gen = calloc(n_blocks, sizeof *kv->gen);
    kv->parent = calloc(n_blocks, sizeof *kv->parent);
    kv->parent_gen = calloc(n_blocks, sizeof *kv->parent_gen);
    kv->lru = calloc(n_blocks, sizeof *kv->lru);
    kv->table = malloc((size_t)cap * sizeof *kv->table);
    const unsigned long long kv_bytes = (unsigned long long)kv->k_bytes + kv->v_bytes;
    if (!kv->k || !kv->v || !kv->refs || !kv->free_bits || !kv->tail_bits || !kv->hash || !kv->tokens || !kv->lru ||
        !kv->gen || !kv->parent || !kv->parent_gen || !kv->table) {
        sp_kv_free(kv);
        return sp_error_set(SP_ERR_NOMEM, "kv cache: cannot allocate %llu bytes",
                            (unsigned long long)(kv_bytes));
    }
    memset(kv->table, 0xff, (size_t)cap * sizeof *kv->table);
    for (uint32_t i = 0; i < n_blocks; i++)
        kv->free_bits[i / 64] |= 1ull << (i % 64);
    kv->n_free = n_blocks;
    *out = kv;
    return SP_OK;
}

void sp_kv_free(struct sp_kv *kv)
{
    if (!kv)
        return;
    for (uint32_t i = 0; kv->ring_k && i < kv->n_rings; i++) {
        free(kv->ring_k[i]);
        free(kv->ring_v[i]);
    }
    free(kv->ring_k);
    free(kv->ring_v);
    free(kv->ring_free);
    free(kv->layer_index);
    free(kv->layer_local);
    free(kv->layer_src);
    free(kv->lay);
    free(kv->k);
    free(kv->v);
    free(kv->refs);
    free(kv->free_bits);
    free(kv->tail_bits);
    free(kv->hash);
    free(kv->tokens);
    free(kv->gen);
    free(kv->parent);
    free(kv->parent_gen);
    free(kv->lru);
    free(kv->table);
    free(kv);
}

uint32_t sp_kv_available(const struct sp_kv *kv) { return kv->n_free + kv->n_cached_idle; }

void sp_kv_stats(const struct sp_kv *kv, uint32_t rings, struct sp_kv_stats *o)
{
    uint64_t ring = (uint64_t)kv->ring_k_bytes + kv->ring_v_bytes;
    o->block_tokens = kv->block_tokens;
    o->blocks_total = kv->n_blocks;
    o->blocks_used = kv->n_blocks - sp_kv_available(kv);
    o->blocks_cached = kv->n_cached_idle;
    o->bytes = (uint64_t)kv->k_bytes + kv->v_bytes + ring * rings;
    o->prefix_hits = kv->hits;
    o->prefix_tokens_reused = kv->tokens_reused;
}

/* ---- cache types ---- */

static const char *const sp_cache_type_names[] = {"f16", "q8_0", "q4_0"};

const char *sp_cache_type_name(sp_cache_type t)
{
    return (unsigned)t < sizeof sp_cache_type_names / sizeof sp_cache_type_names[0] ? sp_cache_type_names[t] : NULL;
}

sp_status sp_cache_type_parse(const char *name, sp_cache_type *out)
{
    for (unsigned t = 0; t < sizeof sp_cache_type_names / sizeof sp_cache_type_names[0]; t++)
        if (name && !strcasecmp(name, sp_cache_type_names[t])) {
            *out = (sp_cache_type)t;
            return SP_OK;
        }
    return sp_error_set(SP_ERR_ARG, "KV cache type '%s': expected f16, q8_0 or q4_0", name ? name : "(null)");
}

uint64_t sp_cache_type_bytes(sp_cache_type t, uint64_t n)
{
    return t == SP_CACHE_Q8_0 ? n / SP_KV_QK * 34 : t == SP_CACHE_Q4_0 ? n / SP_KV_QK * 18 : n * 2;
}

/* ---- reading and writing ---- */

/* 16 floats as one value, for the generic vector operations GCC and Clang
 * share (__builtin_shufflevector with constant lanes): the
 * compiler maps them onto whatever vectors the target has.  (Only local
 * variables: a 64-byte vector passed or returned would depend on the
 * target's ABI.) */
typedef float sp_kv_v16 __attribute__((vector_size(64)));
typedef int32_t sp_kv_i16 __attribute__((vector_size(64)));

/* A stage with len < 16 within the 16 values of v, in place: lane j takes
 * v[j] + v[j ^ len] when j & len is 0, else v[j ^ len] - v[j]. */
#define SP_KV_STAGE16(v, lane, len, ...)                                                                           \
    do {                                                                                                           \
        const sp_kv_v16 p_ = __builtin_shufflevector(v, v, __VA_ARGS__); /* lane j: v[j ^ len] */                  \
        const sp_kv_i16 hi_ = ((lane) & (len)) != 0; /* all ones in the lanes j + len */                           \
        v = (sp_kv_v16)(((sp_kv_i16)(v + p_) & ~hi_) | ((sp_kv_i16)(p_ - v) & hi_));                               \
    } while (0)

/* The stages run in the order len = 1, 2, 4, ...; a stage turns each pair
 * (j, j + len) within blocks of 2 len into (u + v, u - v).  Each value is
 * then one fixed expression of sums and differences however a stage's
 * pairs are visited, so the stages go 16 values at a time (the same bits
 * as one pair at a time, on every target): the four within 16 values in
 * registers (SP_KV_STAGE16), then whole vectors paired. */
void sp_kv_rotate(float *x, uint32_t n, bool back)
{
    const uint32_t r = n & -n; /* the largest power of two dividing n */
    const float scale = 1.0f / (float)r; /* exact */
    const sp_kv_i16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    for (uint32_t b = 0; b < n; b += r) {
        float *y = x + b;
        sp_kv_v16 u, v;
        for (uint32_t c = 0; c < r; c += 16) {
            memcpy(&v, y + c, sizeof v);
            SP_KV_STAGE16(v, lane, 1, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
            SP_KV_STAGE16(v, lane, 2, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
            SP_KV_STAGE16(v, lane, 4, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
            SP_KV_STAGE16(v, lane, 8, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
            memcpy(y + c, &v, sizeof v);
        }
        for (uint32_t len = 16; len < r; len <<= 1)
            for (uint32_t i = 0; i < r; i += 2 * len)
                for (uint32_t j = i; j < i + len; j += 16) {
                    memcpy(&u, y + j, sizeof u);
                    memcpy(&v, y + j + len, sizeof v);
                    const sp_kv_v16 sum = u + v, diff = u - v;
                    memcpy(y + j, &sum, sizeof sum);
                    memcpy(y + j + len, &diff, sizeof diff);
                }
        for (uint32_t c = 0; back && c < r; c += 16) {
            memcpy(&v, y + c, sizeof v);
            v *= scale;
            memcpy(y + c, &v, sizeof v);
        }
    }
}

struct sp_kv_view sp_kv_view(const struct sp_kv *kv, const struct sp_kv_seq *seq, uint32_t layer)
{
    layer = kv->layer_src[layer];
    const struct sp_kv_layer *y = &kv->lay[layer];
    struct sp_kv_view w = {.head_dim = y->dim, .k_row = y->krow, .v_row = y->vrow, .kt = kv->kt, .vt = kv->vt,
                           .v_in_k = kv->v_in_k};
    if (kv->layer_local[layer]) {
        w.k = kv->ring_k[seq->ring - 1] + y->koff;
        w.v = kv->ring_v[seq->ring - 1] + y->voff;
        w.k_head = (size_t)kv->ring_len * y->krow;
        w.v_head = (size_t)kv->ring_len * y->vrow;
        w.span = kv->ring_len;
    } else {
        w.k = kv->k + y->koff;
        w.v = kv->v + y->voff;
        w.blocks = seq->blocks;
        w.k_block = (size_t)SP_KV_BLOCK * y->krow;
        w.v_block = (size_t)SP_KV_BLOCK * y->vrow;
        w.k_head = w.k_block * kv->n_blocks;
        w.v_head = w.v_block * kv->n_blocks;
        w.span = kv->block_tokens;
    }
    return w;
}

void sp_kv_store(struct sp_kv *kv, const struct sp_kv_seq *seq, uint32_t layer, uint32_t pos, const float *k,
                 const float *v)
{
    const struct sp_kv_view w = sp_kv_view(kv, seq, layer);
    const uint32_t D = w.head_dim, n_head = kv->lay[kv->layer_src[layer]].heads, lane = pos % SP_KV_TILE;
    /* the view's pointers are into this room's own arrays; sp_f16_store
     * (quant.h) converts f16 (F16C / NEON rows, the cast's rounding), the
     * quantizers are the scalar reference (a row per head and token: the
     * cost is noise next to the matmuls) */
    for (uint32_t h = 0; h < n_head; h++) {
        const float *kh = k + (size_t)h * D, *vh = v + (size_t)h * D;
        float krot[SP_KV_QDIM_MAX], vrot[SP_KV_QDIM_MAX];
        if (kv->kt != SP_CACHE_F16) { /* quantized rows are stored rotated (kv.h) */
            memcpy(krot, kh, D * sizeof *krot);
            sp_kv_rotate(krot, D, false);
            kh = krot;
        }
        if (kv->vt != SP_CACHE_F16) {
            memcpy(vrot, vh, D * sizeof *vrot);
            sp_kv_rotate(vrot, D, false);
            vh = vrot;
        }
        uint8_t *kt = (uint8_t *)(uintptr_t)sp_kv_view_ktile(&w, pos, h);
        uint8_t *vr = (uint8_t *)(uintptr_t)sp_kv_view_vrow(&w, pos, h);
        if (kv->kt == SP_CACHE_F16) {
            sp_f16_store((uint16_t *)(void *)kt + lane, SP_KV_TILE, kh, D);
        } else { /* quantize the row, then spread its blocks over the tile's lane */
            uint8_t row[SP_KV_QDIM_MAX / SP_KV_QK * 34];
            const uint32_t bb = w.k_row / (D / SP_KV_QK), nq = bb - 2; /* block bytes, quant bytes */
            sp_type_get_ref(kv->kt == SP_CACHE_Q8_0 ? SP_TYPE_Q8_0 : SP_TYPE_Q4_0)->from_float(kh, row, D);
            for (uint32_t g = 0; g < D / SP_KV_QK; g++) {
                uint8_t *grp = kt + (size_t)g * SP_KV_TILE * bb;
                const uint8_t *blk = row + (size_t)g * bb;
                memcpy(grp + 2 * lane, blk, 2);
                for (uint32_t e = 0; e < nq; e++)
                    grp[2 * SP_KV_TILE + e * SP_KV_TILE + lane] = blk[2 + e];
            }
        }
        if (kv->v_in_k) /* the key just stored is the value */
            continue;
        if (kv->vt == SP_CACHE_F16)
            sp_f16_store((uint16_t *)(void *)vr, 1, vh, D);
        else
            sp_type_get_ref(kv->vt == SP_CACHE_Q8_0 ? SP_TYPE_Q8_0 : SP_TYPE_Q4_0)->from_float(vh, vr, D);
    }
}

/* ---- prefix-cache hash table (linear probing with backward-shift delete) ---- */

static uint32_t sp_kv_slot(const struct sp_kv *kv, uint64_t h) { return (uint32_t)(h ^ (h >> 29)) & kv->table_mask; }

/* The cached block holding `toks` right after the cached block `parent`
 * (registration `parent_gen`; SP_KV_NONE: at the start).  The hash only
 * finds candidates: a match is decided on the tokens and the parent, so by
 * induction from the first block every token before the block is equal too,
 * and no hash collision can hand out another prefix's blocks. */
static uint32_t sp_kv_table_find(const struct sp_kv *kv, uint64_t h, const sp_token *toks, uint32_t parent,
                                 uint32_t parent_gen)
{
    for (uint32_t i = sp_kv_slot(kv, h);; i = (i + 1) & kv->table_mask) {
        uint32_t b = kv->table[i];
        if (b == SP_KV_NONE)
            return SP_KV_NONE;
        if (kv->hash[b] == h && kv->parent[b] == parent && kv->parent_gen[b] == parent_gen &&
            !memcmp(kv->tokens + (size_t)b * kv->block_tokens, toks, kv->block_tokens * sizeof *toks))
            return b;
    }
}

static void sp_kv_table_remove(struct sp_kv *kv, uint32_t block)
{
    uint32_t i = sp_kv_slot(kv, kv->hash[block]);
    while (kv->table[i] != block)
        i = (i + 1) & kv->table_mask;
    kv->table[i] = SP_KV_NONE;
    for (uint32_t j = (i + 1) & kv->table_mask; kv->table[j] != SP_KV_NONE; j = (j + 1) & kv->table_mask) {
        uint32_t b = kv->table[j], home = sp_kv_slot(kv, kv->hash[b]);
        /* move b back if its home is not in (i, j] cyclically */
        if (((j - home) & kv->table_mask) >= ((j - i) & kv->table_mask)) {
            kv->table[i] = b;
            kv->table[j] = SP_KV_NONE;
            i = j;
        }
    }
    kv->hash[block] = 0;
}

static bool sp_kv_is_free(const struct sp_kv *kv, uint32_t b)
{
    return b < kv->n_blocks && (kv->free_bits[b / 64] >> (b % 64) & 1);
}

/* Whether block b is the last one some live sequence took. */
static bool sp_kv_is_tail(const struct sp_kv *kv, uint32_t b)
{
    return kv->tail_bits[b / 64] >> (b % 64) & 1;
}

/* Extents: a sequence that cannot continue where its last block is starts
 * over at the lowest wholly free extent of 64 blocks (one word of the free
 * bitmap), so sequences growing side by side (batched decode, one block
 * each in turn) keep runs of up to 64 blocks instead of interleaving block
 * by block: the hardware prefetcher restarts at every jump, and
 * bench/bench_attention.c's interleave argument shows what a jump costs. */
static uint32_t sp_kv_free_extent(const struct sp_kv *kv)
{
    for (uint32_t w = 0; w < kv->n_blocks / 64; w++) /* whole words only */
        if (kv->free_bits[w] == ~0ull)
            return w * 64;
    return SP_KV_NONE;
}

/* Where a sequence starts over when no whole extent is free (a cache sized
 * for its sequences, as the engine's is, has room for few): the longest run
 * of free blocks, from its middle when the block before it is the last one
 * a sequence took (that one may grow into the run's first half), else from
 * its start.  So B sequences growing side by side split the free space into
 * runs instead of interleaving block by block, and a prompt filled alone
 * takes the whole run.  SP_KV_NONE when no block is free. */
static uint32_t sp_kv_free_run(const struct sp_kv *kv)
{
    uint32_t best = SP_KV_NONE, best_len = 0, start = 0, len = 0;
    for (uint32_t b = 0; b < kv->n_blocks; b++) {
        const uint64_t w = kv->free_bits[b / 64];
        if (b % 64 == 0 && b + 64 <= kv->n_blocks && (w == 0 || w == ~0ull)) { /* a whole word at once */
            if (w == 0) {
                if (len > best_len)
                    best_len = len, best = start;
                len = 0;
            } else {
                start = len ? start : b;
                len += 64;
            }
            b += 63;
            continue;
        }
        if (w >> (b % 64) & 1) {
            start = len ? start : b;
            len++;
        } else {
            if (len > best_len)
                best_len = len, best = start;
            len = 0;
        }
    }
    if (len > best_len)
        best_len = len, best = start;
    if (!best_len)
        return SP_KV_NONE;
    return best > 0 && sp_kv_is_tail(kv, best - 1) ? best + best_len / 2 : best;
}

/* Takes a block for writing: the free block `after` + 1 when there is one
 * (a sequence's blocks stay consecutive: one stream per KV head for
 * attention), else the start of the lowest wholly free extent, else
 * sp_kv_free_run, else evicts the least recently used idle cached block,
 * passing over blocks right after another sequence's last one while there
 * are others (that sequence would have to jump).  SP_KV_NONE when none. */
static uint32_t sp_kv_take(struct sp_kv *kv, uint32_t after)
{
    uint32_t b = SP_KV_NONE;
    if (kv->n_free) {
        if (after != SP_KV_NONE && sp_kv_is_free(kv, after + 1))
            b = after + 1;
        else if ((b = sp_kv_free_extent(kv)) == SP_KV_NONE)
            b = sp_kv_free_run(kv);
        kv->free_bits[b / 64] &= ~(1ull << (b % 64));
        kv->n_free--;
    } else if (kv->n_cached_idle) {
        uint64_t best = UINT64_MAX;
        bool best_blocks = true;
        for (uint32_t i = 0; i < kv->n_blocks; i++) {
            if (kv->refs[i] || !kv->hash[i])
                continue;
            const bool blocks = i > 0 && i - 1 != after && sp_kv_is_tail(kv, i - 1);
            if (blocks < best_blocks || (blocks == best_blocks && kv->lru[i] < best))
                best = kv->lru[i], best_blocks = blocks, b = i;
        }
        if (b != SP_KV_NONE) {
            sp_kv_table_remove(kv, b);
            kv->n_cached_idle--;
        }
    }
    if (b != SP_KV_NONE) {
        kv->refs[b] = 1;
        kv->tail_bits[b / 64] |= 1ull << (b % 64);
        if (after != SP_KV_NONE)
            kv->tail_bits[after / 64] &= ~(1ull << (after % 64));
    }
    return b;
}

static void sp_kv_unref(struct sp_kv *kv, uint32_t b)
{
    if (--kv->refs[b] > 0)
        return;
    kv->tail_bits[b / 64] &= ~(1ull << (b % 64));
    if (kv->hash[b])
        kv->n_cached_idle++; /* stays findable until evicted */
    else
        kv->free_bits[b / 64] |= 1ull << (b % 64), kv->n_free++;
}

static void sp_kv_ref(struct sp_kv *kv, uint32_t b)
{
    if (kv->refs[b]++ == 0 && kv->hash[b])
        kv->n_cached_idle--;
    kv->lru[b] = ++kv->clock;
}

static sp_status sp_kv_seq_grow(struct sp_kv_seq *seq, uint32_t need)
{
    if (need <= seq->cap)
        return SP_OK;
    uint32_t cap = seq->cap ? seq->cap : 8;
    while (cap < need)
        cap *= 2;
    uint32_t *nb = realloc(seq->blocks, cap * sizeof *nb);
    if (!nb)
        return sp_error_set(SP_ERR_NOMEM, "kv cache: block table");
    seq->blocks = nb;
    seq->cap = cap;
    return SP_OK;
}

static void sp_kv_copy_block(struct sp_kv *kv, uint32_t dst, uint32_t src)
{
    for (uint32_t l = 0; l < kv->n_layer; l++) { /* each paged layer's heads */
        const struct sp_kv_layer *y = &kv->lay[l];
        if (!y->paged)
            continue;
        const size_t kn = (size_t)SP_KV_BLOCK * y->krow, vn = (size_t)SP_KV_BLOCK * y->vrow;
        for (size_t h = 0; h < y->heads; h++) {
            uint8_t *k = kv->k + y->koff + h * kn * kv->n_blocks, *v = kv->v + y->voff + h * vn * kv->n_blocks;
            memcpy(k + dst * kn, k + src * kn, kn);
            memcpy(v + dst * vn, v + src * vn, vn);
        }
    }
}

/* Gives seq a ring slot (allocating its memory on first use of the slot). */
static sp_status sp_kv_ring_take(struct sp_kv *kv, struct sp_kv_seq *seq)
{
    if (!kv->n_local || seq->ring)
        return SP_OK;
    if (!kv->n_ring_free)
        return sp_error_set(SP_ERR_FULL, "kv cache: all %u sliding-window slots are in use", kv->n_rings);
    uint32_t r = kv->ring_free[kv->n_ring_free - 1];
    if (!kv->ring_k[r]) {
        kv->ring_k[r] = aligned_alloc(64, (kv->ring_k_bytes + 63) / 64 * 64);
        kv->ring_v[r] = aligned_alloc(64, (kv->ring_v_bytes + 63) / 64 * 64);
        if (!kv->ring_k[r] || !kv->ring_v[r]) {
            free(kv->ring_k[r]);
            free(kv->ring_v[r]);
            kv->ring_k[r] = kv->ring_v[r] = NULL;
            return sp_error_set(SP_ERR_NOMEM, "kv cache: no memory for a sliding-window ring");
        }
    }
    kv->n_ring_free--;
    seq->ring = r + 1;
    return SP_OK;
}

sp_status sp_kv_seq_reserve(struct sp_kv *kv, struct sp_kv_seq *seq, uint32_t n_pos)
{
    sp_status rst = sp_kv_ring_take(kv, seq);
    if (rst != SP_OK)
        return rst;
    uint32_t need = (uint32_t)sp_kv_blocks_for(n_pos);
    uint32_t first_write = seq->n_pos / kv->block_tokens; /* block of the first new position */
    bool cow = n_pos > seq->n_pos && first_write < seq->n_blocks && kv->refs[seq->blocks[first_write]] > 1;
    uint32_t extra = (need > seq->n_blocks ? need - seq->n_blocks : 0) + (cow ? 1 : 0);
    if (extra > sp_kv_available(kv))
        return sp_error_set(SP_ERR_FULL, "kv cache: need %u more blocks, %u available", extra,
                            sp_kv_available(kv));
    sp_status st = sp_kv_seq_grow(seq, need);
    if (st != SP_OK)
        return st;
    if (cow) {
        uint32_t src = seq->blocks[first_write];
        uint32_t dst = sp_kv_take(kv, first_write ? seq->blocks[first_write - 1] : SP_KV_NONE);
        sp_kv_copy_block(kv, dst, src);
        sp_kv_unref(kv, src);
        seq->blocks[first_write] = dst;
    }
    while (seq->n_blocks < need) {
        seq->blocks[seq->n_blocks] = sp_kv_take(kv, seq->n_blocks ? seq->blocks[seq->n_blocks - 1] : SP_KV_NONE);
        seq->n_blocks++;
    }
    if (n_pos > seq->n_pos)
        seq->n_pos = n_pos;
    return SP_OK;
}

void sp_kv_seq_release(struct sp_kv *kv, struct sp_kv_seq *seq)
{
    for (uint32_t i = 0; i < seq->n_blocks; i++)
        sp_kv_unref(kv, seq->blocks[i]);
    if (seq->ring)
        kv->ring_free[kv->n_ring_free++] = seq->ring - 1;
    free(seq->blocks);
    memset(seq, 0, sizeof *seq);
}

sp_status sp_kv_seq_truncate(struct sp_kv *kv, struct sp_kv_seq *seq, uint32_t n_pos)
{
    if (n_pos >= seq->n_pos)
        return SP_OK;
    if (n_pos < seq->n_hashed * kv->block_tokens)
        return sp_error_set(SP_ERR_INTERNAL, "kv cache: rolling back to %u positions would cut into %u cached blocks",
                            n_pos, seq->n_hashed);
    uint32_t keep = (uint32_t)sp_kv_blocks_for(n_pos);
    while (seq->n_blocks > keep)
        sp_kv_unref(kv, seq->blocks[--seq->n_blocks]);
    if (keep) /* the last block kept is where the sequence grows again */
        kv->tail_bits[seq->blocks[keep - 1] / 64] |= 1ull << (seq->blocks[keep - 1] % 64);
    seq->n_pos = n_pos;
    return SP_OK;
}

uint32_t sp_kv_seq_len(const struct sp_kv_seq *seq) { return seq->n_pos; }

sp_status sp_kv_seq_fork(struct sp_kv *kv, struct sp_kv_seq *dst, const struct sp_kv_seq *src)
{
    memset(dst, 0, sizeof *dst);
    sp_status st = sp_kv_seq_grow(dst, src->n_blocks);
    if (st != SP_OK)
        return st;
    if (src->ring) { /* rings are private: copy the window */
        if ((st = sp_kv_ring_take(kv, dst)) != SP_OK)
            return st;
        memcpy(kv->ring_k[dst->ring - 1], kv->ring_k[src->ring - 1], kv->ring_k_bytes);
        memcpy(kv->ring_v[dst->ring - 1], kv->ring_v[src->ring - 1], kv->ring_v_bytes);
    }
    for (uint32_t i = 0; i < src->n_blocks; i++) {
        dst->blocks[i] = src->blocks[i];
        sp_kv_ref(kv, src->blocks[i]);
    }
    dst->n_blocks = src->n_blocks;
    dst->n_pos = src->n_pos;
    dst->hash = src->hash;
    dst->n_hashed = src->n_hashed;
    dst->prev = src->prev;
    dst->prev_gen = src->prev_gen;
    return SP_OK;
}

/* Chained block hash: FNV-1a over the previous hash and the block's tokens;
 * never 0 (0 marks "not cached"). */
static uint64_t sp_kv_chain(uint64_t prev, const sp_token *toks, uint32_t n)
{
    uint64_t h = prev ^ 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = (uint32_t)toks[i];
        for (int k = 0; k < 4; k++)
            h = (h ^ ((t >> (8 * k)) & 0xff)) * 0x100000001b3ull;
    }
    return h ? h : 1;
}

uint32_t sp_kv_prefix_attach_if(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens,
                                uint32_t max_tokens, bool (*ok)(void *ud, uint32_t i, uint64_t key), void *ud)
{
    uint32_t bt = kv->block_tokens, n = 0, best = 0;
    if (kv->n_local)
        return 0; /* rings cannot be rebuilt from cached blocks */
    uint64_t h = 0, best_h = 0;
    uint32_t prev = SP_KV_NONE, prev_gen = 0;
    /* the matching blocks go into seq's table unreferenced; the first
     * `best` of them are kept */
    while ((n + 1) * bt <= max_tokens) {
        uint64_t nh = sp_kv_chain(h, tokens + (size_t)n * bt, bt);
        uint32_t b = sp_kv_table_find(kv, nh, tokens + (size_t)n * bt, prev, prev_gen);
        if (b == SP_KV_NONE || sp_kv_seq_grow(seq, n + 1) != SP_OK)
            break;
        seq->blocks[n++] = b;
        h = nh;
        prev = b;
        prev_gen = kv->gen[b];
        if (!ok || ok(ud, n - 1, ((uint64_t)prev_gen << 32) | b))
            best = n, best_h = h;
    }
    for (uint32_t i = 0; i < best; i++)
        sp_kv_ref(kv, seq->blocks[i]);
    seq->n_blocks = best;
    seq->n_hashed = best;
    seq->hash = best_h;
    seq->prev = best ? seq->blocks[best - 1] : SP_KV_NONE;
    seq->prev_gen = best ? kv->gen[seq->prev] : 0;
    seq->n_pos = best * bt;
    if (best) {
        kv->hits++;
        kv->tokens_reused += (uint64_t)best * bt;
    }
    return seq->n_pos;
}

uint64_t sp_kv_prefix_key(const struct sp_kv_seq *seq)
{
    return seq->n_hashed ? ((uint64_t)seq->prev_gen << 32) | seq->prev : 0;
}

uint32_t sp_kv_prefix_attach(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens, uint32_t max_tokens)
{
    return sp_kv_prefix_attach_if(kv, seq, tokens, max_tokens, NULL, NULL);
}

void sp_kv_prefix_commit(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens)
{
    sp_kv_prefix_commit_each(kv, seq, tokens, NULL, NULL);
}

void sp_kv_prefix_commit_each(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens,
                              void (*each)(void *ud, uint32_t i, uint64_t key), void *ud)
{
    uint32_t bt = kv->block_tokens;
    if (kv->n_local)
        return;
    while ((seq->n_hashed + 1) * bt <= seq->n_pos) {
        uint32_t i = seq->n_hashed, b = seq->blocks[i];
        const sp_token *bt_toks = tokens + (size_t)i * bt;
        uint64_t h = sp_kv_chain(seq->hash, bt_toks, bt);
        uint32_t parent = i ? seq->prev : SP_KV_NONE, parent_gen = i ? seq->prev_gen : 0;
        seq->hash = h;
        seq->n_hashed++;
        uint32_t same = kv->hash[b] ? b : sp_kv_table_find(kv, h, bt_toks, parent, parent_gen);
        if (same != SP_KV_NONE) { /* already cached (shared block, or an equal block exists) */
            seq->prev = same;
            seq->prev_gen = kv->gen[same];
            if (each)
                each(ud, i, ((uint64_t)seq->prev_gen << 32) | same);
            continue;
        }
        kv->hash[b] = h;
        kv->gen[b]++;
        kv->parent[b] = parent;
        kv->parent_gen[b] = parent_gen;
        seq->prev = b;
        seq->prev_gen = kv->gen[b];
        memcpy(kv->tokens + (size_t)b * bt, bt_toks, bt * sizeof *bt_toks);
        kv->lru[b] = ++kv->clock;
        uint32_t s = sp_kv_slot(kv, h);
        while (kv->table[s] != SP_KV_NONE)
            s = (s + 1) & kv->table_mask;
        kv->table[s] = b;
        if (each)
            each(ud, i, ((uint64_t)seq->prev_gen << 32) | b);
    }
}

void sp_kv_touch(struct sp_kv *kv)
{
    memset(kv->k, 0, kv->k_bytes);
    memset(kv->v, 0, kv->v_bytes);
}
