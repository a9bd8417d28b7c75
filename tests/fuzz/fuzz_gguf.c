/* libFuzzer target: GGUF parsing and model validation from a memory buffer.
 * Any input must be accepted or refused with a status and a message; never a
 * crash, a leak or an out-of-bounds read (ASan/UBSan watch).  A file that
 * parses also goes through the model loader (every family's keys and
 * tensors: experts, rope factors, fused tensors, windows, soft-caps), read
 * from a memory file. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

static void fuzz_model(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz_gguf", 0);
    if (fd < 0)
        return;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    struct sp_model *m = NULL;
    if (write(fd, data, size) == (ssize_t)size && sp_model_open(&m, path, SP_MAP_READ, NULL) == SP_OK) {
        char features[512];
        sp_model_features(m, features, sizeof features);
        sp_model_close(m);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sp_gguf g;
    /* a private copy: the parser must not read past `size` */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    sp_quant_init();
    if (sp_gguf_init(&g, buf, size) == SP_OK) {
        uint32_t u;
        float f;
        struct sp_gguf_str s;
        const struct sp_gguf_kv *kv;
        sp_gguf_get_u32(&g, "llama.block_count", false, &u);
        sp_gguf_get_f32(&g, "llama.rope.freq_base", false, &f);
        sp_gguf_get_str(&g, "general.architecture", false, &s);
        sp_gguf_get_arr(&g, "tokenizer.ggml.tokens", false, SP_GGUF_STRING, &kv);
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            const struct sp_gguf_tensor *t = &g.tensors[i];
            volatile uint8_t sink = t->nbytes ? ((const uint8_t *)t->data)[t->nbytes - 1] : 0;
            (void)sink;
        }
        struct sp_vocab *v = NULL;
        if (sp_vocab_init(&v, &g) == SP_OK) {
            sp_token toks[64];
            size_t n = 0;
            sp_tokenize(v, "Hello, world!", 13, true, true, toks, 64, &n);
            sp_vocab_free(v);
        }
        sp_gguf_free(&g);
        fuzz_model(data, size);
    }
    free(buf);
    return 0;
}
