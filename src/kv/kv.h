/* KV cache: one pool of fixed-size blocks shared by every sequence.
 *
 * A block holds `block_tokens` consecutive positions of K and V for every
 * layer, as f16.  The arrays are layer-major and head-major, blocks inside:
 * v[layer][head][block][slot][head_dim], and the keys the same but
 * transposed in tiles of 16 positions ([d][16], SP_KV_TILE), so one load
 * gives one value of 16 keys.  What attention reads for one KV head of a
 * block is contiguous (2 KiB of keys and 2 KiB of values for a 16-position
 * block of a 64-wide head), and a sequence holding consecutive blocks (the
 * allocator prefers the block after a sequence's last one, else the
 * lowest free) is one stream per head, which the hardware prefetcher
 * follows.  A sequence owns a block table
 * (logical block i -> pool block).  Blocks are reference-counted: forks (n > 1,
 * beam search) share blocks and copy a shared block only when writing into it;
 * the prefix cache keeps full prompt blocks, found through a hash of their
 * tokens and of every token before them but matched on the tokens themselves
 * (a block's own, and its parent block's identity), and evicts idle ones
 * least-recently-used.
 *
 * Sliding-window (local) layers keep only what their window needs: instead of
 * blocks, each sequence owns a ring of `ring_len` positions (window + the
 * largest batch) for every local layer, so their memory does not grow with the
 * context.  A ring cannot be rebuilt from a cached prefix, so models with
 * local layers do not use the prefix cache (as llama.cpp without swa_full).
 *
 * Running out of blocks is a normal condition: functions return SP_ERR_FULL.
 * Owned by the engine's thread; not thread-safe.
 */
#ifndef SP_KV_H
#define SP_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

#define SP_KV_NONE UINT32_MAX

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

struct sp_kv {
    uint32_t n_layer, kv_dim, head_dim, block_tokens, n_blocks; /* kv_dim = KV heads x head_dim */
    uint32_t n_global, n_local;  /* paged layers, ring layers */
    uint32_t *layer_index;       /* [n_layer] index among its kind */
    bool *layer_local;           /* [n_layer] */
    /* Layer- and head-major: one KV head's blocks of one layer lie side by
     * side, so a sequence given consecutive blocks reads each head's keys
     * and values as one stream the hardware prefetcher follows. */
    size_t block_stride;   /* elements between blocks: block_tokens * head_dim */
    size_t head_stride;    /* elements between KV heads: n_blocks * block_stride */
    size_t layer_stride;   /* elements between paged layers: n_head_kv * head_stride */
    size_t paged_bytes;    /* bytes of each of k and v */
    uint16_t *k, *v;       /* f16 [n_global][n_head_kv][n_blocks][block_tokens][head_dim], keys in
                              tiles (sp_kv_k_at) */
    /* local layers: ring slots, allocated on first use, reused after */
    uint32_t ring_len, n_rings;
    uint16_t **ring_k, **ring_v; /* [n_rings] -> [n_local][n_head_kv][ring_len][head_dim], keys in tiles */
    uint32_t *ring_free;         /* stack of free slots */
    uint32_t n_ring_free;
    uint32_t *refs;        /* [n_blocks] sequences using the block */
    uint64_t *free_bits;   /* [n_blocks / 64 rounded up] bit b set: block b unreferenced and uncached */
    uint64_t *tail_bits;   /* the same shape: block b is the last a sequence took (it may grow past it) */
    uint32_t n_free;
    /* prefix cache */
    uint64_t *hash;        /* [n_blocks] hash of a cached block (0: not cached) */
    sp_token *tokens;      /* [n_blocks][block_tokens] to verify a hit */
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

/* local: [n_layer] flags of sliding-window layers (NULL: none); ring_len:
 * positions a local layer keeps per sequence (window + largest batch);
 * n_rings: most sequences alive at once that need rings. */
sp_status sp_kv_init(struct sp_kv *kv, uint32_t n_layer, uint32_t kv_dim, uint32_t head_dim,
                     uint32_t block_tokens, uint32_t n_blocks, const bool *local, uint32_t ring_len,
                     uint32_t n_rings);
/* Bytes of K/V memory: paged blocks plus `rings` ring slots. */
uint64_t sp_kv_bytes(const struct sp_kv *kv, uint32_t rings);
void sp_kv_free(struct sp_kv *kv);

/* Blocks not held by any sequence (free or idle in the prefix cache). */
uint32_t sp_kv_available(const struct sp_kv *kv);
static inline uint32_t sp_kv_blocks_for(const struct sp_kv *kv, uint64_t n_pos)
{
    return (uint32_t)((n_pos + kv->block_tokens - 1) / kv->block_tokens);
}

/* Makes positions [seq->n_pos, n_pos) writable: allocates blocks and copies a
 * shared partial block before it is written.  SP_ERR_FULL if short of blocks
 * (nothing is changed then).  Does not advance seq->n_pos. */
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
/* dst (empty) shares all of src's blocks. */
sp_status sp_kv_seq_fork(struct sp_kv *kv, struct sp_kv_seq *dst, const struct sp_kv_seq *src);

/* Prefix cache: attaches to an empty `seq` the cached blocks matching the
 * longest prefix of tokens[0, max_tokens) in whole blocks; returns the
 * positions covered (seq->n_pos is set to it). */
uint32_t sp_kv_prefix_attach(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens,
                             uint32_t max_tokens);
/* Registers every full block of `seq` whose tokens (tokens[0, seq->n_pos))
 * are now written and not yet registered. */
void sp_kv_prefix_commit(struct sp_kv *kv, struct sp_kv_seq *seq, const sp_token *tokens);

/* Keys are stored transposed in tiles of SP_KV_TILE positions, a tile of a
 * head being [head_dim][SP_KV_TILE]: one load gives one value of 16 keys,
 * so the key pass needs no transpose.  Blocks and rings hold whole tiles. */
#define SP_KV_TILE 16

/* Offset (in f16 values) of `pos` of `seq` in `layer`, head 0, in kv->k/v
 * (paged) or in the sequence's ring arrays (local): a value row (`tiled`
 * false) or a key's place in its tile (true). */
static inline size_t sp_kv_offset(const struct sp_kv *kv, const struct sp_kv_seq *seq, uint32_t layer, uint32_t pos,
                                  bool tiled)
{
    uint32_t li = kv->layer_index[layer];
    uint32_t slot = kv->layer_local[layer] ? pos % kv->ring_len : pos % kv->block_tokens;
    size_t in = tiled ? (size_t)(slot / SP_KV_TILE) * SP_KV_TILE * kv->head_dim + slot % SP_KV_TILE
                      : (size_t)slot * kv->head_dim;
    if (kv->layer_local[layer])
        return (size_t)li * kv->ring_len * kv->kv_dim + in;
    uint32_t b = seq->blocks[pos / kv->block_tokens];
    return (size_t)b * kv->block_stride + li * kv->layer_stride + in;
}

/* Values between one KV head's row of a position and the next head's. */
static inline size_t sp_kv_head_stride(const struct sp_kv *kv, uint32_t layer)
{
    return kv->layer_local[layer] ? (size_t)kv->ring_len * kv->head_dim : kv->head_stride;
}

/* Address of position `pos` of `seq` in layer `layer`: head h's head_dim
 * f16 values start at + h * sp_kv_head_stride(), one after another for a
 * value, SP_KV_TILE apart for a key.  The position must be reserved (and,
 * for a local layer, inside its ring). */
static inline uint16_t *sp_kv_k_at(const struct sp_kv *kv, const struct sp_kv_seq *seq, uint32_t layer,
                                   uint32_t pos)
{
    uint16_t *base = kv->layer_local[layer] ? kv->ring_k[seq->ring - 1] : kv->k;
    return base + sp_kv_offset(kv, seq, layer, pos, true);
}
static inline uint16_t *sp_kv_v_at(const struct sp_kv *kv, const struct sp_kv_seq *seq, uint32_t layer,
                                   uint32_t pos)
{
    uint16_t *base = kv->layer_local[layer] ? kv->ring_v[seq->ring - 1] : kv->v;
    return base + sp_kv_offset(kv, seq, layer, pos, false);
}

/* The run of positions [pos, pos + n) of `seq` in `layer` that is contiguous
 * in memory (values: row stride head_dim; keys: whole tiles after pos's;
 * heads sp_kv_head_stride() apart), with n the largest such count <=
 * max_n: *k and *v point at position pos, head 0.  Attention walks the
 * cache run by run. */
static inline uint32_t sp_kv_run(const struct sp_kv *kv, const struct sp_kv_seq *seq, uint32_t layer,
                                 uint32_t pos, uint32_t max_n, const uint16_t **k, const uint16_t **v)
{
    uint32_t left = kv->layer_local[layer] ? kv->ring_len - pos % kv->ring_len
                                           : kv->block_tokens - pos % kv->block_tokens;
    *k = sp_kv_k_at(kv, seq, layer, pos);
    *v = sp_kv_v_at(kv, seq, layer, pos);
    return left < max_n ? left : max_n;
}

#endif
