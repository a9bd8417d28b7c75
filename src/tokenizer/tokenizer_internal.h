/* Tokenizer internals shared by vocab.c, pretok.c, encode.c.  Not public. */
#ifndef SP_TOKENIZER_INTERNAL_H
#define SP_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer.h"

enum sp_vocab_kind { SP_VOCAB_BPE, SP_VOCAB_SPM, SP_VOCAB_WPM };

/* Token attributes as llama.cpp derives them from tokenizer.ggml.token_type
 * (plus its fix-ups by token text). */
enum sp_tok_attr {
    SP_TOK_ATTR_UNKNOWN = 1 << 0,
    SP_TOK_ATTR_UNUSED = 1 << 1,
    SP_TOK_ATTR_NORMAL = 1 << 2,
    SP_TOK_ATTR_CONTROL = 1 << 3,
    SP_TOK_ATTR_USER_DEFINED = 1 << 4,
    SP_TOK_ATTR_BYTE = 1 << 5,
    SP_TOK_ATTR_LSTRIP = 1 << 7,
    SP_TOK_ATTR_RSTRIP = 1 << 8,
};

#define SP_PRETOK_MAX_REGEX 6

/* Pre-tokenizer behaviour, per tokenizer.ggml.pre (pretok.c's table). */
enum sp_pre_flag {
    SP_PRE_CLEAN_SPACES = 1 << 0,   /* detokenize drops spaces before punctuation */
    SP_PRE_IGNORE_MERGES = 1 << 1,  /* a word that is a token is taken whole */
    SP_PRE_ADD_BOS = 1 << 2,        /* add_bos defaults to true (the file may say false) */
    SP_PRE_NO_BOS_ID = 1 << 3,      /* no default BOS id (the file may name one) */
    SP_PRE_ESCAPE_SPACES = 1 << 4,  /* ' ' is U+2581 in token texts: escaped before the split,
                                       unescaped in pieces (SentencePiece-style BPE) */
    SP_PRE_RAW_UTF8 = 1 << 5,       /* words are raw UTF-8, not GPT-2 byte-mapped; a byte
                                       without a token falls back to its <0xXX> token */
    SP_PRE_NEWLINE_WORDS = 1 << 6,  /* a word of only '\n' that is a token is taken whole */
    SP_PRE_FORCE_BOS = 1 << 7,      /* add_bos is true whatever the file says */
};

struct sp_tok_entry {
    const char *text; /* not NUL-terminated; points into vocab->text_buf */
    uint32_t len;
    uint32_t attr;
    float score;
};

struct sp_merge {
    const char *text; /* "left right" as in the file */
    uint32_t llen, rlen;
};

struct sp_vocab {
    enum sp_vocab_kind kind;
    char model_name[16];
    char pre_name[64];
    char *chat_template; /* owned copy or NULL */

    uint32_t n_tokens;
    struct sp_tok_entry *tok;
    char *text_buf; /* all token texts, each NUL-terminated */

    /* text -> id: open addressing, slots hold id+1 (0 = empty) */
    uint32_t *tok_hash;
    uint64_t tok_hash_mask;

    /* BPE merges: (left,right) -> rank; slots hold rank+1 */
    struct sp_merge *merges;
    uint32_t n_merges;
    uint32_t *merge_hash;
    uint64_t merge_hash_mask;

    /* pieces for token_to_piece (special=true), concatenated */
    char *piece_buf;
    uint64_t *piece_off; /* n_tokens + 1 */

    /* special-token matching: ids sorted by priority, and a byte trie */
    sp_token *special; /* CONTROL|USER_DEFINED|UNKNOWN ids, longest first */
    uint32_t n_special;
    uint32_t *special_rank; /* per token: priority index or UINT32_MAX */
    struct sp_trie_node *trie;
    uint32_t n_trie;
    uint32_t *trie_hash; /* (node,byte) -> child+1 */
    uint64_t *trie_keys; /* per node: (parent << 8 | byte) */
    uint64_t trie_hash_mask;

    sp_token bos, eos, eot, eom, unk, sep, pad;
    uint8_t *eog; /* n_tokens flags */
    bool add_bos, add_eos, add_sep;
    bool add_space_prefix;
    bool ignore_merges;
    bool clean_spaces;
    uint32_t pre_flags; /* enum sp_pre_flag of the BPE pre-tokenizer, 0 otherwise */
    uint32_t max_token_len;
    sp_token byte_tok[256]; /* SPM byte fallback ids (-1 none) */

    /* pre-tokenizer */
    int n_regex;
    pcre2_code *regex[SP_PRETOK_MAX_REGEX];
};

struct sp_trie_node {
    sp_token token; /* token ending here or -1 */
};

/* FNV-1a over bytes; used by every hash table here. */
static inline uint64_t sp_tok_hash_bytes(const void *p, size_t n, uint64_t h)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define SP_TOK_HASH_SEED 0xcbf29ce484222325ULL

/* Id of the token whose text is the `n` bytes at `s`, or -1. */
sp_token sp_vocab_lookup(const struct sp_vocab *v, const char *s, size_t n);
/* Child of trie node `node` by `byte`, or 0 (the root) when none. */
uint32_t sp_vocab_trie_child(const struct sp_vocab *v, uint32_t node, uint8_t byte);
/* Rank of the merge (left,right) where left/right are adjacent at `s`, or -1. */
int32_t sp_vocab_merge_rank(const struct sp_vocab *v, const char *s, size_t llen, size_t rlen);

/* llama.cpp's lenient UTF-8 decoder: one code point at s[*off], advancing
 * *off; a bad sequence yields U+FFFD and advances one byte. */
uint32_t sp_utf8_decode_lenient(const uint8_t *s, size_t n, size_t *off);
/* Encodes `cp` (<= 0x10FFFF), returns the byte count (1..4). */
int sp_utf8_encode(uint32_t cp, char *out);
/* Length of a UTF-8 sequence from its first byte, as llama.cpp's table. */
static inline size_t sp_utf8_len_lead(uint8_t c)
{
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}
/* GPT-2 byte <-> unicode mapping. */
uint32_t sp_byte_to_cp(uint8_t b);
int sp_cp_to_byte(uint32_t cp); /* -1 when not a mapped code point */

/* Pre-tokenizer setup by name: regexes, v->pre_flags and the flags and ids
 * they imply.  An unknown name is not an error (llama.cpp falls back to
 * "default"); SP_ERR_UNSUPPORTED for a name llama.cpp knows but spindle
 * cannot split; SP_ERR_INTERNAL when a regex fails to compile. */
sp_status sp_pretok_init(struct sp_vocab *v, const char *pre);
void sp_pretok_free(struct sp_vocab *v);

/* Growable buffers for one encode call. */
struct sp_tok_out {
    sp_token *ids;
    size_t n, cap;
    bool oom;
};
void sp_tok_out_push(struct sp_tok_out *o, sp_token t);

/* Splits `n` bytes of `text` with the vocab's regexes and calls
 * `word(ctx, bytes, len)` for each piece, byte-level encoded (GPT-2 map)
 * unless the vocab has SP_PRE_RAW_UTF8 (then the piece's UTF-8 itself).
 * Returns SP_ERR_NOMEM on allocation failure. */
typedef void (*sp_pretok_word_fn)(void *ctx, const char *word, size_t len);
sp_status sp_pretok_split(const struct sp_vocab *v, const char *text, size_t n,
                          sp_pretok_word_fn word, void *ctx);

#endif
