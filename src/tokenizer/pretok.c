/* Pre-tokenization for BPE vocabularies: the regex split chosen by
 * tokenizer.ggml.pre, then the GPT-2 byte-to-unicode encoding of each piece
 * (skipped for raw-UTF-8 BPE such as Gemma 4's).  Matches llama.cpp's
 * unicode_regex_split():
 *   - the input is decoded leniently (a bad byte becomes U+FFFD) and the
 *     pieces are the re-encoded code points, so invalid UTF-8 never reaches
 *     a piece;
 *   - each regex splits every piece made by the previous ones; text between
 *     matches is kept as its own piece;
 *   - whitespace is Unicode White_Space (\s plus U+0085 here, since PCRE2's
 *     UCP \s lacks NEL), and in the regexes llama.cpp runs through
 *     std::wregex without categories, whitespace never matches a literal
 *     range (it was replaced by VT there), hence the (?!ws) guards below.
 * Regexes are compiled once at vocab init (JIT when available) and only read
 * afterwards, so concurrent encodes are safe (match data is per call). */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "tokenizer/tokenizer_internal.h"

/* ---- UTF-8 ---------------------------------------------------------------- */

uint32_t sp_utf8_decode_lenient(const uint8_t *s, size_t n, size_t *off)
{
    size_t o = *off;
    uint8_t c = s[o];
    if (!(c & 0x80)) {
        *off = o + 1;
        return c;
    }
    if (!(c & 0x40))
        goto bad;
    if (!(c & 0x20)) {
        if (o + 1 >= n || (s[o + 1] & 0xc0) != 0x80)
            goto bad;
        *off = o + 2;
        return ((uint32_t)(c & 0x1f) << 6) | (s[o + 1] & 0x3f);
    }
    if (!(c & 0x10)) {
        if (o + 2 >= n || (s[o + 1] & 0xc0) != 0x80 || (s[o + 2] & 0xc0) != 0x80)
            goto bad;
        *off = o + 3;
        return ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[o + 1] & 0x3f) << 6) | (s[o + 2] & 0x3f);
    }
    if (!(c & 0x08)) {
        if (o + 3 >= n || (s[o + 1] & 0xc0) != 0x80 || (s[o + 2] & 0xc0) != 0x80 ||
            (s[o + 3] & 0xc0) != 0x80)
            goto bad;
        *off = o + 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[o + 1] & 0x3f) << 12) |
               ((uint32_t)(s[o + 2] & 0x3f) << 6) | (s[o + 3] & 0x3f);
    }
bad:
    *off = o + 1;
    return 0xFFFD;
}

int sp_utf8_encode(uint32_t cp, char *out)
{
    if (cp <= 0x7f) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp <= 0x7ff) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp <= 0xffff) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* GPT-2's map: printable Latin-1 bytes stand for themselves, the other 68
 * bytes take U+0100.. in byte order. */
static bool byte_is_self(int b)
{
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t sp_byte_to_cp(uint8_t b)
{
    if (byte_is_self(b))
        return b;
    if (b <= 0x20)
        return 256u + b;
    if (b >= 0x7f && b <= 0xa0)
        return 256u + 33u + (b - 0x7fu);
    return 256u + 67u; /* 0xAD */
}

int sp_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_self((int)cp) ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 67)
        return (int)(0x7f + cp - 256 - 33);
    if (cp == 256 + 67)
        return 0xad;
    return -1;
}

/* ---- regex sets ------------------------------------------------------------ */

#define WS "\\s\\x{85}"
#define CONTRACTIONS "'s|'t|'re|'ve|'m|'ll|'d"
#define GPT2_RE CONTRACTIONS "| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+"
#define LLAMA3_HEAD "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define LLAMA3_TAIL "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"
#define CJK_RE "(?:(?![" WS "])[一-龥ࠀ-一가-퟿])+"

static const char *const RE_LLAMA3[] = {LLAMA3_HEAD "\\p{N}{1,3}" LLAMA3_TAIL, NULL};
static const char *const RE_QWEN2[] = {LLAMA3_HEAD "\\p{N}" LLAMA3_TAIL, NULL};
/* Qwen3.5: Qwen2's split with combining marks (\p{M}) kept inside words. */
static const char *const RE_QWEN35[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+",
    NULL};
/* Tekken (Mistral): words split at case changes.  A letter outside
 * [a-z] counts as upper case and one outside [A-Z] as lower case (a
 * non-ASCII letter as both), which is how llama.cpp runs tekken's split
 * (its \p{Lu}/\p{Ll} classes narrowed to ASCII) and so how the GGUF's
 * merges were checked against it. */
#define TEKKEN_UP "(?:(?=\\p{L})[^a-z])"
#define TEKKEN_LO "(?:(?=\\p{L})[^A-Z])"
static const char *const RE_TEKKEN[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" TEKKEN_UP "*" TEKKEN_LO "+|[^\\r\\n\\p{L}\\p{N}]?" TEKKEN_UP "+" TEKKEN_LO "*"
    "|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+",
    NULL};
/* GPT-4o (o200k; gpt-oss, Llama 4): tekken's case split with contractions
 * on the words and numbers in groups of up to three. */
#define GPT4O_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
static const char *const RE_GPT4O[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" TEKKEN_UP "*" TEKKEN_LO "+" GPT4O_CONTR "|[^\\r\\n\\p{L}\\p{N}]?" TEKKEN_UP "+" TEKKEN_LO
    "*" GPT4O_CONTR "|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+",
    NULL};
static const char *const RE_GPT2[] = {GPT2_RE, NULL};
static const char *const RE_STARCODER[] = {"\\p{N}", GPT2_RE, NULL};
static const char *const RE_FALCON[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_RE, "[0-9][0-9][0-9]", NULL};
static const char *const RE_DEFAULT[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_RE, "\\p{N}+",
                                         "[0-9][0-9][0-9]", NULL};
static const char *const RE_DEEPSEEK_CODER[] = {"[\\r\\n]", "[" WS "]?\\p{L}+", "[" WS "]?\\p{P}+",
                                                CJK_RE, "\\p{N}", NULL};
/* Singletons with a canonical decomposition are escaped so that no editor's
 * normalisation can change them. */
static const char *const RE_DEEPSEEK_LLM[] = {
    "[\\r\\n]",
    "[" WS "]?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ\\x{10400}-\\x{1044f}𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    /* U+3000 is whitespace, so the original range U+3000-U+3002 starts at U+3001 */
    "[" WS "]?[!-/:-~！-／：-～‘-‟、-。]+",
    "[" WS "]+$",
    CJK_RE,
    "\\p{N}+",
    NULL};
static const char *const RE_BLOOM[] = {" ?[^(" WS "|.,!?…。，、।۔،)]+", NULL};
static const char *const RE_VIKING[] = {" ?[^(" WS "|.,!?…。，、।۔،)]+", "\\p{N}", NULL};

/* Gemma 4: SentencePiece-style BPE; spaces are escaped to U+2581 before
 * the split, which only separates runs of newlines from the rest. */
static const char *const RE_NEWLINES[] = {"[^\\n]+|[\\n]+", NULL};

struct pre_def {
    const char *names; /* '|'-separated */
    const char *const *re;
    uint32_t flags; /* enum sp_pre_flag */
};

#define CLEAN SP_PRE_CLEAN_SPACES
static const struct pre_def PRE_DEFS[] = {
    {"default", RE_DEFAULT, CLEAN},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", RE_LLAMA3,
     CLEAN | SP_PRE_IGNORE_MERGES | SP_PRE_ADD_BOS},
    {"dbrx|smaug-bpe", RE_LLAMA3, CLEAN},
    {"glm4|chatglm-bpe", RE_LLAMA3, CLEAN | SP_PRE_NO_BOS_ID},
    {"deepseek-llm", RE_DEEPSEEK_LLM, 0},
    {"deepseek-coder", RE_DEEPSEEK_CODER, 0},
    {"falcon", RE_FALCON, CLEAN},
    {"mpt|olmo|jais|gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|exaone4",
     RE_GPT2, CLEAN},
    {"jina-v1-en|jina-v2-code|roberta-bpe", RE_GPT2, CLEAN},
    {"trillion|granite-docling", RE_GPT2, 0},
    {"starcoder|refact|codeshell|exaone|minerva-7b", RE_STARCODER, CLEAN},
    {"command-r|smollm", RE_STARCODER, 0},
    {"qwen2|deepseek-r1-qwen|kormo|hunyuan", RE_QWEN2, 0},
    {"qwen35", RE_QWEN35, 0},
    {"tekken", RE_TEKKEN, SP_PRE_IGNORE_MERGES | SP_PRE_ADD_BOS},
    {"gpt-4o|llama4|kanana2|talkie", RE_GPT4O, 0},
    {"stablelm2|megrez", RE_QWEN2, CLEAN},
    {"poro-chat", RE_BLOOM, 0},
    {"bloom|gpt3-finnish", RE_BLOOM, CLEAN},
    {"viking", RE_VIKING, 0},
    {"gemma4|granite-embed-multi-311m", RE_NEWLINES,
     CLEAN | SP_PRE_ESCAPE_SPACES | SP_PRE_RAW_UTF8 | SP_PRE_NEWLINE_WORDS | SP_PRE_FORCE_BOS},
};
#undef CLEAN

/* llama.cpp knows these but they need splitters not implemented here. */
static const char *const PRE_UNSUPPORTED =
    "deepseek-v3|chameleon|superbpe|bailingmoe|bailingmoe2|llada-moe|"
    "seed-coder|hunyuan-dense|kimi-k2|grok-2|afmoe|minimax-m2";

static bool name_in(const char *list, const char *name)
{
    size_t n = strlen(name);
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

sp_status sp_pretok_init(struct sp_vocab *v, const char *pre)
{
    const struct pre_def *def = &PRE_DEFS[0];
    if (name_in(PRE_UNSUPPORTED, pre))
        return sp_error_set(SP_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%s' is not supported", pre);
    for (size_t i = 0; i < sizeof(PRE_DEFS) / sizeof(PRE_DEFS[0]); i++) {
        if (name_in(PRE_DEFS[i].names, pre)) {
            def = &PRE_DEFS[i];
            break;
        }
    }
    v->pre_flags = def->flags;
    v->clean_spaces = def->flags & SP_PRE_CLEAN_SPACES;
    v->ignore_merges = def->flags & SP_PRE_IGNORE_MERGES;
    if (def->flags & SP_PRE_ADD_BOS)
        v->add_bos = true;
    if (def->flags & SP_PRE_NO_BOS_ID)
        v->bos = -1;
    v->n_regex = 0;
    for (int i = 0; def->re[i]; i++) {
        int err;
        PCRE2_SIZE eoff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &eoff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof msg);
            sp_pretok_free(v);
            return sp_error_set(SP_ERR_INTERNAL, "pre-tokenizer '%s' regex %d: %s at %zu", pre, i,
                                (const char *)msg, (size_t)eoff);
        }
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
        v->regex[v->n_regex++] = re;
    }
    return SP_OK;
}

void sp_pretok_free(struct sp_vocab *v)
{
    for (int i = 0; i < v->n_regex; i++)
        pcre2_code_free(v->regex[i]);
    v->n_regex = 0;
}

/* ---- split ------------------------------------------------------------------ */

struct span {
    size_t a, b;
};

struct span_list {
    struct span *s;
    size_t n, cap;
};

static bool span_push(struct span_list *l, size_t a, size_t b)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        struct span *ns = realloc(l->s, nc * sizeof *ns);
        if (!ns)
            return false;
        l->s = ns;
        l->cap = nc;
    }
    l->s[l->n++] = (struct span){a, b};
    return true;
}

sp_status sp_pretok_split(const struct sp_vocab *v, const char *text, size_t n,
                          sp_pretok_word_fn word, void *ctx)
{
    sp_status st = SP_OK;
    if (n == 0)
        return SP_OK;
    /* real: the re-encoded code points (what the pieces are made of);
     * subj: the same with surrogates and out-of-range values as U+FFFD (same
     * length), so PCRE2 sees valid UTF-8 and we can skip its check. */
    uint64_t cap64;
    if (!sp_mul_u64(n, 3, &cap64))
        return sp_error_set(SP_ERR_NOMEM, "tokenize: input too large");
    char *real = malloc(cap64 + 4), *subj = malloc(cap64 + 4);
    char *wbuf = NULL;
    struct span_list cur = {0}, next = {0};
    pcre2_match_data *md[SP_PRETOK_MAX_REGEX] = {0};
    if (!real || !subj) {
        st = sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
        goto out;
    }
    size_t m = 0;
    for (size_t off = 0; off < n;) {
        uint32_t cp = sp_utf8_decode_lenient((const uint8_t *)text, n, &off);
        if (cp > 0x10FFFF)
            cp = 0xFFFD;
        int k = sp_utf8_encode(cp, real + m);
        if (cp >= 0xD800 && cp <= 0xDFFF)
            sp_utf8_encode(0xFFFD, subj + m);
        else
            memcpy(subj + m, real + m, (size_t)k);
        m += (size_t)k;
    }
    if (!span_push(&cur, 0, m)) {
        st = sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
        goto out;
    }
    for (int r = 0; r < v->n_regex; r++) {
        md[r] = pcre2_match_data_create_from_pattern(v->regex[r], NULL);
        if (!md[r]) {
            st = sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
            goto out;
        }
        next.n = 0;
        for (size_t i = 0; i < cur.n; i++) {
            size_t a = cur.s[i].a, len = cur.s[i].b - a;
            const PCRE2_SPTR s = (PCRE2_SPTR)(subj + a);
            size_t pos = 0, prev = 0;
            while (pos <= len) {
                int rc = pcre2_match(v->regex[r], s, len, pos, PCRE2_NO_UTF_CHECK, md[r], NULL);
                if (rc < 0)
                    break; /* no match (errors cannot occur on valid input) */
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md[r]);
                size_t ms = ov[0], me = ov[1];
                if (ms > prev && !span_push(&next, a + prev, a + ms))
                    goto nomem;
                if (me > ms) {
                    if (!span_push(&next, a + ms, a + me))
                        goto nomem;
                    prev = me;
                    pos = me;
                } else {
                    /* empty match: step one code point */
                    prev = ms > prev ? ms : prev;
                    if (ms >= len)
                        break;
                    pos = ms + sp_utf8_len_lead((uint8_t)subj[a + ms]);
                }
            }
            if (prev < len && !span_push(&next, a + prev, a + len))
                goto nomem;
        }
        struct span_list t = cur;
        cur = next;
        next = t;
    }
    if (v->pre_flags & SP_PRE_RAW_UTF8) {
        for (size_t i = 0; i < cur.n; i++)
            if (cur.s[i].b > cur.s[i].a)
                word(ctx, real + cur.s[i].a, cur.s[i].b - cur.s[i].a);
        goto out;
    }
    /* byte-level encoding: each byte becomes a 1- or 2-byte code point */
    size_t wcap = 0;
    for (size_t i = 0; i < cur.n; i++) {
        size_t len = cur.s[i].b - cur.s[i].a;
        if (len * 2 > wcap)
            wcap = len * 2;
    }
    wbuf = malloc(wcap + 1);
    if (!wbuf)
        goto nomem;
    for (size_t i = 0; i < cur.n; i++) {
        size_t wl = 0;
        for (size_t j = cur.s[i].a; j < cur.s[i].b; j++)
            wl += (size_t)sp_utf8_encode(sp_byte_to_cp((uint8_t)real[j]), wbuf + wl);
        if (wl)
            word(ctx, wbuf, wl);
    }
    goto out;
nomem:
    st = sp_error_set(SP_ERR_NOMEM, "tokenize: out of memory");
out:
    for (int r = 0; r < SP_PRETOK_MAX_REGEX; r++)
        pcre2_match_data_free(md[r]);
    free(cur.s);
    free(next.s);
    free(wbuf);
    free(real);
    free(subj);
    return st;
}
