/* libFuzzer target: the input is a model's answer to a request with tools.
 * Its first byte picks the format (Hermes, Mistral, Llama 3, plain JSON,
 * Harmony), tool_choice (auto or required) and parallel_tool_calls; the
 * rest is the text.  It is read into calls whole and byte by byte (the two
 * must agree), checked, and matched against the calls' grammar: an answer
 * the grammar accepts under `required` must read as calls only (Harmony:
 * at least one call, after the analysis messages the grammar lets come
 * first, which read as text).  Anything else is fine
 * except a crash, a sanitizer report or a hang.
 *
 *   make fuzz   (scripts/run-fuzz runs it on tests/fuzz/corpus/toolcall) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "toolcall/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":3}}}}}]";
static const char *const templates[] = {"<tool_call>", "[TOOL_CALLS]",
                                        "\"parameters\": dictionary of argument name", "plain", "<|channel|>"};
#define HARMONY 4

#define MAX_TEXT 4096
#define MAX_CALLS 16

/* What a reading gives: the content, and each call's name and arguments. */
struct events {
    char text[MAX_TEXT];
    size_t n_text;
    char name[MAX_CALLS][80];
    char args[MAX_CALLS][MAX_TEXT];
    size_t n_args[MAX_CALLS];
    int calls, texts;
};

static void add(char *dst, size_t *n, size_t cap, const char *s, size_t len)
{
    if (*n + len > cap)
        __builtin_trap(); /* more output than input */
    memcpy(dst + *n, s, len);
    *n += len;
}

static sp_status record(void *user, const struct sp_toolcall_event *ev)
{
    struct events *e = user;
    if (ev->kind == SP_TOOLCALL_TEXT) {
        e->texts++;
        add(e->text, &e->n_text, MAX_TEXT, ev->text, ev->len);
    } else if (ev->kind == SP_TOOLCALL_CALL) {
        if (ev->index != e->calls++)
            __builtin_trap();
        if (ev->index < MAX_CALLS)
            snprintf(e->name[ev->index], sizeof e->name[0], "%.*s", (int)ev->len, ev->text);
    } else {
        if (ev->index != e->calls - 1)
            __builtin_trap(); /* arguments belong to the call announced last */
        if (ev->index < MAX_CALLS)
            add(e->args[ev->index], &e->n_args[ev->index], MAX_TEXT, ev->text, ev->len);
    }
    return SP_OK;
}

static void read_all(struct sp_toolcall *tc, const char *text, size_t n, bool bytewise, struct events *e)
{
    struct sp_toolcall_parser *p = NULL;
    memset(e, 0, sizeof *e);
    if (sp_toolcall_parser_new(&p, tc) != SP_OK)
        __builtin_trap();
    if (bytewise) {
        for (size_t i = 0; i < n; i++)
            sp_toolcall_parser_feed(p, text + i, 1, false, record, e);
        sp_toolcall_parser_feed(p, "", 0, true, record, e);
    } else {
        sp_toolcall_parser_feed(p, text, n, true, record, e);
    }
    if (sp_toolcall_parser_calls(p) != e->calls)
        __builtin_trap();
    sp_toolcall_parser_free(p);
}

static bool same(const struct events *a, const struct events *b)
{
    if (a->n_text != b->n_text || memcmp(a->text, b->text, a->n_text) || a->calls != b->calls)
        return false;
    for (int i = 0; i < a->calls && i < MAX_CALLS; i++)
        if (strcmp(a->name[i], b->name[i]) || a->n_args[i] != b->n_args[i] ||
            memcmp(a->args[i], b->args[i], a->n_args[i]))
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sp_grammar *grammars[32];
    static struct events whole, bytes;
    if (size < 1 || size > 4096)
        return 0;
    int cfg = data[0] & 31, f = cfg & 16 ? HARMONY : cfg & 3;
    bool required = cfg & 4, parallel = cfg & 8;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    json_error_t jerr;
    json_t *tools = json_loads(tools_json, 0, &jerr), *choice = json_string(required ? "required" : "auto");
    json_t *par = json_boolean(parallel);
    struct sp_toolcall *tc = NULL;
    char param[64], why[256];
    if (sp_toolcall_new(&tc, sp_toolcall_format_for(templates[f]), tools, choice, par, param, sizeof param) != SP_OK)
        __builtin_trap();
    read_all(tc, text, n, false, &whole);
    read_all(tc, text, n, true, &bytes);
    if (!same(&whole, &bytes))
        __builtin_trap();
    sp_toolcall_check(tc, text, n, why, sizeof why);
    if (!grammars[cfg]) {
        char *gbnf = NULL;
        const char *trigger = NULL;
        if (sp_toolcall_grammar(tc, &gbnf, &trigger) != SP_OK ||
            sp_grammar_prepare(SP_GRAMMAR_GBNF, gbnf, strlen(gbnf), trigger, NULL, &grammars[cfg]) != SP_OK)
            __builtin_trap();
        free(gbnf);
    }
    struct sp_grammar *g = grammars[cfg];
    if (required && sp_grammar_accepting(g, sp_grammar_feed(g, sp_grammar_start(g), text, n)) &&
        (whole.calls < 1 || (whole.texts && f != HARMONY)))
        __builtin_trap(); /* an answer of the grammar is calls and nothing else */
    sp_toolcall_free(tc);
    json_decref(tools);
    json_decref(choice);
    json_decref(par);
    return 0;
}
