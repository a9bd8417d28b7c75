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
 * dstate.  The walks are token_walk.c's. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/match_internal.h"
#include "grammar/schema_internal.h"

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

bool sp_grammar_grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
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
uint32_t sp_grammar_node(struct sp_grammar *g, uint32_t q, uint32_t parent)
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
        if (!sp_grammar_grow((void **)&g->nq, &cap, g->n_nodes + 1, sizeof *g->nq))
            return 0;
        uint32_t c2 = g->cap_nodes, c3 = g->cap_nodes, c4 = g->cap_nodes;
        if (!sp_grammar_grow((void **)&g->np, &c2, g->n_nodes + 1, sizeof *g->np) ||
            !sp_grammar_grow((void **)&g->ndepth, &c3, g->n_nodes + 1, sizeof *g->ndepth) ||
            !sp_grammar_grow((void **)&g->mark, &c4, g->n_nodes + 1, sizeof *g->mark))
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
    if (!sp_grammar_grow((void **)&g->work, &g->cap_work, (*n + 1) * 2, sizeof *g->work))
        return false;
    g->work[*n * 2] = q;
    g->work[*n * 2 + 1] = parent;
    (*n)++;
    return true;
}

static bool push_out(struct sp_grammar *g, uint32_t *n, uint32_t id)
{
    if (!sp_grammar_grow((void **)&g->out, &g->cap_out, *n + 1, sizeof *g->out))
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
        uint32_t id = sp_grammar_node(g, q, par);
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
            uint32_t ret = sp_grammar_node(g, e->target, par);
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
    if (!sp_grammar_grow((void **)&g->ds_off, &c1, id + 2, sizeof *g->ds_off) ||
        !sp_grammar_grow((void **)&g->ds_row, &c7, id + 2, sizeof *g->ds_row) ||
        !sp_grammar_grow((void **)&g->ds_self, &c6, id + 2, sizeof *g->ds_self) ||
        !sp_grammar_grow((void **)&g->ds_hash, &c2, id + 2, sizeof *g->ds_hash) ||
        !sp_grammar_grow((void **)&g->ds_reads, &c3, id + 2, sizeof *g->ds_reads) ||
        !sp_grammar_grow((void **)&g->ds_flags, &c4, id + 2, sizeof *g->ds_flags) ||
        !sp_grammar_grow((void **)&g->ds_mask, &c5, id + 2, sizeof *g->ds_mask) ||
        !sp_grammar_grow((void **)&g->ds_pool, &g->cap_pool, g->n_pool + n, sizeof *g->ds_pool))
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

/* The row slot of (d, c), giving d a row first if it has none; NULL once
 * the rows are full (the hash takes over) or on no memory. */
static uint32_t *row_slot(struct sp_grammar *g, uint32_t d, unsigned c)
{
    if (!g->ds_row[d]) {
        uint32_t n = gbits_count(&g->ds_reads[d]);
        if (g->n_rows + n > ROWS_MAX ||
            !sp_grammar_grow((void **)&g->rows, &g->cap_rows, g->n_rows + n, sizeof *g->rows))
            return NULL;
        memset(g->rows + g->n_rows, 0xff, (size_t)n * sizeof *g->rows);
        g->ds_row[d] = g->n_rows + 1;
        g->n_rows += n;
    }
    return g->rows + g->ds_row[d] - 1 + gbits_rank(&g->ds_reads[d], c);
}

/* step() (match_internal.h) for a transition not in a row yet. */
uint32_t sp_grammar_step_new(struct sp_grammar *g, uint32_t d, unsigned c)
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
uint32_t sp_grammar_single(struct sp_grammar *g, uint32_t x)
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
    if (!sp_grammar_grow((void **)&g->nq, &cap, FIRST_NODE, sizeof *g->nq) ||
        !sp_grammar_grow((void **)&g->np, &c1, FIRST_NODE, sizeof *g->np) ||
        !sp_grammar_grow((void **)&g->ndepth, &c2, FIRST_NODE, sizeof *g->ndepth) ||
        !sp_grammar_grow((void **)&g->mark, &c3, FIRST_NODE, sizeof *g->mark))
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
    if (!sp_grammar_grow((void **)&g->ds_off, &c, 2, sizeof *g->ds_off) ||
        !sp_grammar_grow((void **)&g->ds_self, &c8, 2, sizeof *g->ds_self) ||
        !sp_grammar_grow((void **)&g->ds_hash, &c4, 2, sizeof *g->ds_hash) ||
        !sp_grammar_grow((void **)&g->ds_reads, &c5, 2, sizeof *g->ds_reads) ||
        !sp_grammar_grow((void **)&g->ds_flags, &c6, 2, sizeof *g->ds_flags) ||
        !sp_grammar_grow((void **)&g->ds_mask, &c7, 2, sizeof *g->ds_mask) ||
        !sp_grammar_grow((void **)&g->ds_row, &c9, 2, sizeof *g->ds_row))
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

/* ---- bind ---- */

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

uint32_t sp_grammar_n_vocab(const struct sp_grammar *g) { return g->toks ? g->toks->n_vocab : 0; }
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
    w[0] = sp_grammar_single(g, x);
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
        const struct pre *p = sp_grammar_pre_of(g, g->nq[x]);
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
        if (nodes[i] >= FIRST_NODE && !check_uncertain(g, nodes[i], sp_grammar_pre_of(g, g->nq[nodes[i]]), m)) {
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
