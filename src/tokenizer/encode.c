/* Encoding: special-token partition, then BPE / SentencePiece / WordPiece on
 * each text fragment, as llama.cpp's llama_vocab::impl::tokenize does.
 *
 * Every buffer is sized from the input once per call; the merge loops use a
 * binary heap with lazy invalidation (O(n log n) per word). */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/tokenizer_internal.h"

void sp_tok_out_push(struct sp_tok_out *o, sp_token t)
{
    if (o->oom)
        return;
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 256;
        sp_token *ni = realloc(o->ids, nc * sizeof *ni);
        if (!ni) {
            o->oom = true;
            return;
        }
        o->ids = ni;
        o->cap = nc;
    }
    o->ids[o->n++] = t;
}

/* ---- binary heap of candidate merges ------------------------------------------ */

struct bigram {
    float score;   /* SPM: higher first */
    int32_t rank;  /* BPE: lower first */
    int32_t left, right;
    uint32_t llen, rlen;
};

struct heap {
    struct bigram *a;
    size_t n, cap;
    bool spm;
    bool oom;
};

/* true when x should pop before y */
static bool before(const struct heap *h, const struct bigram *x, const struct bigram *y)
{
    if (h->spm) {
        if (x->score != y->score)
            return x->score > y->score;
        return x->left < y->left;
    }
    if (x->rank != y->rank)
        return x->rank < y->rank;
    return x->left < y->left;
}

static void heap_push(struct heap *h, struct bigram b)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        struct bigram *na = realloc(h->a, nc * sizeof *na);
        if (!na) {
            h->oom = true;
            return;
        }
        h->a = na;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(h, &b, &h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = b;
}

static struct bigram heap_pop(struct heap *h)
{
    struct bigram top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(h, &h->a[c + 1], &h->a[c]))
            c++;
        if (!before(h, &h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
    return top;
}

struct sym {
    int32_t prev, next;
    uint32_t start, len;
};

struct session {
    const struct sp_vocab *v;
    struct sp_tok_out *out;
    struct sym *syms;
    size_t cap_syms;
    struct heap heap;
    bool oom;
};

static bool syms_reserve(struct session *s, size_t n)
{
    if (n <= s->cap_syms)
        return true;
    size_t nc = s->cap_syms ? s->cap_syms : 64;
    while (nc < n)
        nc *= 2;
    struct sym *ns = realloc(s->syms, nc * sizeof *ns);
    if (!ns) {
        s->oom = true;
        return false;
    }
    s->syms = ns;
    s->cap_syms = nc;
    return true;
}

/* Splits `text` into UTF-8-length symbols (llama.cpp's lead-byte table,
 * clamped at the end); returns the count. */
static size_t split_chars(struct session *s, const char *text, size_t n)
{
    if (!syms_reserve(s, n))
        return 0;
    size_t k = 0;
    for (size_t off = 0; off < n;) {
        size_t l = sp_utf8_len_lead((uint8_t)text[off]);
        if (l > n - off)
            l = n - off;
        s->syms[k] = (struct sym){(int32_t)k - 1, off + l == n ? -1 : (int32_t)k + 1, (uint32_t)off, (uint32_t)l};
        off += l;
        k++;
    }
    return k;
}

/* ---- BPE ------------------------------------------------------------------------- */

static void bpe_add(struct session *s, const char *text, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const struct sym *a = &s->syms[l], *b = &s->syms[r];
    int32_t rank = sp_vocab_merge_rank(s->v, text + a->start, a->len, b->len);
    if (rank < 0)
        return;
    heap_push(&s->heap, (struct bigram){0, rank, l, r, a->len, b->len});
}

static bool only_newlines(const char *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (w[i] != '\n')
            return false;
    return true;
}

/* The token a BPE word falls back to for byte `b` of a symbol that is no
 * token: the byte's own text (GPT-2 mapped words), or "<0xXX>" for raw
 * UTF-8 words; -1 when there is none (the byte is dropped). */
static sp_token byte_token(const struct sp_vocab *v, uint8_t b)
{
    if (!(v->pre_flags & SP_PRE_RAW_UTF8))
        return sp_vocab_lookup(v, (const char *)&b, 1);
    static const char hex[] = "0123456789ABCDEF";
    const char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    return sp_vocab_lookup(v, buf, sizeof buf);
}

static void bpe_word(void *ctx, const char *w, size_t n)
{
    struct session *s = ctx;
    const struct sp_vocab *v = s->v;
    if (s->oom)
        return;
    if (v->ignore_merges || ((v->pre_flags & SP_PRE_NEWLINE_WORDS) && only_newlines(w, n))) {
        sp_token t = sp_vocab_lookup(v, w, n);
        if (t >= 0) {
            sp_tok_out_push(s->out, t);
            return;
        }
    }
    size_t k = split_chars(s, w, n);
    if (!k)
        return;
    s->heap.n = 0;
    for (size_t i = 1; i < k; i++)
        bpe_add(s, w, (int32_t)i - 1, (int32_t)i);
    while (s->heap.n) {
        struct bigram b = heap_pop(&s->heap);
        struct sym *L = &s->syms[b.left], *R = &s->syms[b.right];
        if (L->len != b.llen || R->len != b.rlen)
            continue; /* outdated */
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0)
            s->syms[R->next].prev = b.left;
        bpe_add(s, w, L->prev, b.left);
        bpe_add(s, w, b.left, L->next);
    }
    if (s->heap.oom)
        s->oom = true;
    for (int32_t i = 0; i >= 0; i = s->syms[i].next) {
        const struct sym *y = &s->syms[i];
        sp_token t = sp_vocab_lookup(v, w + y->start, y->len);
        if (t >= 0) {
            sp_tok_out_push(s->out, t);
            continue;
        }
        for (uint32_t j = 0; j < y->len; j++) {
            sp_token bt = byte_token(v, (uint8_t)w[y->start + j]);
            if (bt >= 0)
                sp_tok_out_push(s->out, bt);
        }
    }
}

/* ---- SentencePiece BPE -------------------------------------------------------------- */

static void spm_add(struct session *s, const char *text, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const struct sym *a = &s->syms[l], *b = &s->syms[r];
    sp_token t = sp_vocab_lookup(s->v, text + a->start, (size_t)a->len + b->len);
    if (t < 0)
        return;
    heap_push(&s->heap, (struct bigram){s->v->tok[t].score, 0, l, r, a->len, b->len});
}

static void spm_text(struct session *s, const char *text, size_t n)
{
    const struct sp_vocab *v = s->v;
    size_t k = split_chars(s, text, n);
    if (!k)
        return;
    s->heap.n = 0;
    s->heap.spm = true;
    for (size_t i = 1; i < k; i++)
        spm_add(s, text, (int32_t)i - 1, (int32_t)i);
    while (s->heap.n) {
        struct bigram b = heap_pop(&s->heap);
        struct sym *L = &s->syms[b.left], *R = &s->syms[b.right];
        if (L->len == 0 || R->len == 0 || L->len + R->len != b.llen + b.rlen)
            continue;
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0)
            s->syms[R->next].prev = b.left;
        spm_add(s, text, L->prev, b.left);
        spm_add(s, text, b.left, L->next);
    }
    s->heap.spm = false;
    if (s->heap.oom)
        s->oom = true;
    for (int32_t i = 0; i >= 0; i = s->syms[i].next) {
        const struct sym *y = &s->syms[i];
        sp_token t = sp_vocab_lookup(v, text + y->start, y->len);
        if (t >= 0) {
            sp_tok_out_push(s->out, t);
            continue;
        }
        /* byte fallback */
        for (uint32_t j = 0; j < y->len; j++) {
            sp_token bt = v->byte_tok[(uint8_t)text[y->start + j]];
            if (bt < 0)
                bt = v->unk;
            if (bt >= 0)
                sp_tok_out_push(s->out, bt);
        }
    }
}

/* ---- WordPiece ------------------------------------------------------------------------- */

static bool is_chinese_char(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B920 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool cp_is_space(uint32_t c, utf8proc_category_t cat)
{
    return (c >= 9 && c <= 13) || c == 0x85 || cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL ||
           cat == UTF8PROC_CATEGORY_ZP;
}

/* First code point of the canonical decomposition (llama.cpp's NFD table
 * keeps only that one, which also drops accents). */
static uint32_t nfd_first(uint32_t c)
{
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return c;
    utf8proc_int32_t buf[8];
    int last = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)c, buf, 8, UTF8PROC_DECOMPOSE, &last);
    return n >= 1 ? (uint32_t)buf[0] : c;
}

static void wpm_word(struct session *s, const char *w, size_t n, char *scratch)
{
    const struct sp_vocab *v = s->v;
    memcpy(scratch, "\xe2\x96\x81", 3);
    memcpy(scratch + 3, w, n);
    size_t len = n + 3, before = s->out->n;
    for (size_t i = 0; i < len; i++) {
        bool match = false;
        size_t j = i + v->max_token_len + 1 < len ? i + v->max_token_len + 1 : len;
        for (; j > i; j--) {
            sp_token t = sp_vocab_lookup(v, scratch + i, j - i);
            if (t >= 0) {
                sp_tok_out_push(s->out, t);
                match = true;
                i = j - 1;
                break;
            }
        }
        if (!match) {
            s->out->n = before;
            break;
        }
    }
    if (s->out->n == before && v->unk >= 0)
        sp_tok_out_push(s->out, v->unk);
}

static sp_status wpm_text(struct session *s, const char *text, size_t n)
{
    /* words are built in `buf` (<= 4 bytes per input byte), separated by
     * recording their bounds */
    char *buf = malloc(n * 4 + 8), *scratch = malloc(n * 4 + 8);
    size_t *bounds = malloc((n * 2 + 2) * sizeof *bounds);
    if (!buf || !scratch || !bounds) {
        free(buf), free(scratch), free(bounds);
        return sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
    }
    size_t bl = 0, nb = 0, wstart = 0;
#define FINISH_WORD()                      \
    do {                                   \
        if (bl > wstart) {                 \
            bounds[nb++] = wstart;         \
            bounds[nb++] = bl;             \
        }                                  \
        wstart = bl;                       \
    } while (0)
    for (size_t off = 0; off < n;) {
        uint32_t c = sp_utf8_decode_lenient((const uint8_t *)text, n, &off);
        c = nfd_first(c);
        utf8proc_category_t cat = c <= 0x10FFFF ? utf8proc_category((utf8proc_int32_t)c) : UTF8PROC_CATEGORY_CN;
        if (cp_is_space(c, cat)) {
            FINISH_WORD();
            continue;
        }
        if (c == 0 || c == 0xFFFD || cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
            cat == UTF8PROC_CATEGORY_CS || cat == UTF8PROC_CATEGORY_CO)
            continue;
        uint32_t lc = c <= 0x10FFFF ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)c) : c;
        bool punct = cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
        bool symbol = cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO;
        if (punct || (c < 0x7F && symbol) || is_chinese_char(c)) {
            FINISH_WORD();
            bl += (size_t)sp_utf8_encode(lc > 0x10FFFF ? 0xFFFD : lc, buf + bl);
            FINISH_WORD();
        } else {
            bl += (size_t)sp_utf8_encode(lc > 0x10FFFF ? 0xFFFD : lc, buf + bl);
        }
    }
    FINISH_WORD();
#undef FINISH_WORD
    for (size_t i = 0; i < nb; i += 2)
        wpm_word(s, buf + bounds[i], bounds[i + 1] - bounds[i], scratch);
    free(buf), free(scratch), free(bounds);
    return SP_OK;
}

/* ---- special-token partition --------------------------------------------------------------- */

struct smatch {
    uint32_t rank;
    uint32_t pos, len;
    sp_token tok;
};

static int smatch_cmp(const void *a, const void *b)
{
    const struct smatch *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static bool is_c_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Marks state[i]: 0 raw text, 1 inside a special token, 2 stripped; tok_at[i]
 * holds the token starting at i.  Same result as llama.cpp's per-token
 * leftmost search over fragments, longest token first. */
static sp_status partition(const struct sp_vocab *v, const char *text, size_t n, bool parse_special,
                           uint8_t *state, sp_token *tok_at)
{
    struct smatch *m = NULL;
    size_t nm = 0, cm = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t node = 0;
        for (size_t j = i; j < n; j++) {
            node = sp_vocab_trie_child(v, node, (uint8_t)text[j]);
            if (!node)
                break;
            sp_token t = v->trie[node].token;
            if (t < 0)
                continue;
            if (!parse_special && (v->tok[t].attr & (SP_TOK_ATTR_CONTROL | SP_TOK_ATTR_UNKNOWN)))
                continue;
            if (nm == cm) {
                size_t nc = cm ? cm * 2 : 64;
                struct smatch *nmv = realloc(m, nc * sizeof *nmv);
                if (!nmv) {
                    free(m);
                    return sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
                }
                m = nmv;
                cm = nc;
            }
            m[nm++] = (struct smatch){v->special_rank[t], (uint32_t)i, (uint32_t)(j - i + 1), t};
        }
    }
    if (nm)
        qsort(m, nm, sizeof *m, smatch_cmp);
    for (size_t k = 0; k < nm; k++) {
        const struct smatch *x = &m[k];
        bool free_run = true;
        for (uint32_t j = 0; j < x->len; j++) {
            if (state[x->pos + j]) {
                free_run = false;
                break;
            }
        }
        if (!free_run)
            continue;
        memset(state + x->pos, 1, x->len);
        tok_at[x->pos] = x->tok;
        uint32_t attr = v->tok[x->tok].attr;
        if (attr & SP_TOK_ATTR_LSTRIP)
            for (size_t j = x->pos; j > 0 && !state[j - 1] && is_c_space(text[j - 1]); j--)
                state[j - 1] = 2;
        if (attr & SP_TOK_ATTR_RSTRIP)
            for (size_t j = (size_t)x->pos + x->len; j < n && !state[j] && is_c_space(text[j]); j++)
                state[j] = 2;
    }
    free(m);
    return SP_OK;
}

/* ---- entry point ----------------------------------------------------------------------------- */

/* Copies `n` bytes of `text` to `dst` with each ' ' as U+2581 (llama.cpp's
 * llama_escape_whitespace); returns the bytes written (<= 3 * n). */
static size_t escape_spaces(char *dst, const char *text, size_t n)
{
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        if (text[k] == ' ') {
            memcpy(dst + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            dst[m++] = text[k];
        }
    }
    return m;
}

/* Encodes into o (o->ids malloc'd; the caller frees it, also on failure). */
static sp_status sp_tokenize_out(const struct sp_vocab *v, const char *text, size_t len, bool add_special,
                                 bool parse_special, struct sp_tok_out *out)
{
    sp_status st = SP_OK;
    struct sp_tok_out o = {0};
    struct session s = {.v = v, .out = &o};
    uint8_t *state = NULL;
    sp_token *tok_at = NULL;
    char *esc_buf = NULL;
    *out = o;
    if (len && !text)
        return sp_error_set(SP_ERR_ARG, "tokenize: NULL text");
    if (len) {
        state = calloc(len, 1);
        tok_at = malloc(len * sizeof *tok_at);
        if (!state || !tok_at) {
            st = sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
            goto done;
        }
        if (v->n_special && (st = partition(v, text, len, parse_special, state, tok_at)) != SP_OK)
            goto done;
    }
    if (v->kind == SP_VOCAB_SPM || (v->pre_flags & SP_PRE_ESCAPE_SPACES)) {
        esc_buf = malloc(len * 3 + 4);
        if (!esc_buf) {
            st = sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
            goto done;
        }
    }
    bool is_prev_special = true;
    if (add_special) {
        if (v->kind == SP_VOCAB_WPM || (v->add_bos && v->bos >= 0))
            if (v->bos >= 0)
                sp_tok_out_push(&o, v->bos);
    }
    for (size_t i = 0; i < len;) {
        if (state[i] == 2) {
            i++;
            continue;
        }
        if (state[i] == 1) {
            sp_token t = tok_at[i];
            sp_tok_out_push(&o, t);
            i += v->tok[t].len;
            is_prev_special = true;
            continue;
        }
        size_t j = i;
        while (j < len && state[j] == 0)
            j++;
        switch (v->kind) {
        case SP_VOCAB_BPE:
            if (v->pre_flags & SP_PRE_ESCAPE_SPACES) {
                size_t m = escape_spaces(esc_buf, text + i, j - i);
                st = sp_pretok_split(v, esc_buf, m, bpe_word, &s);
            } else {
                st = sp_pretok_split(v, text + i, j - i, bpe_word, &s);
            }
            if (st != SP_OK)
                goto done;
            break;
        case SP_VOCAB_SPM: {
            size_t m = 0;
            if (v->add_space_prefix && is_prev_special) {
                memcpy(esc_buf, "\xe2\x96\x81", 3);
                m = 3;
            }
            m += escape_spaces(esc_buf + m, text + i, j - i);
            spm_text(&s, esc_buf, m);
            break;
        }
        case SP_VOCAB_WPM:
            if ((st = wpm_text(&s, text + i, j - i)) != SP_OK)
                goto done;
            break;
        }
        is_prev_special = false;
        i = j;
    }
    if (add_special) {
        if (v->kind == SP_VOCAB_WPM) {
            if (v->sep >= 0)
                sp_tok_out_push(&o, v->sep);
        } else if (v->add_eos && v->eos >= 0) {
            sp_tok_out_push(&o, v->eos);
        }
    }
    if (o.oom || s.oom)
        st = sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
done:
    *out = o;
    free(s.syms);
    free(s.heap.a);
    free(state);
    free(tok_at);
    free(esc_buf);
    return st;
}

sp_status sp_tokenize(const struct sp_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, sp_token *out, size_t cap, size_t *n_out)
{
    struct sp_tok_out o;
    sp_status st = sp_tokenize_out(v, text, len, add_special, parse_special, &o);
    *n_out = st == SP_OK ? o.n : 0;
    if (st == SP_OK && o.n > cap)
        st = sp_error_set(SP_ERR_ARG, "tokenize: %zu tokens do not fit in %zu", o.n, cap);
    else if (st == SP_OK && o.n)
        memcpy(out, o.ids, o.n * sizeof *out);
    free(o.ids);
    return st;
}

sp_status sp_tokenize_alloc(const struct sp_vocab *v, const char *text, size_t len, bool add_special,
                            bool parse_special, sp_token **out, size_t *n_out)
{
    struct sp_tok_out o;
    sp_status st = sp_tokenize_out(v, text, len, add_special, parse_special, &o);
    *out = NULL;
    *n_out = 0;
    if (st != SP_OK) {
        free(o.ids);
        return st;
    }
    if (!o.ids && !(o.ids = malloc(sizeof *o.ids))) /* no tokens: still a pointer to free */
        return sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
    *out = o.ids;
    *n_out = o.n;
    return SP_OK;
}
