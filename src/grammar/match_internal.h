/* The matcher's state, shared by match.c (the automaton at run time, masks)
 * and token_walk.c (the trie walks that split a state's tokens); internal
 * to src/grammar. */
#ifndef SP_GRAMMAR_MATCH_INTERNAL_H
#define SP_GRAMMAR_MATCH_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar_internal.h"
#include "grammar/tokens.h"

#define NODE_ROOT 1u
#define NODE_ESC 2u
#define FIRST_NODE 3u
#define MAX_DEPTH 2048u
#define MASK_CACHE_BYTES (64u << 20)
#define ROWS_MAX (8u << 20)     /* row entries (4 bytes each) before transitions go to the hash */
#define NO_TRANS UINT32_MAX

struct htab {
    uint64_t *key;
    uint32_t *val;   /* value + 1; 0: empty */
    uint32_t cap, n; /* cap: a power of two */
};

struct collect {
    uint32_t *acc;       /* accepted: ranges [acc[2i], acc[2i+1]) of sorted indices */
    uint32_t *unc;       /* uncertain: sorted indices */
    uint32_t n_acc_r, n_acc, n_unc;
};

struct region;

struct pre {          /* per read state, made by its first mask; one allocation */
    uint32_t n_acc, n_unc;
    uint8_t is_bits;
    uint64_t *bits;   /* accepted: [n_words] bitmap when is_bits */
    uint32_t *acc;    /* accepted: [n_acc] ids otherwise */
    uint32_t *unc;    /* uncertain: [n_unc] ids, sorted by bytes */
    uint16_t *lcp;    /* [n_unc] bytes shared with the previous uncertain token */
};

/* A grammar is its compiled form and bind results (immutable once bound,
 * shared by its copies: `proto` points at the owner, which lives while any
 * copy does) and its own matching state (nodes, dstates, masks). */
struct sp_grammar {
    atomic_int refs;
    struct sp_grammar *proto;    /* a copy: whose shared part this borrows; NULL: owns it */

    /* ---- shared ---- */
    struct sp_grammar_nfa nfa;
    char *schema;                /* the JSON Schema it came from, or NULL */
    size_t schema_len;
    const struct sp_grammar_tokens *toks;
    char *trigger;               /* lazy: the text before which output is free */
    uint8_t *trig_dfa;           /* lazy: [trig_len][256] progress through the trigger */
    uint32_t trig_len;
    uint64_t *lazy_masks;        /* lazy, made at bind: [trig_len][n_words] masks before the trigger */
    uint32_t *lazy_count;        /* allowed tokens of each */

    /* ---- own ---- */
    bool failed_overflow;
    uint32_t trig_state;         /* lazy: the dstate once the trigger is read; 0: not yet */

    /* nodes */
    uint32_t *nq, *np;
    uint16_t *ndepth;
    uint32_t n_nodes, cap_nodes;
    struct htab node_tab;
    uint32_t *mark, stamp;

    /* dstates: [ds_off[i], ds_off[i + 1]) in ds_pool; 0 is DEAD */
    uint32_t *ds_off, *ds_pool;
    uint64_t *ds_hash;
    struct sp_gbits *ds_reads;   /* bytes some top reads (all when it holds NODE_ESC) */
    struct sp_gbits *ds_self;    /* bytes known to lead back to the same dstate */
    uint8_t *ds_flags;           /* 1: holds NODE_ROOT, 2: holds NODE_ESC, 4: has real tops */
    uint32_t *ds_mask;           /* mask slot + 1, 0: none */
    uint32_t n_ds, cap_ds, n_pool, cap_pool;
    struct htab ds_tab;          /* hash -> id, probed by hash */
    uint32_t *ds_row;            /* offset + 1 of the dstate's row in rows, 0: none */
    uint32_t *rows;              /* per byte the dstate reads (by rank): target, or NO_TRANS */
    uint32_t n_rows, cap_rows;
    struct htab trans;           /* (ds << 8 | byte) -> ds, once rows are at ROWS_MAX */

    /* scratch for closure */
    uint32_t *work, *out;
    uint32_t cap_work, cap_out;
    uint64_t steps, step_limit;  /* closure items (and bind's trie nodes); a closure past
                                    step_limit (0: none, the case outside bind) fails */

    /* bind results (shared) */
    struct sp_gbits *follow;     /* [n_rules] bytes that can come right after a rule ends */
    struct pre *_Atomic *pre;    /* [n_states] NULL until a mask needs the state */
    _Atomic uint64_t pre_bytes;  /* of the owner: what the made pre take */
    uint32_t n_words;

    /* scratch of the trie walks (own, made by the first) */
    struct collect *wc;
    uint32_t *wds, *wids;
    uint8_t *wesc;
    uint32_t *wreg, cap_wreg;    /* a region being made: pairs (see struct region) */
    const struct region **dreg;  /* [cap_dreg] per dstate: its region, &no_region, NULL: not known */
    uint32_t cap_dreg;

    /* masks (own) */
    uint64_t *masks;             /* [n_slots][n_words] */
    uint32_t *slot_ds;           /* dstate of each slot */
    uint32_t *slot_count;
    uint32_t n_slots, max_slots;
    uint32_t *walk;              /* [max_len + 1] dstates along a token */
    uint64_t hits, misses;
    uint64_t n_whole;            /* subtrees the walks accepted whole */
    uint64_t n_region;           /* first-level subtrees the walks took from regions */
    uint64_t *uni;               /* [cap_uni] per dstate: bytes 0xc0.. as bits; bit 0 (0xc0, never a
                                    lead): known; others: each whole character with this lead
                                    byte leads back to the dstate (walk_uni) */
    uint32_t cap_uni;
    bool plain_walk;             /* tests: no subtree accepted whole */
    uint32_t cls_nd;             /* self_classes' dstate (UINT32_MAX: none), its self set's */
    uint64_t cls_w[2];           /* ASCII words then, and its classes */
    unsigned cls_none, cls_full;
};

static inline const uint32_t *ds_nodes(const struct sp_grammar *g, uint32_t d, uint32_t *n)
{
    *n = g->ds_off[d + 1] - g->ds_off[d];
    return g->ds_pool + g->ds_off[d];
}

static inline uint32_t gbits_count(const struct sp_gbits *b)
{
    return (uint32_t)(__builtin_popcountll(b->w[0]) + __builtin_popcountll(b->w[1]) +
                      __builtin_popcountll(b->w[2]) + __builtin_popcountll(b->w[3]));
}

/* The index of byte c among the bytes set in b (c must be set). */
static inline uint32_t gbits_rank(const struct sp_gbits *b, unsigned c)
{
    uint32_t k = (uint32_t)__builtin_popcountll(b->w[c >> 6] & ((1ull << (c & 63)) - 1));
    for (unsigned w = 0; w < c >> 6; w++)
        k += (uint32_t)__builtin_popcountll(b->w[w]);
    return k;
}

/* The dstate after reading byte c in d, computed once: UINT32_MAX on no
 * memory.  Transitions live in per-dstate rows indexed by the byte's rank
 * among the bytes d reads (a trie walk steps siblings from one dstate, so
 * the row stays in cache); past ROWS_MAX entries in a hash. */
uint32_t sp_grammar_step_new(struct sp_grammar *g, uint32_t d, unsigned c);

static inline uint32_t step(struct sp_grammar *g, uint32_t d, unsigned c)
{
    if (d == SP_GRAMMAR_DEAD || !sp_gbits_has(&g->ds_reads[d], c))
        return SP_GRAMMAR_DEAD;
    if (sp_gbits_has(&g->ds_self[d], c)) /* loops (string characters) skip the lookup */
        return d;
    if (g->ds_row[d]) {
        uint32_t r = g->rows[g->ds_row[d] - 1 + gbits_rank(&g->ds_reads[d], c)];
        if (r != NO_TRANS)
            return r;
    }
    return sp_grammar_step_new(g, d, c);
}

/* Grows *p (of *cap elements of elem bytes) to hold need; false on no
 * memory or past UINT32_MAX elements. */
bool sp_grammar_grow(void **p, uint32_t *cap, uint32_t need, size_t elem);
/* The node (q, parent); 0 on allocation failure or beyond MAX_DEPTH. */
uint32_t sp_grammar_node(struct sp_grammar *g, uint32_t q, uint32_t parent);
/* The dstate holding the single stack top x; UINT32_MAX on no memory. */
uint32_t sp_grammar_single(struct sp_grammar *g, uint32_t x);
/* The tokens of read state q (token_walk.c); NULL on no memory. */
const struct pre *sp_grammar_pre_of(struct sp_grammar *g, uint32_t q);

#endif
