/* Chat templates: byte-for-byte agreement with Python's jinja2 on the goldens
 * in tests/goldens/chat/ and, with tools, tool calls and tool results,
 * tests/goldens/chat-tools/ (both made by scripts/goldens/chat.py), plus targeted
 * semantics checks and hostile templates that must fail cleanly. */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "check.h"

#define GOLDEN_DIR "tests/goldens/chat"
#define TOOLS_GOLDEN_DIR "tests/goldens/chat-tools"
#define FIXED_NOW 1721995200 /* 2024-07-26 12:00:00 UTC, as in chat.py */

static int n_cases, n_error_cases, n_files, n_tool_cases;

static void run_golden(const char *path)
{
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    CHECK(doc != NULL, "%s: %s", path, jerr.text);
    if (!doc)
        return;
    const char *tmpl = json_string_value(json_object_get(doc, "template"));
    json_t *cases = json_object_get(doc, "cases");
    CHECK(tmpl && json_is_array(cases) && json_array_size(cases) > 0, "%s: bad golden", path);
    n_files++;
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        json_t *jm = json_object_get(cs, "messages");
        size_t nm = json_array_size(jm);
        struct sp_chat_msg *msgs = calloc(nm ? nm : 1, sizeof(*msgs));
        char **calls = calloc(nm ? nm : 1, sizeof *calls);
        for (size_t k = 0; k < nm; k++) {
            json_t *m = json_array_get(jm, k);
            msgs[k].role = json_string_value(json_object_get(m, "role"));
            msgs[k].content = json_string_value(json_object_get(m, "content"));
            msgs[k].tool_call_id = json_string_value(json_object_get(m, "tool_call_id"));
            msgs[k].name = json_string_value(json_object_get(m, "name"));
            if (json_object_get(m, "tool_calls"))
                msgs[k].tool_calls = calls[k] = json_dumps(json_object_get(m, "tool_calls"), JSON_COMPACT);
        }
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *want = json_string_value(json_object_get(cs, "output"));
        char *got = NULL, *tools = NULL;
        if (json_object_get(cs, "tools"))
            tools = json_dumps(json_object_get(cs, "tools"), JSON_COMPACT);
        struct sp_chat_opts o = {json_is_true(json_object_get(cs, "add_generation_prompt")),
                                 json_string_value(json_object_get(cs, "bos_token")),
                                 json_string_value(json_object_get(cs, "eos_token")), FIXED_NOW, tools, NULL, NULL};
        sp_status st = sp_chat_render_opts(tmpl, msgs, nm, &o, &got);
        n_tool_cases += tools != NULL;
        n_cases++;
        if (want) {
            CHECK(st == SP_OK, "%s [%s]: status %d: %s", path, name, st, sp_error_message());
            if (st == SP_OK) {
                bool same = strcmp(got, want) == 0;
                if (!same) {
                    size_t d = 0;
                    while (got[d] && got[d] == want[d])
                        d++;
                    CHECK(same, "%s [%s]: output differs at byte %zu:\n--- got: %.80s\n--- want: %.80s",
                          path, name, d, got + d, want + d);
                } else {
                    CHECK(same, "unreachable");
                }
            }
        } else {
            n_error_cases++;
            CHECK(st == SP_ERR_ARG && got == NULL, "%s [%s]: expected an error (%s), got status %d",
                  path, name, json_string_value(json_object_get(cs, "error")), st);
            CHECK(strstr(sp_error_message(), "chat template") != NULL, "message: %s",
                  sp_error_message());
            /* raise_exception() in Python shows as "TemplateError: <message>";
             * ours must carry the same text. */
            const char *perr = json_string_value(json_object_get(cs, "error"));
            if (perr && !strncmp(perr, "TemplateError: ", 15)) {
                char want_msg[300];
                snprintf(want_msg, sizeof(want_msg), "raise_exception: %.40s", perr + 15);
                CHECK(strstr(sp_error_message(), want_msg) != NULL, "%s [%s]: [%s] lacks [%s]",
                      path, name, sp_error_message(), want_msg);
            }
        }
        free(got);
        free(tools);
        for (size_t k = 0; k < nm; k++)
            free(calls[k]);
        free(calls);
        free(msgs);
    }
    json_decref(doc);
}

static void run_goldens(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s (run from the repo root)", dir);
    if (!d)
        return;
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json"))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    CHECK(n >= 18, "expected at least 18 golden files, found %zu", n);
    for (size_t i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        run_golden(path);
        free(names[i]);
    }
}

static const struct sp_chat_msg conv[] = {
    { .role = "system", .content = "Be brief." },
    { .role = "user", .content = "Hi {{ x }}" },
    { .role = "assistant", .content = "Hello" },
    { .role = "user", .content = "Bye" },
};

/* Renders with the fixed conversation; returns the output (caller frees) or NULL. */
static char *render(const char *tmpl, sp_status *st)
{
    char *out = NULL;
    *st = sp_chat_render_at(tmpl, conv, 4, true, "<s>", "</s>", FIXED_NOW, &out);
    return out;
}

static void expect(const char *tmpl, const char *want)
{
    sp_status st;
    char *got = render(tmpl, &st);
    CHECK(st == SP_OK && got && strcmp(got, want) == 0, "template %s\n  want [%s]\n  got  [%s] (%s)",
          tmpl, want, got ? got : "(null)", st ? sp_error_message() : "");
    free(got);
}

static void expect_error(const char *tmpl, const char *msg_part)
{
    sp_status st;
    char *got = render(tmpl, &st);
    CHECK(st == SP_ERR_ARG && got == NULL, "template %.60s: expected SP_ERR_ARG, got %d", tmpl, st);
    CHECK(strstr(sp_error_message(), msg_part) != NULL, "template %.60s: message [%s] lacks [%s]",
          tmpl, sp_error_message(), msg_part);
    free(got);
}

static void semantics(void)
{
    /* Expected values below were checked against Python jinja2 3.1 (HF env). */
    expect("{{ messages[1].content }}", "Hi {{ x }}");
    expect("{{ messages|length }} {{ messages[1:]|length }} {{ messages[-1]['role'] }}", "4 3 user");
    expect("{% for m in messages %}{{ loop.index }}{{ loop.first }}{{ loop.last }},{% endfor %}",
           "1TrueFalse,2FalseFalse,3FalseFalse,4FalseTrue,");
    expect("{% for m in messages if m.role == 'user' %}{{ loop.index0 }}/{{ loop.length }} {% endfor %}",
           "0/2 1/2 ");
    expect("  {% if true %}\n  x\n  {% endif %}\nz", "  x\nz");
    expect("a  {%- if true -%}  b  {%- endif -%}  c", "abc");
    expect("a {# c #}\nb\n{# d #}\nc", "a b\nc");
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2.5 }}",
           "3 -4 1 2 3.5 1024 3.5");
    expect("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 1/3 }}", "0.30000000000000004 1e+20 1.0 0.3333333333333333");
    expect("{{ 'a' ~ 1 ~ none ~ true }} {{ none }} {{ undefined_thing }}|", "a1NoneTrue None |");
    expect("{{ [1, 'a', none, {'k': [true]}] }}", "[1, 'a', None, {'k': [True]}]");
    expect("{{ {'a': 1, 'b': [1, 2.5, none, 'x\"y']}|tojson }}", "{\"a\": 1, \"b\": [1, 2.5, null, \"x\\\"y\"]}");
    expect("{{ {'a': [1]}|tojson(indent=2) }}", "{\n  \"a\": [\n    1\n  ]\n}");
    expect("{{ '  x y  '|trim }}|{{ ' ab '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}",
           "x y|ab|a|['a', 'b', '', 'c']");
    expect("{{ ' a  b '.split() }} {{ 'Hello World'.upper() }} {{ 'ÄB'|lower }} {{ 'hello wOrld'.title() }}",
           "['a', 'b'] HELLO WORLD äb Hello World");
    expect("{{ 'abc'[::-1] }} {{ 'héllo'[1:3] }} {{ 'héllo'|length }} {{ 'abc'[5] }}|", "cba él 5 |");
    expect("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
           "10");
    expect("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", "1");
    expect("{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}", "[1B][23]");
    expect("{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }}",
           "Hi {{ x }}|Bye");
    expect("{{ messages|rejectattr('role', 'equalto', 'user')|list|length }}", "2");
    expect("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ 3 is not none }}",
           "False True True True True");
    expect("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}",
           "True True True True");
    expect("{{ 1 if false else 2 }} {{ 'yes' if 1 < 2 < 3 }} {{ x|default('d') }} {{ ''|default('d', true) }}",
           "2 yes d d");
    expect("{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, first=true) }}", "a\n  b|  a\n  b");
    expect("{{ 'it''s' }} {{ \"q\\\"\" }} {{ 'x' * 3 }} {{ [1] + [2] }}", "its q\" xxx [1, 2]");
    expect("{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;");
    expect("{% for i in range(10) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "012");
    expect("{% for i in range(4) %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% endfor %}", "02");
    expect("{% for i in [] %}x{% else %}empty{% endfor %}", "empty");
    expect("{% set b %}  in block  {% endset %}[{{ b }}]{% filter upper %}up{% endfilter %}", "[  in block  ]UP");
    expect("{{ strftime_now('%d %b %Y') }}", "26 Jul 2024");
    expect("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}", "<s></s>True");
    expect("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b', 'z') }}{{ {'a': 1}.get('b') }}", "1zNone");
    expect("{{ messages[0].content.startswith('Be') }} {{ 'x.'.endswith(('.', '!')) }}", "True True");
    expect("{{ ['b', 'a', 'B']|unique|list }} {{ [1,2,3]|first }}{{ [1,2,3]|last }}", "['b', 'a'] 13");
    expect("{% if false %}{{ x|nofilter }}{% endif %}{{ x|nofilter if false else 1 }}", "1");
    expect("{{ 1 is lessthan 2 }}{{ 2 is le 2 }}{{ 3 is greaterthan 3 }}{{ 'trim' is filter }}", "TrueTrueFalseTrue");
    /* markupsafe: Markup + str escapes the str (functionary writes tools this way) */
    expect("{{ 'a'|safe + '<b>' }}|{{ '<' + 'x'|safe }}|{{ ('q'|safe + '\"') ~ '<' }}|{{ 'x'|safe + 'y'|safe }}",
           "a&lt;b&gt;|&lt;x|q&#34;<|xy");
    expect("x\n", "x");                      /* one trailing newline dropped */
    expect("x\r\ny", "x\ny");               /* newlines normalised */
    expect(sp_chat_chatml_template(),
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi {{ x }}<|im_end|>\n"
           "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
           "<|im_start|>assistant\n");
}

static void errors(void)
{
    expect_error("{{ x ", "1:");
    expect_error("{% if x %}no end", "expected 'endif'");
    expect_error("{% for x in y %}", "endfor");
    expect_error("{# never closed", "comment");
    expect_error("{{ 'abc }}", "unterminated string");
    expect_error("{{ x|no_such_filter }}", "no filter named 'no_such_filter'");
    expect_error("{{ 1 is no_such_test }}", "no test named");
    /* unknown names outside if/conditionals fail even when never executed */
    expect_error("{% for m in [] %}{{ m|no_such_filter }}{% endfor %}", "no filter named");
    expect_error("{% if true %}{% macro f() %}{{ 1 is nope }}{% endmacro %}{% endif %}", "no test named");
    expect_error("{% frobnicate %}", "unknown or unexpected tag");
    expect_error("{% endif %}", "unknown or unexpected tag");
    expect_error("a\n  {{ raise_exception('bad conversation') }}", "raise_exception: bad conversation");
    expect_error("{{ raise_exception('x') }}", "1:4:");
    expect_error("{{ 1 + 'a' }}", "unsupported operand");
    expect_error("{{ x.y }}", "'x' is undefined");
    expect_error("{{ 1 / 0 }}", "division by zero");
    expect_error("{% break %}", "outside of a loop");
    expect_error("{% for i in 5 %}{% endfor %}", "not iterable");
    /* runaway work: nested loops over the largest range allowed */
    expect_error("{% set r = range(1000) %}{% for a in r %}{% for b in r %}{% for c in r %}"
                 "{% endfor %}{% endfor %}{% endfor %}", "work limit");
    expect_error("{% for a in range(1000000000) %}{% endfor %}", "range too big");
    /* unbounded recursion */
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion");
    /* output cap: doubling a string */
    expect_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                 "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}", "limit");
    expect_error("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "limit");
    expect_error("{{ 'x' * 100000000 }}", "limit");
    /* deep nesting must fail, not overflow the stack */
    char *deep = malloc(300000);
    size_t k = 0;
    k += (size_t)sprintf(deep + k, "{{ ");
    for (int i = 0; i < 50000; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 50000; i++)
        deep[k++] = ')';
    strcpy(deep + k, " }}");
    expect_error(deep, "nested too deeply");
    k = 0;
    for (int i = 0; i < 5000; i++)
        k += (size_t)sprintf(deep + k, "{%% if 1 %%}");
    deep[k] = 0;
    expect_error(deep, "nested too deeply");
    k = (size_t)sprintf(deep, "{{ ");
    for (int i = 0; i < 30000; i++)
        k += (size_t)sprintf(deep + k, "not ");
    strcpy(deep + k, "1 }}");
    expect_error(deep, "nested too deeply");
    free(deep);
    /* invalid UTF-8 in the template and in message content: no crash */
    {
        sp_status st;
        char *o = render("{{ '\x80\x80" "a\xff'[::-1] }}{{ '\x80z'|length }}{{ '\xc3'|upper }}{{ '\x80'.strip() }}"
                         "{% for ch in '\x80\xbf' %}{{ ch }}{% endfor %}", &st);
        CHECK(st == SP_OK && o != NULL, "invalid UTF-8 template: %d %s", st, sp_error_message());
        free(o);
        const struct sp_chat_msg bad[] = { { .role = "user", .content = "\xbf\xbf\xe2\x82" } };
        o = NULL;
        st = sp_chat_render_at("{{ messages[0].content[::-1]|trim|title }}{{ messages[0].content[1:] }}",
                               bad, 1, false, NULL, NULL, FIXED_NOW, &o);
        CHECK(st == SP_OK && o != NULL, "invalid UTF-8 content: %d %s", st, sp_error_message());
        free(o);
    }
    /* bad arguments */
    char *out = (char *)1;
    CHECK(sp_chat_render(NULL, conv, 1, false, "", "", &out) == SP_ERR_ARG && out == NULL,
          "NULL template must be SP_ERR_ARG");
}

/* Template variables (HF's apply_chat_template kwargs): each key a global;
 * the renderer's own names are reserved. */
static void variables(void)
{
    const char *tmpl = "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>{% endif %}"
                       "{{ reasoning_effort | default('medium') }}:{{ messages[0]['content'] }}";
    struct sp_chat_msg m[1] = {{.role = "user", .content = "hi"}};
    struct {
        const char *vars, *want;
    } ok[] = {
        {NULL, "medium:hi"},
        {"{}", "medium:hi"},
        {"{\"enable_thinking\": false}", "<think>\n\n</think>medium:hi"},
        {"{\"enable_thinking\": true, \"reasoning_effort\": \"low\"}", "low:hi"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct sp_chat_opts o = {false, "", "", FIXED_NOW, NULL, ok[i].vars, NULL};
        char *got = NULL;
        sp_status st = sp_chat_render_opts(tmpl, m, 1, &o, &got);
        CHECK(st == SP_OK && got && !strcmp(got, ok[i].want), "vars %s: %s", ok[i].vars ? ok[i].vars : "NULL",
              st == SP_OK ? got : sp_error_message());
        free(got);
    }
    const char *bad[][2] = {{"{\"messages\": []}", "'messages' is reserved"},
                            {"{\"raise_exception\": 1}", "'raise_exception' is reserved"},
                            {"[1]", "not a JSON object"},
                            {"{", "not a JSON object"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sp_chat_opts o = {false, "", "", FIXED_NOW, NULL, bad[i][0], NULL};
        char *got = (char *)1;
        sp_status st = sp_chat_render_opts(tmpl, m, 1, &o, &got);
        CHECK(st == SP_ERR_ARG && got == NULL && strstr(sp_error_message(), bad[i][1]), "vars %s: %s", bad[i][0],
              sp_error_message());
    }
}

int main(void)
{
    run_goldens(GOLDEN_DIR);
    run_goldens(TOOLS_GOLDEN_DIR);
    CHECK(n_tool_cases >= 18 * 8, "%d tool-use cases", n_tool_cases);
    printf("goldens: %d files, %d cases (%d expected errors, %d with tools)\n", n_files, n_cases, n_error_cases,
           n_tool_cases);
    semantics();
    errors();
    variables();
    return sp_check_report("test_chat");
}
