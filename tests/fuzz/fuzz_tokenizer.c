/* libFuzzer target: encode arbitrary bytes (with and without special-token
 * parsing), decode, stream-decode.  Nothing may crash; for lossless
 * vocabularies the concatenated pieces of valid UTF-8 input give the input
 * back (SentencePiece: after the one prefix space it adds).
 * Vocabulary: $SP_FUZZ_VOCAB, default
 * build/testdata/vocab/ggml-vocab-gpt-2.gguf (scripts/fetch-model testdata).
 * Build: clang -fsanitize=fuzzer,address,undefined -Iinclude -Isrc ... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mmap.h"
#include "tokenizer/tokenizer.h"

static struct sp_mapping map;
static struct sp_gguf gguf;
static struct sp_vocab *vocab;

static void load_once(void)
{
    if (vocab)
        return;
    const char *path = getenv("SP_FUZZ_VOCAB");
    if (!path)
        path = "build/testdata/vocab/ggml-vocab-gpt-2.gguf";
    if (sp_mapping_init(&map, path, 0) != SP_OK || sp_gguf_init(&gguf, map.data, map.size) != SP_OK ||
        sp_vocab_init(&vocab, &gguf) != SP_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s (run scripts/fetch-model testdata)\n", path,
                sp_error_message());
        abort();
    }
}

static int valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) k = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) k = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) k = 4, cp = c & 0x07;
        else return 0;
        if (i + k > n) return 0;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += k;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_once();
    /* SentencePiece can give up to 3 byte tokens per input space (U+2581
     * escape) plus a prefix per fragment, so 6 per byte is a safe bound */
    size_t cap = size * 6 + 16, n = 0;
    sp_token *ids = malloc(cap * sizeof *ids);
    sp_status st = sp_tokenize(vocab, (const char *)data, size, true, true, ids, cap, &n);
    if (st != SP_OK)
        abort();
    size_t small = 0;
    st = sp_tokenize(vocab, (const char *)data, size, true, true, ids, n ? n - 1 : 0, &small);
    if (n && (st != SP_ERR_ARG || small != n))
        abort(); /* too-small output reports the needed count */
    st = sp_tokenize(vocab, (const char *)data, size, false, false, ids, cap, &n);
    if (st != SP_OK)
        abort();
    size_t dcap = 64 + size * 8;
    char *dec = malloc(dcap), *stream = malloc(dcap);
    int64_t k = sp_detokenize(vocab, ids, n, false, dec, dcap);
    if (k < 0 || (size_t)k > dcap)
        abort();
    /* pieces */
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        int r = sp_token_to_piece(vocab, ids[i], false, dec + w, dcap - w);
        if (r < 0 || (size_t)r > dcap - w)
            abort();
        w += (size_t)r;
    }
    if (sp_vocab_lossless(vocab) && valid_utf8(data, size)) {
        int spm = strcmp(sp_vocab_model_name(vocab), "llama") == 0;
        /* SentencePiece decodes a literal U+2581 in the input as a space */
        char *want = malloc(size + 1);
        size_t wl = 0;
        for (size_t i = 0; i < size; i++) {
            if (spm && i + 3 <= size && memcmp(data + i, "\xe2\x96\x81", 3) == 0) {
                want[wl++] = ' ';
                i += 2;
            } else {
                want[wl++] = (char)data[i];
            }
        }
        int same = w == wl && memcmp(dec, want, wl) == 0;
        /* and adds one prefix space (add_space_prefix) */
        int same_spm = spm && w == wl + 1 && dec[0] == ' ' && memcmp(dec + 1, want, wl) == 0;
        free(want);
        if (!same && !same_spm)
            abort();
    }
    /* streaming output is always valid UTF-8 */
    struct sp_detok d;
    sp_detok_init(&d, vocab, true);
    size_t sw = 0;
    for (size_t i = 0; i < n; i++) {
        int r = sp_detok_push(&d, ids[i], stream + sw, dcap - sw);
        if (r < 0)
            abort();
        sw += (size_t)r;
    }
    int r = sp_detok_flush(&d, stream + sw, dcap - sw);
    if (r < 0)
        abort();
    sw += (size_t)r;
    if (!valid_utf8((const uint8_t *)stream, sw))
        abort();
    free(ids), free(dec), free(stream);
    return 0;
}
