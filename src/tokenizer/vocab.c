/* Vocabulary loading (from GGUF metadata), lookups, and decoding.
 *
 * The vocabulary copies every token text into one buffer and indexes it
 * with open-addressing hash tables (text -> id, merge pair -> rank), so load
 * is linear in the vocabulary size.  Token attributes, special ids, the
 * end-of-generation set and the special-token list follow llama.cpp's
 * llama_vocab::load, including its fix-ups by token text. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "tokenizer/tokenizer_internal.h"

#define KEY_PREFIX "tokenizer.ggml."

/* ---- hash tables ------------------------------------------------------------ */

static uint64_t table_size_for(uint64_t n)
{
    uint64_t s = 16;
    while (s < n * 2)
        s <<= 1;
    return s;
}

sp_token sp_vocab_lookup(const struct sp_vocab *v, const char *s, size_t n)
{
    uint64_t h = sp_tok_hash_bytes(s, n, SP_TOK_HASH_SEED);
    for (uint64_t i = h & v->tok_hash_mask;; i = (i + 1) & v->tok_hash_mask) {
        uint32_t slot = v->tok_hash[i];
        if (!slot)
            return -1;
        const struct sp_tok_entry *e = &v->tok[slot - 1];
        if (e->len == n && memcmp(e->text, s, n) == 0)
            return (sp_token)(slot - 1);
    }
}

sp_token sp_vocab_find(const struct sp_vocab *v, const char *text)
{
    return sp_vocab_lookup(v, text, strlen(text));
}

static uint64_t merge_hash(const char *s, size_t llen, size_t rlen)
{
    uint64_t h = sp_tok_hash_bytes(&llen, sizeof llen, SP_TOK_HASH_SEED);
    return sp_tok_hash_bytes(s, llen + rlen, h);
}

int32_t sp_vocab_merge_rank(const struct sp_vocab *v, const char *s, size_t llen, size_t rlen)
{
    if (!v->merge_hash)
        return -1;
    uint64_t h = merge_hash(s, llen, rlen);
    for (uint64_t i = h & v->merge_hash_mask;; i = (i + 1) & v->merge_hash_mask) {
        uint32_t slot = v->merge_hash[i];
        if (!slot)
            return -1;
        const struct sp_merge *m = &v->merges[slot - 1];
        if (m->llen == llen && m->rlen == rlen && memcmp(m->text, s, llen) == 0 &&
            memcmp(m->text + llen + 1, s + llen, rlen) == 0)
            return (int32_t)(slot - 1);
    }
}

/* ---- loading ------------------------------------------------------------------- */

static sp_status get_id(const struct sp_gguf *g, const char *key, uint32_t n, sp_token *id)
{
    uint32_t u = UINT32_MAX;
    sp_status st = sp_gguf_get_u32(g, key, false, &u);
    if (st != SP_OK)
        return st;
    if (u != UINT32_MAX && u < n)
        *id = (sp_token)u;
    return SP_OK;
}

static sp_status get_flag(const struct sp_gguf *g, const char *key, bool *out)
{
    return sp_gguf_get_bool(g, key, false, out);
}

/* llama.cpp ORs CONTROL into a control-looking token found by its text. */
static void set_control(struct sp_vocab *v, sp_token t)
{
    if (t >= 0)
        v->tok[t].attr |= SP_TOK_ATTR_CONTROL;
}

/* Lowest id among the texts in `list` (NULL-terminated), or -1. */
static sp_token find_any(const struct sp_vocab *v, const char *const *list)
{
    sp_token best = -1;
    for (int i = 0; list[i]; i++) {
        sp_token t = sp_vocab_find(v, list[i]);
        if (t >= 0 && (best < 0 || t < best))
            best = t;
    }
    return best;
}

/* The fix-ups llama.cpp applies by token text after reading the ids:
 * control-looking tokens, "unused" control tokens, and the
 * end-of-generation set with its model-specific exceptions. */
static void fix_special_attrs(struct sp_vocab *v, sp_token fim[6])
{
    static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                            "<end_of_utterance>", NULL};
    static const char *const eom_texts[] = {"<|eom_id|>", NULL};
    static const char *const fim_texts[6][8] = {
        {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL},
        {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL},
        {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "<|code_middle|>", "<|middle|>", NULL},
        {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
        {"<|file_sep|>", NULL},
    };
    static const char *const eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                            "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                                            "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                                            "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
                                            "<|tool_response>", NULL};
    static const char *const harmony_ud[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};

    if (v->eot < 0) {
        v->eot = find_any(v, eot_texts);
        set_control(v, v->eot);
    }
    if (v->eom < 0) {
        v->eom = find_any(v, eom_texts);
        set_control(v, v->eom);
    }
    for (int k = 0; k < 6; k++) {
        if (fim[k] < 0) {
            fim[k] = find_any(v, fim_texts[k]);
            set_control(v, fim[k]);
        }
    }
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        struct sp_tok_entry *e = &v->tok[i];
        if ((e->attr & SP_TOK_ATTR_CONTROL) && strstr(e->text, "unused"))
            e->attr |= SP_TOK_ATTR_UNUSED;
    }
    for (int k = 3; k < 6; k++)
        if (fim[k] >= 0)
            v->eog[fim[k]] = 1;
    for (int i = 0; eog_texts[i]; i++) {
        sp_token t = sp_vocab_find(v, eog_texts[i]);
        if (t >= 0) {
            v->eog[t] = 1;
            set_control(v, t);
        }
    }
    for (int i = 0; harmony_ud[i]; i++) {
        sp_token t = sp_vocab_find(v, harmony_ud[i]);
        if (t >= 0)
            v->tok[t].attr = SP_TOK_ATTR_USER_DEFINED;
    }
    if (v->eos >= 0)
        v->eog[v->eos] = 1;
    if (v->eot >= 0)
        v->eog[v->eot] = 1;
    if (v->eom >= 0)
        v->eog[v->eom] = 1;
    /* o200k_harmony / solar-open: <|end|> is not end-of-generation there */
    sp_token t_ret = sp_vocab_find(v, "<|return|>"), t_call = sp_vocab_find(v, "<|call|>");
    sp_token t_calls = sp_vocab_find(v, "<|calls|>"), t_flush = sp_vocab_find(v, "<|flush|>");
    sp_token t_end = sp_vocab_find(v, "<|end|>");
    bool has_call = (t_call >= 0 && v->eog[t_call]) || (t_calls >= 0 && v->eog[t_calls]);
    bool has_ret = t_ret >= 0 && v->eog[t_ret], has_flush = t_flush >= 0 && v->eog[t_flush];
    if (t_end >= 0 && v->eog[t_end] && ((has_ret && has_call) || (has_call && has_flush))) {
        v->eog[t_end] = 0;
        v->tok[t_end].attr = SP_TOK_ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is text when <|tool_response> is end-of-generation */
    sp_token t_tr = sp_vocab_find(v, "<|tool_response>"), t_s = sp_vocab_find(v, "</s>");
    if (t_tr >= 0 && v->eog[t_tr] && t_s >= 0 && v->eog[t_s]) {
        v->eog[t_s] = 0;
        v->tok[t_s].attr = SP_TOK_ATTR_NORMAL;
    }
}

struct special_key {
    uint32_t len;
    sp_token id;
};

static int special_cmp(const void *a, const void *b)
{
    const struct special_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static sp_status build_specials(struct sp_vocab *v)
{
    uint32_t n = 0;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (v->tok[i].attr & (SP_TOK_ATTR_CONTROL | SP_TOK_ATTR_USER_DEFINED | SP_TOK_ATTR_UNKNOWN)) {
            n++;
            bytes += v->tok[i].len;
        }
    }
    v->n_special = n;
    v->special = malloc((n ? n : 1) * sizeof *v->special);
    v->special_rank = malloc((size_t)v->n_tokens * sizeof *v->special_rank);
    if (!v->special || !v->special_rank)
        return sp_error_set(SP_ERR_NOMEM, "vocab: out of memory");
    n = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        v->special_rank[i] = UINT32_MAX;
        if (v->tok[i].attr & (SP_TOK_ATTR_CONTROL | SP_TOK_ATTR_USER_DEFINED | SP_TOK_ATTR_UNKNOWN))
            v->special[n++] = (sp_token)i;
    }
    struct special_key *keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys)
        return sp_error_set(SP_ERR_NOMEM, "vocab: out of memory");
    for (uint32_t i = 0; i < n; i++)
        keys[i] = (struct special_key){v->tok[v->special[i]].len, v->special[i]};
    qsort(keys, n, sizeof *keys, special_cmp);
    for (uint32_t i = 0; i < n; i++)
        v->special[i] = keys[i].id;
    free(keys);
    for (uint32_t i = 0; i < n; i++)
        v->special_rank[v->special[i]] = i;

    /* byte trie over the special texts; node 0 is the root */
    uint64_t max_nodes = bytes + 1;
    v->trie = malloc(max_nodes * sizeof *v->trie);
    v->trie_hash_mask = table_size_for(max_nodes) - 1;
    v->trie_hash = calloc(v->trie_hash_mask + 1, sizeof *v->trie_hash);
    v->trie_keys = malloc(max_nodes * sizeof *v->trie_keys);
    if (!v->trie || !v->trie_hash || !v->trie_keys)
        return sp_error_set(SP_ERR_NOMEM, "vocab: out of memory");
    v->n_trie = 1;
    v->trie[0].token = -1;
    v->trie_keys[0] = UINT64_MAX;
    for (uint32_t k = 0; k < n; k++) {
        const struct sp_tok_entry *e = &v->tok[v->special[k]];
        uint32_t node = 0;
        for (uint32_t j = 0; j < e->len; j++) {
            uint64_t key = ((uint64_t)node << 8) | (uint8_t)e->text[j];
            uint64_t h = sp_tok_hash_bytes(&key, sizeof key, SP_TOK_HASH_SEED);
            uint64_t i = h & v->trie_hash_mask;
            for (;; i = (i + 1) & v->trie_hash_mask) {
                uint32_t slot = v->trie_hash[i];
                if (!slot) {
                    uint32_t child = v->n_trie++;
                    v->trie[child].token = -1;
                    v->trie_keys[child] = key;
                    v->trie_hash[i] = child + 1;
                    node = child;
                    break;
                }
                if (v->trie_keys[slot - 1] == key) {
                    node = slot - 1;
                    break;
                }
            }
        }
        if (v->trie[node].token < 0) /* first in priority order wins */
            v->trie[node].token = v->special[k];
    }
    return SP_OK;
}

uint32_t sp_vocab_trie_child(const struct sp_vocab *v, uint32_t node, uint8_t byte)
{
    uint64_t key = ((uint64_t)node << 8) | byte;
    uint64_t h = sp_tok_hash_bytes(&key, sizeof key, SP_TOK_HASH_SEED);
    for (uint64_t i = h & v->trie_hash_mask;; i = (i + 1) & v->trie_hash_mask) {
        uint32_t slot = v->trie_hash[i];
        if (!slot)
            return 0;
        if (v->trie_keys[slot - 1] == key)
            return slot - 1;
    }
}

/* Appends `len` bytes to the piece being built; with out == NULL it only
 * counts (the sizing pass of build_pieces). */
static void piece_put(char *out, uint64_t *n, const void *bytes, size_t len)
{
    if (out)
        memcpy(out + *n, bytes, len);
    *n += len;
}

/* The piece of token `t` with special=true (llama.cpp's token_to_piece
 * cache).  Writes into `out` when it is not NULL and returns the length.
 * Special texts are verbatim; normal byte-level BPE texts are un-mapped,
 * other normal texts (SentencePiece, SentencePiece-style BPE) have U+2581
 * as ' '; a byte token "<0xXX>" is its byte; anything else is empty.
 * A BPE code point outside the byte map becomes "[UNK_BYTE_0x<hex><text>]"
 * as in llama.cpp, so a piece can grow with the square of the text length:
 * callers size `out` from a counting call first. */
static uint64_t make_piece(const struct sp_vocab *v, uint32_t t, char *out)
{
    const struct sp_tok_entry *e = &v->tok[t];
    uint64_t n = 0;
    bool byte_mapped = v->kind == SP_VOCAB_BPE && !(v->pre_flags & SP_PRE_ESCAPE_SPACES);
    if (e->attr & (SP_TOK_ATTR_UNKNOWN | SP_TOK_ATTR_CONTROL | SP_TOK_ATTR_USER_DEFINED)) {
        piece_put(out, &n, e->text, e->len);
    } else if (byte_mapped && (e->attr & SP_TOK_ATTR_NORMAL)) {
        for (size_t off = 0; off < e->len;) {
            uint32_t cp = sp_utf8_decode_lenient((const uint8_t *)e->text, e->len, &off);
            int b = sp_cp_to_byte(cp);
            if (b >= 0) {
                char c = (char)b;
                piece_put(out, &n, &c, 1);
                continue;
            }
            char u[4], hex[3];
            int k = sp_utf8_encode(cp > 0x10FFFF ? 0xFFFD : cp, u);
            piece_put(out, &n, "[UNK_BYTE_0x", 12);
            for (int j = 0; j < k; j++) {
                snprintf(hex, sizeof hex, "%02x", (uint8_t)u[j]);
                piece_put(out, &n, hex, 2);
            }
            piece_put(out, &n, e->text, e->len);
            piece_put(out, &n, "]", 1);
        }
    } else if (e->attr & SP_TOK_ATTR_NORMAL) { /* SentencePiece and SentencePiece-style BPE */
        for (size_t i = 0; i < e->len;) {
            if (i + 3 <= e->len && memcmp(e->text + i, "\xe2\x96\x81", 3) == 0) {
                piece_put(out, &n, " ", 1);
                i += 3;
            } else {
                piece_put(out, &n, e->text + i++, 1);
            }
        }
    } else if (e->attr & SP_TOK_ATTR_BYTE) { /* "<0xXX>" */
        char c = 0;
        if (e->len >= 5) {
            char hex[3] = {e->text[3], e->text[4], 0};
            c = (char)strtol(hex, NULL, 16);
        }
        piece_put(out, &n, &c, 1);
    }
    return n;
}

/* Pieces of all tokens, back to back.  A hostile vocabulary can ask for
 * quadratic pieces (see make_piece); past SP_VOCAB_PIECES_MAX it is refused. */
#define SP_VOCAB_PIECES_MAX (256ull << 20)
static sp_status build_pieces(struct sp_vocab *v)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        total += make_piece(v, i, NULL); /* one piece < 2^63 (text < 2^31 bytes), total <= 256 MiB: no overflow */
        if (total > SP_VOCAB_PIECES_MAX)
            return sp_error_set(SP_ERR_FORMAT,
                                "tokenizer.ggml.tokens: decoded pieces need more than %llu MiB (token %u)",
                                SP_VOCAB_PIECES_MAX >> 20, i);
    }
    v->piece_buf = malloc(total ? (size_t)total : 1);
    v->piece_off = malloc(((size_t)v->n_tokens + 1) * sizeof *v->piece_off);
    if (!v->piece_buf || !v->piece_off)
        return sp_error_set(SP_ERR_NOMEM, "vocab: out of memory");
    uint64_t pos = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        v->piece_off[i] = pos;
        pos += make_piece(v, i, v->piece_buf + pos);
    }
    v->piece_off[v->n_tokens] = pos;
    return SP_OK;
}

static bool str_contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

static void copy_view(char *dst, size_t cap, struct sp_gguf_str s)
{
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    if (n) /* an absent key is {NULL, 0}: memcpy from NULL is undefined even for 0 bytes */
        memcpy(dst, s.ptr, n);
    dst[n] = 0;
}

/* Defaults per tokenizer.ggml.model, as llama.cpp's llama_vocab::load sets
 * them before reading the file's own ids and flags. */
struct model_def {
    const char *name;
    enum sp_vocab_kind kind;
    sp_token bos, eos, unk, sep, pad;
    bool add_bos, add_sep, add_space_prefix, clean_spaces;
    const char *pre; /* pre-tokenizer used whatever tokenizer.ggml.pre says, or NULL */
};

static const struct model_def MODEL_DEFS[] = {
    /* name, kind, bos, eos, unk, sep, pad, add_bos, add_sep, add_space_prefix, clean_spaces, pre */
    {"llama", SP_VOCAB_SPM, 1, 2, 0, -1, -1, true, false, true, false, NULL},
    {"bert", SP_VOCAB_WPM, 101, -1, 100, 102, 0, true, true, false, true, NULL},
    {"gpt2", SP_VOCAB_BPE, 11, 11, -1, -1, -1, false, false, false, false, NULL},
    /* SentencePiece-style BPE over raw UTF-8 (see pretok.c's "gemma4") */
    {"gemma4", SP_VOCAB_BPE, -1, -1, -1, -1, -1, false, false, false, false, "gemma4"},
};

static const struct model_def *find_model(struct sp_gguf_str model)
{
    for (size_t i = 0; i < sizeof MODEL_DEFS / sizeof MODEL_DEFS[0]; i++)
        if (sp_gguf_str_eq(model, MODEL_DEFS[i].name))
            return &MODEL_DEFS[i];
    return NULL;
}

sp_status sp_vocab_init(struct sp_vocab **out, const struct sp_gguf *g)
{
    sp_status st;
    *out = NULL;
    struct sp_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return sp_error_set(SP_ERR_NOMEM, "vocab: out of memory");
    struct sp_gguf_str model = {0}, pre = {"default", 7}, tmpl = {0}, gname = {0}, arch = {0};
    const struct sp_gguf_kv *kv_tok = NULL, *kv_scores = NULL, *kv_types = NULL, *kv_merges = NULL;

    if ((st = sp_gguf_get_str(g, KEY_PREFIX "model", true, &model)) != SP_OK)
        goto fail;
    if ((st = sp_gguf_get_str(g, KEY_PREFIX "pre", false, &pre)) != SP_OK)
        goto fail;
    if ((st = sp_gguf_get_str(g, "tokenizer.chat_template", false, &tmpl)) != SP_OK)
        goto fail;
    (void)sp_gguf_get_str(g, "general.name", false, &gname);
    (void)sp_gguf_get_str(g, "general.architecture", false, &arch);
    copy_view(v->model_name, sizeof v->model_name, model);
    copy_view(v->pre_name, sizeof v->pre_name, pre);
    const struct model_def *md = find_model(model);
    if (!md) {
        st = sp_error_set(SP_ERR_UNSUPPORTED, "tokenizer.ggml.model '%s' is not supported", v->model_name);
        goto fail;
    }
    v->kind = md->kind;
    v->bos = md->bos, v->eos = md->eos, v->unk = md->unk, v->sep = md->sep, v->pad = md->pad;
    v->eot = v->eom = -1;
    v->add_bos = md->add_bos, v->add_sep = md->add_sep;
    v->add_space_prefix = md->add_space_prefix, v->clean_spaces = md->clean_spaces;
    if (md->pre) {
        pre = (struct sp_gguf_str){md->pre, strlen(md->pre)};
        copy_view(v->pre_name, sizeof v->pre_name, pre);
    }

    if ((st = sp_gguf_get_arr(g, KEY_PREFIX "tokens", true, SP_GGUF_STRING, &kv_tok)) != SP_OK)
        goto fail;
    if (kv_tok->arr_n == 0 || kv_tok->arr_n >= INT32_MAX) {
        st = sp_error_set(SP_ERR_FORMAT, "tokenizer.ggml.tokens: bad count %llu",
                          (unsigned long long)kv_tok->arr_n);
        goto fail;
    }
    v->n_tokens = (uint32_t)kv_tok->arr_n;
    if ((st = sp_gguf_get_arr(g, KEY_PREFIX "scores", false, SP_GGUF_FLOAT32, &kv_scores)) != SP_OK)
        goto fail;
    if ((st = sp_gguf_get_arr(g, KEY_PREFIX "token_type", false, SP_GGUF_INT32, &kv_types)) != SP_OK)
        goto fail;
    if (kv_scores && kv_scores->arr_n != v->n_tokens) {
        st = sp_error_set(SP_ERR_FORMAT, "tokenizer.ggml.scores: %llu entries for %u tokens",
                          (unsigned long long)kv_scores->arr_n, v->n_tokens);
        goto fail;
    }
    if (kv_types && kv_types->arr_n != v->n_tokens) {
        st = sp_error_set(SP_ERR_FORMAT, "tokenizer.ggml.token_type: %llu entries for %u tokens",
                          (unsigned long long)kv_types->arr_n, v->n_tokens);
        goto fail;
    }

    /* token texts (an empty text becomes "[EMPTY_<id>]" as in llama.cpp) */
    uint64_t total = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        uint64_t l = kv_tok->arr_strs[i].len;
        if (l == 0)
            l = 24;
        if (l >= UINT32_MAX / 2 || !sp_add_u64(total, l + 1, &total)) {
            st = sp_error_set(SP_ERR_FORMAT, "tokenizer.ggml.tokens: token %u too long", i);
            goto fail;
        }
    }
    v->tok = calloc(v->n_tokens, sizeof *v->tok);
    v->text_buf = malloc(total);
    v->eog = calloc(v->n_tokens, 1);
    v->tok_hash_mask = table_size_for(v->n_tokens) - 1;
    v->tok_hash = calloc(v->tok_hash_mask + 1, sizeof *v->tok_hash);
    if (!v->tok || !v->text_buf || !v->eog || !v->tok_hash) {
        st = sp_error_set(SP_ERR_NOMEM, "vocab: out of memory for %u tokens", v->n_tokens);
        goto fail;
    }
    uint64_t pos = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        struct sp_gguf_str s = kv_tok->arr_strs[i];
        struct sp_tok_entry *e = &v->tok[i];
        e->text = v->text_buf + pos;
        if (s.len == 0) {
            e->len = (uint32_t)sprintf(v->text_buf + pos, "[EMPTY_%u]", i);
        } else {
            memcpy(v->text_buf + pos, s.ptr, s.len);
            e->len = (uint32_t)s.len;
            v->text_buf[pos + s.len] = 0;
        }
        pos += e->len + 1;
        if (e->len > v->max_token_len)
            v->max_token_len = e->len;
        e->score = kv_scores ? sp_gguf_arr_f32(kv_scores, i) : 0.0f;
        e->attr = SP_TOK_ATTR_NORMAL;
        if (kv_types) {
            switch (sp_gguf_arr_i32(kv_types, i)) {
            case 1: e->attr = SP_TOK_ATTR_NORMAL; break;
            case 2: e->attr = SP_TOK_ATTR_UNKNOWN; break;
            case 3: e->attr = SP_TOK_ATTR_CONTROL; break;
            case 4: e->attr = SP_TOK_ATTR_USER_DEFINED; break;
            case 5: e->attr = SP_TOK_ATTR_UNUSED; break;
            case 6: e->attr = SP_TOK_ATTR_BYTE; break;
            default: e->attr = 0; break;
            }
        }
        /* insert; a repeated text maps to the later id, as in llama.cpp */
        uint64_t h = sp_tok_hash_bytes(e->text, e->len, SP_TOK_HASH_SEED);
        for (uint64_t j = h & v->tok_hash_mask;; j = (j + 1) & v->tok_hash_mask) {
            uint32_t slot = v->tok_hash[j];
            if (!slot || (v->tok[slot - 1].len == e->len && memcmp(v->tok[slot - 1].text, e->text, e->len) == 0)) {
                v->tok_hash[j] = i + 1;
                break;
            }
        }
    }

    if (v->kind == SP_VOCAB_BPE) {
        if ((st = sp_gguf_get_arr(g, KEY_PREFIX "merges", true, SP_GGUF_STRING, &kv_merges)) != SP_OK)
            goto fail;
        if (kv_merges->arr_n >= INT32_MAX) {
            st = sp_error_set(SP_ERR_FORMAT, "tokenizer.ggml.merges: too many entries");
            goto fail;
        }
        v->n_merges = (uint32_t)kv_merges->arr_n;
        v->merges = calloc(v->n_merges ? v->n_merges : 1, sizeof *v->merges);
        v->merge_hash_mask = table_size_for(v->n_merges) - 1;
        v->merge_hash = calloc(v->merge_hash_mask + 1, sizeof *v->merge_hash);
        if (!v->merges || !v->merge_hash) {
            st = sp_error_set(SP_ERR_NOMEM, "vocab: out of memory for merges");
            goto fail;
        }
        for (uint32_t i = 0; i < v->n_merges; i++) {
            struct sp_gguf_str s = kv_merges->arr_strs[i];
            const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
            struct sp_merge *m = &v->merges[i];
            m->text = s.ptr;
            if (!sp) { /* llama.cpp stores ("","") for a merge without a space */
                m->llen = m->rlen = 0;
            } else {
                m->llen = (uint32_t)(sp - s.ptr);
                m->rlen = (uint32_t)(s.len - m->llen - 1);
            }
            /* the first rank of a repeated pair wins (std::map::emplace) */
            uint64_t h = merge_hash(m->text, m->llen, 0);
            if (m->llen || m->rlen) {
                /* hash over left+right bytes, which are not adjacent here */
                h = sp_tok_hash_bytes(&(size_t){m->llen}, sizeof(size_t), SP_TOK_HASH_SEED);
                h = sp_tok_hash_bytes(m->text, m->llen, h);
                h = sp_tok_hash_bytes(m->text + m->llen + 1, m->rlen, h);
            }
            for (uint64_t j = h & v->merge_hash_mask;; j = (j + 1) & v->merge_hash_mask) {
                uint32_t slot = v->merge_hash[j];
                if (!slot) {
                    v->merge_hash[j] = i + 1;
                    break;
                }
                const struct sp_merge *o = &v->merges[slot - 1];
                if (o->llen == m->llen && o->rlen == m->rlen && memcmp(o->text, m->text, m->llen) == 0 &&
                    memcmp(o->text + o->llen + 1, m->text + m->llen + 1, m->rlen) == 0)
                    break;
            }
        }
        char prebuf[64];
        copy_view(prebuf, sizeof prebuf, pre);
        if ((st = sp_pretok_init(v, prebuf)) != SP_OK)
            goto fail;
    }

    /* special ids and flags from the file */
    sp_token fim[6] = {-1, -1, -1, -1, -1, -1};
    struct { const char *key; sp_token *id; } ids[] = {
        {KEY_PREFIX "bos_token_id", &v->bos}, {KEY_PREFIX "eos_token_id", &v->eos},
        {KEY_PREFIX "eot_token_id", &v->eot}, {KEY_PREFIX "eom_token_id", &v->eom},
        {KEY_PREFIX "unknown_token_id", &v->unk}, {KEY_PREFIX "seperator_token_id", &v->sep},
        {KEY_PREFIX "padding_token_id", &v->pad}, {KEY_PREFIX "fim_pre_token_id", &fim[0]},
        {KEY_PREFIX "fim_suf_token_id", &fim[1]}, {KEY_PREFIX "fim_mid_token_id", &fim[2]},
        {KEY_PREFIX "fim_pad_token_id", &fim[3]}, {KEY_PREFIX "fim_rep_token_id", &fim[4]},
        {KEY_PREFIX "fim_sep_token_id", &fim[5]}, {KEY_PREFIX "prefix_token_id", &fim[0]},
        {KEY_PREFIX "suffix_token_id", &fim[1]}, {KEY_PREFIX "middle_token_id", &fim[2]},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if ((st = get_id(g, ids[i].key, v->n_tokens, ids[i].id)) != SP_OK)
            goto fail;
    if ((st = get_flag(g, KEY_PREFIX "add_bos_token", &v->add_bos)) != SP_OK ||
        (st = get_flag(g, KEY_PREFIX "add_eos_token", &v->add_eos)) != SP_OK ||
        (st = get_flag(g, KEY_PREFIX "add_sep_token", &v->add_sep)) != SP_OK ||
        (st = get_flag(g, KEY_PREFIX "add_space_prefix", &v->add_space_prefix)) != SP_OK)
        goto fail;
    if (v->pre_flags & SP_PRE_FORCE_BOS) /* Gemma 4 files may say add_bos_token = false */
        v->add_bos = true;
    for (int i = 0; i < 256; i++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", i);
        v->byte_tok[i] = sp_vocab_find(v, hex);
        if (v->byte_tok[i] < 0) {
            char c = (char)i;
            v->byte_tok[i] = sp_vocab_lookup(v, &c, 1);
        }
    }
    fix_special_attrs(v, fim);
    if ((st = build_specials(v)) != SP_OK)
        goto fail;
    if ((st = build_pieces(v)) != SP_OK)
        goto fail;

    /* per-model strip attributes (llama.cpp sets these by name) */
    char name[128], prebuf2[64], archbuf[64];
    copy_view(name, sizeof name, gname);
    copy_view(prebuf2, sizeof prebuf2, pre);
    copy_view(archbuf, sizeof archbuf, arch);
    for (char *p = name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if (str_contains(prebuf2, "jina-v2-de") || str_contains(prebuf2, "jina-v2-es") ||
        str_contains(prebuf2, "jina-v2-code") || str_contains(archbuf, "nomic-bert-moe") ||
        str_contains(archbuf, "jina-bert-v3")) {
        sp_token t = sp_vocab_find(v, "<mask>");
        if (t >= 0)
            v->tok[t].attr |= SP_TOK_ATTR_LSTRIP;
    } else if (str_contains(name, "phi-3") || str_contains(name, "phi3")) {
        for (uint32_t i = 0; i < v->n_special; i++)
            v->tok[v->special[i]].attr |= SP_TOK_ATTR_RSTRIP;
        sp_token t = sp_vocab_find(v, "</s>");
        if (t >= 0)
            v->tok[t].attr |= SP_TOK_ATTR_RSTRIP;
        static const char *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (int i = 0; i < 3; i++)
            if ((t = sp_vocab_find(v, off[i])) >= 0)
                v->tok[t].attr &= ~(uint32_t)SP_TOK_ATTR_RSTRIP;
    }

    if (tmpl.ptr) {
        v->chat_template = malloc(tmpl.len + 1);
        if (!v->chat_template) {
            st = sp_error_set(SP_ERR_NOMEM, "vocab: out of memory");
            goto fail;
        }
        memcpy(v->chat_template, tmpl.ptr, tmpl.len);
        v->chat_template[tmpl.len] = 0;
    }
    *out = v;
    return SP_OK;
fail:
    sp_vocab_free(v);
    return st;
}

void sp_vocab_free(struct sp_vocab *v)
{
    if (!v)
        return;
    sp_pretok_free(v);
    free(v->chat_template);
    free(v->tok);
    free(v->text_buf);
    free(v->tok_hash);
    free(v->merges);
    free(v->merge_hash);
    free(v->piece_buf);
    free(v->piece_off);
    free(v->special);
    free(v->special_rank);
    free(v->trie);
    free(v->trie_hash);
    free(v->trie_keys);
    free(v->eog);
    free(v);
}

/* ---- accessors ------------------------------------------------------------------- */

uint32_t sp_vocab_size(const struct sp_vocab *v) { return v->n_tokens; }
sp_token sp_vocab_bos(const struct sp_vocab *v) { return v->bos; }
sp_token sp_vocab_eos(const struct sp_vocab *v) { return v->eos; }
const char *sp_vocab_model_name(const struct sp_vocab *v) { return v->model_name; }
const char *sp_vocab_pre_name(const struct sp_vocab *v) { return v->pre_name; }
const char *sp_vocab_chat_template(const struct sp_vocab *v) { return v->chat_template; }

bool sp_vocab_is_eog(const struct sp_vocab *v, sp_token t)
{
    return t >= 0 && (uint32_t)t < v->n_tokens && v->eog[t];
}

bool sp_vocab_is_control(const struct sp_vocab *v, sp_token t)
{
    return t >= 0 && (uint32_t)t < v->n_tokens && (v->tok[t].attr & SP_TOK_ATTR_CONTROL);
}

const char *sp_vocab_token_text(const struct sp_vocab *v, sp_token t)
{
    return t >= 0 && (uint32_t)t < v->n_tokens ? v->tok[t].text : NULL;
}

bool sp_vocab_lossless(const struct sp_vocab *v)
{
    return v->kind != SP_VOCAB_WPM;
}

/* ---- decoding --------------------------------------------------------------------- */

int sp_token_to_piece(const struct sp_vocab *v, sp_token t, bool special, char *buf, size_t cap)
{
    if (t < 0 || (uint32_t)t >= v->n_tokens)
        return -1;
    if (!special && (v->tok[t].attr & (SP_TOK_ATTR_UNKNOWN | SP_TOK_ATTR_CONTROL)))
        return 0;
    size_t n = (size_t)(v->piece_off[t + 1] - v->piece_off[t]);
    if (n && n <= cap) /* never memcpy to a NULL buf, even 0 bytes (sizing call) */
        memcpy(buf, v->piece_buf + v->piece_off[t], n);
    return (int)n;
}

/* llama.cpp's clean-up of spaces before punctuation and contractions. */
static size_t clean_spaces(char *text, size_t total)
{
    size_t t1 = total, n = total ? 1 : 0;
    for (size_t i = 1; i < t1; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            n--;
        text[n++] = x;
    }
    size_t t2 = n;
    n = t2 ? 1 : 0;
    for (size_t i = 1; i < t2; i++) {
        char x = text[i];
        if (x == '\'' && i + 1 < t2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            n--;
            text[++i] = '\0';
        }
        text[n++] = x;
    }
    size_t t3 = n;
    n = t3 ? 1 : 0;
    for (size_t i = 1; i < t3; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < t3) {
            char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm')
                n--;
            else if (i + 2 < t3 && ((x1 == 'r' && text[i + 2] == 'e') || (x1 == 'v' && text[i + 2] == 'e')))
                n--;
        }
        text[n++] = x;
    }
    return n;
}

int64_t sp_detokenize(const struct sp_vocab *v, const sp_token *toks, size_t n, bool special,
                      char *buf, size_t cap)
{
    uint64_t total = 0;
    bool remove_space = v->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        sp_token t = toks[i];
        if (t < 0 || (uint32_t)t >= v->n_tokens)
            return -1;
        size_t len = 0;
        const char *p = v->piece_buf + v->piece_off[t];
        if (special || !(v->tok[t].attr & (SP_TOK_ATTR_UNKNOWN | SP_TOK_ATTR_CONTROL)))
            len = (size_t)(v->piece_off[t + 1] - v->piece_off[t]);
        if (remove_space && len && *p == ' ')
            p++, len--;
        remove_space = false;
        if (len && total + len <= cap) /* len == 0: buf may be NULL (sizing call) */
            memcpy(buf + total, p, len);
        total += len;
    }
    if (total > cap)
        return (int64_t)total;
    if (v->clean_spaces && total)
        total = clean_spaces(buf, (size_t)total);
    return (int64_t)total;
}

/* ---- streaming ---------------------------------------------------------------------- */

void sp_detok_init(struct sp_detok *d, const struct sp_vocab *v, bool special)
{
    d->vocab = v;
    d->special = special;
    d->first = false;
    d->n_pending = 0;
}

/* Length of the valid UTF-8 sequence at s[0..n), 0 if it is an incomplete
 * but so-far valid prefix, -1 if invalid. */
static int utf8_seq(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    int need;
    uint32_t min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        need = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        need = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 4, min = 0x10000;
    else
        return -1;
    uint32_t cp = c & (0x7f >> need);
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n)
            return 0;
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
        /* reject overlong / surrogate / too-large as early as possible */
        if (i == 1) {
            if (need == 3 && c == 0xe0 && s[1] < 0xa0) return -1;
            if (need == 3 && c == 0xed && s[1] >= 0xa0) return -1;
            if (need == 4 && c == 0xf0 && s[1] < 0x90) return -1;
            if (need == 4 && c == 0xf4 && s[1] >= 0x90) return -1;
        }
    }
    (void)min;
    return need;
}

/* Moves the complete part of `src` (n bytes) to out, invalid bytes as
 * U+FFFD; keeps an incomplete tail in d->pending when `hold`.  Returns bytes
 * written or -1 when cap is too small. */
static int emit(struct sp_detok *d, const uint8_t *src, size_t n, bool hold, char *out, size_t cap)
{
    size_t w = 0;
    d->n_pending = 0;
    for (size_t i = 0; i < n;) {
        int k = utf8_seq(src + i, n - i);
        if (k == 0 && hold) {
            memcpy(d->pending, src + i, n - i);
            d->n_pending = (int)(n - i);
            break;
        }
        if (k <= 0) {
            if (w + 3 > cap)
                return -1;
            memcpy(out + w, "\xef\xbf\xbd", 3);
            w += 3;
            i += 1;
            continue;
        }
        if (w + (size_t)k > cap)
            return -1;
        memcpy(out + w, src + i, (size_t)k);
        w += (size_t)k;
        i += (size_t)k;
    }
    return (int)w;
}

int sp_detok_push(struct sp_detok *d, sp_token t, char *out, size_t cap)
{
    const struct sp_vocab *v = d->vocab;
    if (t < 0 || (uint32_t)t >= v->n_tokens)
        return -1;
    size_t len = 0;
    const char *p = v->piece_buf + v->piece_off[t];
    if (d->special || !(v->tok[t].attr & (SP_TOK_ATTR_UNKNOWN | SP_TOK_ATTR_CONTROL)))
        len = (size_t)(v->piece_off[t + 1] - v->piece_off[t]);
    if (d->first && v->add_space_prefix && len && *p == ' ')
        p++, len--;
    d->first = false;
    size_t np = (size_t)d->n_pending;
    if (np + len > cap + 8)
        return -1;
    /* pending (<= 3 bytes) + piece, assembled in the caller's buffer tail */
    uint8_t small[256];
    uint8_t *tmp = np + len <= sizeof small ? small : malloc(np + len);
    if (!tmp)
        return -1;
    memcpy(tmp, d->pending, np);
    memcpy(tmp + np, p, len);
    char saved[8];
    memcpy(saved, d->pending, sizeof saved);
    int saved_n = d->n_pending;
    int w = emit(d, tmp, np + len, true, out, cap);
    if (w < 0) { /* leave the state as it was so the caller can retry */
        memcpy(d->pending, saved, sizeof saved);
        d->n_pending = saved_n;
    }
    if (tmp != small)
        free(tmp);
    return w;
}

int sp_detok_flush(struct sp_detok *d, char *out, size_t cap)
{
    uint8_t tmp[8];
    size_t np = (size_t)d->n_pending;
    memcpy(tmp, d->pending, np);
    int w = emit(d, tmp, np, false, out, cap);
    if (w < 0) {
        memcpy(d->pending, tmp, np);
        d->n_pending = (int)np;
    }
    return w;
}
