/* Merging equal states of a compiled NFA (see grammar_internal.h).
 *
 * Two states of one rule with the same finality and the same edges (per
 * target: the same bytes, the same calls) match the same suffixes, so one of
 * them can stand for both.  Thompson construction leaves many such pairs:
 * the states after each alternative of `a | "\\" b` lead to the same
 * place, and a repetition `x{0,30}` copies that pair thirty times.  Merging
 * them is repeated until nothing changes (targets merged in one round make
 * their sources equal in the next), at most MAX_ROUNDS times; each round
 * only merges states proven equal, so stopping early is safe.  A round
 * recomputes the signatures of the states with an edge to one merged in the
 * round before (the others' are unchanged), so a long chain costs its
 * length in rounds but not that many passes over every state's edges.
 *
 * Fewer states mean fewer trie walks when a grammar is bound to a
 * vocabulary (one per state that reads a byte) and fewer parallel stacks
 * while matching. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar_internal.h"

#define MAX_ROUNDS 64
/* ... and while a round merges at least 1/MIN_MERGE_SHARE of the states: a
 * long tail of rounds that merge one state each (a chain of equal states
 * deep in one rule) costs a pass over every state each and saves little. */
#define MIN_MERGE_SHARE 1000u

/* One edge of a state's signature: bytes (a set id: a's sets are unique by
 * value, so equal ids are equal sets) to a target, or a call (rule)
 * returning to a target. */
struct sig_edge {
    uint32_t kind, arg, target; /* no padding: signatures compare with memcmp */
};

static uint32_t set_hash(const struct sp_gbits *s)
{
    return (uint32_t)sp_grammar_mix(s->w[0] ^ sp_grammar_mix(s->w[1] ^ sp_grammar_mix(s->w[2] ^ (s->w[3] + 1))));
}

/* The sets of a by value: open addressing, set id + 1 (0: empty); room:
 * the sets a->sets has room for. */
struct set_table {
    uint32_t *t, cap, room;
};

/* The set id of bits in a's sets (appended when new); UINT32_MAX on no memory. */
static uint32_t set_id(struct sp_grammar_nfa *a, struct set_table *h, const struct sp_gbits *bits)
{
    if (((size_t)a->n_sets + 1) * 2 > h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 256;
        while (((size_t)a->n_sets + 1) * 2 > cap) /* the first table holds the sets made before */
            cap *= 2;
        uint32_t *t = calloc(cap, sizeof *t);
        if (!t)
            return UINT32_MAX;
        for (uint32_t i = 0; i < a->n_sets; i++) {
            uint32_t j = set_hash(&a->sets[i]) & (cap - 1);
            while (t[j])
                j = (j + 1) & (cap - 1);
            t[j] = i + 1;
        }
        free(h->t);
        h->t = t;
        h->cap = cap;
    }
    uint32_t j = set_hash(bits) & (h->cap - 1);
    for (; h->t[j]; j = (j + 1) & (h->cap - 1))
        if (!memcmp(&a->sets[h->t[j] - 1], bits, sizeof *bits))
            return h->t[j] - 1;
    if (a->n_sets >= h->room) {
        uint32_t room = h->room < 64 ? 64 : h->room * 2;
        struct sp_gbits *p = realloc(a->sets, (size_t)room * sizeof *p);
        if (!p)
            return UINT32_MAX;
        a->sets = p;
        h->room = room;
    }
    a->sets[a->n_sets] = *bits;
    h->t[j] = a->n_sets + 1;
    return a->n_sets++;
}

struct minimizer {
    struct sp_grammar_nfa *a;     /* its sets grow by the unions signatures make */
    struct set_table sets;
    uint32_t *rep;            /* [n_states] representative, rep[rep[s]] == rep[s] */
    struct sig_edge *sig;     /* signatures of this round, state s at sig_off[s] */
    uint32_t *sig_off, *sig_n;     /* sig_off[s]: a->edge_off[s], room for every edge */
    uint32_t cap_sig;
    uint32_t *old;            /* [n_states] rep before the round */
    uint8_t *dirty;           /* [n_states] signature to recompute */
    uint64_t *hash;
    uint32_t *tab;            /* open addressing over states, UINT32_MAX: empty */
    uint32_t cap_tab;
};

static int cmp_sig_edge(const void *x, const void *y)
{
    const struct sig_edge *a = x, *b = y;
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    if (a->target != b->target)
        return a->target < b->target ? -1 : 1;
    return a->arg < b->arg ? -1 : a->arg > b->arg ? 1 : 0;
}

/* The signature of s with targets through rep: sorted, byte edges to one
 * target merged (their sets united), duplicate calls dropped. */
static bool signature(struct minimizer *m, uint32_t s, uint32_t at)
{
    struct sp_grammar_nfa *a = m->a;
    uint32_t n = a->edge_off[s + 1] - a->edge_off[s];
    if (!m->sig || at + n > m->cap_sig) {
        uint32_t cap = m->cap_sig ? m->cap_sig : 1024;
        while (cap < at + n)
            cap *= 2;
        struct sig_edge *p = realloc(m->sig, (size_t)cap * sizeof *p);
        if (!p)
            return false;
        m->sig = p;
        m->cap_sig = cap;
    }
    struct sig_edge *e = m->sig + at;
    for (uint32_t i = 0; i < n; i++) {
        const struct sp_gedge *x = &a->edges[a->edge_off[s] + i];
        e[i] = (struct sig_edge){x->kind, x->arg, m->rep[x->target]};
    }
    if (n > 16) {
        qsort(e, n, sizeof *e, cmp_sig_edge);
    } else { /* most states have a few edges: insertion sort */
        for (uint32_t i = 1; i < n; i++) {
            struct sig_edge x = e[i];
            uint32_t j = i;
            for (; j > 0 && cmp_sig_edge(&e[j - 1], &x) > 0; j--)
                e[j] = e[j - 1];
            e[j] = x;
        }
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (k && e[k - 1].kind == e[i].kind && e[k - 1].target == e[i].target &&
            (e[i].kind == SP_GEDGE_BYTES || e[k - 1].arg == e[i].arg)) {
            if (e[i].kind == SP_GEDGE_BYTES && e[k - 1].arg != e[i].arg) {
                struct sp_gbits u = a->sets[e[k - 1].arg];
                for (int w = 0; w < 4; w++)
                    u.w[w] |= a->sets[e[i].arg].w[w];
                uint32_t id = set_id(a, &m->sets, &u);
                if (id == UINT32_MAX)
                    return false;
                e[k - 1].arg = id;
            }
            continue;
        }
        e[k++] = e[i];
    }
    uint64_t h = sp_grammar_mix(((uint64_t)a->rule_of[s] << 1 | a->final[s]) + 0x9e3779b97f4a7c15ull);
    for (uint32_t i = 0; i < k; i++)
        h = sp_grammar_mix(h ^ ((uint64_t)e[i].kind << 62 ^ (uint64_t)e[i].arg << 32 ^ e[i].target));
    m->sig_off[s] = at;
    m->sig_n[s] = k;
    m->hash[s] = h;
    return true;
}

static bool same(const struct minimizer *m, uint32_t x, uint32_t y)
{
    const struct sp_grammar_nfa *a = m->a;
    if (m->hash[x] != m->hash[y] || a->rule_of[x] != a->rule_of[y] || a->final[x] != a->final[y] ||
        m->sig_n[x] != m->sig_n[y])
        return false;
    return !memcmp(m->sig + m->sig_off[x], m->sig + m->sig_off[y], m->sig_n[x] * sizeof *m->sig);
}

/* One round: states with equal signatures get one representative.
 * Returns the number merged, or -1 on no memory. */
static int64_t round_merge(struct minimizer *m)
{
    const struct sp_grammar_nfa *a = m->a;
    for (uint32_t s = 0; s < a->n_states; s++) {
        if (m->rep[s] != s || !m->dirty[s])
            continue;
        if (!signature(m, s, a->edge_off[s]))
            return -1;
        m->dirty[s] = 0;
    }
    memcpy(m->old, m->rep, (size_t)a->n_states * sizeof *m->old);
    memset(m->tab, 0xff, (size_t)m->cap_tab * sizeof *m->tab);
    int64_t merged = 0;
    for (uint32_t s = 0; s < a->n_states; s++) {
        if (m->rep[s] != s)
            continue;
        uint32_t j = (uint32_t)m->hash[s] & (m->cap_tab - 1);
        while (m->tab[j] != UINT32_MAX && !same(m, m->tab[j], s))
            j = (j + 1) & (m->cap_tab - 1);
        if (m->tab[j] == UINT32_MAX) {
            m->tab[j] = s;
        } else {
            m->rep[s] = m->tab[j];
            merged++;
        }
    }
    /* chains from this round (s -> t where t was merged earlier) collapse */
    for (uint32_t s = 0; s < a->n_states; s++)
        m->rep[s] = m->rep[m->rep[s]];
    for (uint32_t s = 0; merged && s < a->n_states; s++) {
        if (m->rep[s] != s)
            continue;
        for (uint32_t i = a->edge_off[s]; i < a->edge_off[s + 1] && !m->dirty[s]; i++) {
            uint32_t t = a->edges[i].target;
            m->dirty[s] = m->rep[t] != m->old[t];
        }
    }
    return merged;
}

/* Rebuilds a with one state per class, numbered in order of the
 * representatives; the signatures of the last round are the edges. */
static bool rebuild(struct minimizer *m, struct sp_grammar_nfa *a)
{
    uint32_t n = a->n_states, n_new = 0, n_edges = 0;
    uint32_t *id = malloc((size_t)n * sizeof *id);
    if (!id)
        return false;
    for (uint32_t s = 0; s < n; s++)
        if (m->rep[s] == s) {
            id[s] = n_new++;
            n_edges += m->sig_n[s];
        }
    uint32_t *edge_off = calloc((size_t)n_new + 1, sizeof *edge_off);
    struct sp_gedge *edges = malloc((n_edges ? n_edges : 1) * sizeof *edges);
    uint8_t *final = malloc(n_new ? n_new : 1);
    uint32_t *rule_of = malloc((n_new ? n_new : 1) * sizeof *rule_of);
    struct sp_gbits *reads = calloc(n_new ? n_new : 1, sizeof *reads);
    bool ok = edge_off && edges && final && rule_of && reads;
    uint32_t k = 0, ne = 0;
    for (uint32_t s = 0; s < n && ok; s++) {
        if (m->rep[s] != s)
            continue;
        edge_off[k] = ne;
        final[k] = a->final[s];
        rule_of[k] = a->rule_of[s];
        for (uint32_t i = 0; i < m->sig_n[s] && ok; i++) {
            const struct sig_edge *e = &m->sig[m->sig_off[s] + i];
            if (e->kind == SP_GEDGE_BYTES)
                for (int w = 0; w < 4; w++)
                    reads[k].w[w] |= a->sets[e->arg].w[w];
            edges[ne++] = (struct sp_gedge){e->kind, e->arg, id[e->target]};
        }
        k++;
    }
    if (ok) {
        edge_off[n_new] = ne;
        for (uint32_t r = 0; r < a->n_rules; r++)
            if (a->rule_start[r] != UINT32_MAX)
                a->rule_start[r] = id[m->rep[a->rule_start[r]]];
        free(a->edge_off);
        free(a->edges);
        free(a->final);
        free(a->rule_of);
        free(a->reads);
        a->edge_off = edge_off;
        a->edges = edges;
        a->final = final;
        a->rule_of = rule_of;
        a->reads = reads;
        a->n_states = n_new;
    } else {
        free(edge_off);
        free(edges);
        free(final);
        free(rule_of);
        free(reads);
    }
    free(id);
    return ok;
}

sp_status sp_grammar_nfa_minimize(struct sp_grammar_nfa *a)
{
    struct minimizer m = {.a = a, .sets = {.room = a->n_sets}};
    uint32_t n = a->n_states;
    sp_status st = SP_OK;
    if (n == 0)
        return SP_OK;
    m.cap_tab = 1024;
    while (m.cap_tab < 2 * n)
        m.cap_tab *= 2;
    m.rep = malloc((size_t)n * sizeof *m.rep);
    m.sig_off = malloc((size_t)n * sizeof *m.sig_off);
    m.sig_n = malloc((size_t)n * sizeof *m.sig_n);
    m.hash = malloc((size_t)n * sizeof *m.hash);
    m.tab = malloc((size_t)m.cap_tab * sizeof *m.tab);
    m.old = malloc((size_t)n * sizeof *m.old);
    m.dirty = malloc(n);
    if (!m.rep || !m.sig_off || !m.sig_n || !m.hash || !m.tab || !m.old || !m.dirty) {
        st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (uint32_t s = 0; s < n; s++)
        m.rep[s] = s;
    memset(m.dirty, 1, n);
    int64_t merged = 0, total = 0;
    for (int r = 0; r < MAX_ROUNDS; r++) {
        if (sp_grammar_stop_now()) {
            st = sp_error_set(SP_ERR_ARG, "grammar: too large to compile: stopped while minimizing");
            goto done;
        }
        if ((merged = round_merge(&m)) < 0) {
            st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
            goto done;
        }
        total += merged;
        if (!merged || (uint64_t)merged * MIN_MERGE_SHARE < n)
            break;
    }
    if (total && merged) {
        /* stopped at MAX_ROUNDS: the signatures must match the final rep */
        for (uint32_t s = 0; s < n; s++)
            if (m.rep[s] == s && !signature(&m, s, a->edge_off[s])) {
                st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
                goto done;
            }
    }
    if (total && !rebuild(&m, a))
        st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
done:
    free(m.rep);
    free(m.sig);
    free(m.sig_off);
    free(m.sig_n);
    free(m.hash);
    free(m.tab);
    free(m.old);
    free(m.dirty);
    free(m.sets.t);
    return st;
}
