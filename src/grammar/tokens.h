/* The token table's layout, for the matcher (internal to src/grammar). */
#ifndef SP_GRAMMAR_TOKENS_H
#define SP_GRAMMAR_TOKENS_H

#include <stdint.h>

#include "grammar/grammar.h"

#define SP_GRAMMAR_TOKEN_MAX_LEN 1024

struct sp_grammar_tokens {
    uint32_t n_vocab;
    uint32_t *off;       /* [n_vocab + 1] into bytes */
    char *bytes;
    uint8_t *kind;       /* [n_vocab] sp_grammar_token_kind */
    uint32_t n_sorted;   /* TEXT tokens, sorted by their bytes */
    uint32_t *sorted;
    uint32_t n_end;
    uint32_t *ends;
    uint32_t max_len;
    /* trie in preorder: node i reads node_byte[i] at depth node_depth[i]
     * (1 = first byte); its subtree is [i, node_next[i]); its tokens are
     * sorted[node_lo[i] ..] of which the first node_here[i] end at i. */
    uint32_t n_nodes;
    uint8_t *node_byte;
    uint16_t *node_depth;
    uint32_t *node_next, *node_lo, *node_here;
    /* the bytes read below node i (its subtree less i itself) are the
     * 256-bit set sum_set[4 * node_sum[i] ..]; set 0 is empty.  Equal sets
     * are stored once (a JSON string state accepts a subtree whole when
     * these bytes all loop back to its dstate). */
    uint32_t *node_sum;
    uint64_t *sum_set;
    /* node_utf8[i]: every token through node i is valid UTF-8 and node i
     * ends a whole character (so each token's bytes below are whole
     * characters) */
    uint8_t *node_utf8;
    uint32_t n_sums;
};

/* First sorted index after node i's subtree. */
static inline uint32_t sp_gtok_subtree_end(const struct sp_grammar_tokens *t, uint32_t i)
{
    uint32_t nx = t->node_next[i];
    return nx < t->n_nodes ? t->node_lo[nx] : t->n_sorted;
}

#endif
