/* A vocabulary as byte strings, and the trie over them that token masks
 * walk: tokens sorted by their bytes, trie nodes in preorder, each with the
 * index of its subtree's end, so a rejected prefix skips its whole subtree
 * in one step and a shared prefix is walked once. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/tokens.h"
#include "tokenizer/tokenizer.h"

uint32_t sp_grammar_tokens_size(const struct sp_grammar_tokens *t) { return t->n_vocab; }

void sp_grammar_tokens_free(struct sp_grammar_tokens *t)
{
    if (!t)
        return;
    free(t->off);
    free(t->bytes);
    free(t->kind);
    free(t->sorted);
    free(t->ends);
    free(t->node_byte);
    free(t->node_depth);
    free(t->node_next);
    free(t->node_lo);
    free(t->node_here);
    free(t->node_sum);
    free(t->node_utf8);
    free(t->node_cls);
    free(t->text_bits);
    for (uint32_t k = 0; t->regions && k < SP_GTOK_REGION_SLOTS; k++)
        free(atomic_load(&t->regions[k]));
    free((void *)t->regions);
    free(t->sum_set);
    free(t);
}

static int cmp_tok(const void *x, const void *y, void *ctx)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    const struct sp_grammar_tokens *t = ctx;
    uint32_t la = t->off[a + 1] - t->off[a], lb = t->off[b + 1] - t->off[b];
    int c = memcmp(t->bytes + t->off[a], t->bytes + t->off[b], la < lb ? la : lb);
    if (c)
        return c;
    if (la != lb)
        return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* The length of the valid UTF-8 character at b[0..n), 0 if none. */
static uint32_t utf8_char(const unsigned char *b, uint32_t n)
{
    unsigned c = b[0], lo = 0x80, hi = 0xbf;
    uint32_t k;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return 0;
    if (n < k || b[1] < lo || b[1] > hi)
        return 0;
    for (uint32_t j = 2; j < k; j++)
        if (b[j] < 0x80 || b[j] > 0xbf)
            return 0;
    return k;
}

/* Clears node_utf8 on the nodes of the token b[0..len) (path[1..len]) that
 * do not end a whole character of a valid UTF-8 token. */
static void mark_utf8(struct sp_grammar_tokens *t, const uint32_t *path, const unsigned char *b, uint32_t len)
{
    uint32_t d = 0, k = 0;
    while (d < len && (k = utf8_char(b + d, len - d)) > 0) {
        for (uint32_t j = 1; j < k; j++)
            t->node_utf8[path[d + j]] = 0;
        d += k;
    }
    if (d < len) /* not valid UTF-8: none of its nodes */
        for (uint32_t j = 1; j <= len; j++)
            t->node_utf8[path[j]] = 0;
}

static sp_status build_trie(struct sp_grammar_tokens *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint32_t len = t->off[i + 1] - t->off[i];
        if (t->kind[i] == SP_GRAMMAR_TOKEN_TEXT && (len == 0 || len > SP_GRAMMAR_TOKEN_MAX_LEN))
            t->kind[i] = SP_GRAMMAR_TOKEN_NEVER;
        n += t->kind[i] == SP_GRAMMAR_TOKEN_TEXT;
        t->n_end += t->kind[i] == SP_GRAMMAR_TOKEN_END;
    }
    t->sorted = malloc((n ? n : 1) * sizeof *t->sorted);
    t->ends = malloc((t->n_end ? t->n_end : 1) * sizeof *t->ends);
    uint64_t total = t->off[t->n_vocab] + 1;
    t->node_byte = malloc(total);
    t->node_depth = malloc(total * sizeof *t->node_depth);
    t->node_next = malloc(total * sizeof *t->node_next);
    t->node_lo = malloc(total * sizeof *t->node_lo);
    t->node_here = malloc(total * sizeof *t->node_here);
    t->node_utf8 = malloc(total);
    if (!t->node_utf8 || !t->sorted || !t->ends || !t->node_byte || !t->node_depth || !t->node_next || !t->node_lo ||
        !t->node_here)
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory for the token trie");
    uint32_t k = 0, e = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (t->kind[i] == SP_GRAMMAR_TOKEN_TEXT)
            t->sorted[k++] = i;
        else if (t->kind[i] == SP_GRAMMAR_TOKEN_END)
            t->ends[e++] = i;
    }
    t->n_sorted = n;
    qsort_r(t->sorted, n, sizeof *t->sorted, cmp_tok, t);
    uint32_t path[SP_GRAMMAR_TOKEN_MAX_LEN + 1];
    uint32_t depth = 0, nn = 0, prev = UINT32_MAX;
    for (uint32_t s = 0; s < n; s++) {
        uint32_t id = t->sorted[s];
        const unsigned char *b = (const unsigned char *)t->bytes + t->off[id];
        uint32_t len = t->off[id + 1] - t->off[id], lcp = 0;
        if (prev != UINT32_MAX) {
            const unsigned char *pb = (const unsigned char *)t->bytes + t->off[prev];
            uint32_t pl = t->off[prev + 1] - t->off[prev];
            while (lcp < len && lcp < pl && pb[lcp] == b[lcp])
                lcp++;
        }
        while (depth > lcp)
            t->node_next[path[depth--]] = nn;
        for (uint32_t d = lcp; d < len; d++) {
            path[++depth] = nn;
            t->node_byte[nn] = b[d];
            t->node_depth[nn] = (uint16_t)(d + 1);
            t->node_lo[nn] = s;
            t->node_here[nn] = 0;
            t->node_utf8[nn] = 1;
            nn++;
        }
        t->node_here[path[len]]++;
        mark_utf8(t, path, b, len);
        if (len > t->max_len)
            t->max_len = len;
        prev = id;
    }
    while (depth > 0)
        t->node_next[path[depth--]] = nn;
    t->n_nodes = nn;
    return SP_OK;
}

/* The hash of a 256-bit set, for interning the subtree summaries. */
static uint64_t sum_hash(const uint64_t *w)
{
    uint64_t h = w[0] * 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 29) ^ w[1]) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 31) ^ w[2]) * 0x94d049bb133111ebull;
    h = (h ^ (h >> 30) ^ w[3]) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 32);
}

/* node_sum and sum_set: in reverse preorder (children before their
 * parent), each node's set is the union of its children's bytes and sets,
 * interned in an open-addressing table of set indices. */
static sp_status build_sums(struct sp_grammar_tokens *t)
{
    sp_status st = SP_OK;
    uint32_t cap = 1024, hcap = 2048, *hash = NULL;
    t->node_sum = malloc((t->n_nodes ? t->n_nodes : 1) * sizeof *t->node_sum);
    t->node_cls = calloc(t->n_nodes ? t->n_nodes : 1, 1);
    t->sum_set = calloc((size_t)cap * 4, sizeof *t->sum_set);
    hash = calloc(hcap, sizeof *hash); /* set index + 1; 0: empty */
    if (!t->node_sum || !t->node_cls || !t->sum_set || !hash) {
        st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory for the token trie");
        goto done;
    }
    t->n_sums = 1; /* set 0: nothing below (leaves) */
    for (uint32_t i = t->n_nodes; i-- > 0;) {
        uint64_t w[4] = {0, 0, 0, 0};
        for (uint32_t c = i + 1; c < t->node_next[i]; c = t->node_next[c]) {
            const uint64_t *cs = t->sum_set + 4 * (size_t)t->node_sum[c];
            for (int k = 0; k < 4; k++)
                w[k] |= cs[k];
            w[t->node_byte[c] >> 6] |= 1ull << (t->node_byte[c] & 63);
            t->node_cls[i] |= (uint8_t)(t->node_cls[c] | sp_gtok_cls(t->node_byte[c]));
        }
        if (!(w[0] | w[1] | w[2] | w[3])) {
            t->node_sum[i] = 0;
            continue;
        }
        uint32_t j = (uint32_t)sum_hash(w) & (hcap - 1);
        while (hash[j] && memcmp(t->sum_set + 4 * (size_t)(hash[j] - 1), w, sizeof w))
            j = (j + 1) & (hcap - 1);
        if (hash[j]) {
            t->node_sum[i] = hash[j] - 1;
            continue;
        }
        if (t->n_sums == cap) {
            uint64_t *ns = realloc(t->sum_set, (size_t)cap * 2 * 4 * sizeof *ns);
            if (!ns) {
                st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory for the token trie");
                goto done;
            }
            t->sum_set = ns;
            cap *= 2;
        }
        memcpy(t->sum_set + 4 * (size_t)t->n_sums, w, sizeof w);
        hash[j] = t->n_sums + 1;
        t->node_sum[i] = t->n_sums++;
        if (t->n_sums * 2 > hcap) { /* rehash at half full */
            if (hcap > UINT32_MAX / 4) {
                st = sp_error_set(SP_ERR_NOMEM, "grammar: too many token trie summaries");
                goto done;
            }
            uint32_t ncap = hcap * 2, *nh = calloc(ncap, sizeof *nh);
            if (!nh) {
                st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory for the token trie");
                goto done;
            }
            for (uint32_t k = 1; k < t->n_sums; k++) {
                uint32_t h = (uint32_t)sum_hash(t->sum_set + 4 * (size_t)k) & (ncap - 1);
                while (nh[h])
                    h = (h + 1) & (ncap - 1);
                nh[h] = k + 1;
            }
            free(hash);
            hash = nh;
            hcap = ncap;
        }
    }
done:
    free(hash);
    return st;
}

sp_status sp_grammar_tokens_init(struct sp_grammar_tokens **out, uint32_t n_vocab,
                                 const char *const *bytes, const uint32_t *lens,
                                 const uint8_t *kinds)
{
    *out = NULL;
    struct sp_grammar_tokens *t = calloc(1, sizeof *t);
    uint64_t total = 0;
    if (!t)
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    for (uint32_t i = 0; i < n_vocab; i++)
        total += lens[i];
    if (total > UINT32_MAX - 1) {
        free(t);
        return sp_error_set(SP_ERR_ARG, "grammar: vocabulary of %llu bytes is too large",
                            (unsigned long long)total);
    }
    t->n_vocab = n_vocab;
    t->off = malloc(((size_t)n_vocab + 1) * sizeof *t->off);
    t->bytes = malloc(total ? total : 1);
    t->kind = malloc(n_vocab ? n_vocab : 1);
    if (!t->off || !t->bytes || !t->kind) {
        sp_grammar_tokens_free(t);
        return sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    }
    uint32_t o = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        t->off[i] = o;
        if (lens[i])
            memcpy(t->bytes + o, bytes[i], lens[i]);
        o += lens[i];
        t->kind[i] = kinds ? kinds[i] : SP_GRAMMAR_TOKEN_TEXT;
    }
    t->off[n_vocab] = o;
    sp_status st = build_trie(t);
    if (st == SP_OK)
        st = build_sums(t);
    if (st == SP_OK && (!(t->text_bits = calloc(((size_t)n_vocab + 63) / 64 + 1, sizeof *t->text_bits)) ||
                        !(t->regions = calloc(SP_GTOK_REGION_SLOTS, sizeof *t->regions))))
        st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
    for (uint32_t k = 0; st == SP_OK && k < SP_GTOK_REGION_SLOTS; k++)
        atomic_init(&t->regions[k], NULL);
    for (uint32_t i = 0; st == SP_OK && i < t->n_sorted; i++)
        t->text_bits[t->sorted[i] >> 6] |= 1ull << (t->sorted[i] & 63);
    if (st != SP_OK) {
        sp_grammar_tokens_free(t);
        return st;
    }
    *out = t;
    return SP_OK;
}

sp_status sp_grammar_tokens_from_vocab(struct sp_grammar_tokens **out, const struct sp_vocab *v)
{
    uint32_t n = sp_vocab_size(v);
    char **bytes = calloc(n ? n : 1, sizeof *bytes);
    uint32_t *lens = calloc(n ? n : 1, sizeof *lens);
    uint8_t *kinds = calloc(n ? n : 1, 1);
    sp_status st = SP_OK;
    *out = NULL;
    if (!bytes || !lens || !kinds) {
        st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    char buf[SP_GRAMMAR_TOKEN_MAX_LEN + 1];
    for (uint32_t i = 0; i < n; i++) {
        if (sp_vocab_is_eog(v, (sp_token)i)) {
            kinds[i] = SP_GRAMMAR_TOKEN_END;
            continue;
        }
        if (sp_vocab_is_control(v, (sp_token)i)) {
            kinds[i] = SP_GRAMMAR_TOKEN_NEVER;
            continue;
        }
        int k = sp_token_to_piece(v, (sp_token)i, false, buf, sizeof buf);
        if (k <= 0 || k > SP_GRAMMAR_TOKEN_MAX_LEN) {
            kinds[i] = SP_GRAMMAR_TOKEN_NEVER;
            continue;
        }
        bytes[i] = malloc((size_t)k);
        if (!bytes[i]) {
            st = sp_error_set(SP_ERR_NOMEM, "grammar: out of memory");
            goto done;
        }
        memcpy(bytes[i], buf, (size_t)k);
        lens[i] = (uint32_t)k;
    }
    st = sp_grammar_tokens_init(out, n, (const char *const *)bytes, lens, kinds);
done:
    for (uint32_t i = 0; bytes && i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    free(kinds);
    return st;
}
