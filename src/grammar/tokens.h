/* The token table's layout, for the matcher (internal to src/grammar). */
#ifndef SP_GRAMMAR_TOKENS_H
#define SP_GRAMMAR_TOKENS_H

#include <stdatomic.h>
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
    /* node_cls[i]: the byte classes (SP_GTOK_CLS_*) of node i's set, so a
     * walk can often decide a subtree without loading its set */
    uint8_t *node_cls;
    uint32_t n_sums;
    uint64_t *text_bits; /* [(n_vocab + 63) / 64] the TEXT tokens */
    /* the matcher's walk regions (match.c's struct region, one allocation
     * each; NULL: free), made by the walks of any grammar of this
     * vocabulary and shared by all: published by compare-and-swap, never
     * changed after */
    void *_Atomic *regions; /* [SP_GTOK_REGION_SLOTS] */
};
#define SP_GTOK_REGION_SLOTS 64

/* The byte classes of node_cls: bit k is set when the set holds a byte of
 * class k.  The ASCII classes single out the bytes JSON strings treat
 * specially ('"', '\\', controls), digits and letters. */
enum {
    SP_GTOK_CLS_CTRL = 1,    /* 0x00-0x1f, 0x7f */
    SP_GTOK_CLS_QUOTE = 2,   /* '"' */
    SP_GTOK_CLS_BSLASH = 4,  /* '\\' */
    SP_GTOK_CLS_DIGIT = 8,   /* 0-9 */
    SP_GTOK_CLS_ALPHA = 16,  /* A-Z a-z */
    SP_GTOK_CLS_PUNCT = 32,  /* the rest of 0x20-0x7e */
    SP_GTOK_CLS_HIGH = 64,   /* 0x80-0xff */
};
#define SP_GTOK_N_ASCII_CLS 6

/* The class bit of byte c. */
static inline unsigned sp_gtok_cls(unsigned c)
{
    if (c >= 0x80)
        return SP_GTOK_CLS_HIGH;
    if (c < 0x20 || c == 0x7f)
        return SP_GTOK_CLS_CTRL;
    if (c == '"')
        return SP_GTOK_CLS_QUOTE;
    if (c == '\\')
        return SP_GTOK_CLS_BSLASH;
    if (c >= '0' && c <= '9')
        return SP_GTOK_CLS_DIGIT;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
        return SP_GTOK_CLS_ALPHA;
    return SP_GTOK_CLS_PUNCT;
}

/* First sorted index after node i's subtree. */
static inline uint32_t sp_gtok_subtree_end(const struct sp_grammar_tokens *t, uint32_t i)
{
    uint32_t nx = t->node_next[i];
    return nx < t->n_nodes ? t->node_lo[nx] : t->n_sorted;
}

#endif
