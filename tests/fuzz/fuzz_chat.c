/* libFuzzer target: the fuzzer input is a chat template rendered over a fixed
 * conversation.  Any result is fine except a crash, a sanitizer report, a
 * hang, or an inconsistent status/output pair.
 *
 * Build and run (from the repo root):
 *   clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *     tests/fuzz/fuzz_chat.c src/chat/[a-z]*.c src/core/error.c -ljansson -lutf8proc -lm \
 *     -o build/fuzz_chat
 *   build/fuzz_chat -max_total_time=30 tests/fuzz/corpus/chat  (copy the corpus
 *   first if new inputs should not be written there) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"

static const struct sp_chat_msg msgs[] = {
    { "system", "You are helpful." },
    { "user", "Hi {{ there }} {% raw %}" },
    { "assistant", "Hello! \xc3\xa9\xe4\xb8\x96" },
    { "user", "Bye\n" },
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *tmpl = malloc(size + 1);
    if (!tmpl)
        return 0;
    memcpy(tmpl, data, size);
    tmpl[size] = 0; /* an embedded NUL just ends the template early */
    char *out = NULL;
    sp_status st = sp_chat_render_at(tmpl, msgs, sizeof(msgs) / sizeof(msgs[0]), size & 1,
                                     "<s>", "</s>", 1721995200, &out);
    if ((st == SP_OK) != (out != NULL))
        __builtin_trap();
    if (out && strlen(out) > SP_CHAT_MAX_OUTPUT)
        __builtin_trap();
    free(out);
    free(tmpl);
    return 0;
}
