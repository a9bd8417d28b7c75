/* The compiled form of a grammar, shared by the compiler (gbnf.c, gbnf_nfa.c) and the
 * matcher (match.c).  Not an interface for other rooms.
 *
 * Each rule is an NFA over bytes without epsilon edges.  A state has byte
 * edges (a 256-bit set -> target) and call edges (rule -> the state to
 * return to), and may be final (its rule can end there).  Every state left
 * after compilation can reach its rule's end, and every rule called can
 * finish, so any stack of states is a viable prefix of some sentence. */
#ifndef SP_GRAMMAR_INTERNAL_H
#define SP_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "grammar/grammar.h"

enum { SP_GEDGE_BYTES = 0, SP_GEDGE_CALL = 1 };

struct sp_gedge {
    uint32_t kind;   /* SP_GEDGE_* */
    uint32_t arg;    /* byte set index, or the rule called */
    uint32_t target; /* next state, or the state returned to */
};

struct sp_gbits {
    uint64_t w[4];
};

/* A 64-bit finalizer (MurmurHash3's): the hash of table keys. */
static inline uint64_t sp_grammar_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static inline int sp_gbits_has(const struct sp_gbits *b, unsigned c)
{
    return (int)((b->w[c >> 6] >> (c & 63)) & 1u);
}

struct sp_grammar_nfa {
    uint32_t n_rules, root;
    char **rule_name;     /* [n_rules] */
    uint32_t *rule_start; /* [n_rules] */
    uint32_t n_states;
    uint32_t *edge_off;   /* [n_states + 1] into edges */
    struct sp_gedge *edges;
    uint8_t *final;       /* [n_states] */
    uint32_t *rule_of;    /* [n_states] */
    struct sp_gbits *reads; /* [n_states] union of the byte edges' sets */
    uint32_t n_sets;
    struct sp_gbits *sets;
};

/* gbnf.c: text -> nfa (zeroed on failure; error set).  calls: NULL, or
 * names of rules that stay calls wherever they are used (never built in
 * place), NULL-ended. */
sp_status sp_grammar_nfa_build(struct sp_grammar_nfa *nfa, const char *text, size_t len,
                               const char *root, const char *const *calls);
void sp_grammar_nfa_free(struct sp_grammar_nfa *nfa);
/* minimize.c: merges states with equal futures (same rule, finality and
 * edges); the language of every rule is unchanged. */
sp_status sp_grammar_nfa_minimize(struct sp_grammar_nfa *nfa);

/* match.c: takes ownership of nfa. */
sp_status sp_grammar_from_nfa(struct sp_grammar **out, struct sp_grammar_nfa *nfa);

#endif
