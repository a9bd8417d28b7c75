/* libFuzzer target: the fuzzer input is a chat template rendered over a fixed
 * conversation (with a tool call and its result, and tools half of the
 * time).  Any result is fine except a crash, a sanitizer report, a hang, or
 * an inconsistent status/output pair.
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
    { .role = "system", .content = "You are helpful." },
    { .role = "user", .content = "Hi {{ there }} {% raw %}" },
    { .role = "assistant", .content = "Hello! \xc3\xa9\xe4\xb8\x96" },
    { .role = "user", .content = "Bye\n" },
    { .role = "assistant", .tool_calls = "[{\"id\":\"call00001\",\"type\":\"function\",\"function\":"
                                         "{\"name\":\"f\",\"arguments\":{\"a\":[1,2.5,null,true]}}}]" },
    { .role = "tool", .content = "{\"ok\": 1}", .tool_call_id = "call00001", .name = "f" },
};
static const char tools[] = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
                            "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\"}}}}}]";

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
    struct sp_chat_opts o = {.add_generation_prompt = size & 1,
                             .bos_token = "<s>",
                             .eos_token = "</s>",
                             .now_unix = 1721995200,
                             .tools = size & 2 ? tools : NULL,
                             .vars = size & 4 ? "{\"enable_thinking\": false, \"custom\": [1, \"x\"]}" : NULL};
    sp_status st = sp_chat_render_opts(tmpl, msgs, sizeof(msgs) / sizeof(msgs[0]), &o, &out);
    if ((st == SP_OK) != (out != NULL))
        __builtin_trap();
    if (out && strlen(out) > SP_CHAT_MAX_OUTPUT)
        __builtin_trap();
    free(out);
    free(tmpl);
    return 0;
}
