/* The parsed form of a GBNF grammar, shared by the parser (gbnf.c) and the
 * NFA construction (gbnf_nfa.c).  Not an interface for other rooms or files.
 *
 * The parser turns the text into rules, each an AST (alternatives,
 * sequences, literals, classes, references, repetitions) in pools; the
 * construction turns the rules into the byte-level NFA of
 * grammar_internal.h. */
#ifndef SP_GRAMMAR_GBNF_INTERNAL_H
#define SP_GRAMMAR_GBNF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar_internal.h"

#define MAX_DEPTH 128
#define MAX_CP 0x10FFFFu


enum { A_ALT, A_SEQ, A_LIT, A_CLASS, A_REF, A_REP };

struct ast {
    uint8_t kind;
    bool neg;             /* A_CLASS */
    uint32_t off, n;      /* A_ALT/A_SEQ: kids pool; A_LIT: bytes pool; A_CLASS: ranges pool */
    uint32_t kid;         /* A_REP */
    uint32_t min, max;    /* A_REP; max UINT32_MAX: unbounded */
    uint32_t ref;         /* A_REF: rule index */
};

struct rule {
    char *name;
    uint32_t body;        /* ast index; UINT32_MAX: referenced, not defined */
    uint32_t line, col;   /* first reference or definition */
};

struct vec {
    void *p;
    size_t n, cap, elem;
};

/* Element i of v's pool, or NULL while the pool is empty (then nothing is
 * read from it). */
static inline const void *vec_at(const struct vec *v, size_t i)
{
    return v->p ? (const char *)v->p + i * v->elem : NULL;
}

static inline bool vec_push(struct vec *v, const void *x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        void *p = realloc(v->p, cap * v->elem);
        if (!p)
            return false;
        v->p = p;
        v->cap = cap;
    }
    memcpy((char *)v->p + v->n * v->elem, x, v->elem);
    v->n++;
    return true;
}

struct parser {
    const char *s;
    size_t len, pos;
    size_t at_pos;              /* pos_of's last answer, to go on from */
    uint32_t at_line, at_col;
    int depth;
    bool failed;
    struct vec ast, kids, bytes, ranges, rules; /* ast, uint32, char, uint32 pairs, rule */
    uint32_t *rtab;             /* rule names: open addressing, rule index + 1 (0: empty) */
    uint32_t rtab_cap;          /* a power of two, at least twice the rules */
};

static inline struct ast *ast_at(struct parser *p, uint32_t i) { return (struct ast *)p->ast.p + i; }

static inline void nomem(struct parser *p)
{
    if (!p->failed)
        sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    p->failed = true;
}

/* gbnf_nfa.c: the parsed rules (every one defined) -> nfa, built from the
 * rule root_id, minimized (zeroed on failure, with the error set).  calls:
 * as sp_grammar_nfa_build's. */
sp_status sp_grammar_nfa_construct(struct parser *p, struct sp_grammar_nfa *nfa, uint32_t root_id,
                                   const char *const *calls);

#endif
