/* Reasoning output (server/reasoning.c), Harmony's messages: recorded
 * gpt-oss-like outputs split into reasoning and answer, whole and fed one
 * byte at a time alike, and their tool calls read by the Harmony format's
 * parser from the answer, as the server chains them (server/sse.c): the
 * analysis channel, the final channel, preambles, calls with the recipient
 * in either header, several calls, <|call|> present or not (it ends
 * generation), bodies with '<' in them, outputs without channels. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "server/server.h"
#include "toolcall/toolcall.h"

/* Events flattened: R<reasoning>| T<text>| C<index>:<name>| A<index>:<args>| with runs merged. */
struct flat {
    char s[4096];
    size_t n;
    char last;
    int last_index;
    struct sp_toolcall_parser *tp;
};

static void add(struct flat *f, char kind, int index, const char *text, size_t len)
{
    if (!len && kind != 'C')
        return;
    if (kind != f->last || kind == 'C' || index != f->last_index) {
        f->n += (size_t)snprintf(f->s + f->n, sizeof f->s - f->n, "%s%c", f->n ? "|" : "", kind);
        if (kind == 'C' || kind == 'A')
            f->n += (size_t)snprintf(f->s + f->n, sizeof f->s - f->n, "%d:", index);
    }
    f->n += (size_t)snprintf(f->s + f->n, sizeof f->s - f->n, "%.*s", (int)len, text);
    f->last = kind;
    f->last_index = index;
}

static sp_status on_tool(void *user, const struct sp_toolcall_event *ev)
{
    char kind = ev->kind == SP_TOOLCALL_TEXT ? 'T' : ev->kind == SP_TOOLCALL_CALL ? 'C' : 'A';
    add(user, kind, kind == 'T' ? -1 : ev->index, ev->text, ev->len);
    return SP_OK;
}

static sp_status on_think(void *user, bool reasoning, const char *text, size_t len)
{
    struct flat *f = user;
    if (reasoning) {
        add(f, 'R', -1, text, len);
        return SP_OK;
    }
    if (f->tp)
        return sp_toolcall_parser_feed(f->tp, text, len, false, on_tool, f);
    add(f, 'T', -1, text, len);
    return SP_OK;
}

static void run(const char *out, bool bytewise, struct sp_toolcall *tc, struct flat *f)
{
    struct sp_think t;
    memset(f, 0, sizeof *f);
    f->last_index = -2;
    if (tc)
        CHECK(sp_toolcall_parser_new(&f->tp, tc) == SP_OK, "parser");
    sp_think_init(&t, SP_THINK_HARMONY);
    size_t n = strlen(out);
    if (bytewise) {
        for (size_t i = 0; i < n; i++)
            CHECK(sp_think_feed(&t, out + i, 1, false, on_think, f) == SP_OK, "feed");
        CHECK(sp_think_feed(&t, "", 0, true, on_think, f) == SP_OK, "feed");
    } else {
        CHECK(sp_think_feed(&t, out, n, true, on_think, f) == SP_OK, "feed");
    }
    if (f->tp)
        sp_toolcall_parser_feed(f->tp, "", 0, true, on_tool, f);
    sp_toolcall_parser_free(f->tp);
}

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"tz\":{\"type\":\"string\"}}}}}]";

static const struct {
    bool tools;
    const char *out, *want;
} cases[] = {
    {false, "<|channel|>analysis<|message|>I reason.<|end|><|start|>assistant<|channel|>final<|message|>Paris.",
     "RI reason.|TParis."},
    {false, "<|channel|>final<|message|>Hi <there> a<b <|en d <|endx|>.", "THi <there> a<b <|en d <|endx|>."},
    {false, "<|channel|>analysis<|message|>Think <| more<|end|><|start|>assistant<|channel|>analysis<|message|>"
     " again<|end|><|start|>assistant<|channel|>final<|message|>Done<|return|>", "RThink <| more again|TDone"},
    {false, "<|channel|>analysis<|message|>cut sho", "Rcut sho"},
    {false, "<|channel|>analysis<|message|>r<|start|>assistant<|channel|>final<|message|>f", "Rr|Tf"},
    {false, "<|channel|>commentary to=assistant<|channel|>analysis<|message|>x<|end|><|start|>assistant"
     "<|channel|>final<|message|>y", "Rx|Ty"},
    {false, "<|channel|>analysis<|message|>done<|end|><|start|>assistant", "Rdone"},
    {false, "No channels at all.", "TNo channels at all."},
    {false, "<|channel|>final<|message|>x<|e", "Tx<|e"},
    /* tools: calls from the recipient on, through the Harmony parser */
    {true, "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
     "RNeed the weather.|C0:get_weather|A0:{\"city\":\"Paris\"}"},
    {true, " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"R<|e|>me\"}<|call|>",
     "C0:get_weather|A0:{\"city\": \"R<|e|>me\"}"},
    {true, "<|channel|>analysis<|message|>Two.<|end|><|start|>assistant to=functions.get_weather<|channel|>"
     "commentary json<|message|>{\"city\":\"Oslo\"}<|call|><|start|>assistant<|channel|>commentary "
     "to=functions.get_time <|constrain|>json<|message|>{\"tz\":\"Europe/Oslo\"}<|call|>",
     "RTwo.|C0:get_weather|A0:{\"city\":\"Oslo\"}|C1:get_time|A1:{\"tz\":\"Europe/Oslo\"}"},
    {true, "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_time <|constrain|>json<|message|>{}", "TChecking.|C0:get_time|A0:{}"},
    {true, "<|channel|>analysis<|message|>No call needed.<|end|><|start|>assistant<|channel|>final<|message|>"
     "It is to=functions.x in text.", "RNo call needed.|TIt is to=functions.x in text."},
};

int main(void)
{
    json_error_t jerr;
    json_t *tools = json_loads(tools_json, 0, &jerr);
    struct sp_toolcall *tc = NULL;
    char param[64];
    const struct sp_toolcall_format *f = sp_toolcall_format_for("<|start|>assistant<|channel|>final<|message|>");
    CHECK(!strcmp(sp_toolcall_format_name(f), "harmony"), "format %s", sp_toolcall_format_name(f));
    CHECK(sp_toolcall_new(&tc, f, tools, NULL, NULL, param, sizeof param) == SP_OK, "tools: %s", sp_error_message());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct flat whole, bytes;
        run(cases[i].out, false, cases[i].tools ? tc : NULL, &whole);
        run(cases[i].out, true, cases[i].tools ? tc : NULL, &bytes);
        CHECK(!strcmp(whole.s, cases[i].want), "case %zu: got [%s] want [%s]", i, whole.s, cases[i].want);
        CHECK(!strcmp(bytes.s, cases[i].want), "case %zu byte by byte: got [%s] want [%s]", i, bytes.s,
              cases[i].want);
    }
    /* a header longer than any is no header: the answer, in order */
    char longer[400];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    struct flat fl;
    run(longer, true, NULL, &fl);
    CHECK(fl.n == sizeof longer && fl.s[0] == 'T' && !strcmp(fl.s + 1, longer), "long text: %.20s (%zu)", fl.s, fl.n);
    /* outputs of random pieces: read byte by byte as whole */
    static const char *const pieces[] = {"<|channel|>analysis", "<|channel|>final", "<|channel|>commentary",
                                         "<|message|>",
                                         "<|end|>", "<|start|>assistant", "<|call|>", "<|return|>", " to=functions.",
                                         "get_time", "{\"tz\":\"x\"}", "<|", "<", "|>", "a", " "};
    uint32_t rng = 12345;
    for (int k = 0; k < 400; k++) {
        char out[1024];
        size_t n = 0;
        int len = 1 + (int)((rng = rng * 1103515245u + 12345u) >> 16) % 30;
        for (int j = 0; j < len; j++) {
            const char *p = pieces[((rng = rng * 1103515245u + 12345u) >> 16) % (sizeof pieces / sizeof pieces[0])];
            n += (size_t)snprintf(out + n, sizeof out - n, "%s", p);
        }
        struct flat whole, bytes;
        run(out, false, k & 1 ? tc : NULL, &whole);
        run(out, true, k & 1 ? tc : NULL, &bytes);
        CHECK(!strcmp(whole.s, bytes.s), "random %d [%s]: whole [%s], byte by byte [%s]", k, out, whole.s, bytes.s);
    }
    sp_toolcall_free(tc);
    json_decref(tools);
    return sp_check_report("test_reasoning");
}
