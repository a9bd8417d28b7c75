/* The trie walks of the matcher: the first time a mask needs a read state
 * q, one walk over the vocabulary's trie from the stack (q, bottom 2)
 * splits the tokens into accepted, uncertain and rejected (see match.c).
 * A walk accepts subtrees whole when their bytes lead back to the dstate
 * reached, and takes first-level subtrees from regions shared by every
 * grammar of the vocabulary. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/match_internal.h"

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

/* Whether the dstate e may be on a path the walk accepts whole from a
 * dstate with flags f (see walk_nodes): none escaping (so a region's paths
 * keep the escape flag clear, as its exits assume), and real tops when f
 * has them. */
static inline bool whole_flags(const struct sp_grammar *g, uint8_t f, uint32_t e)
{
    return !(g->ds_flags[e] & 2) && (!(f & 4) || (g->ds_flags[e] & 4));
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
        if (!sp_grammar_grow((void **)&g->uni, &cap, d + 1, sizeof *g->uni))
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
    if (!sp_grammar_grow((void **)&g->wreg, &g->cap_wreg, 2 * (*n + 1), sizeof *g->wreg))
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
        if (!sp_grammar_grow((void **)&g->dreg, &cap, h + 1, sizeof *g->dreg))
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

/* For a walk from d0 that has no region: the region whose slice of byte b
 * is d0's first-level subtree of b, and *home, its dstate; &no_region when
 * none.  Either b leads to a dstate h with a region and back to h, or b
 * leads a UTF-8 character all of whose continuations reach one dstate h
 * through live dstates with flags like h's (the walk_uni test from d0
 * towards h) and h's region takes b's subtree as characters leading back
 * to h (its slice starts with b's own tokens, not an exit).  NULL on no
 * memory. */
static const struct region *first_region(struct sp_grammar *g, uint32_t d0, unsigned b, uint32_t *home)
{
    uint32_t x = step(g, d0, b);
    if (x == UINT32_MAX)
        return NULL;
    if (x == SP_GRAMMAR_DEAD)
        return &no_region;
    const struct region *r = region_of(g, x);
    if (!r)
        return NULL;
    if (r != &no_region && sp_gbits_has(&g->ds_self[x], b)) {
        *home = x;
        return r;
    }
    unsigned lo, hi;
    uint32_t k = utf8_lead(b, &lo, &hi), h = x;
    for (uint32_t j = 1; k && j < k && h != SP_GRAMMAR_DEAD && h != UINT32_MAX; j++)
        h = step(g, h, j == 1 ? lo : 0x80); /* one character's end */
    if (h == UINT32_MAX)
        return NULL;
    if (!k || h == SP_GRAMMAR_DEAD || !whole_flags(g, g->ds_flags[h], x) || !(r = region_of(g, h)))
        return r ? &no_region : NULL;
    if (r == &no_region || r->beg[b] == r->end[b] || r->item[2 * r->beg[b]] == REGION_EXIT)
        return &no_region;
    uint32_t seen[4] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    int ok = uni_chain(g, h, x, k - 1, lo, hi, seen);
    if (ok < 0)
        return NULL;
    *home = h;
    return ok ? r : &no_region;
}

/* One trie walk from the stack (q, NODE_ESC), from the region of its
 * dstate d0 when it has one (the region's tokens, then the subtrees that
 * leave it, walked); else per first-level node: when its byte leads to a
 * dstate with a region and back there (and no escape), that region's slice;
 * else the node's whole subtree walked. */
static sp_status walk_state(struct sp_grammar *g, uint32_t q, struct collect *c, uint32_t *ds, uint8_t *esc)
{
    const struct sp_grammar_tokens *t = g->toks;
    const struct sp_gbits *follow = &g->follow[g->nfa.rule_of[q]];
    uint32_t x = sp_grammar_node(g, q, NODE_ESC);
    uint32_t d0 = x ? sp_grammar_single(g, x) : UINT32_MAX;
    const struct region *r0 = d0 == UINT32_MAX ? NULL : g->plain_walk ? &no_region : region_of(g, d0);
    if (!r0)
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    c->n_acc_r = c->n_acc = c->n_unc = 0;
    for (uint32_t i = 0; i < t->n_nodes; i = t->node_next[i]) {
        unsigned b = t->node_byte[i];
        uint32_t home = d0;
        const struct region *r = r0;
        if (r == &no_region && !g->plain_walk && !((g->ds_flags[d0] & 2) && sp_gbits_has(follow, b))) {
            r = first_region(g, d0, b, &home);
            if (!r)
                return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        }
        if (r == &no_region) {
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
            ds[d - 1] = home;
            esc[d - 1] = 0;
            sp_status st = walk_nodes(g, hi, t->node_next[hi], follow, c, ds, esc);
            if (st != SP_OK)
                return st;
        }
    }
    return SP_OK;
}

static uint32_t lcp_bytes(const struct sp_grammar_tokens *t, uint32_t a, uint32_t b)
{
    uint32_t la = t->off[a + 1] - t->off[a], lb = t->off[b + 1] - t->off[b], k = 0;
    const char *x = t->bytes + t->off[a], *y = t->bytes + t->off[b];
    while (k < la && k < lb && x[k] == y[k])
        k++;
    return k;
}


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
const struct pre *sp_grammar_pre_of(struct sp_grammar *g, uint32_t q)
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
