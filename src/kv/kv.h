/* KV cache: one pool of fixed-size blocks shared by every sequence.
 *
 * A block holds a fixed number of positions (sp_kv_stats: block_tokens) of
 * K and V for every layer, each as f16 or quantized (q8_0, q4_0: the
 * shape's types).  A sequence owns a block table (logical
 * block i -> pool block).  Blocks are reference-counted: forks (n > 1,
 * beam search) share blocks and copy a shared block only when writing into
 * it; the prefix cache keeps full prompt blocks, found through a hash of
 * their tokens and of every token before them but matched on the tokens
 * themselves (a block's own, and its parent block's identity), and evicts
 * idle ones least-recently-used.
 *
 * Sliding-window (local) layers keep only what their window needs: instead
 * of blocks, each sequence owns a ring of `ring_len` positions (window + the
 * largest batch) for every local layer, so their memory does not grow with
 * the context.  A ring cannot be rebuilt from a cached prefix, so models
 * with local layers do not use the prefix cache (as llama.cpp without
 * swa_full).
 *
 * The pool (struct sp_kv) is opaque.  Its users write through sp_kv_store,
 * read through a view (sp_kv_view: the one part of the layout readers see,
 * described there), and ask sp_kv_stats for sizes and counters.  Running
 * out of blocks is a normal condition: functions return SP_ERR_FULL.
 * Owned by the engine's thread; not thread-safe. */
#ifndef SP_KV_H
#define SP_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

struct sp_kv;

/* What a cache holds, apart from how many blocks. */
struct sp_kv_shape {
    uint32_t n_layer, n_head_kv, head_dim;
    const bool *local; /* [n_layer] sliding-window layers; NULL: none */
    const bool *stateless; /* [n_layer] layers without keys and values (linear layers, whose
                              state the state room keeps); NULL: none.  When every layer is,
                              blocks hold no rows (n_head_kv and head_dim may be 0) and only
                              number positions for the block tables and the prefix cache. */
    const uint32_t *heads_kv, *head_dims; /* [n_layer] each layer's KV heads and head width (NULL: n_head_kv,
                                             head_dim for every layer; Gemma 4's local and global layers
                                             differ); a layer reading another's has its source's */
    const uint32_t *source; /* [n_layer] the layer whose keys and values each layer reads: its own
                               index, or an earlier layer of the same kind (local or not), which
                               itself reads its own; NULL: every layer its own.  A layer reading
                               another's holds no rows (blocks and rings leave it out), its view
                               is the source's, and it is never stored to (its caller computes
                               no keys for it: Gemma 3n / 4's shared_kv_layers) */
    uint32_t ring_len; /* positions a local layer keeps per sequence (window + largest batch) */
    uint32_t n_rings;  /* most sequences alive at once that need rings */
    sp_cache_type type_k, type_v; /* how keys and values are stored (0: f16); quantized
                                     types need head_dim % SP_KV_QK == 0 */
    bool v_in_k;       /* each position's value is its key (multi-head latent attention: the
                          latent and RoPE key serve as both): only keys are stored, readers
                          take a run's values from its key tile (sp_kv_view_vrows).  f16
                          keys and values, no local layers, every layer's head width <= SP_KV_VK_DIM_MAX. */
};

/* A sequence's place in the cache.  The caller owns the storage (zeroed
 * before first use) and passes it to the sp_kv_seq_* functions; its fields
 * belong to this room. */
struct sp_kv_seq {
    uint32_t *blocks;    /* [cap] pool block ids */
    uint32_t n_blocks, cap;
    uint32_t n_pos;      /* positions written */
    uint64_t hash;       /* prefix-cache hash through the last full block registered */
    uint32_t n_hashed;   /* blocks registered with the prefix cache */
    uint32_t prev, prev_gen; /* the cached block (and its generation) holding block n_hashed - 1's
                                tokens: the parent a next registered block names */
    uint32_t ring;       /* ring slot + 1 for local layers (0: none yet) */
};

struct sp_kv_stats {
    uint32_t block_tokens;                          /* positions per block */
    uint32_t blocks_total, blocks_used, blocks_cached; /* cached: idle in the prefix cache */
    uint64_t bytes;                                 /* K/V memory: the blocks plus the rings asked for */
    uint64_t prefix_hits, prefix_tokens_reused;
};

/* Bytes one block takes (K and V of every paged layer; 0 when no layer is). */
uint64_t sp_kv_block_bytes(const struct sp_kv_shape *shape);
/* Blocks that hold n_pos positions. */
uint64_t sp_kv_blocks_for(uint64_t n_pos);

/* A cache of n_blocks blocks of this shape.  SP_ERR_ARG for an empty
 * geometry, SP_ERR_NOMEM when it does not fit. */
sp_status sp_kv_new(struct sp_kv **out, const struct sp_kv_shape *shape, uint32_t n_blocks);
/* Writes the paged pool once so its pages are resident from the start
 * (predictable memory; see spindle info). */
void sp_kv_touch(struct sp_kv *kv);
void sp_kv_free(struct sp_kv *kv);

/* Blocks not held by any sequence (free or idle in the prefix cache). */
uint32_t sp_kv_available(const struct sp_kv *kv);
/* Sizes and counters; `rings`: sliding-window rings to count in bytes. */
void sp_kv_stats(const struct sp_kv *kv, uint32_t rings, struct sp_kv_stats *out);

/* Makes positions [0, n_pos) of seq writable and counts them as written
 * (the caller stores them, sp_kv_store, before the next prefix commit):
 * allocates blocks and copies a shared partial block before it is
 * written.  SP_ERR_FULL if short of blocks (nothing is changed then). */
sp_status sp_kv_seq_reserve(struct sp_kv *kv, struct sp_kv_seq *seq, uint32_t n_pos);
/* Drops the sequence's references; its blocks become free (or stay cached). */
void sp_kv_seq_release(struct sp_kv *kv, struct sp_kv_seq *seq);
/* Rolls the sequence back to its first n_pos positions (speculative
 * decoding's rejected drafts): blocks wholly past n_pos are released, the
 * positions kept are untouched, and later writes go to [n_pos, ...) as for
 * a sequence that never held more.  Positions in blocks registered with the
 * prefix cache are never rolled back (SP_ERR_INTERNAL), so a rejected token never
 * reaches the cache when the caller registers only what it keeps.  Ring
 * (sliding-window) layers need nothing: positions past n_pos are rewritten
 * before a query reads them, and what their writes overwrote lies further
 * back than any window reaches (a ring holds window + the largest batch). */
sp_status sp_kv_seq_truncate(struct sp_kv *kv, struct sp_kv_seq *seq, uint32_t n_pos);
/* Positions seq holds (reserved, and not rolled back). */
uint32_t sp_kv_seq_len(const struct sp_kv_seq *seq);
/* dst (empty) shares all of src's blocks. */
sp_status sp_kv_seq_fork(struct sp_kv *kv, struct sp_kv_seq *dst, const struct sp_kv_seq *src);

/* Prefix cache: attaches to an empty `seq` the cached blocks matching the
 * longest prefix of tokens[0, max_tokens) in whole blocks; returns the
 * positions covered (they count as written). */
uint32_t sp_kv_prefix_attach(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens,
                             uint32_t max_tokens);
/* Registers every full block of `seq` whose tokens (tokens[0, written
 * positions)) are not yet registered. */
void sp_kv_prefix_commit(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens);

/* sp_kv_prefix_commit, calling each(ud, i, key) for every block i it
 * registers.  A key names a registered block: which registration of which
 * pool block holds block i's tokens (never 0; a block evicted and
 * registered again gets a new key).  What else a prefix needs (the
 * recurrent state's snapshots) is filed under the key of its last block. */
void sp_kv_prefix_commit_each(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens,
                              void (*each)(void *ud, uint32_t i, uint64_t key), void *ud);
/* The key of seq's last registered block (0: none). */
uint64_t sp_kv_prefix_key(const struct sp_kv_seq *seq);
/* sp_kv_prefix_attach keeping the longest run of matching blocks whose
 * last block i (key) ok(ud, i, key) accepts (ok NULL: any). */
uint32_t sp_kv_prefix_attach_if(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens,
                                uint32_t max_tokens, bool (*ok)(void *ud, uint32_t i, uint64_t key), void *ud);

/* Stores the key and value of position `pos` (reserved) of seq in `layer`:
 * k and v are [n_head_kv][head_dim] f32, rounded to f16 as C's cast does,
 * or quantized as ggml's reference quantizer does (per 32 values: q8_0
 * d = amax / 127, q = round(x / d); q4_0 d = max / -8, q = x / d + 8.5
 * truncated, clipped to 15). */
void sp_kv_store(struct sp_kv *kv, const struct sp_kv_seq *seq, uint32_t layer, uint32_t pos, const float *k,
                 const float *v);

/* ---- reading: the layout readers see ----
 * Keys lie transposed in tiles of SP_KV_TILE consecutive positions (those
 * with equal pos / SP_KV_TILE), so one load gives one value of 16 keys and
 * a key pass needs no transpose.  A tile of one KV head is, by type:
 *   f16   [head_dim][SP_KV_TILE] f16;
 *   q8_0  head_dim / SP_KV_QK groups of SP_KV_TILE * 34 bytes: the 16 keys'
 *         f16 scales d[16], then int8 q[32][16] (value e of key i at
 *         q[e][i]);
 *   q4_0  groups of SP_KV_TILE * 18 bytes: d[16], then bytes b[16][16], the
 *         low nibble of b[e][i] value e of key i and its high nibble value
 *         e + 16, each stored + 8;
 * a value of a quantized key is d[i] * q, exact in f32.  A quantized
 * cache holds rotated rows, H k and H v (sp_kv_rotate): the rotation
 * spreads a head's few large channels over the whole row, so a block's
 * scale fits its values (llama.cpp's attention rotation does the same).
 * Readers rotate the query (H q / r . H k = q . k) and rotate the weighted
 * sum of values back (H / r undoes H).  Values lie as rows
 * of head_dim f16, or of head_dim / 32 ggml blocks (q8_0: f16 d, int8
 * q[32]; q4_0: f16 d, bytes b[16] holding values j and j + 16 in the low
 * and high nibble, + 8).  A run (sp_kv_view_run) is a stretch of positions
 * stored one after another: whole tiles of keys, rows of values one row
 * apart; runs hold whole tiles.  The addresses are valid until seq's blocks
 * change (its next reserve, fork or release). */
#define SP_KV_TILE 16
#define SP_KV_QK 32 /* values per quantized block */
#define SP_KV_QDIM_MAX 1024 /* largest head_dim a quantized type takes */
#define SP_KV_VK_DIM_MAX 1024 /* largest head_dim of a v_in_k cache */

/* Bytes of one position's key or value of one KV head stored as `t`. */
static inline uint32_t sp_kv_row_bytes(sp_cache_type t, uint32_t head_dim)
{
    return (uint32_t)sp_cache_type_bytes(t, head_dim);
}

/* One sequence's keys and values in one layer.  Its fields are for the
 * inline functions below and for the readers' dispatch on the types. */
struct sp_kv_view {
    const uint8_t *k, *v;       /* the layer's block 0 (paged) or the sequence's ring */
    const uint32_t *blocks;     /* the sequence's block table; NULL for a ring */
    size_t k_block, v_block;    /* bytes from one pool block to the next */
    size_t k_head, v_head;      /* bytes from one KV head to the next */
    uint32_t k_row, v_row;      /* bytes of one position of one head (sp_kv_row_bytes) */
    uint32_t span;              /* positions in a block, or in the ring */
    uint32_t head_dim;
    sp_cache_type kt, vt;       /* the key and value types */
    bool v_in_k;                /* the values are the keys (sp_kv_shape); v, v_row are unset */
};

struct sp_kv_view sp_kv_view(const struct sp_kv *kv, const struct sp_kv_seq *seq, uint32_t layer);

/* The key tile holding `pos` in KV head `head` (pos is its lane
 * pos % SP_KV_TILE), any type. */
static inline const uint8_t *sp_kv_view_ktile(const struct sp_kv_view *w, uint32_t pos, uint32_t head)
{
    const uint32_t slot = pos % w->span;
    const size_t blk = w->blocks ? (size_t)w->blocks[pos / w->span] * w->k_block : 0;
    return w->k + head * w->k_head + blk + (size_t)(slot / SP_KV_TILE) * SP_KV_TILE * w->k_row;
}

/* The f16 key of `pos` in KV head `head`: its value d at + d * SP_KV_TILE;
 * its tile starts pos % SP_KV_TILE values before. */
static inline const uint16_t *sp_kv_view_k(const struct sp_kv_view *w, uint32_t pos, uint32_t head)
{
    return (const uint16_t *)(const void *)sp_kv_view_ktile(w, pos, head) + pos % SP_KV_TILE;
}

/* The value row of `pos` in KV head `head` (v_row bytes), any type. */
static inline const uint8_t *sp_kv_view_vrow(const struct sp_kv_view *w, uint32_t pos, uint32_t head)
{
    const uint32_t slot = pos % w->span;
    const size_t blk = w->blocks ? (size_t)w->blocks[pos / w->span] * w->v_block : 0;
    return w->v + head * w->v_head + blk + (size_t)slot * w->v_row;
}

/* The value rows of positions [pos, pos + n) (n from sp_kv_view_run, so
 * within one key tile) in KV head `head`, *row bytes apart: the stored
 * rows, or for a v_in_k cache the keys' f16 values copied out of their
 * tile into buf ([n][head_dim], SP_KV_TILE * SP_KV_VK_DIM_MAX at most), the
 * same values the rows would hold. */
static inline const uint8_t *sp_kv_view_vrows(const struct sp_kv_view *w, uint32_t pos, uint32_t head, uint32_t n,
                                              uint16_t *buf, uint32_t *row)
{
    if (!w->v_in_k) {
        *row = w->v_row;
        return sp_kv_view_vrow(w, pos, head);
    }
    const uint16_t *k = (const uint16_t *)(const void *)sp_kv_view_ktile(w, pos, head) + pos % SP_KV_TILE;
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t d = 0; d < w->head_dim; d++)
            buf[(size_t)r * w->head_dim + d] = k[(size_t)d * SP_KV_TILE + r];
    *row = w->head_dim * 2;
    return (const uint8_t *)buf;
}

/* The f16 value row of `pos` in KV head `head` (head_dim values). */
static inline const uint16_t *sp_kv_view_v(const struct sp_kv_view *w, uint32_t pos, uint32_t head)
{
    return (const uint16_t *)(const void *)sp_kv_view_vrow(w, pos, head);
}

/* x[0..n) replaced by H x, H the Walsh-Hadamard transform over blocks of
 * r values, r the largest power of two dividing n (sums and differences
 * only, in one fixed order: the stages len = 1, 2, 4, ... each turning the
 * pairs (j, j + len) into (u + v, u - v)); with `back`, by H x / r.  n is a
 * multiple of 16 (a quantized head size is one of SP_KV_QK).  H H = r I, so H / r
 * undoes H, and (H q / r) . (H k) = q . k.  The scale is a power of two
 * (exact) and left out of the stored rows: scaled to be orthonormal, rows
 * of small values would put q8_0 / q4_0 scales among f16's subnormals. */
void sp_kv_rotate(float *x, uint32_t n, bool back);

/* f16 bits at p (any alignment) as f32. */
static inline float sp_kv_f16_at(const uint8_t *p)
{
    _Float16 h;
    __builtin_memcpy(&h, p, sizeof h);
    return (float)h;
}

/* Value e of key `lane` of a quantized key tile (type t), exact. */
static inline float sp_kv_qkey(const uint8_t *tile, sp_cache_type t, int lane, int e)
{
    const size_t gb = (size_t)SP_KV_TILE * (t == SP_CACHE_Q8_0 ? 34 : 18);
    const uint8_t *g = tile + (size_t)(e / SP_KV_QK) * gb, *q = g + 2 * SP_KV_TILE;
    const int i = e % SP_KV_QK;
    const float d = sp_kv_f16_at(g + 2 * lane);
    if (t == SP_CACHE_Q8_0)
        return d * (float)(int8_t)q[i * SP_KV_TILE + lane];
    const uint8_t b = q[(i % 16) * SP_KV_TILE + lane];
    return d * (float)((i < 16 ? b & 15 : b >> 4) - 8);
}

/* Value e of a quantized value row (type t), exact. */
static inline float sp_kv_qval(const uint8_t *row, sp_cache_type t, int e)
{
    const uint8_t *b = row + (size_t)(e / SP_KV_QK) * (t == SP_CACHE_Q8_0 ? 34 : 18);
    const int i = e % SP_KV_QK;
    const float d = sp_kv_f16_at(b);
    if (t == SP_CACHE_Q8_0)
        return d * (float)(int8_t)b[2 + i];
    return d * (float)((i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4) - 8);
}

/* The length of the run that starts at `pos`, at most max_n. */
static inline uint32_t sp_kv_view_run(const struct sp_kv_view *w, uint32_t pos, uint32_t max_n)
{
    uint32_t left = w->span - pos % w->span;
    return left < max_n ? left : max_n;
}

#endif
