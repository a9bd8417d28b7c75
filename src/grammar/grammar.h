/* Constrained decoding: GBNF grammars and JSON Schema, compiled to a
 * byte-level pushdown automaton that masks the tokens which cannot continue
 * the output.
 *
 * The pieces:
 *   - sp_grammar_compile() parses GBNF text (llama.cpp's format: rules,
 *     alternation, grouping, * + ? {m} {m,} {m,n}, literals with escapes,
 *     character classes with ranges and negation, `.`, comments) into one
 *     NFA per rule over bytes: character classes become their UTF-8 byte
 *     sequences, so partial characters inside tokens need no special case.
 *     Errors name the line and column.  Left recursion, undefined rules and
 *     rules that can never finish are refused.
 *   - sp_grammar_tokens_*() turn a vocabulary into byte strings in a trie
 *     (tokens sorted by bytes, nodes in preorder), built once per model.
 *   - sp_grammar_bind() prepares a compiled grammar for one vocabulary: for
 *     every automaton state that reads a byte it walks the trie once and
 *     splits the tokens into accepted (whatever the stack below), rejected,
 *     and uncertain (the token runs past the end of the state's rule, so the
 *     stack below decides).  A mask is then the union of the accepted sets
 *     of the current stack tops plus the uncertain tokens checked against the
 *     real stack, cached per automaton state.
 *   - sp_grammar_from_schema() compiles a JSON Schema to GBNF text and
 *     sp_grammar_validate() checks a finished output against the schema
 *     (including what no grammar enforces: uniqueItems, multipleOf, bounds
 *     on floats).
 *
 * A grammar and everything it caches belongs to one thread at a time (the
 * request's parser, then the engine's thread); it is never used by two at
 * once.  The exception is sharing: once bound, a grammar that nobody
 * matches with may be copied (sp_grammar_clone) by any number of threads at
 * once; copies share its compiled form and bind results, each has its own
 * matching state, and the shared part lives until the last copy is freed.
 * sp_grammar_cache_*() keeps such grammars by their text.  Masks and
 * matching allocate only when a cache grows.
 *
 * A lazy grammar (sp_grammar_set_trigger) leaves the output free until its
 * trigger text appears in it, and from the trigger on the output must be a
 * sentence of the grammar (whose sentences start with the trigger): tool
 * calls that a model may or may not make. */
#ifndef SP_GRAMMAR_GRAMMAR_H
#define SP_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

struct sp_grammar;
struct sp_grammar_tokens;
struct sp_vocab;

/* Hard limits that keep hostile input bounded. */
#define SP_GRAMMAR_MAX_TEXT (1u << 20)     /* bytes of GBNF */
#define SP_GRAMMAR_MAX_STATES (1u << 18)   /* automaton states after expansion */
#define SP_GRAMMAR_MAX_STACKS 4096         /* parallel stacks in one state */
#define SP_GRAMMAR_MAX_TRIGGER 64          /* bytes of a lazy grammar's trigger */
/* The budget of one compile and bind, checked inside their loops so that a
 * grammar over it stops early (SP_ERR_ARG naming the limit): a few bytes of
 * nested repetition ("(.{0,100}){0,100}") would otherwise take minutes and
 * gigabytes.  Work counts epsilon-closure steps while compiling, and trie
 * nodes walked plus closure items while binding (a large schema on a
 * 262k-token vocabulary takes about 7e7); edges are the automaton's after
 * epsilon removal (large schemas: about 2e4); bytes are the automaton,
 * dstates and token tables of a bound grammar (large schemas: under 16 MiB). */
#define SP_GRAMMAR_MAX_WORK (1ull << 27)    /* 134217728 steps */
#define SP_GRAMMAR_MAX_EDGES (1u << 20)     /* 1048576 edges */
#define SP_GRAMMAR_MAX_BYTES (64ull << 20)  /* 64 MiB */
/* A compile (sp_grammar_prepare: the schema's grammar, the automaton, its
 * minimizing, the bind) past this many milliseconds stops and is refused
 * as too large, checked where the stop check is polled. */
#define SP_GRAMMAR_MAX_COMPILE_MS 1000

/* ---- vocabularies ---- */

enum sp_grammar_token_kind {
    SP_GRAMMAR_TOKEN_TEXT = 0, /* its bytes are output text */
    SP_GRAMMAR_TOKEN_END,      /* ends the output: allowed where the grammar accepts */
    SP_GRAMMAR_TOKEN_NEVER,    /* control and empty tokens: never allowed */
};

/* A vocabulary given as byte strings (tests, tools).  bytes[i]/lens[i] is
 * token i's text; kinds may be NULL (all TEXT).  Copies everything. */
sp_status sp_grammar_tokens_init(struct sp_grammar_tokens **out, uint32_t n_vocab,
                                 const char *const *bytes, const uint32_t *lens,
                                 const uint8_t *kinds);
/* A model's vocabulary: each token's text as the detokenizer emits it;
 * end-of-generation tokens are END, control tokens NEVER. */
sp_status sp_grammar_tokens_from_vocab(struct sp_grammar_tokens **out, const struct sp_vocab *v);
void sp_grammar_tokens_free(struct sp_grammar_tokens *t);
uint32_t sp_grammar_tokens_size(const struct sp_grammar_tokens *t);

/* ---- grammars ---- */

/* Compiles GBNF text; `root` names the start rule (NULL: "root").  Errors:
 * SP_ERR_ARG with "line L, column C: ..." (or the rule's name). */
sp_status sp_grammar_compile(struct sp_grammar **out, const char *text, size_t len,
                             const char *root);
/* Options of a schema's grammar: any JSON whitespace between tokens
 * (else compact), and objects closed (a property the schema does not list
 * is written only where additionalProperties, patternProperties or
 * minProperties asks for one: OpenAI's strict mode) instead of JSON
 * Schema's open default (any other key, any value). */
#define SP_SCHEMA_FLEX 1u
#define SP_SCHEMA_CLOSED 2u
/* Compiles a JSON Schema (sp_grammar_from_schema_as; opts: SP_SCHEMA_*)
 * into a grammar that keeps the schema, so that sp_grammar_check validates
 * against it. */
sp_status sp_grammar_compile_schema(struct sp_grammar **out, const char *schema, size_t len, unsigned opts);
/* Was g compiled from a JSON Schema? */
bool sp_grammar_has_schema(const struct sp_grammar *g);
/* The check of a finished output, in the shape of sp_gen_params.validate
 * (ctx: the grammar): the schema's validation when the grammar came from
 * one, else SP_OK (the engine checks that the grammar accepts). */
sp_status sp_grammar_check(void *grammar, const char *text, size_t len, char *why, size_t cap);
/* Prepares g for the vocabulary t (which must outlive g): precomputes the
 * per-state token sets.  Idempotent for the same t. */
sp_status sp_grammar_bind(struct sp_grammar *g, const struct sp_grammar_tokens *t);
/* The size of the vocabulary g is bound to (0: unbound). */
uint32_t sp_grammar_n_vocab(const struct sp_grammar *g);
/* Makes g lazy (before binding): output before `text` is free, the rest
 * must be a sentence of g.  SP_ERR_ARG when g's sentences do not start
 * with text, or it is empty or longer than SP_GRAMMAR_MAX_TRIGGER. */
sp_status sp_grammar_set_trigger(struct sp_grammar *g, const char *text, size_t len);
/* A copy of g for one more user: shares g's compiled form and bind results
 * (g must be bound or never be bound), starts with empty caches.  Safe to
 * call from several threads at once while nobody matches with g. */
sp_status sp_grammar_clone(struct sp_grammar *g, struct sp_grammar **out);
/* Drops g (a copy, or the original: the shared part goes with the last). */
void sp_grammar_free(struct sp_grammar *g);

/* ---- ready-to-use grammars ---- */

/* enum sp_grammar_kind (GBNF text, or a JSON Schema validated afterwards
 * too) is public: include/spindle.h. */

/* Compiles text as kind, makes it lazy on `trigger` (NULL: not lazy) and
 * binds it to t (NULL: unbound).  Errors as the steps'. */
sp_status sp_grammar_prepare(enum sp_grammar_kind kind, const char *text, size_t len, const char *trigger,
                             const struct sp_grammar_tokens *t, struct sp_grammar **out);

/* Stopping a compile: the calling thread's check (sp_grammar_stop_set; fn
 * NULL: none) is polled by the compile and bind loops every
 * SP_GRAMMAR_STOP_EVERY steps of work (sp_grammar_stop_poll, true once it
 * has returned true: the loop then fails as over its budget), and
 * sp_grammar_prepare reports such a failure as SP_ERR_CANCELLED. */
#define SP_GRAMMAR_STOP_EVERY 65536u
void sp_grammar_stop_set(bool (*fn)(void *ctx), void *ctx);
bool sp_grammar_stop_poll(uint64_t work);
/* The same check now, whatever the work (for loops with few, long steps). */
bool sp_grammar_stop_now(void);

/* About how many bytes g's compiled form and bind results take (what a
 * cache keeps; a copy answers for the shared part). */
uint64_t sp_grammar_bytes(const struct sp_grammar *g);

/* Prepared grammars kept by (kind, trigger, text), at most max_entries of
 * them and at most SP_GRAMMAR_CACHE_BYTES of them (sp_grammar_bytes), least
 * recently used out first; a grammar larger than the byte budget is handed
 * out but not kept.  Thread-safe. */
#define SP_GRAMMAR_CACHE_BYTES (256ull << 20) /* 256 MiB */
struct sp_grammar_cache;
sp_status sp_grammar_cache_new(struct sp_grammar_cache **out, const struct sp_grammar_tokens *t,
                               uint32_t max_entries);
/* Changes the byte budget (0: SP_GRAMMAR_CACHE_BYTES), evicting at once
 * what is over it. */
void sp_grammar_cache_set_max_bytes(struct sp_grammar_cache *c, uint64_t max_bytes);
/* sp_grammar_cache_get and sp_grammar_cache_free are public
 * (include/spindle.h; sp_grammar_cache_create makes one for a model). */
void sp_grammar_cache_stats(struct sp_grammar_cache *c, uint64_t *hits, uint64_t *misses);

/* Counts for the benchmark and tests. */
struct sp_grammar_stats {
    uint32_t n_rules, n_states, n_read_states; /* read: states with byte edges */
    uint32_t n_uncertain;     /* uncertain tokens summed over read states */
    uint32_t n_nodes, n_dstates, n_masks_cached;
    uint64_t mask_hits, mask_misses;
    uint64_t n_whole;         /* trie subtrees the walks accepted whole */
    uint64_t n_region;        /* first-level trie subtrees the walks took from regions */
};
void sp_grammar_stats(const struct sp_grammar *g, struct sp_grammar_stats *out);

/* For tests: g's trie walks visit every node (no subtree accepted whole
 * from the trie's byte summaries), the reference the fast walk must equal. */
void sp_grammar_set_plain_walk(struct sp_grammar *g, bool plain);

/* ---- matching ----
 * sp_grammar_state, SP_GRAMMAR_DEAD, sp_grammar_start, sp_grammar_mask,
 * sp_grammar_advance and sp_grammar_accepting are public (include/spindle.h);
 * the mask needs sp_grammar_bind. */

/* Advances over raw bytes; SP_GRAMMAR_DEAD when they leave the language. */
sp_grammar_state sp_grammar_feed(struct sp_grammar *g, sp_grammar_state s, const char *bytes,
                                 size_t len);

/* ---- JSON Schema ---- */

/* Compiles a JSON Schema (JSON text, draft-4 .. 2020-12) to GBNF text
 * (*gbnf, malloc'd; root rule "root"; compact: no whitespace).  Every
 * validation keyword is either enforced by the grammar or checked by
 * sp_grammar_validate; annotations and unknown keywords are ignored.
 * SP_ERR_ARG, with the message naming the problem and its JSON path
 * ("$ref '#/x' points at nothing at $.properties.a"), for a malformed
 * schema, one no value satisfies, or one that uses what can be neither
 * enforced nor checked (remote references). */
sp_status sp_grammar_from_schema(const char *schema, size_t len, char **gbnf);
/* The same with the schema's rule named `rule` instead of root, to be part
 * of a larger grammar (the other rules are named arrN, objN..., keyN, refN,
 * dur-time, hex and json-*), with the options opts (SP_SCHEMA_*). */
sp_status sp_grammar_from_schema_as(const char *schema, size_t len, const char *rule, unsigned opts,
                                    char **gbnf);

/* Validates `text` (the finished output) against `schema`.  SP_OK when
 * valid; SP_ERR_ARG otherwise, with every failure (up to a few) listed in
 * why[0..cap) as "$.path: problem; ...". */
sp_status sp_grammar_validate(const char *schema, size_t schema_len, const char *text,
                              size_t len, char *why, size_t cap);

#endif
