/* Tool calls: the format each template gets, reading calls out of answers
 * (whole and byte by byte alike), the grammar of the calls accepting
 * exactly those answers, the check of arguments, bad definitions, and the
 * conversation the templates see. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "grammar/grammar.h"
#include "toolcall/toolcall.h"

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12}},"
    "\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"a\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"a\"],\"additionalProperties\":false}}}]";

static const struct sp_toolcall_format *fmt(const char *name)
{
    static const char *const tmpl[] = {"x [TOOL_CALLS] y", "<tool_call>", "Respond in the format {\"name\": function "
                                       "name, \"parameters\": dictionary of argument name and its value}", "{{ x }}",
                                       "<|start|>assistant<|channel|>final<|message|>"};
    for (size_t i = 0; i < 5; i++)
        if (!strcmp(sp_toolcall_format_name(sp_toolcall_format_for(tmpl[i])), name))
            return sp_toolcall_format_for(tmpl[i]);
    return sp_toolcall_format_for(NULL);
}

static struct sp_toolcall *make(const char *format, const char *choice_json, bool parallel)
{
    json_error_t jerr;
    json_t *tools = json_loads(tools_json, 0, &jerr), *choice = json_loads(choice_json, JSON_DECODE_ANY, &jerr);
    json_t *par = parallel ? json_true() : json_false();
    struct sp_toolcall *tc = NULL;
    char param[64];
    sp_status st = sp_toolcall_new(&tc, fmt(format), tools, choice, par, param, sizeof param);
    CHECK(st == SP_OK, "%s %s: %s", format, choice_json, sp_error_message());
    json_decref(tools);
    json_decref(choice);
    json_decref(par);
    return tc;
}

/* Events flattened: T<text>| C<index>:<name>| A<index>:<args>| with runs merged. */
struct flat {
    char s[2048];
    size_t n;
    char last;
    int last_index;
};

static sp_status flat_event(void *user, const struct sp_toolcall_event *ev)
{
    struct flat *f = user;
    char kind = ev->kind == SP_TOOLCALL_TEXT ? 'T' : ev->kind == SP_TOOLCALL_CALL ? 'C' : 'A';
    if (kind == 'C')
        CHECK(ev->id && (!strncmp(ev->id, "call_", 5) || strlen(ev->id) == 9), "id %s", ev->id ? ev->id : "");
    if (kind != f->last || kind == 'C' || ev->index != f->last_index)
        f->n += (size_t)snprintf(f->s + f->n, sizeof f->s - f->n, "%s%c%d:", f->n ? "|" : "", kind,
                                 kind == 'T' ? 0 : ev->index);
    f->n += (size_t)snprintf(f->s + f->n, sizeof f->s - f->n, "%.*s", (int)ev->len, ev->text);
    f->last = kind;
    f->last_index = ev->index;
    return SP_OK;
}

struct parse_case {
    const char *format, *choice;
    bool parallel;
    const char *text;
    const char *want;   /* flattened events */
    bool grammar;       /* the calls' grammar accepts the text */
    bool valid;         /* sp_toolcall_check */
};

static const struct parse_case parse_cases[] = {
    {"hermes", "\"required\"", true, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n</tool_call>",
     "C0:f|A0:{\"a\":1}", true, true},
    {"hermes", "\"required\"", true,
     "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n</tool_call>\n<tool_call>\n"
     "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>",
     "C0:f|A0:{\"a\":1}|C1:get_weather|A1:{\"city\":\"Paris\"}", true, true},
    {"hermes", "\"auto\"", true, "Let me see.\n<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":2}}\n</tool_call>",
     "T0:Let me see.\n|C0:f|A0:{\"a\":2}", true, true},
    {"hermes", "\"auto\"", true, "a <tool b <tool_cal", "T0:a <tool b <tool_cal", true, true},
    {"hermes", "\"auto\"", true, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":", "C0:f|A0:{\"a\":", false,
     false},
    {"hermes", "\"required\"", true, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":-1}}\n</tool_call>",
     "C0:f|A0:{\"a\":-1}", false, false},
    {"mistral", "\"required\"", true,
     "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":{\"a\":1},\"id\":\"abcdefghi\"}, "
     "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}]",
     "C0:f|A0:{\"a\":1}|C1:get_weather|A1:{\"city\":\"x\"}", true, true},
    {"mistral", "\"auto\"", true, "Sure[TOOL_CALLS][{\"name\":\"f\",\"arguments\":{\"a\":0}}]",
     "T0:Sure|C0:f|A0:{\"a\":0}", true, true},
    {"llama3", "\"required\"", false, "{\"name\": \"f\", \"parameters\": {\"a\": 7}}", "C0:f|A0:{\"a\": 7}", false,
     true},
    {"llama3", "\"required\"", false, "{\"name\":\"f\",\"parameters\":{\"a\":7}}", "C0:f|A0:{\"a\":7}", true, true},
    {"json", "\"required\"", true,
     "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"a\\\"}b\"}}\n{\"name\":\"f\",\"arguments\":{\"a\":3}}",
     "C0:get_weather|A0:{\"city\":\"a\\\"}b\"}|C1:f|A1:{\"a\":3}", true, true},
    {"json", "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", true, "{\"name\":\"f\",\"arguments\":{\"a\":9}}",
     "C0:f|A0:{\"a\":9}", true, true},
    {"json", "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", true,
     "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}", "C0:get_weather|A0:{\"city\":\"x\"}", false, true},
    {"json", "\"required\"", true, "{\"arguments\":{\"a\":1},\"name\":\"f\"}", "C0:f|A0:{\"a\":1}", false, true},
    {"json", "\"required\"", false, "{\"name\":\"f\",\"arguments\":{\"a\":1}}\n{\"name\":\"f\",\"arguments\":{}}",
     "C0:f|A0:{\"a\":1}|T0:\n{\"name\":\"f\",\"arguments\":{}}", false, true},
    {"json", "\"required\"", true, "{\"name\":\"nope\",\"arguments\":{}}", "C0:nope|A0:{}", false, false},
    {"json", "\"auto\"", true, "Just text {\"nam", "T0:Just text {\"nam", true, true},
    /* Harmony: what server/reasoning.c leaves of a tool message (from the recipient on), and whole outputs */
    {"harmony", "\"auto\"", true, " to=functions.f <|constrain|>json<|message|>{\"a\":1}", "C0:f|A0:{\"a\":1}", true,
     true},
    {"harmony", "\"auto\"", true, "Let me check. to=functions.get_weather<|channel|>commentary json<|message|>"
     "{\"city\": \"Paris\"}<|call|>", "T0:Let me check.|C0:get_weather|A0:{\"city\": \"Paris\"}", false, true},
    {"harmony", "\"auto\"", true, " to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|> "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"x}\\\"\"}<|call|>",
     "C0:f|A0:{\"a\":1}|C1:get_weather|A1:{\"city\":\"x}\\\"\"}", false, true},
    {"harmony", "\"auto\"", true, "Say to=functions or to=functions.<|message|>{}", "T0:Say to=functions or "
     "to=functions.<|message|>{}", false, true},
    {"harmony", "\"required\"", true, "<|channel|>analysis<|message|>Need f.<|end|><|start|>assistant<|channel|>"
     "commentary to=functions.f <|constrain|>json<|message|>{\"a\":2}", "T0:<|channel|>analysis<|message|>Need f."
     "<|end|><|start|>assistant<|channel|>commentary|C0:f|A0:{\"a\":2}", true, true},
    {"harmony", "\"required\"", true, " to=functions.f<|channel|>commentary <|constrain|>json<|message|>{\"a\":-1}",
     "C0:f|A0:{\"a\":-1}", false, false},
    {"harmony", "\"required\"", true, "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant "
     "to=functions.f<|channel|>commentary json<|message|>{\"a\":4}",
     "T0:<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant|C0:f|A0:{\"a\":4}", false, true},
    {"harmony", "\"required\"", true, "<|channel|>final<|message|>No call.", "T0:<|channel|>final<|message|>No call.",
     false, false},
    {"harmony", "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", true,
     "<|channel|>commentary to=functions.f<|message|>{\"a\":3}", "T0:<|channel|>commentary|C0:f|A0:{\"a\":3}", true,
     true},
    {"harmony", "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", true,
     " to=functions.get_weather<|message|>{\"city\":\"x\"}", "C0:get_weather|A0:{\"city\":\"x\"}", false, true},
};

static void parse_all(struct sp_toolcall *tc, const char *text, bool bytewise, struct flat *f)
{
    struct sp_toolcall_parser *p = NULL;
    memset(f, 0, sizeof *f);
    f->last_index = -1;
    if (sp_toolcall_parser_new(&p, tc) != SP_OK)
        return;
    size_t n = strlen(text);
    if (bytewise) {
        for (size_t i = 0; i < n; i++)
            sp_toolcall_parser_feed(p, text + i, 1, false, flat_event, f);
        sp_toolcall_parser_feed(p, "", 0, true, flat_event, f);
    } else {
        sp_toolcall_parser_feed(p, text, n, true, flat_event, f);
    }
    sp_toolcall_parser_free(p);
}

static void test_parse(void)
{
    for (size_t i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
        const struct parse_case *c = &parse_cases[i];
        struct sp_toolcall *tc = make(c->format, c->choice, c->parallel);
        if (!tc)
            continue;
        struct flat whole, bytes;
        parse_all(tc, c->text, false, &whole);
        parse_all(tc, c->text, true, &bytes);
        CHECK(!strcmp(whole.s, c->want), "case %zu: got [%s] want [%s]", i, whole.s, c->want);
        CHECK(!strcmp(bytes.s, c->want), "case %zu byte by byte: got [%s] want [%s]", i, bytes.s, c->want);
        char *gbnf = NULL, why[512] = "";
        const char *trigger = NULL;
        struct sp_grammar *g = NULL;
        sp_status st = sp_toolcall_grammar(tc, &gbnf, &trigger);
        CHECK(st == SP_OK, "case %zu grammar: %s", i, sp_error_message());
        CHECK(!strcmp(c->choice, "\"auto\"") == (trigger != NULL), "case %zu: a trigger only for auto", i);
        if (st == SP_OK && sp_grammar_prepare(SP_GRAMMAR_GBNF, gbnf, strlen(gbnf), trigger, NULL, &g) == SP_OK) {
            bool acc = sp_grammar_accepting(g, sp_grammar_feed(g, sp_grammar_start(g), c->text, strlen(c->text)));
            CHECK(acc == c->grammar, "case %zu: the grammar %s [%s]\n%s", i, acc ? "accepts" : "refuses", c->text,
                  gbnf);
        } else {
            CHECK(false, "case %zu: the grammar does not compile: %s\n%s", i, sp_error_message(), gbnf ? gbnf : "");
        }
        bool valid = sp_toolcall_check(tc, c->text, strlen(c->text), why, sizeof why) == SP_OK;
        CHECK(valid == c->valid, "case %zu: check says %s (%s)", i, valid ? "valid" : "invalid", why);
        sp_grammar_free(g);
        free(gbnf);
        sp_toolcall_free(tc);
    }
}

/* Bad definitions name the field. */
static void test_errors(void)
{
    static const struct {
        const char *tools, *choice, *param, *needle;
    } cases[] = {
        {"[]", "null", "tools", "1 to 128"},
        {"{}", "null", "tools", "array"},
        {"[{\"type\":\"retrieval\"}]", "null", "tools[0]", "'function'"},
        {"[{\"type\":\"function\"}]", "null", "tools[0].function", "object"},
        {"[{\"type\":\"function\",\"function\":{}}]", "null", "tools[0].function.name", "1 to 64"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "null", "tools[0].function.name", "letters"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]",
         "null", "tools[1].function.name", "twice"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"string\"}}}]", "null",
         "tools[0].function.parameters", "type 'object'"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\",\"not\":{}}}}]",
         "null", "tools[0].function.parameters", "'not'"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"x\":1}}]", "null", "tools[0].function", "'x'"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]", "\"sometimes\"", "tool_choice", "none, auto"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]", "{\"type\":\"function\",\"function\":{\"name\":\"b\"}}",
         "tool_choice", "'b'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t jerr;
        json_t *tools = json_loads(cases[i].tools, JSON_DECODE_ANY, &jerr);
        json_t *choice = json_loads(cases[i].choice, JSON_DECODE_ANY, &jerr);
        struct sp_toolcall *tc = NULL;
        char param[64];
        sp_status st = sp_toolcall_new(&tc, fmt("json"), tools, choice, NULL, param, sizeof param);
        CHECK(st == SP_ERR_ARG && !tc, "case %zu: accepted", i);
        CHECK(!strcmp(param, cases[i].param), "case %zu: param %s, want %s", i, param, cases[i].param);
        CHECK(strstr(sp_error_message(), cases[i].needle) != NULL, "case %zu: [%s] lacks [%s]", i, sp_error_message(),
              cases[i].needle);
        sp_toolcall_free(tc);
        json_decref(tools);
        json_decref(choice);
    }
}

/* The format of every template in the goldens: the tool-call families by
 * their markers, the rest plain JSON. */
static void test_formats(void)
{
    static const struct {
        const char *file, *format;
    } want[] = {
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.json", "hermes"},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.json", "hermes"},
        {"Qwen-Qwen2.5-7B-Instruct.json", "hermes"},
        {"mistralai-Mistral-Nemo-Instruct-2407.json", "mistral"},
        {"meta-llama-Llama-3.1-8B-Instruct.json", "llama3"},
        {"meta-llama-Llama-3.2-3B-Instruct.json", "llama3"},
        {"meta-llama-Llama-3.3-70B-Instruct.json", "llama3"},
        {"gguf-SmolLM2-135M-Instruct.json", "json"},
        {"extra-gemma3-builtin.json", "json"},
        {"google-gemma-2-2b-it.json", "json"},
        {"openai-gpt-oss-120b.json", "harmony"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[256];
        json_error_t jerr;
        snprintf(path, sizeof path, "tests/goldens/chat/%s", want[i].file);
        json_t *doc = json_load_file(path, 0, &jerr);
        const char *tmpl = json_string_value(json_object_get(doc, "template"));
        CHECK(tmpl != NULL, "%s: %s", path, jerr.text);
        if (tmpl)
            CHECK(!strcmp(sp_toolcall_format_name(sp_toolcall_format_for(tmpl)), want[i].format), "%s: %s", path,
                  sp_toolcall_format_name(sp_toolcall_format_for(tmpl)));
        json_decref(doc);
    }
}

/* The conversation: native formats keep calls (arguments as objects) and
 * results; plain JSON describes the tools in the system message, writes
 * calls as text and merges results into one user turn. */
static void test_prompt(void)
{
    json_error_t jerr;
    json_t *calls = json_loads("[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                               "\"arguments\":\"{\\\"a\\\":1}\"}},{\"id\":\"call_2\",\"type\":\"function\","
                               "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{}\"}}]", 0, &jerr);
    const struct sp_toolcall_msg msgs[] = {
        {"user", "Hi", NULL, NULL, NULL, NULL},
        {"assistant", NULL, calls, NULL, NULL, NULL},
        {"tool", "1", NULL, "call_1", NULL, NULL},
        {"tool", "2", NULL, "call_2", NULL, NULL},
        {"assistant", "Done.", NULL, NULL, NULL, NULL},
    };
    struct sp_toolcall *tc = make("json", "\"auto\"", true);
    struct sp_toolcall_prompt p;
    CHECK(sp_toolcall_prompt(fmt("json"), tc, msgs, 5, &p) == SP_OK, "json prompt: %s", sp_error_message());
    CHECK(p.n == 5 && !p.tools, "json: %zu messages", p.n);
    if (p.n == 5) {
        CHECK(!strcmp(p.msgs[0].role, "system") && strstr(p.msgs[0].content, "\"name\":\"get_weather\"") &&
                  strstr(p.msgs[0].content, "one line per call"), "system: %s", p.msgs[0].content);
        CHECK(!strcmp(p.msgs[2].content, "{\"name\": \"f\", \"arguments\": {\"a\":1}}\n"
                                         "{\"name\": \"get_weather\", \"arguments\": {}}") && !p.msgs[2].tool_calls,
              "calls as text: %s", p.msgs[2].content);
        CHECK(!strcmp(p.msgs[3].role, "user") &&
                  !strcmp(p.msgs[3].content, "Result of f (call call_1): 1\nResult of get_weather (call call_2): 2"),
              "results: %s", p.msgs[3].content);
        CHECK(!strcmp(p.msgs[4].content, "Done."), "last: %s", p.msgs[4].content);
    }
    sp_toolcall_prompt_free(&p);
    CHECK(sp_toolcall_prompt(fmt("hermes"), tc, msgs, 5, &p) == SP_OK, "hermes prompt: %s", sp_error_message());
    CHECK(p.n == 5 && p.tools && strstr(p.tools, "get_weather"), "hermes: tools given");
    if (p.n == 5)
        CHECK(p.msgs[1].tool_calls && strstr(p.msgs[1].tool_calls, "\"arguments\":{\"a\":1}") &&
                  !strcmp(p.msgs[2].tool_call_id, "call_1") && !strcmp(p.msgs[2].role, "tool"),
              "hermes: calls %s", p.msgs[1].tool_calls ? p.msgs[1].tool_calls : "(none)");
    sp_toolcall_prompt_free(&p);
    sp_toolcall_free(tc);
    json_decref(calls);
}

static sp_status args_of_first(void *user, const struct sp_toolcall_event *ev)
{
    char *args = user;
    if (ev->kind == SP_TOOLCALL_ARGS && ev->index == 0 && strlen(args) + ev->len < 256)
        strncat(args, ev->text, ev->len);
    return SP_OK;
}

/* What a native template writes for an earlier call is what the format
 * reads back: render a round trip with each family's real template, find
 * the call (the last trigger in the text: the instructions before it may
 * show one too) and read it. */
static void test_native_round_trip(void)
{
    static const struct {
        const char *file, *trigger;
    } cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct.json", "<tool_call>"},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.json", "<tool_call>"},
        {"mistralai-Mistral-Nemo-Instruct-2407.json", "[TOOL_CALLS]"},
        {"meta-llama-Llama-3.2-3B-Instruct.json", "{\"name\""},
        {"openai-gpt-oss-120b.json", " to=functions."},
    };
    json_error_t jerr;
    json_t *calls = json_loads("[{\"id\":\"abcdefghi\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                               "\"arguments\":\"{\\\"a\\\": 1}\"}}]", 0, &jerr);
    CHECK(calls != NULL, "calls: %s", jerr.text);
    const struct sp_toolcall_msg msgs[] = {
        {"user", "Call f.", NULL, NULL, NULL, NULL},
        {"assistant", NULL, calls, NULL, NULL, NULL},
        {"tool", "ok", NULL, "abcdefghi", "f", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256], args[256] = "", *text = NULL;
        snprintf(path, sizeof path, "tests/goldens/chat/%s", cases[i].file);
        json_t *doc = json_load_file(path, 0, &jerr);
        const char *tmpl = json_string_value(json_object_get(doc, "template"));
        const struct sp_toolcall_format *f = sp_toolcall_format_for(tmpl);
        struct sp_toolcall *tc = make(sp_toolcall_format_name(f), "\"required\"", false);
        struct sp_toolcall_prompt p = {0};
        if (tmpl && tc && sp_toolcall_prompt(f, tc, msgs, 3, &p) == SP_OK) {
            struct sp_chat_opts o = {false, "<s>", "</s>", 1721995200, p.tools, NULL, p.reasoning_alias};
            CHECK(sp_chat_render_opts(tmpl, p.msgs, p.n, &o, &text) == SP_OK, "%s: %s", path, sp_error_message());
        }
        const char *at = NULL;
        for (const char *q = text; q && (q = strstr(q, cases[i].trigger)); q++)
            at = q;
        struct sp_toolcall_parser *pr = NULL;
        if (at && sp_toolcall_parser_new(&pr, tc) == SP_OK) {
            sp_toolcall_parser_feed(pr, at, strlen(at), true, args_of_first, args);
            CHECK(sp_toolcall_parser_calls(pr) == 1, "%s: %d calls in [%.120s]", path, sp_toolcall_parser_calls(pr), at);
        }
        sp_toolcall_parser_free(pr);
        json_t *got = json_loads(args, 0, &jerr);
        CHECK(got && json_integer_value(json_object_get(got, "a")) == 1 && json_object_size(got) == 1,
              "%s: arguments [%s] in [%s]", path, args, text ? text : "(no text)");
        json_decref(got);
        free(text);
        sp_toolcall_prompt_free(&p);
        sp_toolcall_free(tc);
        json_decref(doc);
    }
    json_decref(calls);
}

/* gpt-oss's template over conversations as clients send them (reasoning_content,
 * content null beside calls, arguments as text, reasoning_effort): what
 * sp_toolcall_prompt makes of them renders as jinja2 renders the messages
 * llama.cpp hands the template (tests/goldens/chat-harmony/, chat.py). */
static void test_harmony_goldens(void)
{
    json_error_t jerr;
    const char *path = "tests/goldens/chat-harmony/openai-gpt-oss-120b.json";
    json_t *doc = json_load_file(path, 0, &jerr);
    const char *tmpl = json_string_value(json_object_get(doc, "template"));
    json_t *cases = json_object_get(doc, "cases");
    CHECK(tmpl && json_array_size(cases) >= 16, "%s: %s", path, jerr.text);
    const struct sp_toolcall_format *f = sp_toolcall_format_for(tmpl);
    CHECK(tmpl && !strcmp(sp_toolcall_format_name(f), "harmony"), "%s: format", path);
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        json_t *jm = json_object_get(cs, "messages"), *tools = json_object_get(cs, "tools");
        size_t n = json_array_size(jm);
        struct sp_toolcall_msg *msgs = calloc(n, sizeof *msgs);
        struct sp_toolcall *tc = NULL;
        char param[64], *vars = NULL, *got = NULL;
        for (size_t k = 0; msgs && k < n; k++) {
            json_t *m = json_array_get(jm, k);
            msgs[k] = (struct sp_toolcall_msg){
                json_string_value(json_object_get(m, "role")), json_string_value(json_object_get(m, "content")),
                json_object_get(m, "tool_calls"), json_string_value(json_object_get(m, "tool_call_id")),
                json_string_value(json_object_get(m, "name")),
                json_string_value(json_object_get(m, "reasoning_content"))};
        }
        if (tools)
            CHECK(sp_toolcall_new(&tc, f, tools, NULL, NULL, param, sizeof param) == SP_OK, "%s: tools: %s", name,
                  sp_error_message());
        if (json_object_get(cs, "vars"))
            vars = json_dumps(json_object_get(cs, "vars"), JSON_COMPACT);
        struct sp_toolcall_prompt p = {0};
        sp_status st = msgs ? sp_toolcall_prompt(f, tc, msgs, n, &p) : SP_ERR_NOMEM;
        CHECK(st == SP_OK, "%s: prompt: %s", name, sp_error_message());
        if (st == SP_OK) {
            struct sp_chat_opts o = {json_is_true(json_object_get(cs, "add_generation_prompt")), "", "", 1721995200,
                                     p.tools, vars, p.reasoning_alias};
            st = sp_chat_render_opts(tmpl, p.msgs, p.n, &o, &got);
        }
        const char *want = json_string_value(json_object_get(cs, "output"));
        CHECK(want && st == SP_OK, "%s: status %d: %s", name, st, sp_error_message());
        if (want && got && strcmp(want, got)) {
            size_t d = 0;
            while (got[d] && got[d] == want[d])
                d++;
            CHECK(false, "%s: differs at byte %zu:\n--- got: %.120s\n--- want: %.120s", name, d, got + d, want + d);
        }
        free(got);
        free(vars);
        sp_toolcall_prompt_free(&p);
        sp_toolcall_free(tc);
        free(msgs);
    }
    json_decref(doc);
}

int main(void)
{
    test_parse();
    test_errors();
    test_formats();
    test_prompt();
    test_native_round_trip();
    test_harmony_goldens();
    return sp_check_report("test_toolcall");
}
