/* The pushdown automaton at run time, and token masks.
 *
 * A stack is a node (state, parent) in a hash-consed tree, so equal stacks
 * are equal ids; node 1 is the bottom of real stacks (and, inside a set,
 * "the input may end here"), node 2 the bottom used while precomputing
 * (and "the token ran past the end of the state's rule").  An automaton
 * state ("dstate") is the sorted set of stack tops that read a byte, plus
 * those markers, interned, so a state is a small integer and transitions
 * (dstate, byte) -> dstate are cached.
 *
 * Masks: a state q that reads a byte gets its tokens split by one trie
 * walk from the stack (q, bottom 2): accepted (consumed without leaving q's
 * rule: allowed whatever lies below), uncertain (some path left the rule
 * with bytes to go: the real stack decides) and rejected.  The walk is made
 * the first time a mask needs q (not at bind: a schema's grammar has
 * thousands of states, and a request visits a few dozen), by whichever copy
 * gets there first, and is shared by every copy.  A mask is the union of
 * the accepted sets of its tops, plus the uncertain tokens walked again from
 * the real stack (sorted by bytes, shared prefixes walked once), cached per
 * dstate. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar_internal.h"
#include "grammar/tokens.h"
#include "grammar/schema_internal.h"

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

/* A region: the trie nodes a walk from a dstate H reaches through bytes
 * that lead back to H and whole UTF-8 characters that do (walk_uni), the
 * same for every H with the same bytes leading back, the same lead bytes
 * of whole characters leading back and real tops, whatever H's rule and
 * what comes after it, so shared by every grammar of the vocabulary
 * (tokens.h's regions).  item[2k], item[2k + 1]: tokens accepted (sorted
 * indices [lo, hi)), or (REGION_EXIT, node): a node whose byte leaves H,
 * whose subtree each walk still walks from H; in trie order, the items
 * below the first-level node of byte b at [beg[b], end[b]).  Immutable
 * once published. */
#define REGION_MIN_SELF 16      /* bytes leading back before a region pays */
#define REGION_MAX_ITEMS (1u << 20)
#define REGION_EXIT UINT32_MAX
struct region {
    uint64_t self[4], uni;
    uint32_t n;                 /* pairs */
    uint32_t beg[256], end[256];
    uint32_t item[];
};
static const struct region no_region; /* dreg's "none" */

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

/* ---- hash tables ---- */


static bool htab_grow(struct htab *h)
{
    uint32_t cap = h->cap ? h->cap * 2 : 1024;
    uint64_t *key = malloc((size_t)cap * sizeof *key);
    uint32_t *val = calloc(cap, sizeof *val);
    if (!key || !val) {
        free(key);
        free(val);
        return false;
    }
    for (uint32_t i = 0; i < h->cap; i++) {
        if (!h->val[i])
            continue;
        uint32_t j = (uint32_t)sp_grammar_mix(h->key[i]) & (cap - 1);
        while (val[j])
            j = (j + 1) & (cap - 1);
        key[j] = h->key[i];
        val[j] = h->val[i];
    }
    free(h->key);
    free(h->val);
    h->key = key;
    h->val = val;
    h->cap = cap;
    return true;
}

/* Value of key, or UINT32_MAX. */
static inline uint32_t htab_get(const struct htab *h, uint64_t key)
{
    if (!h->cap)
        return UINT32_MAX;
    uint32_t j = (uint32_t)sp_grammar_mix(key) & (h->cap - 1);
    while (h->val[j]) {
        if (h->key[j] == key)
            return h->val[j] - 1;
        j = (j + 1) & (h->cap - 1);
    }
    return UINT32_MAX;
}

static bool htab_put(struct htab *h, uint64_t key, uint32_t val)
{
    if ((h->n + 1) * 2 > h->cap && !htab_grow(h))
        return false;
    uint32_t j = (uint32_t)sp_grammar_mix(key) & (h->cap - 1);
    while (h->val[j] && h->key[j] != key)
        j = (j + 1) & (h->cap - 1);
    if (!h->val[j])
        h->n++;
    h->key[j] = key;
    h->val[j] = val + 1;
    return true;
}

static void htab_free(struct htab *h)
{
    free(h->key);
    free(h->val);
    memset(h, 0, sizeof *h);
}

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    uint32_t c = *cap ? *cap : 256;
    while (c < need) {
        if (c > UINT32_MAX / 2)
            return false;
        c *= 2;
    }
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* ---- nodes ---- */

/* The node (q, parent); 0 on allocation failure or beyond MAX_DEPTH. */
static uint32_t node(struct sp_grammar *g, uint32_t q, uint32_t parent)
{
    uint64_t key = (uint64_t)q << 32 | parent;
    uint32_t id = htab_get(&g->node_tab, key);
    if (id != UINT32_MAX)
        return id;
    uint16_t depth = parent >= FIRST_NODE ? (uint16_t)(g->ndepth[parent] + 1) : 1;
    if (depth > MAX_DEPTH)
        return 0;
    if (g->n_nodes == g->cap_nodes) {
        uint32_t cap = g->cap_nodes;
        if (!grow((void **)&g->nq, &cap, g->n_nodes + 1, sizeof *g->nq))
            return 0;
        uint32_t c2 = g->cap_nodes, c3 = g->cap_nodes, c4 = g->cap_nodes;
        if (!grow((void **)&g->np, &c2, g->n_nodes + 1, sizeof *g->np) ||
            !grow((void **)&g->ndepth, &c3, g->n_nodes + 1, sizeof *g->ndepth) ||
            !grow((void **)&g->mark, &c4, g->n_nodes + 1, sizeof *g->mark))
            return 0;
        memset(g->mark + g->cap_nodes, 0, (size_t)(cap - g->cap_nodes) * sizeof *g->mark);
        g->cap_nodes = cap;
    }
    id = g->n_nodes++;
    g->nq[id] = q;
    g->np[id] = parent;
    g->ndepth[id] = depth;
    g->mark[id] = 0;
    if (!htab_put(&g->node_tab, key, id)) {
        g->n_nodes--;
        return 0;
    }
    return id;
}

static bool push_work(struct sp_grammar *g, uint32_t *n, uint32_t q, uint32_t parent)
{
    if (!grow((void **)&g->work, &g->cap_work, (*n + 1) * 2, sizeof *g->work))
        return false;
    g->work[*n * 2] = q;
    g->work[*n * 2 + 1] = parent;
    (*n)++;
    return true;
}

static bool push_out(struct sp_grammar *g, uint32_t *n, uint32_t id)
{
    if (!grow((void **)&g->out, &g->cap_out, *n + 1, sizeof *g->out))
        return false;
    g->out[(*n)++] = id;
    return true;
}

/* Expands the pending (state, parent) items into stack tops: calls push,
 * final states pop.  Appends to out; false on allocation failure or past
 * g->step_limit. */
static bool closure(struct sp_grammar *g, uint32_t n_work, uint32_t *n_out)
{
    const struct sp_grammar_nfa *a = &g->nfa;
    while (n_work) {
        if (g->step_limit && (++g->steps > g->step_limit || sp_grammar_stop_poll(g->steps)))
            return false;
        n_work--;
        uint32_t q = g->work[n_work * 2], par = g->work[n_work * 2 + 1];
        uint32_t id = node(g, q, par);
        if (!id)
            continue; /* too deep: this path ends */
        if (g->mark[id] == g->stamp)
            continue;
        g->mark[id] = g->stamp;
        const struct sp_gbits *r = &a->reads[q];
        if ((r->w[0] | r->w[1] | r->w[2] | r->w[3]) && !push_out(g, n_out, id))
            return false;
        if (a->final[q]) {
            if (par < FIRST_NODE) {
                if (g->mark[par] != g->stamp) {
                    g->mark[par] = g->stamp;
                    if (!push_out(g, n_out, par))
                        return false;
                }
            } else if (!push_work(g, &n_work, g->nq[par], g->np[par])) {
                return false;
            }
        }
        for (uint32_t i = a->edge_off[q]; i < a->edge_off[q + 1]; i++) {
            const struct sp_gedge *e = &a->edges[i];
            if (e->kind != SP_GEDGE_CALL)
                continue;
            uint32_t ret = node(g, e->target, par);
            if (ret && !push_work(g, &n_work, a->rule_start[e->arg], ret))
                return false;
        }
    }
    return true;
}

/* ---- dstates ---- */

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* Interns out[0..n) (sorted here); UINT32_MAX on allocation failure. */
static uint32_t intern(struct sp_grammar *g, uint32_t n)
{
    if (n == 0)
        return SP_GRAMMAR_DEAD;
    if (n > SP_GRAMMAR_MAX_STACKS) {
        g->failed_overflow = true;
        return SP_GRAMMAR_DEAD;
    }
    qsort(g->out, n, sizeof *g->out, cmp_u32);
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < n; i++)
        h = sp_grammar_mix(h ^ g->out[i]) + i;
    if (g->ds_tab.cap) {
        uint32_t j = (uint32_t)sp_grammar_mix(h) & (g->ds_tab.cap - 1);
        while (g->ds_tab.val[j]) {
            uint32_t id = g->ds_tab.val[j] - 1;
            if (g->ds_tab.key[j] == h && g->ds_off[id + 1] - g->ds_off[id] == n &&
                !memcmp(g->ds_pool + g->ds_off[id], g->out, n * sizeof *g->out))
                return id;
            j = (j + 1) & (g->ds_tab.cap - 1);
        }
    }
    uint32_t id = g->n_ds;
    uint32_t c1 = g->cap_ds, c2 = g->cap_ds, c3 = g->cap_ds, c4 = g->cap_ds, c5 = g->cap_ds, c6 = g->cap_ds;
    uint32_t c7 = g->cap_ds;
    if (!grow((void **)&g->ds_off, &c1, id + 2, sizeof *g->ds_off) ||
        !grow((void **)&g->ds_row, &c7, id + 2, sizeof *g->ds_row) ||
        !grow((void **)&g->ds_self, &c6, id + 2, sizeof *g->ds_self) ||
        !grow((void **)&g->ds_hash, &c2, id + 2, sizeof *g->ds_hash) ||
        !grow((void **)&g->ds_reads, &c3, id + 2, sizeof *g->ds_reads) ||
        !grow((void **)&g->ds_flags, &c4, id + 2, sizeof *g->ds_flags) ||
        !grow((void **)&g->ds_mask, &c5, id + 2, sizeof *g->ds_mask) ||
        !grow((void **)&g->ds_pool, &g->cap_pool, g->n_pool + n, sizeof *g->ds_pool))
        return UINT32_MAX;
    g->cap_ds = c1;
    memcpy(g->ds_pool + g->n_pool, g->out, n * sizeof *g->out);
    g->n_pool += n;
    g->ds_off[id + 1] = g->n_pool;
    g->ds_hash[id] = h;
    g->ds_mask[id] = 0;
    g->ds_row[id] = 0;
    struct sp_gbits rd = {{0}};
    uint8_t fl = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x = g->out[i];
        if (x == NODE_ROOT) {
            fl |= 1;
        } else if (x == NODE_ESC) {
            fl |= 2;
            memset(&rd, 0xff, sizeof rd);
        } else {
            fl |= 4;
            const struct sp_gbits *r = &g->nfa.reads[g->nq[x]];
            for (int w = 0; w < 4; w++)
                rd.w[w] |= r->w[w];
        }
    }
    g->ds_reads[id] = rd;
    memset(&g->ds_self[id], 0, sizeof g->ds_self[id]);
    g->ds_flags[id] = fl;
    g->n_ds++;
    struct htab *t = &g->ds_tab;
    if ((t->n + 1) * 2 > t->cap) {
        /* rehash by the stored hashes */
        uint32_t cap = t->cap ? t->cap * 2 : 1024;
        uint64_t *key = malloc((size_t)cap * sizeof *key);
        uint32_t *val = calloc(cap, sizeof *val);
        if (!key || !val) {
            free(key);
            free(val);
            return UINT32_MAX;
        }
        for (uint32_t i = 0; i < t->cap; i++)
            if (t->val[i]) {
                uint32_t j = (uint32_t)sp_grammar_mix(t->key[i]) & (cap - 1);
                while (val[j])
                    j = (j + 1) & (cap - 1);
                key[j] = t->key[i];
                val[j] = t->val[i];
            }
        free(t->key);
        free(t->val);
        t->key = key;
        t->val = val;
        t->cap = cap;
    }
    uint32_t j = (uint32_t)sp_grammar_mix(h) & (t->cap - 1);
    while (t->val[j])
        j = (j + 1) & (t->cap - 1);
    t->key[j] = h;
    t->val[j] = id + 1;
    t->n++;
    return id;
}

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

/* The row slot of (d, c), giving d a row first if it has none; NULL once
 * the rows are full (the hash takes over) or on no memory. */
static uint32_t *row_slot(struct sp_grammar *g, uint32_t d, unsigned c)
{
    if (!g->ds_row[d]) {
        uint32_t n = gbits_count(&g->ds_reads[d]);
        if (g->n_rows + n > ROWS_MAX || !grow((void **)&g->rows, &g->cap_rows, g->n_rows + n, sizeof *g->rows))
            return NULL;
        memset(g->rows + g->n_rows, 0xff, (size_t)n * sizeof *g->rows);
        g->ds_row[d] = g->n_rows + 1;
        g->n_rows += n;
    }
    return g->rows + g->ds_row[d] - 1 + gbits_rank(&g->ds_reads[d], c);
}

/* The dstate after reading byte c in d, computed once: UINT32_MAX on no
 * memory.  Transitions live in per-dstate rows indexed by the byte's rank
 * among the bytes d reads (a trie walk steps siblings from one dstate, so
 * the row stays in cache); past ROWS_MAX entries in a hash. */
static uint32_t step_new(struct sp_grammar *g, uint32_t d, unsigned c);

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
    return step_new(g, d, c);
}

/* step() for a transition not in a row yet. */
static uint32_t step_new(struct sp_grammar *g, uint32_t d, unsigned c)
{
    uint64_t key = (uint64_t)d << 8 | c;
    uint32_t r = g->ds_row[d] ? UINT32_MAX : htab_get(&g->trans, key);
    if (r != UINT32_MAX)
        return r;
    const struct sp_grammar_nfa *a = &g->nfa;
    uint32_t n, n_work = 0, n_out = 0;
    g->stamp++;
    for (uint32_t i = 0;; i++) {
        const uint32_t *nodes = ds_nodes(g, d, &n);
        if (i >= n)
            break;
        uint32_t x = nodes[i];
        if (x < FIRST_NODE)
            continue;
        uint32_t q = g->nq[x];
        if (!sp_gbits_has(&a->reads[q], c))
            continue;
        for (uint32_t k = a->edge_off[q]; k < a->edge_off[q + 1]; k++) {
            const struct sp_gedge *e = &a->edges[k];
            if (e->kind == SP_GEDGE_BYTES && sp_gbits_has(&a->sets[e->arg], c) &&
                !push_work(g, &n_work, e->target, g->np[x]))
                return UINT32_MAX;
        }
    }
    if (!closure(g, n_work, &n_out))
        return UINT32_MAX;
    r = intern(g, n_out);
    if (r == UINT32_MAX)
        return UINT32_MAX;
    uint32_t *slot = row_slot(g, d, c);
    if (slot)
        *slot = r;
    else if (!htab_put(&g->trans, key, r))
        return UINT32_MAX;
    if (r == d)
        g->ds_self[d].w[c >> 6] |= 1ull << (c & 63);
    return r;
}

/* The dstate holding the single stack top x. */
static uint32_t single(struct sp_grammar *g, uint32_t x)
{
    uint32_t n = 0;
    if (!push_out(g, &n, x))
        return UINT32_MAX;
    return intern(g, n);
}

/* ---- grammars ---- */

/* Empty matching state: nodes 0..2 reserved ((none), the real bottom, the
 * precompute bottom), dstate 0 DEAD.  False on no memory. */
static bool matching_init(struct sp_grammar *g)
{
    uint32_t cap = 0, c1 = 0, c2 = 0, c3 = 0;
    if (!grow((void **)&g->nq, &cap, FIRST_NODE, sizeof *g->nq) ||
        !grow((void **)&g->np, &c1, FIRST_NODE, sizeof *g->np) ||
        !grow((void **)&g->ndepth, &c2, FIRST_NODE, sizeof *g->ndepth) ||
        !grow((void **)&g->mark, &c3, FIRST_NODE, sizeof *g->mark))
        return false;
    g->cap_nodes = cap;
    memset(g->mark, 0, (size_t)cap * sizeof *g->mark);
    for (uint32_t i = 0; i < FIRST_NODE; i++) {
        g->nq[i] = g->np[i] = UINT32_MAX;
        g->ndepth[i] = 0;
    }
    g->n_nodes = FIRST_NODE;
    g->n_ds = 1;
    g->cls_nd = UINT32_MAX;
    uint32_t c = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0, c8 = 0, c9 = 0;
    if (!grow((void **)&g->ds_off, &c, 2, sizeof *g->ds_off) ||
        !grow((void **)&g->ds_self, &c8, 2, sizeof *g->ds_self) ||
        !grow((void **)&g->ds_hash, &c4, 2, sizeof *g->ds_hash) ||
        !grow((void **)&g->ds_reads, &c5, 2, sizeof *g->ds_reads) ||
        !grow((void **)&g->ds_flags, &c6, 2, sizeof *g->ds_flags) ||
        !grow((void **)&g->ds_mask, &c7, 2, sizeof *g->ds_mask) ||
        !grow((void **)&g->ds_row, &c9, 2, sizeof *g->ds_row))
        return false;
    g->cap_ds = c;
    g->ds_off[0] = g->ds_off[1] = 0;
    memset(&g->ds_reads[0], 0, sizeof g->ds_reads[0]);
    memset(&g->ds_self[0], 0, sizeof g->ds_self[0]);
    g->ds_flags[0] = 0;
    g->ds_mask[0] = 0;
    g->ds_row[0] = 0;
    return true;
}

sp_status sp_grammar_from_nfa(struct sp_grammar **out, struct sp_grammar_nfa *nfa)
{
    *out = NULL;
    struct sp_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        sp_grammar_nfa_free(nfa);
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    }
    atomic_init(&g->refs, 1);
    g->nfa = *nfa;
    memset(nfa, 0, sizeof *nfa);
    if (!matching_init(g)) {
        sp_grammar_free(g);
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    }
    *out = g;
    return SP_OK;
}

sp_status sp_grammar_clone(struct sp_grammar *g, struct sp_grammar **out)
{
    struct sp_grammar *src = g->proto ? g->proto : g;
    struct sp_grammar *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c)
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    atomic_init(&c->refs, 1);
    atomic_fetch_add(&src->refs, 1);
    c->proto = src;
    c->nfa = src->nfa;
    c->schema = src->schema;
    c->schema_len = src->schema_len;
    c->toks = src->toks;
    c->trig_dfa = src->trig_dfa;
    c->trig_len = src->trig_len;
    c->lazy_masks = src->lazy_masks;
    c->lazy_count = src->lazy_count;
    c->follow = src->follow;
    c->pre = src->pre;
    c->n_words = src->n_words;
    c->max_slots = src->max_slots;
    if (!matching_init(c) ||
        (c->toks && !(c->walk = malloc(((size_t)c->toks->max_len + 2) * sizeof *c->walk)))) {
        sp_grammar_free(c);
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    }
    *out = c;
    return SP_OK;
}

sp_status sp_grammar_compile(struct sp_grammar **out, const char *text, size_t len, const char *root)
{
    struct sp_grammar_nfa nfa;
    *out = NULL;
    /* schema grammars made elsewhere (tool calls, response_format's GBNF)
     * spell the same rules; inlining or not keeps the language */
    sp_status st = sp_grammar_nfa_build(&nfa, text, len, root, sp_schema_called_rules);
    if (st != SP_OK)
        return st;
    return sp_grammar_from_nfa(out, &nfa);
}

sp_status sp_grammar_compile_schema(struct sp_grammar **out, const char *schema, size_t len, unsigned opts)
{
    char *gbnf = NULL;
    *out = NULL;
    sp_status st = sp_grammar_from_schema_as(schema, len, "root", opts, &gbnf);
    if (st != SP_OK)
        return st;
    st = sp_grammar_compile(out, gbnf, strlen(gbnf), NULL);
    free(gbnf);
    if (st != SP_OK)
        return sp_error_wrap(st, "json schema compiled to a grammar that failed");
    if (!((*out)->schema = malloc(len + 1))) {
        sp_grammar_free(*out);
        *out = NULL;
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    }
    memcpy((*out)->schema, schema, len);
    (*out)->schema[len] = '\0';
    (*out)->schema_len = len;
    return SP_OK;
}

bool sp_grammar_has_schema(const struct sp_grammar *g) { return g->schema != NULL; }

sp_status sp_grammar_check(void *grammar, const char *text, size_t len, char *why, size_t cap)
{
    struct sp_grammar *g = grammar;
    if (!g->schema)
        return SP_OK;
    return sp_grammar_validate(g->schema, g->schema_len, text, len, why, cap);
}

void sp_grammar_free(struct sp_grammar *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    free(g->nq);
    free(g->np);
    free(g->ndepth);
    free(g->mark);
    htab_free(&g->node_tab);
    free(g->ds_off);
    free(g->ds_pool);
    free(g->ds_hash);
    free(g->ds_reads);
    free(g->ds_self);
    free(g->ds_flags);
    free(g->ds_mask);
    htab_free(&g->ds_tab);
    htab_free(&g->trans);
    free(g->ds_row);
    free(g->rows);
    free(g->work);
    free(g->out);
    free(g->masks);
    free(g->slot_ds);
    free(g->slot_count);
    free(g->walk);
    if (g->wc) {
        free(g->wc->acc);
        free(g->wc->unc);
        free(g->wc);
    }
    free(g->wds);
    free(g->wids);
    free(g->wesc);
    free(g->wreg);
    free((void *)g->dreg);
    free(g->uni);
    if (g->proto) {
        sp_grammar_free(g->proto);
    } else {
        for (uint32_t q = 0; g->pre && q < g->nfa.n_states; q++) /* before the automaton's count goes */
            free(atomic_load(&g->pre[q]));
        free((void *)g->pre);
        sp_grammar_nfa_free(&g->nfa);
        free(g->schema);
        free(g->trigger);
        free(g->trig_dfa);
        free(g->lazy_masks);
        free(g->lazy_count);
        free(g->follow);
    }
    free(g);
}

void sp_grammar_set_plain_walk(struct sp_grammar *g, bool plain) { g->plain_walk = plain; }

void sp_grammar_stats(const struct sp_grammar *g, struct sp_grammar_stats *o)
{
    memset(o, 0, sizeof *o);
    o->n_rules = g->nfa.n_rules;
    o->n_states = g->nfa.n_states;
    for (uint32_t q = 0; q < g->nfa.n_states; q++) {
        const struct sp_gbits *r = &g->nfa.reads[q];
        if (r->w[0] | r->w[1] | r->w[2] | r->w[3]) {
            o->n_read_states++;
            const struct pre *p = g->pre ? atomic_load(&g->pre[q]) : NULL;
            if (p)
                o->n_uncertain += p->n_unc;
        }
    }
    o->n_nodes = g->n_nodes;
    o->n_whole = g->n_whole;
    o->n_region = g->n_region;
    o->n_dstates = g->n_ds;
    o->n_masks_cached = g->n_slots;
    o->mask_hits = g->hits;
    o->mask_misses = g->misses;
}

/* ---- matching ---- */

/* Before a lazy grammar's trigger, a state is LAZY_BASE + the number of
 * trigger bytes just read. */
#define LAZY_BASE 0x80000000u

static uint32_t real_start(struct sp_grammar *g)
{
    uint32_t n_work = 0, n_out = 0;
    g->stamp++;
    if (!push_work(g, &n_work, g->nfa.rule_start[g->nfa.root], NODE_ROOT) || !closure(g, n_work, &n_out))
        return SP_GRAMMAR_DEAD;
    uint32_t d = intern(g, n_out);
    return d == UINT32_MAX ? SP_GRAMMAR_DEAD : d;
}

static uint32_t real_feed(struct sp_grammar *g, uint32_t s, const unsigned char *b, size_t len)
{
    for (size_t i = 0; i < len && s != SP_GRAMMAR_DEAD; i++)
        if ((s = step(g, s, b[i])) == UINT32_MAX)
            return SP_GRAMMAR_DEAD;
    return s;
}

/* The dstate right after the trigger (the grammar's own sentences start
 * with it); DEAD on no memory. */
static uint32_t trigger_state(struct sp_grammar *g)
{
    if (!g->trig_state) {
        const char *trig = g->proto ? g->proto->trigger : g->trigger;
        g->trig_state = real_feed(g, real_start(g), (const unsigned char *)trig, g->trig_len);
    }
    return g->trig_state;
}

sp_status sp_grammar_set_trigger(struct sp_grammar *g, const char *text, size_t len)
{
    if (g->proto || atomic_load(&g->refs) != 1 || g->toks || g->trig_len)
        return sp_error_set(SP_ERR_ARG, "grammar: a trigger is set once, before binding");
    if (!len || len > SP_GRAMMAR_MAX_TRIGGER)
        return sp_error_set(SP_ERR_ARG, "grammar: a trigger has 1 to %d bytes", SP_GRAMMAR_MAX_TRIGGER);
    if (real_feed(g, real_start(g), (const unsigned char *)text, len) == SP_GRAMMAR_DEAD)
        return sp_error_set(SP_ERR_ARG, "grammar: its sentences do not start with the trigger '%.*s'",
                            (int)len, text);
    g->trigger = malloc(len);
    g->trig_dfa = malloc(len * 256);
    if (!g->trigger || !g->trig_dfa)
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    memcpy(g->trigger, text, len);
    /* the string-matching automaton: a mismatch falls back to the longest
     * prefix of the trigger that ends the bytes read */
    const unsigned char *w = (const unsigned char *)text;
    uint8_t *dfa = g->trig_dfa;
    memset(dfa, 0, 256);
    dfa[w[0]] = 1;
    for (uint32_t k = 1, x = 0; k < len; k++) {
        memcpy(dfa + k * 256, dfa + x * 256, 256);
        dfa[k * 256 + w[k]] = (uint8_t)(k + 1);
        x = dfa[x * 256 + w[k]];
    }
    g->trig_len = (uint32_t)len;
    return SP_OK;
}

sp_grammar_state sp_grammar_start(struct sp_grammar *g)
{
    return g->trig_len ? LAZY_BASE : real_start(g);
}

sp_grammar_state sp_grammar_feed(struct sp_grammar *g, sp_grammar_state s, const char *bytes, size_t len)
{
    const unsigned char *b = (const unsigned char *)bytes;
    size_t i = 0;
    for (; i < len && s >= LAZY_BASE; i++) {
        uint32_t k = g->trig_dfa[(s - LAZY_BASE) * 256 + b[i]];
        s = k < g->trig_len ? LAZY_BASE + k : trigger_state(g);
    }
    return real_feed(g, s, b + i, len - i);
}

bool sp_grammar_accepting(struct sp_grammar *g, sp_grammar_state s)
{
    if (s >= LAZY_BASE)
        return true; /* free text may end anywhere */
    return s != SP_GRAMMAR_DEAD && s < g->n_ds && (g->ds_flags[s] & 1);
}

sp_grammar_state sp_grammar_advance(struct sp_grammar *g, sp_grammar_state s, sp_token id)
{
    const struct sp_grammar_tokens *t = g->toks;
    /* s comes from a public caller: only states g has made lead on */
    bool known = s >= LAZY_BASE ? s - LAZY_BASE < g->trig_len : s < g->n_ds;
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab || s == SP_GRAMMAR_DEAD || !known)
        return SP_GRAMMAR_DEAD;
    if (t->kind[id] == SP_GRAMMAR_TOKEN_END)
        return sp_grammar_accepting(g, s) ? s : SP_GRAMMAR_DEAD;
    if (t->kind[id] != SP_GRAMMAR_TOKEN_TEXT)
        return SP_GRAMMAR_DEAD;
    return sp_grammar_feed(g, s, t->bytes + t->off[id], t->off[id + 1] - t->off[id]);
}

static uint32_t count_bits(const uint64_t *m, uint32_t n_words);

/* The masks before the trigger, k bytes of it read: every text token
 * except those that complete the trigger and then leave the grammar, and
 * the end tokens.  Made at bind, shared by copies. */
static sp_status lazy_masks(struct sp_grammar *g)
{
    const struct sp_grammar_tokens *t = g->toks;
    g->lazy_masks = calloc((size_t)g->trig_len * g->n_words, sizeof *g->lazy_masks);
    g->lazy_count = calloc(g->trig_len, sizeof *g->lazy_count);
    if (!g->lazy_masks || !g->lazy_count)
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory for masks");
    for (uint32_t k = 0; k < g->trig_len; k++) {
        uint64_t *m = g->lazy_masks + (size_t)k * g->n_words;
        for (uint32_t id = 0; id < t->n_vocab; id++) {
            if (t->kind[id] != SP_GRAMMAR_TOKEN_TEXT)
                continue;
            const unsigned char *b = (const unsigned char *)t->bytes + t->off[id];
            uint32_t len = t->off[id + 1] - t->off[id], j = 0, p = k;
            while (j < len && (p = g->trig_dfa[p * 256 + b[j]]) < g->trig_len)
                j++;
            if (j < len && real_feed(g, trigger_state(g), b + j + 1, len - j - 1) == SP_GRAMMAR_DEAD)
                continue;
            m[id >> 6] |= 1ull << (id & 63);
        }
        for (uint32_t e = 0; e < t->n_end; e++)
            m[t->ends[e] >> 6] |= 1ull << (t->ends[e] & 63);
        g->lazy_count[k] = count_bits(m, g->n_words);
    }
    return SP_OK;
}

/* ---- bind: per read state, the accepted and uncertain tokens ---- */

static inline void add_acc(struct collect *c, uint32_t lo, uint32_t hi)
{
    if (lo == hi)
        return;
    if (c->n_acc_r && c->acc[2 * c->n_acc_r - 1] == lo) {
        c->acc[2 * c->n_acc_r - 1] = hi;
    } else {
        c->acc[2 * c->n_acc_r] = lo;
        c->acc[2 * c->n_acc_r + 1] = hi;
        c->n_acc_r++;
    }
    c->n_acc += hi - lo;
}

static void add_range(uint32_t *dst, uint32_t *n, uint32_t lo, uint32_t hi)
{
    for (uint32_t s = lo; s < hi; s++)
        dst[(*n)++] = s;
}

static bool gbits_or(struct sp_gbits *d, const struct sp_gbits *s)
{
    bool changed = false;
    for (int w = 0; w < 4; w++) {
        uint64_t v = d->w[w] | s->w[w];
        changed |= v != d->w[w];
        d->w[w] = v;
    }
    return changed;
}

/* FOLLOW(R): the bytes that may come right after rule R ends, in any
 * context (an over-approximation, which is what rejecting needs).  first[q]:
 * the bytes that may come next at state q.  Fixpoint over all states. */
static bool compute_follow(struct sp_grammar *g)
{
    const struct sp_grammar_nfa *a = &g->nfa;
    struct sp_gbits *first = malloc((a->n_states ? a->n_states : 1) * sizeof *first);
    uint8_t *nullable = calloc(a->n_rules ? a->n_rules : 1, 1);
    g->follow = calloc(a->n_rules ? a->n_rules : 1, sizeof *g->follow);
    if (!first || !nullable || !g->follow) {
        free(first);
        free(nullable);
        return false;
    }
    for (uint32_t q = 0; q < a->n_states; q++)
        first[q] = a->reads[q];
    /* nullable rules: the start reaches a final state through nullable calls */
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t q = 0; q < a->n_states; q++) {
            uint32_t r = a->rule_of[q];
            if (nullable[r] || q != a->rule_start[r])
                continue;
            /* a short search from the start over nullable calls */
            uint32_t cur = q;
            for (uint32_t hops = 0; hops < a->n_states && !nullable[r]; hops++) {
                if (a->final[cur]) {
                    nullable[r] = 1;
                    changed = true;
                    break;
                }
                uint32_t next = UINT32_MAX;
                for (uint32_t i = a->edge_off[cur]; i < a->edge_off[cur + 1]; i++)
                    if (a->edges[i].kind == SP_GEDGE_CALL && nullable[a->edges[i].arg]) {
                        next = a->edges[i].target;
                        break;
                    }
                if (next == UINT32_MAX)
                    break;
                cur = next;
            }
        }
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t q = 0; q < a->n_states; q++) {
            if (a->final[q])
                changed |= gbits_or(&first[q], &g->follow[a->rule_of[q]]);
            for (uint32_t i = a->edge_off[q]; i < a->edge_off[q + 1]; i++) {
                const struct sp_gedge *e = &a->edges[i];
                if (e->kind != SP_GEDGE_CALL)
                    continue;
                changed |= gbits_or(&first[q], &first[a->rule_start[e->arg]]);
                if (nullable[e->arg])
                    changed |= gbits_or(&first[q], &first[e->target]);
                changed |= gbits_or(&g->follow[e->arg], &first[e->target]);
            }
        }
    }
    free(first);
    free(nullable);
    return true;
}

static sp_status over_budget(bool work);

/* Whether the dstate e may be on a path the walk accepts whole from a
 * dstate with flags f (see walk_state): all real tops, or none escaping. */
static inline bool whole_flags(const struct sp_grammar *g, uint8_t f, uint32_t e)
{
    return (f & 4) ? (g->ds_flags[e] & 4) != 0 : !(g->ds_flags[e] & 2);
}

/* Whether every k continuation bytes (the first in lo..hi, the rest in
 * 0x80..0xbf) from e lead back to home through live dstates with flags
 * like home's; seen[k] remembers a dstate already shown to. */
static int uni_chain(struct sp_grammar *g, uint32_t home, uint32_t e, uint32_t k, unsigned lo, unsigned hi,
                     uint32_t *seen)
{
    for (unsigned c = lo; c <= hi; c++) {
        uint32_t x = step(g, e, c);
        if (x == UINT32_MAX)
            return -1;
        if (k == 1) {
            if (x != home)
                return 0;
            continue;
        }
        if (x == SP_GRAMMAR_DEAD || !whole_flags(g, g->ds_flags[home], x))
            return 0;
        if (seen[k - 1] == x)
            continue;
        int r = uni_chain(g, home, x, k - 1, 0x80, 0xbf, seen);
        if (r <= 0)
            return r;
        seen[k - 1] = x;
    }
    return 1;
}

/* The lead bytes (bits of 0xc0..0xff) of d whose whole characters all
 * lead back to d (walk_uni's set, made once per dstate); UINT64_MAX on no
 * memory. */
static uint64_t walk_uni(struct sp_grammar *g, uint32_t d)
{
    if (d >= g->cap_uni) {
        uint32_t cap = g->cap_uni;
        if (!grow((void **)&g->uni, &cap, d + 1, sizeof *g->uni))
            return UINT64_MAX;
        memset(g->uni + g->cap_uni, 0, (size_t)(cap - g->cap_uni) * sizeof *g->uni);
        g->cap_uni = cap;
    }
    if (g->uni[d] & 1)
        return g->uni[d];
    uint64_t u = 1;
    for (unsigned c = 0xc2; c <= 0xf4; c++) {
        if (!sp_gbits_has(&g->ds_reads[d], c))
            continue;
        uint32_t x = step(g, d, c);
        if (x == UINT32_MAX)
            return UINT64_MAX;
        if (x == SP_GRAMMAR_DEAD || !whole_flags(g, g->ds_flags[d], x))
            continue;
        unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
        unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
        uint32_t seen[4] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
        int r = uni_chain(g, d, x, c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3, lo, hi, seen);
        if (r < 0)
            return UINT64_MAX;
        if (r)
            u |= 1ull << (c - 0xc0);
    }
    g->uni[d] = u;
    return u;
}

/* The ASCII bytes of each class of tokens.h's SP_GTOK_CLS_* (bits 0..5),
 * as words 0 and 1 of a 256-bit set. */
static const uint64_t cls_words[SP_GTOK_N_ASCII_CLS][2] = {
    {0x00000000ffffffffull, 0x8000000000000000ull}, /* controls */
    {0x0000000400000000ull, 0x0000000000000000ull}, /* '"' */
    {0x0000000000000000ull, 0x0000000010000000ull}, /* '\\' */
    {0x03ff000000000000ull, 0x0000000000000000ull}, /* digits */
    {0x0000000000000000ull, 0x07fffffe07fffffeull}, /* letters */
    {0xfc00fffb00000000ull, 0x78000001e8000001ull}, /* the rest of 0x20-0x7e */
};

/* The ASCII classes none of whose bytes (*none) and all of whose bytes
 * (*full) are known to loop back to nd, remembered for the last dstate
 * asked while its self set is unchanged. */
static void self_classes(struct sp_grammar *g, uint32_t nd, unsigned *none, unsigned *full)
{
    const uint64_t *self = g->ds_self[nd].w;
    if (g->cls_nd != nd || g->cls_w[0] != self[0] || g->cls_w[1] != self[1]) {
        unsigned n = 0, f = 0;
        for (unsigned k = 0; k < SP_GTOK_N_ASCII_CLS; k++) {
            uint64_t a0 = self[0] & cls_words[k][0], a1 = self[1] & cls_words[k][1];
            if (!(a0 | a1))
                n |= 1u << k;
            else if (a0 == cls_words[k][0] && a1 == cls_words[k][1])
                f |= 1u << k;
        }
        g->cls_nd = nd;
        g->cls_w[0] = self[0];
        g->cls_w[1] = self[1];
        g->cls_none = n;
        g->cls_full = f;
    }
    *none = g->cls_none;
    *full = g->cls_full;
}

/* Whether the walk may accept node i's subtree whole from dstate nd: every
 * byte below loops back to nd, or the tokens below are whole UTF-8
 * characters each of which leads back to nd.  The classes of the bytes
 * below decide most nodes without their set: one ASCII class none of whose
 * bytes loops back rejects, only ASCII classes all of whose bytes do
 * accept.  -1 on no memory. */
static int whole_below(struct sp_grammar *g, uint32_t i, uint32_t nd)
{
    const struct sp_grammar_tokens *t = g->toks;
    unsigned cls = t->node_cls[i], none, full;
    self_classes(g, nd, &none, &full);
    if (cls & none)
        return 0;
    if (!(cls & ~full))
        return 1;
    const uint64_t *s = t->sum_set + 4 * (size_t)t->node_sum[i], *self = g->ds_self[nd].w;
    if ((s[0] & ~self[0]) | (s[1] & ~self[1]))
        return 0;
    if (!((s[2] & ~self[2]) | (s[3] & ~self[3])))
        return 1;
    if (!t->node_utf8[i])
        return 0;
    uint64_t u = walk_uni(g, nd);
    if (u == UINT64_MAX)
        return -1;
    return !(s[3] & ~u);
}

/* Walks the trie nodes [begin, end) (whole subtrees, whose parent's dstate
 * and escape flag are in ds and esc) into c.  A path that leaves q's rule
 * with bytes to go makes the token uncertain only when the next byte may
 * follow the rule somewhere (follow: FOLLOW of the rule). */
static sp_status walk_nodes(struct sp_grammar *g, uint32_t begin, uint32_t end, const struct sp_gbits *follow,
                            struct collect *c, uint32_t *ds, uint8_t *esc)
{
    const struct sp_grammar_tokens *t = g->toks;
    for (uint32_t i = begin; i < end;) {
        uint32_t d = t->node_depth[i];
        uint32_t p = ds[d - 1];
        unsigned b = t->node_byte[i];
        uint8_t esc_a = esc[d - 1] | ((g->ds_flags[p] & 2) && sp_gbits_has(follow, b) ? 1 : 0);
        uint32_t nd = step(g, p, b);
        if (nd == UINT32_MAX)
            return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        uint32_t lo = t->node_lo[i], here = lo + t->node_here[i];
        if (nd != SP_GRAMMAR_DEAD)
            add_acc(c, lo, here);
        else if (esc_a)
            add_range(c->unc, &c->n_unc, lo, here);
        if (nd == SP_GRAMMAR_DEAD || (!(g->ds_flags[nd] & 4) && esc_a)) {
            /* nothing below can be accepted; an earlier escape leaves it open */
            if (esc_a)
                add_range(c->unc, &c->n_unc, here, sp_gtok_subtree_end(t, i));
            i = t->node_next[i];
            continue;
        }
        int whole = !g->plain_walk && t->node_next[i] > i + 1 && whole_flags(g, g->ds_flags[nd], nd)
                        ? whole_below(g, i, nd) : 0;
        if (whole < 0)
            return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        if (whole) {
            /* the bytes below (string characters) come back to nd through
             * live dstates that all have real tops, or none that escape:
             * the plain walk would accept each token below and descend, so
             * the subtree is accepted whole */
            add_acc(c, here, sp_gtok_subtree_end(t, i));
            g->n_whole++;
            i = t->node_next[i];
            continue;
        }
        ds[d] = nd; /* real tops, or just escaped here: the children's first byte decides */
        esc[d] = esc_a;
        i++;
    }
    return SP_OK;
}

static bool region_put(struct sp_grammar *g, uint32_t *n, uint32_t a, uint32_t b, uint32_t from)
{
    if (a != REGION_EXIT && *n > from && g->wreg[2 * *n - 2] != REGION_EXIT && g->wreg[2 * *n - 1] == a) {
        g->wreg[2 * *n - 1] = b; /* adjacent ranges merge */
        return true;
    }
    if (a != REGION_EXIT && a == b)
        return true;
    if (!grow((void **)&g->wreg, &g->cap_wreg, 2 * (*n + 1), sizeof *g->wreg))
        return false;
    g->wreg[2 * *n] = a;
    g->wreg[2 * *n + 1] = b;
    (*n)++;
    return true;
}

/* The UTF-8 character of lead byte c: its length (0: not a lead) and the
 * range of its first continuation byte. */
static uint32_t utf8_lead(unsigned c, unsigned *lo, unsigned *hi)
{
    *lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    *hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    return c < 0xc2 || c > 0xf4 ? 0 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

/* Whether every byte below lead node i up to its character's end (k bytes
 * in all) continues the character validly (so each path stays on the live
 * dstates walk_uni checked). */
static bool lead_valid(const struct sp_grammar_tokens *t, uint32_t i, uint32_t k, unsigned lo, unsigned hi)
{
    for (uint32_t j = i + 1; j < t->node_next[i];) {
        uint32_t pos = t->node_depth[j] - t->node_depth[i];
        unsigned b = t->node_byte[j];
        if (pos == 1 ? b < lo || b > hi : b < 0x80 || b > 0xbf)
            return false;
        j = pos + 1 == k ? t->node_next[j] : j + 1;
    }
    return true;
}

/* Makes h's start region into g->wreg (*n pairs): the plain walk's
 * decisions at every node whose path is bytes leading back to h and whole
 * characters whose lead byte walk_uni gives h (whose partial characters
 * reach live dstates); with h's bytes that lead back all known.  need[d]:
 * continuation bytes still to come after the node at depth d on the
 * current path.  False on no memory. */
static bool region_make(struct sp_grammar *g, uint32_t h, uint64_t uni, uint32_t *n, uint32_t *beg,
                        uint32_t *end)
{
    const struct sp_grammar_tokens *t = g->toks;
    uint8_t need[SP_GRAMMAR_TOKEN_MAX_LEN + 1];
    need[0] = 0;
    *n = 0;
    for (unsigned b = 0; b < 256; b++)
        beg[b] = end[b] = 0;
    for (uint32_t i = 0, from = 0, top = 0; i < t->n_nodes;) {
        uint32_t d = t->node_depth[i], k = 0;
        unsigned b = t->node_byte[i], lo, hi;
        if (d == 1) { /* a first-level node: its items are a slice of their own */
            end[t->node_byte[top]] = *n;
            top = i;
            beg[b] = from = *n;
        }
        if (need[d - 1]) {
            need[d] = (uint8_t)(need[d - 1] - 1); /* a continuation (lead_valid checked it) */
        } else if (sp_gbits_has(&g->ds_self[h], b)) { /* (whole_below may move ds_self) */
            need[d] = 0;
        } else if ((k = utf8_lead(b, &lo, &hi)) && (uni >> (b - 0xc0) & 1) && lead_valid(t, i, k, lo, hi)) {
            need[d] = (uint8_t)(k - 1);
        } else {
            if (!region_put(g, n, REGION_EXIT, i, from))
                return false;
            i = t->node_next[i];
            end[t->node_byte[top]] = *n;
            continue;
        }
        uint32_t first = t->node_lo[i], here = first + t->node_here[i];
        if (!region_put(g, n, first, here, from))
            return false;
        int whole = !need[d] && t->node_next[i] > i + 1 ? whole_below(g, i, h) : 0;
        if (whole < 0)
            return false;
        if (whole) {
            if (!region_put(g, n, here, sp_gtok_subtree_end(t, i), from))
                return false;
            g->n_whole++;
            i = t->node_next[i];
        } else {
            i++;
        }
        end[t->node_byte[top]] = *n;
    }
    return true;
}

/* The region of dstate h (see struct region): remembered per dstate, else
 * found among the vocabulary's or made and published there; &no_region
 * when h has none (it escapes, has no real tops, few bytes lead back, or
 * the vocabulary's slots are full).  NULL on no memory. */
static const struct region *region_of(struct sp_grammar *g, uint32_t h)
{
    const struct sp_grammar_tokens *t = g->toks;
    if (h >= g->cap_dreg) {
        uint32_t cap = g->cap_dreg;
        if (!grow((void **)&g->dreg, &cap, h + 1, sizeof *g->dreg))
            return NULL;
        memset((void *)(g->dreg + g->cap_dreg), 0, (size_t)(cap - g->cap_dreg) * sizeof *g->dreg);
        g->cap_dreg = cap;
    }
    if (g->dreg[h])
        return g->dreg[h];
    g->dreg[h] = &no_region;
    if ((g->ds_flags[h] & 2) || !(g->ds_flags[h] & 4) || gbits_count(&g->ds_reads[h]) < REGION_MIN_SELF)
        return &no_region;
    for (unsigned c = 0; c < 256; c++) /* every byte that leads back to h known */
        if (sp_gbits_has(&g->ds_reads[h], c) && step(g, h, c) == UINT32_MAX)
            return NULL;
    if (gbits_count(&g->ds_self[h]) < REGION_MIN_SELF)
        return &no_region;
    uint64_t uni = walk_uni(g, h);
    if (uni == UINT64_MAX)
        return NULL;
    const uint64_t *self = g->ds_self[h].w; /* after walk_uni, which may move it */
    uint32_t k = 0;
    for (; k < SP_GTOK_REGION_SLOTS; k++) {
        const struct region *x = atomic_load_explicit(&t->regions[k], memory_order_acquire);
        if (!x)
            break;
        if (x->uni == uni && !memcmp(x->self, self, sizeof x->self))
            return g->dreg[h] = x;
    }
    if (k == SP_GTOK_REGION_SLOTS)
        return &no_region;
    uint32_t n = 0, beg[256], end[256];
    if (!region_make(g, h, uni, &n, beg, end))
        return NULL;
    if (n > REGION_MAX_ITEMS)
        return &no_region;
    struct region *x = malloc(sizeof *x + (size_t)n * 2 * sizeof(uint32_t));
    if (!x)
        return NULL;
    memcpy(x->self, g->ds_self[h].w, sizeof x->self);
    x->uni = uni;
    x->n = n;
    memcpy(x->beg, beg, sizeof beg);
    memcpy(x->end, end, sizeof end);
    memcpy(x->item, g->wreg, (size_t)n * 2 * sizeof(uint32_t));
    for (; k < SP_GTOK_REGION_SLOTS; k++) {
        void *expect = NULL;
        if (atomic_compare_exchange_strong_explicit(&t->regions[k], &expect, x, memory_order_acq_rel,
                                                    memory_order_acquire))
            return g->dreg[h] = x;
        const struct region *y = expect;
        if (y->uni == uni && !memcmp(y->self, x->self, sizeof x->self)) { /* another thread's, the same */
            free(x);
            return g->dreg[h] = y;
        }
    }
    free(x);
    return &no_region;
}

/* One trie walk from the stack (q, NODE_ESC), per first-level node: when
 * its byte leads to a dstate with a region and back there (and no escape),
 * the region's slice (its tokens, then the subtrees that leave it, walked);
 * else the node's whole subtree walked. */
static sp_status walk_state(struct sp_grammar *g, uint32_t q, struct collect *c, uint32_t *ds, uint8_t *esc)
{
    const struct sp_grammar_tokens *t = g->toks;
    const struct sp_gbits *follow = &g->follow[g->nfa.rule_of[q]];
    uint32_t x = node(g, q, NODE_ESC);
    uint32_t d0 = x ? single(g, x) : UINT32_MAX;
    if (d0 == UINT32_MAX)
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    c->n_acc_r = c->n_acc = c->n_unc = 0;
    for (uint32_t i = 0; i < t->n_nodes; i = t->node_next[i]) {
        unsigned b = t->node_byte[i];
        uint32_t nd = g->plain_walk || ((g->ds_flags[d0] & 2) && sp_gbits_has(follow, b)) ? SP_GRAMMAR_DEAD
                                                                                           : step(g, d0, b);
        const struct region *r = nd == UINT32_MAX || nd == SP_GRAMMAR_DEAD ? &no_region : region_of(g, nd);
        if (nd == UINT32_MAX || !r)
            return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        if (r == &no_region || !sp_gbits_has(&g->ds_self[nd], b)) {
            ds[0] = d0;
            esc[0] = 0;
            sp_status st = walk_nodes(g, i, t->node_next[i], follow, c, ds, esc);
            if (st != SP_OK)
                return st;
            continue;
        }
        g->n_region++;
        for (uint32_t k = r->beg[b]; k < r->end[b]; k++) {
            uint32_t lo = r->item[2 * k], hi = r->item[2 * k + 1];
            if (lo != REGION_EXIT) {
                add_acc(c, lo, hi);
                continue;
            }
            uint32_t d = t->node_depth[hi];
            ds[d - 1] = nd;
            esc[d - 1] = 0;
            sp_status st = walk_nodes(g, hi, t->node_next[hi], follow, c, ds, esc);
            if (st != SP_OK)
                return st;
        }
    }
    return SP_OK;
}

/* The bytes of g's automaton, dstates and bind tables so far. */
static uint64_t grammar_bytes(const struct sp_grammar *g)
{
    const struct sp_grammar_nfa *a = &g->nfa;
    uint64_t b = (uint64_t)a->edge_off[a->n_states] * sizeof *a->edges +
                 (uint64_t)a->n_states * (sizeof(struct sp_gbits) + sizeof(struct pre) + 13);
    b += (uint64_t)g->cap_nodes * 14 + (uint64_t)g->node_tab.cap * 12 + (uint64_t)g->ds_tab.cap * 12;
    b += (uint64_t)g->cap_ds * (8 + 2 * sizeof(struct sp_gbits) + 13) + (uint64_t)g->cap_pool * 4;
    b += (uint64_t)g->cap_rows * 4 + (uint64_t)g->trans.cap * 12;
    b += atomic_load_explicit((_Atomic uint64_t *)&g->pre_bytes, memory_order_relaxed);
    return b;
}

uint64_t sp_grammar_bytes(const struct sp_grammar *g)
{
    return grammar_bytes(g->proto ? g->proto : g);
}

/* The error for a bind over SP_GRAMMAR_MAX_WORK (work) or SP_GRAMMAR_MAX_BYTES. */
static sp_status over_budget(bool work)
{
    if (work)
        return sp_error_set(SP_ERR_ARG, "grammar: too large to compile: more than %llu steps of work "
                            "(limit SP_GRAMMAR_MAX_WORK; nested or long repetitions?)",
                            (unsigned long long)SP_GRAMMAR_MAX_WORK);
    return sp_error_set(SP_ERR_ARG, "grammar: too large to compile: more than %llu MiB of tables "
                        "(limit SP_GRAMMAR_MAX_BYTES; nested or long repetitions?)",
                        (unsigned long long)(SP_GRAMMAR_MAX_BYTES >> 20));
}

static uint32_t lcp_bytes(const struct sp_grammar_tokens *t, uint32_t a, uint32_t b)
{
    uint32_t la = t->off[a + 1] - t->off[a], lb = t->off[b + 1] - t->off[b], k = 0;
    const char *x = t->bytes + t->off[a], *y = t->bytes + t->off[b];
    while (k < la && k < lb && x[k] == y[k])
        k++;
    return k;
}

uint32_t sp_grammar_n_vocab(const struct sp_grammar *g) { return g->toks ? g->toks->n_vocab : 0; }

/* State q's tokens in one allocation, from the walk's collect c. */
static struct pre *pre_pack(struct sp_grammar *g, const struct collect *c, uint32_t *ids, uint64_t *bytes)
{
    const struct sp_grammar_tokens *t = g->toks;
    bool is_bits = (uint64_t)c->n_acc * 32 > t->n_vocab;
    size_t n_acc = is_bits ? 0 : c->n_acc, n_bits = is_bits ? g->n_words : 0;
    size_t size = sizeof(struct pre) + n_bits * 8 + (n_acc + c->n_unc) * 4 + (size_t)c->n_unc * 2;
    struct pre *p = calloc(1, size);
    if (!p)
        return NULL;
    *bytes = size;
    p->n_acc = c->n_acc;
    p->n_unc = c->n_unc;
    p->is_bits = is_bits;
    p->bits = (uint64_t *)(p + 1);
    p->acc = (uint32_t *)(p->bits + n_bits);
    p->unc = p->acc + n_acc;
    p->lcp = (uint16_t *)(p->unc + c->n_unc);
    uint32_t n = 0;
    if (is_bits && (uint64_t)c->n_acc * 2 > t->n_sorted) {
        /* most text tokens: all of them, less the gaps between the ranges */
        memcpy(p->bits, t->text_bits, n_bits * 8);
        for (uint32_t r = 0, lo = 0; r <= c->n_acc_r; r++) {
            uint32_t hi = r < c->n_acc_r ? c->acc[2 * r] : t->n_sorted;
            for (uint32_t k = lo; k < hi; k++)
                p->bits[t->sorted[k] >> 6] &= ~(1ull << (t->sorted[k] & 63));
            lo = r < c->n_acc_r ? c->acc[2 * r + 1] : lo;
        }
    } else {
        for (uint32_t r = 0; r < c->n_acc_r; r++)
            for (uint32_t k = c->acc[2 * r]; k < c->acc[2 * r + 1]; k++) {
                uint32_t id = t->sorted[k];
                if (is_bits)
                    p->bits[id >> 6] |= 1ull << (id & 63);
                else
                    p->acc[n++] = id;
            }
    }
    for (uint32_t i = 0; i < c->n_unc; i++)
        ids[i] = p->unc[i] = t->sorted[c->unc[i]];
    for (uint32_t i = 0; i < c->n_unc; i++)
        p->lcp[i] = (uint16_t)(i ? lcp_bytes(t, ids[i - 1], ids[i]) : 0);
    return p;
}

/* The tokens of read state q: made by g's own trie walk the first time any
 * copy needs them, then shared (two copies racing both walk; the first to
 * publish wins).  NULL on no memory. */
static const struct pre *pre_of(struct sp_grammar *g, uint32_t q)
{
    static const struct pre none;
    struct sp_grammar *o = g->proto ? g->proto : g;
    struct pre *p = atomic_load_explicit(&g->pre[q], memory_order_acquire);
    if (p)
        return p;
    const struct sp_gbits *r = &g->nfa.reads[q];
    if (!(r->w[0] | r->w[1] | r->w[2] | r->w[3]))
        return &none;
    const struct sp_grammar_tokens *t = g->toks;
    if (!g->wc) {
        struct collect *c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        g->wc = c;
        c->acc = malloc(((size_t)t->n_sorted + 1) * 2 * sizeof *c->acc);
        c->unc = malloc(((size_t)t->n_sorted + 1) * sizeof *c->unc);
        g->wids = malloc(((size_t)t->n_sorted + 1) * sizeof *g->wids);
        g->wds = malloc(((size_t)t->max_len + 2) * sizeof *g->wds);
        g->wesc = malloc((size_t)t->max_len + 2);
    }
    if (!g->wc->acc || !g->wc->unc || !g->wids || !g->wds || !g->wesc)
        return NULL;
    uint64_t bytes = 0;
    if (walk_state(g, q, g->wc, g->wds, g->wesc) != SP_OK || !(p = pre_pack(g, g->wc, g->wids, &bytes)))
        return NULL;
    struct pre *expect = NULL;
    if (!atomic_compare_exchange_strong_explicit(&g->pre[q], &expect, p, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        free(p);
        return expect;
    }
    atomic_fetch_add_explicit(&o->pre_bytes, bytes, memory_order_relaxed);
    return p;
}

/* Binding ties the grammar to a vocabulary: FOLLOW of every rule and the
 * masks before a trigger; each state's tokens wait for their first mask. */
sp_status sp_grammar_bind(struct sp_grammar *g, const struct sp_grammar_tokens *t)
{
    if (g->toks == t)
        return SP_OK;
    if (g->toks)
        return sp_error_set(SP_ERR_ARG, "grammar: already bound to another vocabulary");
    if (g->proto || atomic_load(&g->refs) != 1)
        return sp_error_set(SP_ERR_ARG, "grammar: a shared grammar is bound before it is copied");
    sp_status st = SP_OK;
    uint32_t n_states = g->nfa.n_states;
    g->pre = calloc(n_states ? n_states : 1, sizeof *g->pre);
    g->n_words = (t->n_vocab + 63) / 64;
    g->walk = malloc(((size_t)t->max_len + 2) * sizeof *g->walk);
    if (!g->pre || !g->walk) {
        st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (uint32_t q = 0; q < n_states; q++)
        atomic_init(&g->pre[q], NULL);
    g->toks = t;
    if (!compute_follow(g)) {
        st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    if (grammar_bytes(g) > SP_GRAMMAR_MAX_BYTES)
        st = over_budget(false);
    if (st == SP_OK && g->trig_len)
        st = lazy_masks(g);
    if (st == SP_OK) {
        uint64_t slot_bytes = (uint64_t)g->n_words * 8;
        g->max_slots = (uint32_t)(MASK_CACHE_BYTES / slot_bytes);
        if (g->max_slots < 16)
            g->max_slots = 16;
    }
done:
    if (st != SP_OK) {
        g->toks = NULL;
        free(g->lazy_masks);
        free(g->lazy_count);
        g->lazy_masks = NULL;
        g->lazy_count = NULL;
    }
    return st;
}

/* ---- masks ---- */

/* Walks the uncertain tokens p of top x from the one-stack dstate, setting
 * the bits of those that survive. */
static bool check_uncertain(struct sp_grammar *g, uint32_t x, const struct pre *p, uint64_t *m)
{
    const struct sp_grammar_tokens *t = g->toks;
    if (!p->n_unc)
        return true;
    uint32_t *w = g->walk;
    w[0] = single(g, x);
    if (w[0] == UINT32_MAX)
        return false;
    uint32_t valid = 0; /* w[0..valid] are the dstates along the previous token */
    for (uint32_t i = 0; i < p->n_unc; i++) {
        uint32_t id = p->unc[i];
        uint32_t lcp = p->lcp[i];
        if (valid > lcp)
            valid = lcp;
        if (m[id >> 6] >> (id & 63) & 1)
            continue;
        const unsigned char *b = (const unsigned char *)t->bytes + t->off[id];
        uint32_t len = t->off[id + 1] - t->off[id];
        while (valid < len && w[valid] != SP_GRAMMAR_DEAD) {
            uint32_t nd = step(g, w[valid], b[valid]);
            if (nd == UINT32_MAX)
                return false;
            w[++valid] = nd;
        }
        if (valid == len && w[len] != SP_GRAMMAR_DEAD)
            m[id >> 6] |= 1ull << (id & 63);
    }
    return true;
}

static uint32_t count_bits(const uint64_t *m, uint32_t n_words)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_words; i++)
        k += (uint32_t)__builtin_popcountll(m[i]);
    return k;
}

/* A free mask slot (the cache empties when full). */
static uint64_t *take_slot(struct sp_grammar *g, uint32_t d)
{
    if (g->n_slots == g->max_slots) {
        for (uint32_t i = 0; i < g->n_slots; i++)
            g->ds_mask[g->slot_ds[i]] = 0;
        g->n_slots = 0;
    }
    if (!g->masks) {
        g->masks = malloc((size_t)g->max_slots * g->n_words * sizeof *g->masks);
        g->slot_ds = malloc((size_t)g->max_slots * sizeof *g->slot_ds);
        g->slot_count = malloc((size_t)g->max_slots * sizeof *g->slot_count);
        if (!g->masks || !g->slot_ds || !g->slot_count)
            return NULL;
    }
    uint32_t s = g->n_slots++;
    g->slot_ds[s] = d;
    g->ds_mask[d] = s + 1;
    return g->masks + (size_t)s * g->n_words;
}

sp_status sp_grammar_mask(struct sp_grammar *g, sp_grammar_state s, const uint64_t **mask,
                          uint32_t *n_allowed)
{
    const struct sp_grammar_tokens *t = g->toks;
    *mask = NULL;
    if (n_allowed)
        *n_allowed = 0;
    if (!t)
        return sp_error_set(SP_ERR_ARG, "grammar: not bound to a vocabulary");
    if (s >= LAZY_BASE && s - LAZY_BASE < g->trig_len) {
        *mask = g->lazy_masks + (size_t)(s - LAZY_BASE) * g->n_words;
        if (n_allowed)
            *n_allowed = g->lazy_count[s - LAZY_BASE];
        return SP_OK;
    }
    if ((s == SP_GRAMMAR_DEAD || s >= g->n_ds) && g->failed_overflow)
        return sp_error_set(SP_ERR_ARG, "grammar: the output matches too many ways at once (more "
                            "than %d parallel parses); make the grammar less ambiguous",
                            SP_GRAMMAR_MAX_STACKS);
    if (s == SP_GRAMMAR_DEAD || s >= g->n_ds)
        return sp_error_set(SP_ERR_ARG, "grammar: the output so far cannot be continued");
    if (g->ds_mask[s]) {
        uint32_t slot = g->ds_mask[s] - 1;
        g->hits++;
        *mask = g->masks + (size_t)slot * g->n_words;
        if (n_allowed)
            *n_allowed = g->slot_count[slot];
        return SP_OK;
    }
    g->misses++;
    uint64_t *m = take_slot(g, s);
    if (!m)
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory for masks");
    memset(m, 0, (size_t)g->n_words * sizeof *m);
    uint32_t n;
    const uint32_t *nodes = ds_nodes(g, s, &n);
    for (uint32_t i = 0;; i++) {
        nodes = ds_nodes(g, s, &n); /* the pool may move while walking */
        if (i >= n)
            break;
        uint32_t x = nodes[i];
        if (x < FIRST_NODE)
            continue;
        const struct pre *p = pre_of(g, g->nq[x]);
        if (!p) {
            g->ds_mask[s] = 0;
            g->n_slots--;
            return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        }
        if (p->is_bits) {
            for (uint32_t w = 0; w < g->n_words; w++)
                m[w] |= p->bits[w];
        } else {
            for (uint32_t k = 0; k < p->n_acc; k++)
                m[p->acc[k] >> 6] |= 1ull << (p->acc[k] & 63);
        }
    }
    for (uint32_t i = 0;; i++) {
        nodes = ds_nodes(g, s, &n);
        if (i >= n)
            break;
        if (nodes[i] >= FIRST_NODE && !check_uncertain(g, nodes[i], pre_of(g, g->nq[nodes[i]]), m)) {
            g->ds_mask[s] = 0;
            g->n_slots--;
            return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        }
    }
    if (g->ds_flags[s] & 1)
        for (uint32_t k = 0; k < t->n_end; k++)
            m[t->ends[k] >> 6] |= 1ull << (t->ends[k] & 63);
    uint32_t cnt = count_bits(m, g->n_words);
    uint32_t slot = g->ds_mask[s] - 1;
    g->slot_count[slot] = cnt;
    if (cnt == 0) {
        g->ds_mask[s] = 0;
        g->n_slots--;
        return sp_error_set(SP_ERR_ARG, "grammar: no token of the vocabulary can continue the output "
                            "here (the grammar needs bytes that no token spells)");
    }
    *mask = m;
    if (n_allowed)
        *n_allowed = cnt;
    return SP_OK;
}
