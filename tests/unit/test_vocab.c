/* Tokenizer vectors: for each ggml-vocab-NAME.gguf in the test data folder
 * ($SP_TESTDATA/vocab, default build/testdata/vocab: `scripts/fetch-model
 * testdata` unpacks it, and scripts/run-tests runs that first), every string of the .inp
 * file must encode (no BOS, no special parsing) to the ids on the matching
 * .out line, and for lossless vocabularies the concatenated pieces must give
 * the string back.  Also: the streaming detokenizer on characters split
 * across byte tokens, invalid UTF-8 input, and the special-token switches. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/mmap.h"
#include "tokenizer/tokenizer.h"

#define SEP "\n__ggml_vocab_test__\n"

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[sz] = 0;
        *n = (size_t)sz;
    }
    return b;
}

struct loaded {
    struct sp_mapping m;
    struct sp_gguf g;
    struct sp_vocab *v;
};

static bool load(struct loaded *L, const char *path)
{
    memset(L, 0, sizeof *L);
    if (sp_mapping_init(&L->m, path, 0) != SP_OK)
        return false;
    if (sp_gguf_init(&L->g, L->m.data, L->m.size) != SP_OK) {
        sp_mapping_free(&L->m);
        return false;
    }
    if (sp_vocab_init(&L->v, &L->g) != SP_OK) {
        fprintf(stderr, "vocab %s: %s\n", path, sp_error_message());
        sp_gguf_free(&L->g);
        sp_mapping_free(&L->m);
        return false;
    }
    return true;
}

static void unload(struct loaded *L)
{
    sp_vocab_free(L->v);
    sp_gguf_free(&L->g);
    sp_mapping_free(&L->m);
}

/* Concatenated pieces (special=false) of ids; returns length. */
static size_t pieces(const struct sp_vocab *v, const sp_token *ids, size_t n, char *buf, size_t cap)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        int k = sp_token_to_piece(v, ids[i], false, buf + w, cap - w);
        if (k < 0 || (size_t)k > cap - w)
            return (size_t)-1;
        w += (size_t)k;
    }
    return w;
}

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80)
                return false;
        i += k;
    }
    return true;
}

static void test_vectors(const char *dir, const char *name)
{
    char path[1200], inp_path[1300], out_path[1300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    size_t ni = 0, no = 0;
    char *inp = read_all(inp_path, &ni), *outp = read_all(out_path, &no);
    struct loaded L;
    CHECK(inp && outp, "%s: vectors missing", name);
    bool ok = load(&L, path);
    CHECK(ok, "%s: load failed", name);
    if (!inp || !outp || !ok) {
        free(inp), free(outp);
        if (ok)
            unload(&L);
        return;
    }
    bool lossless = sp_vocab_lossless(L.v);
    int pass = 0, total = 0, rt_pass = 0, rt_total = 0;
    char *s = inp, *line = outp;
    size_t cap = 1 << 16;
    sp_token *ids = malloc(cap * sizeof *ids);
    char *dec = malloc(cap * 8);
    for (bool last = false; !last;) {
        /* a final string need not be followed by the separator (gemma-4) */
        char *e = strstr(s, SEP);
        if (!e) {
            if (!*s)
                break;
            e = s + strlen(s);
            last = true;
        }
        size_t len = (size_t)(e - s);
        char *nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = 0;
        /* expected ids */
        sp_token want[4096];
        size_t nw = 0;
        for (char *p = line; *p;) {
            char *q;
            long x = strtol(p, &q, 10);
            if (q == p)
                break;
            want[nw++] = (sp_token)x;
            p = q;
        }
        size_t n = 0;
        sp_status st = sp_tokenize(L.v, s, len, false, false, ids, cap, &n);
        bool same = st == SP_OK && n == nw && memcmp(ids, want, n * sizeof *ids) == 0;
        total++;
        pass += same;
        CHECK(same, "%s: string %d (%zu bytes) '%.*s': got %zu ids, want %zu", name, total, len,
              (int)(len < 60 ? len : 60), s, n, nw);
        if (!same) {
            fprintf(stderr, "  got :");
            for (size_t i = 0; i < n && i < 40; i++)
                fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n  want:");
            for (size_t i = 0; i < nw && i < 40; i++)
                fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n");
        }
        if (lossless && st == SP_OK && valid_utf8(s, len)) {
            int64_t k = sp_detokenize(L.v, ids, n, false, dec, cap * 8);
            size_t kp = pieces(L.v, ids, n, dec + cap * 4, cap * 4);
            /* detokenize removes the SentencePiece prefix space; the pieces
             * keep it (byte-level BPE: pieces are exactly the input) */
            bool rt;
            if (strcmp(sp_vocab_model_name(L.v), "llama") == 0)
                rt = k == (int64_t)len && memcmp(dec, s, len) == 0;
            else
                rt = kp == len && memcmp(dec + cap * 4, s, len) == 0;
            rt_total++;
            rt_pass += rt;
            CHECK(rt, "%s: round trip of string %d", name, total);
        }
        s = last ? e : e + strlen(SEP);
        line = nl + 1;
    }
    printf("  %-36s %s/%s: %d/%d vectors, %d/%d round trips%s\n", name, sp_vocab_model_name(L.v),
           sp_vocab_pre_name(L.v), pass, total, rt_pass, rt_total, lossless ? "" : " (lossy: WordPiece)");
    free(ids), free(dec), free(inp), free(outp);
    unload(&L);
}

/* Invalid UTF-8 never fails and decodes back (byte-level BPE keeps
 * U+FFFD for bad bytes as llama.cpp does). */
static void test_invalid_utf8(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/ggml-vocab-gpt-2.gguf", dir);
    struct loaded L;
    if (!load(&L, path)) {
        CHECK(0, "gpt-2 vocab");
        return;
    }
    const char bad[] = "a\x80\xff\xc3(\xe2\x82 \xf0\x9f\x98 z\xed\xa0\x80";
    sp_token ids[256];
    size_t n = 0;
    sp_status st = sp_tokenize(L.v, bad, sizeof bad - 1, false, false, ids, 256, &n);
    CHECK(st == SP_OK && n > 0, "invalid utf-8 encodes: %d", st);
    char buf[512];
    int64_t k = sp_detokenize(L.v, ids, n, false, buf, sizeof buf);
    CHECK(k > 0 && strstr(buf, "\xef\xbf\xbd") != NULL, "bad bytes become U+FFFD");
    /* too-small output reports the needed count */
    size_t need = 0;
    st = sp_tokenize(L.v, "hello world", 11, false, false, ids, 1, &need);
    CHECK(st == SP_ERR_ARG && need == 2, "cap too small: st=%d need=%zu", st, need);
    unload(&L);
}

/* SentencePiece byte fallback splits a character over byte tokens: the
 * streaming detokenizer must hold the partial bytes. */
static void test_stream(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf", dir);
    struct loaded L;
    if (!load(&L, path)) {
        CHECK(0, "llama-spm vocab");
        return;
    }
    const struct sp_vocab *v = L.v;
    /* U+1F600 as four byte tokens, then "a" */
    sp_token seq[6];
    const unsigned char emo[4] = {0xf0, 0x9f, 0x98, 0x80};
    for (int i = 0; i < 4; i++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", emo[i]);
        seq[i] = sp_vocab_find(v, hex);
        CHECK(seq[i] >= 0, "byte token %s", hex);
    }
    seq[4] = sp_vocab_find(v, "a");
    struct sp_detok d;
    sp_detok_init(&d, v, false);
    char out[512];
    int w0 = sp_detok_push(&d, seq[0], out, sizeof out);
    int w1 = sp_detok_push(&d, seq[1], out, sizeof out);
    int w2 = sp_detok_push(&d, seq[2], out, sizeof out);
    CHECK(w0 == 0 && w1 == 0 && w2 == 0, "partial bytes held: %d %d %d", w0, w1, w2);
    int w3 = sp_detok_push(&d, seq[3], out, sizeof out);
    CHECK(w3 == 4 && memcmp(out, emo, 4) == 0, "character completes: %d", w3);
    int w4 = sp_detok_push(&d, seq[4], out, sizeof out);
    CHECK(w4 == 1 && out[0] == 'a', "then ascii: %d", w4);
    /* an unfinished character at the end flushes as U+FFFD */
    sp_detok_push(&d, seq[0], out, sizeof out);
    sp_detok_push(&d, seq[1], out, sizeof out);
    int wf = sp_detok_flush(&d, out, sizeof out);
    CHECK(wf == 6 && memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0, "flush: %d", wf);
    /* a stray continuation byte is replaced at once */
    int ws = sp_detok_push(&d, seq[2], out, sizeof out);
    CHECK(ws == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "stray continuation: %d", ws);
    /* streaming equals sp_detokenize on a real encoding */
    const char *text = "Hello wörld 日本語 😀!";
    sp_token ids[128];
    size_t n = 0;
    CHECK(sp_tokenize(v, text, strlen(text), false, false, ids, 128, &n) == SP_OK, "encode");
    char whole[256], streamed[256];
    int64_t k = sp_detokenize(v, ids, n, false, whole, sizeof whole);
    sp_detok_init(&d, v, false);
    d.first = true;
    size_t sw = 0;
    for (size_t i = 0; i < n; i++) {
        int r = sp_detok_push(&d, ids[i], streamed + sw, sizeof streamed - sw);
        CHECK(r >= 0, "push %zu", i);
        sw += (size_t)(r > 0 ? r : 0);
    }
    sw += (size_t)sp_detok_flush(&d, streamed + sw, sizeof streamed - sw);
    CHECK(k == (int64_t)strlen(text) && memcmp(whole, text, (size_t)k) == 0, "detokenize == input");
    CHECK(sw == (size_t)k && memcmp(streamed, whole, sw) == 0, "stream == detokenize");
    /* BOS via add_special, specials only with parse_special */
    CHECK(sp_tokenize(v, "<s>x", 4, true, true, ids, 128, &n) == SP_OK && n >= 2 && ids[0] == sp_vocab_bos(v) &&
              ids[1] == sp_vocab_bos(v),
          "parse_special finds <s>");
    CHECK(sp_tokenize(v, "<s>x", 4, false, false, ids, 128, &n) == SP_OK && n >= 2 && ids[0] != sp_vocab_bos(v),
          "no parse_special: <s> is text");
    unload(&L);
}

/* Sizing calls: (NULL, 0) gives the needed length and touches nothing,
 * also for a token whose piece is empty (a control token without
 * `special`), and the sized buffer then gets exactly that text: `want`
 * for <control> encode(text). */
static void test_sizing(const char *dir, const char *file, const char *text, const char *want)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct loaded L;
    if (!load(&L, path)) {
        CHECK(0, "%s", file);
        return;
    }
    const struct sp_vocab *v = L.v;
    sp_token ctl = -1;
    for (uint32_t t = 0; t < sp_vocab_size(v) && ctl < 0; t++)
        if (sp_vocab_is_control(v, (sp_token)t))
            ctl = (sp_token)t;
    CHECK(ctl >= 0, "%s: a control token", file);
    CHECK(sp_token_to_piece(v, ctl, false, NULL, 0) == 0, "%s: empty piece sized with NULL", file);
    CHECK(sp_detokenize(v, &ctl, 1, false, NULL, 0) == 0, "%s: empty text sized with NULL", file);
    CHECK(sp_detokenize(v, NULL, 0, false, NULL, 0) == 0, "%s: no tokens sized with NULL", file);
    sp_token ids[64];
    size_t n = 0;
    CHECK(sp_tokenize(v, text, strlen(text), false, false, ids + 1, 63, &n) == SP_OK && n > 0, "%s: encode",
          file);
    ids[0] = ctl; /* leading empty piece, as POST /detokenize {"tokens":[1, ...]} */
    for (size_t i = 1; i <= n; i++) {
        char one[64];
        int need = sp_token_to_piece(v, ids[i], false, NULL, 0);
        int got = sp_token_to_piece(v, ids[i], false, one, sizeof one);
        CHECK(need > 0 && need == got, "%s: piece %zu sized %d, written %d", file, i, need, got);
    }
    for (size_t k = 1; k <= n + 1; k++) {
        int64_t need = sp_detokenize(v, ids, k, false, NULL, 0);
        char *buf = malloc(need > 0 ? (size_t)need : 1);
        int64_t got = buf ? sp_detokenize(v, ids, k, false, buf, (size_t)need) : -1;
        CHECK(need >= 0 && got >= 0 && got <= need, "%s: %zu tokens sized %lld, written %lld", file, k,
              (long long)need, (long long)got);
        if (k == n + 1)
            CHECK(got == (int64_t)strlen(want) && memcmp(buf, want, (size_t)got) == 0, "%s: sized text", file);
        free(buf);
    }
    unload(&L);
}

/* Gemma 4 (BPE over raw UTF-8, spaces as U+2581): BOS is added although
 * the vectors do not show it, a character without a token falls back to
 * its <0xXX> byte tokens, and control tokens parse only when asked. */
static void test_gemma4(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/ggml-vocab-gemma-4.gguf", dir);
    struct loaded L;
    if (!load(&L, path)) {
        CHECK(0, "gemma-4 vocab %s (run scripts/fetch-model testdata)", path);
        return;
    }
    const struct sp_vocab *v = L.v;
    sp_token ids[64];
    size_t n = 0;
    CHECK(sp_tokenize(v, "Hello world", 11, true, false, ids, 64, &n) == SP_OK && n == 3 &&
              ids[0] == sp_vocab_bos(v) && sp_vocab_bos(v) == sp_vocab_find(v, "<bos>") &&
              ids[1] == sp_vocab_find(v, "Hello") && ids[2] == sp_vocab_find(v, "\xe2\x96\x81world"),
          "gemma-4: <bos> Hello ▁world (n=%zu)", n);
    char buf[256];
    int64_t k = sp_detokenize(v, ids, n, false, buf, sizeof buf);
    CHECK(k == 11 && memcmp(buf, "Hello world", 11) == 0, "gemma-4: detokenize drops <bos>, ▁ is a space");
    k = sp_detokenize(v, ids, n, true, buf, sizeof buf);
    CHECK(k == 16 && memcmp(buf, "<bos>Hello world", 16) == 0, "gemma-4: special shows <bos>");
    /* U+2A700 has no token: four byte tokens */
    const char *rare = "x\xf0\xaa\x9c\x80";
    CHECK(sp_tokenize(v, rare, 5, false, false, ids, 64, &n) == SP_OK && n == 5, "gemma-4: byte fallback n=%zu",
          n);
    for (size_t i = 1; i < n && i < 5; i++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", (unsigned char)rare[i]);
        const char *t = sp_vocab_token_text(v, ids[i]);
        CHECK(t && strcmp(t, hex) == 0, "gemma-4: byte %zu is %s, got %s", i, hex, t ? t : "?");
    }
    k = sp_detokenize(v, ids, n, false, buf, sizeof buf);
    CHECK(k == 5 && memcmp(buf, rare, 5) == 0, "gemma-4: byte tokens decode to their bytes");
    /* a whole newline run is one token */
    CHECK(sp_tokenize(v, "a\n\n\nb", 5, false, false, ids, 64, &n) == SP_OK && n == 3 &&
              ids[1] == sp_vocab_find(v, "\n\n\n"),
          "gemma-4: newline run kept whole");
    sp_token turn = sp_vocab_find(v, "<|turn>");
    CHECK(sp_tokenize(v, "<|turn>user", 11, false, true, ids, 64, &n) == SP_OK && n >= 2 && ids[0] == turn,
          "gemma-4: parse_special finds <|turn>");
    CHECK(sp_tokenize(v, "<|turn>user", 11, false, false, ids, 64, &n) == SP_OK && n >= 2 && ids[0] != turn,
          "gemma-4: no parse_special: <|turn> is text");
    unload(&L);
    test_sizing(dir, "ggml-vocab-gemma-4.gguf", "Hello world, this is 😀", "Hello world, this is 😀");
}

int main(void)
{
    const char *env = getenv("SP_TESTDATA");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/vocab", env ? env : "build/testdata");
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s (run scripts/fetch-model testdata)", dir);
    if (!d)
        return sp_check_report("vocab");
    char *names[64];
    int nn = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nn < 64) {
        size_t l = strlen(de->d_name);
        if (l > 5 && strcmp(de->d_name + l - 5, ".gguf") == 0)
            names[nn++] = strdup(de->d_name);
    }
    closedir(d);
    CHECK(nn >= 10, "expected at least 10 vocabularies, found %d", nn);
    for (int i = 0; i < nn; i++)
        for (int j = i + 1; j < nn; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    for (int i = 0; i < nn; i++) {
        test_vectors(dir, names[i]);
        free(names[i]);
    }
    test_invalid_utf8(dir);
    test_stream(dir);
    test_sizing(dir, "ggml-vocab-gpt-2.gguf", "Hello world, this is 😀", "Hello world, this is 😀");
    /* SentencePiece keeps the prefix space after a leading control token, as llama.cpp */
    test_sizing(dir, "ggml-vocab-llama-spm.gguf", "Hello world, this is 😀", " Hello world, this is 😀");
    test_gemma4(dir);
    return sp_check_report("vocab");
}
