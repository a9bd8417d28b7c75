/* The NFA of parsed GBNF rules (see gbnf_internal.h, grammar_internal.h).
 *
 * Construction: Thompson fragments with epsilon edges, then every state
 * takes the edges of its epsilon closure; unreachable states go, byte edges
 * to one target merge into one set.  Then the checks: rules that can never
 * finish and states that cannot reach their rule's end are pruned (every
 * stack left is a viable prefix), and left recursion is refused.  Last,
 * states with equal futures merge (minimize.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/gbnf_internal.h"

/* ---- NFA construction ---- */

enum { E_BYTES = SP_GEDGE_BYTES, E_CALL = SP_GEDGE_CALL, E_EPS = 2 };

struct raw_edge {
    uint32_t from, kind, arg, to;
};

/* Rules this small (AST nodes) that do not reach themselves are built in
 * place of a call: a token that runs past a tiny rule's end (one character
 * of a string, say) would otherwise have to be checked against the stack
 * below at every step. */
#define INLINE_MAX_NODES 24
/* ... and when the rules they inline in turn stay this small (AST nodes,
 * every inlined call counted at its expanded size): a chain of small rules
 * each naming the next twice would otherwise double at every link. */
#define INLINE_MAX_EXPANDED 64
/* Inside a repetition built more than this many times, only rules that
 * expand to this few AST nodes (a JSON string character, not a whole
 * string) are built in place; larger ones stay calls, and the copies share
 * the called rule's states. */
#define INLINE_MAX_COPIES 4
#define INLINE_MAX_IN_COPIES 32

struct builder {
    struct parser *p;
    uint8_t *inlining;    /* [n_rules] being built inline right now */
    uint32_t *size;       /* [n_rules] AST nodes of the body, calls counted as one */
    uint32_t *expanded;   /* [n_rules] size with inlinable calls expanded; 0: not yet known */
    uint8_t *recursive;   /* [n_rules] 0: not yet known, 1: no, 2: reaches itself */
    uint8_t *reach_yes, *reach_no; /* [n_rules] hops_from's answers so far */
    uint32_t in_copies;   /* repetitions with more than INLINE_MAX_COPIES copies being built */
    struct vec edges;     /* raw_edge */
    struct vec sets;      /* sp_gbits, each once */
    uint32_t *set_tab;    /* sets by value: open addressing, index + 1 (0: empty) */
    uint32_t set_cap;     /* a power of two, at least twice the sets */
    struct vec state_rule;/* uint32 */
    uint32_t cur_rule;
};

struct frag {
    uint32_t s, e;
};

static uint32_t new_state(struct builder *b)
{
    if (b->state_rule.n >= SP_GRAMMAR_MAX_STATES) {
        if (!b->p->failed)
            sp_error_set(SP_ERR_ARG, "grammar: more than %u automaton states (repetition counts too large?)",
                         SP_GRAMMAR_MAX_STATES);
        b->p->failed = true;
        return 0;
    }
    if (!vec_push(&b->state_rule, &b->cur_rule))
        nomem(b->p);
    return (uint32_t)b->state_rule.n - 1;
}

/* Fails the compile for going over SP_GRAMMAR_MAX_WORK (work) or
 * SP_GRAMMAR_MAX_EDGES (!work). */
static void over_budget(struct parser *p, bool work)
{
    if (work)
        sp_error_set(SP_ERR_ARG, "grammar: too large to compile: more than %llu steps of work "
                     "(limit SP_GRAMMAR_MAX_WORK; nested or long repetitions?)",
                     (unsigned long long)SP_GRAMMAR_MAX_WORK);
    else
        sp_error_set(SP_ERR_ARG, "grammar: too large to compile: more than %u automaton edges "
                     "(limit SP_GRAMMAR_MAX_EDGES; nested or long repetitions?)", SP_GRAMMAR_MAX_EDGES);
    p->failed = true;
}

static void add_edge(struct builder *b, uint32_t from, uint32_t kind, uint32_t arg, uint32_t to)
{
    struct raw_edge e = {from, kind, arg, to};
    if (!b->p->failed && !vec_push(&b->edges, &e))
        nomem(b->p);
}

static uint32_t gbits_hash(const struct sp_gbits *s)
{
    return (uint32_t)sp_grammar_mix(s->w[0] ^ sp_grammar_mix(s->w[1] ^ sp_grammar_mix(s->w[2] ^ (s->w[3] + 1))));
}

/* The index of the byte set s in b->sets, appended when new. */
static uint32_t add_set(struct builder *b, const struct sp_gbits *s)
{
    const struct sp_gbits *all = b->sets.p;
    if ((b->sets.n + 1) * 2 > b->set_cap) {
        uint32_t cap = b->set_cap ? b->set_cap * 2 : 256;
        uint32_t *t = calloc(cap, sizeof *t);
        if (!t) {
            nomem(b->p);
            return 0;
        }
        for (size_t i = 0; i < b->sets.n; i++) {
            uint32_t j = gbits_hash(&all[i]) & (cap - 1);
            while (t[j])
                j = (j + 1) & (cap - 1);
            t[j] = (uint32_t)i + 1;
        }
        free(b->set_tab);
        b->set_tab = t;
        b->set_cap = cap;
    }
    uint32_t j = gbits_hash(s) & (b->set_cap - 1);
    for (; b->set_tab[j]; j = (j + 1) & (b->set_cap - 1))
        if (!memcmp(&all[b->set_tab[j] - 1], s, sizeof *s))
            return b->set_tab[j] - 1;
    if (!vec_push(&b->sets, s)) {
        nomem(b->p);
        return 0;
    }
    b->set_tab[j] = (uint32_t)b->sets.n;
    return (uint32_t)b->sets.n - 1;
}

static void add_byte_edge(struct builder *b, uint32_t from, unsigned lo, unsigned hi, uint32_t to)
{
    struct sp_gbits s = {{0}};
    for (unsigned c = lo; c <= hi; c++)
        s.w[c >> 6] |= 1ull << (c & 63);
    add_edge(b, from, E_BYTES, add_set(b, &s), to);
}

static int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

static void utf8_bytes(uint32_t cp, unsigned char *o)
{
    int n = utf8_len(cp);
    if (n == 1) {
        o[0] = (unsigned char)cp;
        return;
    }
    for (int i = n - 1; i > 0; i--) {
        o[i] = (unsigned char)(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    o[0] = (unsigned char)(lead[n] | cp);
}

/* The state from which c continuation bytes (any of 0x80-0xBF) lead to e:
 * tail[c], made on first use (UINT32_MAX: not yet), shared by every chain
 * of one class (they all end at e). */
static uint32_t tail_state(struct builder *b, uint32_t *tail, int c, uint32_t e)
{
    if (c == 0)
        return e;
    if (tail[c] == UINT32_MAX) {
        uint32_t next = tail_state(b, tail, c - 1, e);
        tail[c] = new_state(b);
        add_byte_edge(b, tail[c], 0x80, 0xBF, next);
    }
    return tail[c];
}

/* Codepoints [lo, hi] (no surrogates, one encoded length per call after the
 * split) as chains of byte ranges from s to e; a chain's run of full
 * continuation bytes at its end is the class's shared tail (tail_state). */
static void utf8_range(struct builder *b, uint32_t lo, uint32_t hi, uint32_t s, uint32_t e,
                       struct sp_gbits *single, uint32_t *tail)
{
    static const uint32_t bounds[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i]) {
            utf8_range(b, lo, bounds[i], s, e, single, tail);
            utf8_range(b, bounds[i] + 1, hi, s, e, single, tail);
            return;
        }
    if (hi < 0x80) {
        for (uint32_t c = lo; c <= hi; c++)
            single->w[c >> 6] |= 1ull << (c & 63);
        return;
    }
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_range(b, lo, lo | m, s, e, single, tail);
                utf8_range(b, (lo | m) + 1, hi, s, e, single, tail);
                return;
            }
            if ((hi & m) != m) {
                utf8_range(b, lo, (hi & ~m) - 1, s, e, single, tail);
                utf8_range(b, hi & ~m, hi, s, e, single, tail);
                return;
            }
        }
    }
    unsigned char a[4], z[4];
    utf8_bytes(lo, a);
    utf8_bytes(hi, z);
    int k = n; /* bytes k.. are full continuation bytes */
    while (k > 1 && a[k - 1] == 0x80 && z[k - 1] == 0xBF)
        k--;
    uint32_t cur = s;
    for (int i = 0; i < n && !b->p->failed; i++) {
        bool to_tail = i + 1 >= k;
        uint32_t nxt = to_tail ? tail_state(b, tail, n - 1 - i, e) : new_state(b);
        add_byte_edge(b, cur, a[i], z[i], nxt);
        if (to_tail)
            break;
        cur = nxt;
    }
}

static int cmp_u32pair(const void *x, const void *y)
{
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
}

static struct frag build_class(struct builder *b, const struct ast *a)
{
    struct frag f = {new_state(b), new_state(b)};
    uint32_t n = a->n;
    uint32_t *r = malloc((size_t)(n + 2) * 2 * sizeof *r);
    uint32_t *m = malloc((size_t)(n + 4) * 2 * 2 * sizeof *m);
    if (!r || !m) {
        free(r);
        free(m);
        nomem(b->p);
        return f;
    }
    if (n) {
        memcpy(r, vec_at(&b->p->ranges, (size_t)a->off * 2), (size_t)n * 2 * sizeof *r);
        qsort(r, n, 2 * sizeof *r, cmp_u32pair);
    }
    /* merge overlapping ranges */
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (k && r[i * 2] <= r[(k - 1) * 2 + 1] + 1) {
            if (r[i * 2 + 1] > r[(k - 1) * 2 + 1])
                r[(k - 1) * 2 + 1] = r[i * 2 + 1];
        } else {
            r[k * 2] = r[i * 2];
            r[k * 2 + 1] = r[i * 2 + 1];
            k++;
        }
    }
    if (a->neg) { /* complement over [0, MAX_CP] */
        uint32_t nk = 0, next = 0;
        for (uint32_t i = 0; i < k; i++) {
            if (r[i * 2] > next) {
                m[nk * 2] = next;
                m[nk * 2 + 1] = r[i * 2] - 1;
                nk++;
            }
            next = r[i * 2 + 1] + 1;
        }
        if (next <= MAX_CP) {
            m[nk * 2] = next;
            m[nk * 2 + 1] = MAX_CP;
            nk++;
        }
        memcpy(r, m, (size_t)nk * 2 * sizeof *r);
        k = nk;
    }
    /* drop surrogates, then emit */
    struct sp_gbits single = {{0}};
    uint32_t tail[4] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    for (uint32_t i = 0; i < k && !b->p->failed; i++) {
        uint32_t lo = r[i * 2], hi = r[i * 2 + 1];
        if (lo < 0xD800 && hi >= 0xD800) {
            utf8_range(b, lo, 0xD7FF, f.s, f.e, &single, tail);
            lo = 0xE000;
        }
        if (lo >= 0xD800 && lo <= 0xDFFF)
            lo = 0xE000;
        if (lo <= hi)
            utf8_range(b, lo, hi, f.s, f.e, &single, tail);
    }
    if (single.w[0] | single.w[1] | single.w[2] | single.w[3])
        add_edge(b, f.s, E_BYTES, add_set(b, &single), f.e);
    free(r);
    free(m);
    return f;
}

static uint32_t ast_size(struct parser *p, uint32_t ai, int depth)
{
    const struct ast *a = ast_at(p, ai);
    if (depth > MAX_DEPTH * 4)
        return UINT32_MAX / 2;
    uint32_t n = 1;
    if (a->kind == A_ALT || a->kind == A_SEQ)
        for (uint32_t i = 0; i < a->n && n <= INLINE_MAX_NODES; i++)
            n += ast_size(p, ((const uint32_t *)p->kids.p)[a->off + i], depth + 1);
    else if (a->kind == A_REP)
        n += ast_size(p, a->kid, depth + 1) * (a->max == UINT32_MAX ? 2 : (a->max > 8 ? 9 : a->max + 1));
    return n;
}

/* Is there a chain of `hops` references from rule r (r calls a rule that
 * calls a rule ...)?  A rule that reaches itself has chains of any length,
 * so "r is recursive" is asked as hops_from(r, REACH_HOPS): a chain that
 * long is taken as recursion (deep chains keep their calls).  The answers
 * are monotone in hops and kept per rule (reach_yes: the most hops known to
 * exist, reach_no: the fewest known not to), so every rule's body is read
 * at most REACH_HOPS times over a whole build; the recursion is at most
 * REACH_HOPS deep. */
#define REACH_HOPS 17
static bool ast_chain(struct builder *b, uint32_t ai, int hops);
static bool hops_from(struct builder *b, uint32_t r, int hops)
{
    if (hops <= b->reach_yes[r])
        return true;
    if (hops >= b->reach_no[r])
        return false;
    bool yes = ast_chain(b, ((struct rule *)b->p->rules.p)[r].body, hops);
    if (yes)
        b->reach_yes[r] = (uint8_t)hops;
    else
        b->reach_no[r] = (uint8_t)hops;
    return yes;
}

/* Does the AST ai hold a reference to a rule with a chain of hops - 1? */
static bool ast_chain(struct builder *b, uint32_t ai, int hops)
{
    const struct ast *a = ast_at(b->p, ai);
    if (a->kind == A_REF)
        return hops_from(b, a->ref, hops - 1);
    if (a->kind == A_ALT || a->kind == A_SEQ) {
        for (uint32_t i = 0; i < a->n; i++)
            if (ast_chain(b, ((const uint32_t *)b->p->kids.p)[a->off + i], hops))
                return true;
        return false;
    }
    return a->kind == A_REP && ast_chain(b, a->kid, hops);
}

static bool inlinable(struct builder *b, uint32_t r, int depth);

/* AST nodes of ai with inlinable calls expanded (saturating). */
static uint32_t expanded_size(struct builder *b, uint32_t ai, int depth)
{
    const struct ast *a = ast_at(b->p, ai);
    if (depth > MAX_DEPTH * 4)
        return UINT32_MAX / 4;
    uint64_t n = 1;
    if (a->kind == A_REF) {
        if (inlinable(b, a->ref, depth + 1))
            n = b->expanded[a->ref];
    } else if (a->kind == A_ALT || a->kind == A_SEQ) {
        for (uint32_t i = 0; i < a->n && n <= INLINE_MAX_EXPANDED; i++)
            n += expanded_size(b, ((const uint32_t *)b->p->kids.p)[a->off + i], depth + 1);
    } else if (a->kind == A_REP) {
        n += (uint64_t)expanded_size(b, a->kid, depth + 1) *
             (a->max == UINT32_MAX ? 2 : (a->max > 8 ? 9 : a->max + 1));
    }
    return n > UINT32_MAX / 4 ? UINT32_MAX / 4 : (uint32_t)n;
}

/* May a call of rule r be built in place?  Small, not recursive, and small
 * once what it inlines is counted too. */
static bool inlinable(struct builder *b, uint32_t r, int depth)
{
    if (b->size[r] > INLINE_MAX_NODES || b->inlining[r])
        return false;
    if (!b->recursive[r])
        b->recursive[r] = hops_from(b, r, REACH_HOPS) ? 2 : 1;
    if (b->recursive[r] == 2)
        return false;
    if (!b->expanded[r]) {
        b->inlining[r] = 1; /* guards the walk below against cycles */
        b->expanded[r] = expanded_size(b, ((struct rule *)b->p->rules.p)[r].body, depth);
        b->inlining[r] = 0;
    }
    return b->expanded[r] <= INLINE_MAX_EXPANDED;
}

static struct frag build(struct builder *b, uint32_t ai, int depth)
{
    struct parser *p = b->p;
    struct frag f = {0, 0};
    if (p->failed)
        return f;
    if (depth > 4 * MAX_DEPTH) {
        sp_error_set(SP_ERR_ARG, "grammar: nested too deeply");
        p->failed = true;
        return f;
    }
    const struct ast a = *ast_at(p, ai);
    const uint32_t *kids = vec_at(&p->kids, a.off);
    switch (a.kind) {
    case A_LIT: {
        f.s = f.e = new_state(b);
        const unsigned char *s = vec_at(&p->bytes, a.off);
        for (uint32_t i = 0; i < a.n && !p->failed; i++) {
            uint32_t nxt = new_state(b);
            add_byte_edge(b, f.e, s[i], s[i], nxt);
            f.e = nxt;
        }
        return f;
    }
    case A_CLASS:
        return build_class(b, &a);
    case A_REF:
        if (inlinable(b, a.ref, depth) && (!b->in_copies || b->expanded[a.ref] <= INLINE_MAX_IN_COPIES)) {
            b->inlining[a.ref] = 1;
            f = build(b, ((struct rule *)p->rules.p)[a.ref].body, depth + 1);
            b->inlining[a.ref] = 0;
            return f;
        }
        f.s = new_state(b);
        f.e = new_state(b);
        add_edge(b, f.s, E_CALL, a.ref, f.e);
        return f;
    case A_SEQ:
        f.s = f.e = new_state(b);
        for (uint32_t i = 0; i < a.n && !p->failed; i++) {
            struct frag k = build(b, kids[i], depth + 1);
            add_edge(b, f.e, E_EPS, 0, k.s);
            f.e = k.e;
        }
        return f;
    case A_ALT:
        f.s = new_state(b);
        f.e = new_state(b);
        for (uint32_t i = 0; i < a.n && !p->failed; i++) {
            struct frag k = build(b, kids[i], depth + 1);
            add_edge(b, f.s, E_EPS, 0, k.s);
            add_edge(b, k.e, E_EPS, 0, f.e);
        }
        return f;
    case A_REP: {
        uint64_t copies = (uint64_t)a.min + (a.max == UINT32_MAX ? 1 : a.max - a.min);
        bool many = copies > INLINE_MAX_COPIES;
        b->in_copies += many;
        f.s = f.e = new_state(b);
        for (uint32_t i = 0; i < a.min && !p->failed; i++) {
            struct frag k = build(b, a.kid, depth + 1);
            add_edge(b, f.e, E_EPS, 0, k.s);
            f.e = k.e;
        }
        if (a.max == UINT32_MAX) {
            uint32_t loop = new_state(b);
            struct frag k = build(b, a.kid, depth + 1);
            add_edge(b, f.e, E_EPS, 0, loop);
            add_edge(b, loop, E_EPS, 0, k.s);
            add_edge(b, k.e, E_EPS, 0, loop);
            f.e = loop;
        } else if (a.max > a.min) {
            uint32_t end = new_state(b);
            for (uint32_t i = a.min; i < a.max && !p->failed; i++) {
                struct frag k = build(b, a.kid, depth + 1);
                add_edge(b, f.e, E_EPS, 0, end);
                add_edge(b, f.e, E_EPS, 0, k.s);
                f.e = k.e;
            }
            add_edge(b, f.e, E_EPS, 0, end);
            f.e = end;
        }
        b->in_copies -= many;
        return f;
    }
    }
    return f;
}

/* ---- epsilon removal, pruning, checks ---- */

static int cmp_edge(const void *x, const void *y)
{
    const struct raw_edge *a = x, *b = y;
    if (a->from != b->from)
        return a->from < b->from ? -1 : 1;
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    if (a->to != b->to)
        return a->to < b->to ? -1 : 1;
    return a->arg < b->arg ? -1 : a->arg > b->arg ? 1 : 0;
}

struct flat {
    uint32_t n;
    uint32_t *off;          /* [n + 1] */
    struct raw_edge *e;
};

/* Groups edges by source state (sorted, duplicates removed): placed by
 * source (a counting sort), then each state's few edges sorted. */
static bool flatten(struct flat *f, struct raw_edge *e, size_t n_e, uint32_t n_states)
{
    uint32_t *at = calloc((size_t)n_states + 1, sizeof *at);
    struct raw_edge *by = malloc((n_e ? n_e : 1) * sizeof *by);
    if (!at || !by) {
        free(at);
        free(by);
        return false;
    }
    for (size_t i = 0; i < n_e; i++)
        at[e[i].from + 1]++;
    for (uint32_t s = 0; s < n_states; s++)
        at[s + 1] += at[s];
    for (size_t i = 0; i < n_e; i++)
        by[at[e[i].from]++] = e[i];
    if (n_e) /* e may be NULL with no edges */
        memcpy(e, by, n_e * sizeof *e);
    free(by);
    for (uint32_t s = 0, lo = 0; s < n_states; s++) { /* at[s]: the end of s's edges now */
        if (at[s] - lo > 16) {
            qsort(e + lo, at[s] - lo, sizeof *e, cmp_edge);
        } else { /* most states have a few edges: insertion sort */
            for (uint32_t i = lo + 1; i < at[s]; i++) {
                struct raw_edge x = e[i];
                uint32_t j = i;
                for (; j > lo && cmp_edge(&e[j - 1], &x) > 0; j--)
                    e[j] = e[j - 1];
                e[j] = x;
            }
        }
        lo = at[s];
    }
    free(at);
    size_t k = 0;
    for (size_t i = 0; i < n_e; i++)
        if (!k || cmp_edge(&e[i], &e[k - 1]))
            e[k++] = e[i];
    f->n = n_states;
    f->e = e;
    f->off = calloc((size_t)n_states + 1, sizeof *f->off);
    if (!f->off)
        return false;
    for (size_t i = 0; i < k; i++)
        f->off[e[i].from + 1]++;
    for (uint32_t s = 0; s < n_states; s++)
        f->off[s + 1] += f->off[s];
    return true;
}

struct analysis {
    uint32_t n_states, n_rules;
    struct raw_edge *e;     /* eps-free edges, grouped */
    uint32_t *off;
    uint8_t *final;
    uint8_t *nullable, *productive, *alive;
    const struct rule *rules;
    uint32_t *start;
};

/* Does a walk from `s` reach a final state along call edges to rules with
 * flag[] set (byte edges too when `bytes`)?  stamp/mark: scratch. */
static bool reaches_final(const struct analysis *an, uint32_t s, const uint8_t *flag, bool bytes,
                          uint32_t *stack, uint32_t *mark, uint32_t stamp)
{
    size_t sp = 0;
    stack[sp++] = s;
    mark[s] = stamp;
    while (sp) {
        uint32_t q = stack[--sp];
        if (an->final[q])
            return true;
        for (uint32_t i = an->off[q]; i < an->off[q + 1]; i++) {
            const struct raw_edge *x = &an->e[i];
            bool ok = x->kind == E_CALL ? flag[x->arg] : bytes;
            if (ok && mark[x->to] != stamp) {
                mark[x->to] = stamp;
                stack[sp++] = x->to;
            }
        }
    }
    return false;
}

/* live[s]: a walk from s reaches a final state along byte edges and calls
 * of productive rules; one backward search from the final states over the
 * reversed edges (linear in the edges).  stack: scratch of n entries.
 * False on no memory. */
static bool live_states(const struct analysis *an, uint8_t *live, uint32_t *stack)
{
    uint32_t n = an->n_states, n_e = an->off[n];
    uint32_t *roff = calloc((size_t)n + 1, sizeof *roff), *rfrom = malloc(((size_t)n_e + 1) * sizeof *rfrom);
    if (!roff || !rfrom) {
        free(roff);
        free(rfrom);
        return false;
    }
    for (uint32_t q = 0; q < n; q++)
        for (uint32_t i = an->off[q]; i < an->off[q + 1]; i++)
            if (an->e[i].kind != E_CALL || an->productive[an->e[i].arg])
                roff[an->e[i].to + 1]++;
    for (uint32_t q = 0; q < n; q++)
        roff[q + 1] += roff[q];
    for (uint32_t q = 0; q < n; q++)
        for (uint32_t i = an->off[q]; i < an->off[q + 1]; i++)
            if (an->e[i].kind != E_CALL || an->productive[an->e[i].arg])
                rfrom[roff[an->e[i].to]++] = q;
    for (uint32_t q = n; q > 0; q--) /* back to the starts */
        roff[q] = roff[q - 1];
    roff[0] = 0;
    size_t sp = 0;
    for (uint32_t q = 0; q < n; q++) {
        live[q] = an->final[q] ? 1 : 0;
        if (live[q])
            stack[sp++] = q;
    }
    while (sp) {
        uint32_t q = stack[--sp];
        for (uint32_t i = roff[q]; i < roff[q + 1]; i++)
            if (!live[rfrom[i]]) {
                live[rfrom[i]] = 1;
                stack[sp++] = rfrom[i];
            }
    }
    free(roff);
    free(rfrom);
    return true;
}

static bool fixpoint(struct analysis *an, uint8_t *flag, bool bytes, uint32_t *stack, uint32_t *mark,
                     uint32_t *stamp)
{
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = 0; r < an->n_rules; r++) {
            if (flag[r])
                continue;
            if (reaches_final(an, an->start[r], flag, bytes, stack, mark, ++*stamp)) {
                flag[r] = 1;
                changed = true;
            }
        }
    }
    return true;
}

/* Left recursion: a rule that can call itself before reading a byte.  The
 * graph has an edge r -> s when r's start reaches a call of s through calls
 * of nullable rules only; a cycle is refused, naming one rule on it. */
static int64_t left_recursion(const struct analysis *an, uint32_t *stack, uint32_t *mark, uint32_t *stamp)
{
    uint32_t n_rules = an->n_rules;
    struct vec adj = {.elem = sizeof(uint32_t)};
    uint32_t *adj_off = calloc((size_t)n_rules + 1, sizeof *adj_off);
    uint8_t *color = calloc(n_rules ? n_rules : 1, 1);
    uint32_t *path = malloc(((size_t)n_rules + 1) * 2 * sizeof *path);
    int64_t found = -1;
    if (!adj_off || !color || !path) {
        found = -2;
        goto done;
    }
    for (uint32_t r = 0; r < n_rules; r++) {
        adj_off[r] = (uint32_t)adj.n;
        size_t sp = 0;
        uint32_t st = ++*stamp;
        stack[sp++] = an->start[r];
        mark[an->start[r]] = st;
        while (sp) {
            uint32_t q = stack[--sp];
            for (uint32_t i = an->off[q]; i < an->off[q + 1]; i++) {
                const struct raw_edge *x = &an->e[i];
                if (x->kind != E_CALL)
                    continue;
                if (!vec_push(&adj, &x->arg)) {
                    found = -2;
                    goto done;
                }
                if (an->nullable[x->arg] && mark[x->to] != st) {
                    mark[x->to] = st;
                    stack[sp++] = x->to;
                }
            }
        }
    }
    adj_off[n_rules] = (uint32_t)adj.n;
    /* iterative DFS; path holds (rule, next edge) pairs; color 1 = on path */
    const uint32_t *to = adj.p;
    for (uint32_t r0 = 0; r0 < n_rules && found < 0; r0++) {
        if (color[r0])
            continue;
        size_t d = 0;
        path[0] = r0;
        path[1] = adj_off[r0];
        color[r0] = 1;
        while (d != SIZE_MAX && found < 0) {
            uint32_t r = path[d * 2];
            if (path[d * 2 + 1] == adj_off[r + 1]) {
                color[r] = 2;
                d--;
                continue;
            }
            uint32_t s = to[path[d * 2 + 1]++];
            if (color[s] == 1)
                found = s;
            else if (!color[s]) {
                color[s] = 1;
                d++;
                path[d * 2] = s;
                path[d * 2 + 1] = adj_off[s];
            }
        }
    }
done:
    free(adj.p);
    free(adj_off);
    free(color);
    free(path);
    return found;
}

void sp_grammar_nfa_free(struct sp_grammar_nfa *nfa)
{
    if (!nfa)
        return;
    for (uint32_t i = 0; nfa->rule_name && i < nfa->n_rules; i++)
        free(nfa->rule_name[i]);
    free(nfa->rule_name);
    free(nfa->rule_start);
    free(nfa->edge_off);
    free(nfa->edges);
    free(nfa->final);
    free(nfa->rule_of);
    free(nfa->reads);
    free(nfa->sets);
    memset(nfa, 0, sizeof *nfa);
}

/* Step 1 of finish_nfa: each state s takes the non-epsilon edges of its
 * epsilon closure (appended to out, from s), within the budget of work and
 * bytes; final[s]: the closure holds the end of s's rule.  Sets p->failed
 * on an error. */
static void closure_edges(struct builder *b, const struct flat *raw, const uint32_t *rend, uint32_t *stack,
                          uint32_t *mark, uint32_t *stamp, uint8_t *final, struct vec *out)
{
    struct parser *p = b->p;
    uint32_t n = (uint32_t)b->state_rule.n;
    const uint32_t *srule = b->state_rule.p;
    uint64_t work = 0;
    for (uint32_t s = 0; s < n && !p->failed; s++) {
        size_t sp = 0;
        stack[sp++] = s;
        mark[s] = ++*stamp;
        while (sp && !p->failed) {
            if (++work > SP_GRAMMAR_MAX_WORK || out->n > SP_GRAMMAR_MAX_EDGES || sp_grammar_stop_poll(work)) {
                over_budget(p, work > SP_GRAMMAR_MAX_WORK);
                break;
            }
            uint32_t q = stack[--sp];
            if (q == rend[srule[q]])
                final[s] = 1;
            for (uint32_t i = raw->off[q]; i < raw->off[q + 1]; i++) {
                struct raw_edge x = raw->e[i];
                if (x.kind == E_EPS) {
                    if (mark[x.to] != *stamp) {
                        mark[x.to] = *stamp;
                        stack[sp++] = x.to;
                    }
                } else {
                    x.from = s;
                    if (!vec_push(out, &x))
                        nomem(p);
                }
            }
        }
    }
}

/* Step 2: nullable and productive rules; a left-recursive rule, or a root
 * that matches no finite string, is an error.  False (p->failed) then. */
static bool check_rules(struct parser *p, struct analysis *an, uint32_t root, uint32_t *stack, uint32_t *mark,
                        uint32_t *stamp)
{
    fixpoint(an, an->nullable, false, stack, mark, stamp);
    fixpoint(an, an->productive, true, stack, mark, stamp);
    int64_t lr = left_recursion(an, stack, mark, stamp);
    if (lr == -2) {
        nomem(p);
    } else if (lr >= 0) {
        sp_error_set(SP_ERR_ARG, "grammar: rule '%s' is left-recursive (it can reach itself before "
                     "reading any character)", an->rules[lr].name);
        p->failed = true;
    }
    if (!p->failed && !an->productive[root]) {
        sp_error_set(SP_ERR_ARG, "grammar: rule '%s' matches no finite string", an->rules[root].name);
        p->failed = true;
    }
    return !p->failed;
}

/* Step 4: the live states reachable from the root's start (through calls
 * to productive rules), numbered in the order found (newid, UINT32_MAX:
 * dropped); rule_used: the rules called.  Returns how many. */
static uint32_t renumber(const struct analysis *an, uint32_t root, const uint8_t *live, uint32_t *newid,
                         uint32_t *stack, uint8_t *rule_used)
{
    for (uint32_t s = 0; s < an->n_states; s++)
        newid[s] = UINT32_MAX;
    uint32_t n_new = 0;
    size_t sp = 0;
    memset(rule_used, 0, an->n_rules);
    rule_used[root] = 1;
    stack[sp++] = an->start[root];
    newid[an->start[root]] = n_new++;
    while (sp) {
        uint32_t q = stack[--sp];
        for (uint32_t i = an->off[q]; i < an->off[q + 1]; i++) {
            const struct raw_edge *x = &an->e[i];
            if (!live[x->to] || (x->kind == E_CALL && !an->productive[x->arg]))
                continue;
            uint32_t nxt[2] = {x->to, x->kind == E_CALL ? an->start[x->arg] : UINT32_MAX};
            if (x->kind == E_CALL)
                rule_used[x->arg] = 1;
            for (int k = 0; k < 2; k++)
                if (nxt[k] != UINT32_MAX && newid[nxt[k]] == UINT32_MAX) {
                    newid[nxt[k]] = n_new++;
                    stack[sp++] = nxt[k];
                }
        }
    }
    return n_new;
}

/* Step 5, the edges: state k (old id order[k]) gets its live edges, byte
 * edges to one target merged into one set.  False (p->failed) on no
 * memory. */
static bool emit_edges(struct builder *b, struct sp_grammar_nfa *nfa, const struct analysis *an, const uint8_t *live,
                       const uint32_t *newid, const uint32_t *order)
{
    const uint32_t *srule = b->state_rule.p;
    uint32_t ne = 0;
    for (uint32_t k = 0; k < nfa->n_states; k++) {
        uint32_t q = order[k];
        nfa->edge_off[k] = ne;
        nfa->final[k] = an->final[q];
        nfa->rule_of[k] = srule[q];
        for (uint32_t i = an->off[q]; i < an->off[q + 1]; i++) {
            const struct raw_edge *x = &an->e[i];
            if (!live[x->to] || (x->kind == E_CALL && !an->productive[x->arg]))
                continue;
            struct sp_gedge g = {x->kind, x->arg, newid[x->to]};
            if (x->kind == E_BYTES) {
                const struct sp_gbits *s = &nfa->sets[x->arg];
                for (int w = 0; w < 4; w++)
                    nfa->reads[k].w[w] |= s->w[w];
                if (ne > nfa->edge_off[k] && nfa->edges[ne - 1].kind == E_BYTES &&
                    nfa->edges[ne - 1].target == g.target) {
                    struct sp_gbits u = nfa->sets[nfa->edges[ne - 1].arg];
                    for (int w = 0; w < 4; w++)
                        u.w[w] |= s->w[w];
                    size_t before = b->sets.n;
                    uint32_t id = add_set(b, &u);
                    if (b->sets.n != before) {
                        struct sp_gbits *ns = realloc(nfa->sets, b->sets.n * sizeof *ns);
                        if (!ns) {
                            nomem(b->p);
                            return false;
                        }
                        nfa->sets = ns;
                        nfa->sets[id] = u;
                        nfa->n_sets = (uint32_t)b->sets.n;
                    }
                    nfa->edges[ne - 1].arg = id;
                    continue;
                }
            }
            nfa->edges[ne++] = g;
        }
    }
    nfa->edge_off[nfa->n_states] = ne;
    return true;
}

/* Step 5: the final arrays, of the n_new states renumber kept (order:
 * scratch of n_new entries).  False (p->failed) on no memory. */
static bool emit_nfa(struct builder *b, struct sp_grammar_nfa *nfa, const struct analysis *an, const uint8_t *live,
                     const uint32_t *newid, uint32_t n_new, const uint8_t *rule_used, uint32_t *order)
{
    uint32_t n_rules = an->n_rules, n = an->n_states;
    nfa->n_rules = n_rules;
    nfa->n_states = n_new;
    nfa->rule_name = calloc(n_rules, sizeof *nfa->rule_name);
    nfa->rule_start = malloc((size_t)n_rules * sizeof *nfa->rule_start);
    nfa->edge_off = calloc((size_t)n_new + 1, sizeof *nfa->edge_off);
    nfa->final = calloc(n_new ? n_new : 1, 1);
    nfa->rule_of = calloc(n_new ? n_new : 1, sizeof *nfa->rule_of);
    nfa->reads = calloc(n_new ? n_new : 1, sizeof *nfa->reads);
    nfa->edges = malloc((an->off[n] ? an->off[n] : 1) * sizeof *nfa->edges);
    nfa->n_sets = (uint32_t)b->sets.n;
    nfa->sets = malloc((b->sets.n ? b->sets.n : 1) * sizeof *nfa->sets);
    if (!nfa->rule_name || !nfa->rule_start || !nfa->edge_off || !nfa->final || !nfa->rule_of ||
        !nfa->reads || !nfa->edges || !nfa->sets) {
        nomem(b->p);
        return false;
    }
    if (b->sets.n)
        memcpy(nfa->sets, b->sets.p, b->sets.n * sizeof *nfa->sets);
    for (uint32_t r = 0; r < n_rules; r++) {
        nfa->rule_name[r] = strdup(an->rules[r].name);
        nfa->rule_start[r] = rule_used[r] ? newid[an->start[r]] : UINT32_MAX;
        if (!nfa->rule_name[r]) {
            nomem(b->p);
            return false;
        }
    }
    for (uint32_t s = 0; s < n; s++) /* old ids in new order */
        if (newid[s] != UINT32_MAX)
            order[newid[s]] = s;
    return emit_edges(b, nfa, an, live, newid, order);
}

/* From the raw Thompson NFA to the final one.  Returns false with an error. */
static bool finish_nfa(struct builder *b, struct sp_grammar_nfa *nfa, const uint32_t *rstart,
                       const uint32_t *rend, uint32_t root)
{
    struct parser *p = b->p;
    uint32_t n = (uint32_t)b->state_rule.n, n_rules = (uint32_t)p->rules.n;
    struct flat raw = {0}, ef = {0};
    struct vec out = {.elem = sizeof(struct raw_edge)};
    uint32_t *stack = malloc(((size_t)n * 2 + 2) * sizeof *stack);
    uint32_t *mark = calloc(n, sizeof *mark);
    uint32_t *newid = malloc((size_t)n * sizeof *newid);
    uint8_t *final = calloc(n, 1);
    uint8_t *flags = calloc((size_t)n_rules * 4 + 1, 1);
    uint8_t *live = NULL;
    bool ok = false;
    uint32_t stamp = 0;
    if (!stack || !mark || !newid || !final || !flags || !flatten(&raw, b->edges.p, b->edges.n, n)) {
        nomem(p);
        goto done;
    }
    b->edges.p = NULL; /* owned by raw now */
    /* 1. each state takes the non-epsilon edges of its epsilon closure */
    closure_edges(b, &raw, rend, stack, mark, &stamp, final, &out);
    if (p->failed)
        goto done;
    if (!flatten(&ef, out.p, out.n, n)) {
        nomem(p);
        goto done;
    }
    out.p = NULL;
    struct analysis an = {n, n_rules, ef.e, ef.off, final, flags, flags + n_rules, flags + 2 * n_rules,
                          p->rules.p, (uint32_t *)rstart};
    /* 2. nullable and productive rules; left recursion */
    if (!check_rules(p, &an, root, stack, mark, &stamp))
        goto done;
    /* 3. live states: can reach their rule's end (calls to productive rules) */
    if (!(live = calloc(n, 1)) || !live_states(&an, live, stack)) {
        nomem(p);
        goto done;
    }
    /* 4. reachable live states from the rule starts, renumbered */
    uint8_t *rule_used = flags + 3 * n_rules;
    uint32_t n_new = renumber(&an, root, live, newid, stack, rule_used);
    /* 5. the final arrays (mark, no longer needed, holds the order) */
    nfa->root = root;
    ok = emit_nfa(b, nfa, &an, live, newid, n_new, rule_used, mark);
done:
    free(live);
    free(ef.off);
    free(ef.e);
    free(raw.off);
    free(raw.e);
    free(out.p);
    free(stack);
    free(mark);
    free(newid);
    free(final);
    free(flags);
    return ok;
}

sp_status sp_grammar_nfa_construct(struct parser *p, struct sp_grammar_nfa *nfa, uint32_t root_id,
                                   const char *const *calls)
{
    struct builder b = {0};
    uint32_t *rstart = NULL, *rend = NULL;
    sp_status st = SP_ERR_ARG;
    struct rule *rules = p->rules.p;
    uint32_t n_rules = (uint32_t)p->rules.n;
    b.p = p;
    b.edges.elem = sizeof(struct raw_edge);
    b.sets.elem = sizeof(struct sp_gbits);
    b.state_rule.elem = sizeof(uint32_t);
    rstart = malloc((size_t)n_rules * sizeof *rstart);
    rend = malloc((size_t)n_rules * sizeof *rend);
    b.inlining = calloc(n_rules, 1);
    b.size = malloc((size_t)n_rules * sizeof *b.size);
    b.expanded = calloc(n_rules, sizeof *b.expanded);
    b.recursive = calloc(n_rules, 1);
    b.reach_yes = calloc(n_rules, 1);
    b.reach_no = malloc(n_rules ? n_rules : 1);
    if (!rstart || !rend || !b.inlining || !b.size || !b.expanded || !b.recursive || !b.reach_yes ||
        !b.reach_no) {
        st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    memset(b.reach_no, REACH_HOPS + 1, n_rules);
    for (uint32_t r = 0; r < n_rules && calls; r++) { /* never built in place, as if recursive */
        for (const char *const *c = calls; *c; c++)
            if (!strcmp(rules[r].name, *c))
                b.recursive[r] = 2;
    }
    for (uint32_t r = 0; r < n_rules; r++)
        b.size[r] = ast_size(p, rules[r].body, 0);
    for (uint32_t r = 0; r < n_rules && !p->failed; r++) {
        b.cur_rule = r;
        struct frag f = build(&b, rules[r].body, 0);
        rstart[r] = f.s;
        rend[r] = f.e;
    }
    if (p->failed || !finish_nfa(&b, nfa, rstart, rend, root_id)) {
        st = sp_error_message()[0] && strstr(sp_error_message(), "out of memory") ? SP_ERR_NOMEM : SP_ERR_ARG;
        sp_grammar_nfa_free(nfa);
        goto done;
    }
    if ((st = sp_grammar_nfa_minimize(nfa)) != SP_OK)
        sp_grammar_nfa_free(nfa);
done:
    free(b.edges.p);
    free(b.sets.p);
    free(b.set_tab);
    free(b.state_rule.p);
    free(rstart);
    free(rend);
    free(b.inlining);
    free(b.size);
    free(b.expanded);
    free(b.recursive);
    free(b.reach_yes);
    free(b.reach_no);
    return st;
}
