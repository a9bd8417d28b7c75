/* Reasoning output: a chat template that has the model think between
 * <think> and </think> (Qwen3, DeepSeek-R1, SmolLM3 ...) gets its thinking
 * separated from its answer, incrementally, as a stream arrives; so does
 * one that writes Harmony's channels (gpt-oss: the analysis channel is its
 * thinking, the final channel its answer; server.h's SP_THINK_HARMONY).
 *
 * The open tag counts only at the start of the output (after whitespace),
 * as llama-server reads it: a model that writes "<think>" in the middle of
 * an answer is quoting it.  A template whose generation prompt already
 * opened the block (DeepSeek-R1's "<think>\n") starts inside.  Whitespace
 * right after either tag is dropped.  A byte that may begin a tag is held
 * until the next one decides (at most the tag's length); nothing is
 * allocated.
 *
 * The thinking budget (sp_think_budget_attach) bounds the block by tokens
 * from the decoding side: a stage of the request's own (spindle.h's
 * sp_stage) counts the tokens drawn inside the block and, once the budget
 * is spent, leaves the close tag's tokens as the only candidates, one per
 * step, so the block closes and the model goes on with its answer.  For
 * Harmony the block is the first analysis message
 * ("<|channel|>analysis<|message|>" at the output's start, closed by
 * "<|end|>"). */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

static const char sp_think_open[] = "<think>";
static const char sp_think_close[] = "</think>";

void sp_think_init(struct sp_think *t, enum sp_think_mode mode)
{
    memset(t, 0, sizeof *t);
    t->mode = mode;
    t->trim = mode == SP_THINK_INSIDE;
}

static bool sp_think_space(char ch)
{
    return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t';
}

/* Emits s[from..to) unless empty. */
static sp_status sp_think_emit(sp_think_fn fn, void *u, bool reasoning, const char *s, size_t from, size_t to)
{
    return to > from ? fn(u, reasoning, s + from, to - from) : SP_OK;
}

/* SP_THINK_START: leading whitespace, then the open tag or anything else. */
static sp_status sp_think_start(struct sp_think *t, const char *s, size_t n, size_t *i, sp_think_fn fn, void *u)
{
    for (; *i < n; (*i)++) {
        char ch = s[*i];
        if (t->matched == 0 && sp_think_space(ch) && t->n_space < sizeof t->space) {
            t->space[t->n_space++] = ch;
            continue;
        }
        if (ch == sp_think_open[t->matched]) {
            if (++t->matched == sizeof sp_think_open - 1) { /* the block opens */
                t->mode = SP_THINK_INSIDE;
                t->matched = 0;
                t->trim = true;
                (*i)++;
                return SP_OK;
            }
            continue;
        }
        /* not a tag: what was held is the answer's */
        t->mode = SP_THINK_AFTER;
        sp_status st = sp_think_emit(fn, u, false, t->space, 0, t->n_space);
        if (st == SP_OK)
            st = sp_think_emit(fn, u, false, sp_think_open, 0, t->matched);
        t->matched = t->n_space = 0;
        return st;
    }
    return SP_OK;
}

/* SP_THINK_INSIDE: reasoning up to the close tag. */
static sp_status sp_think_inside(struct sp_think *t, const char *s, size_t n, size_t *i, sp_think_fn fn, void *u)
{
    size_t run = *i; /* start of the reasoning not yet emitted */
    sp_status st = SP_OK;
    for (; *i < n && st == SP_OK; (*i)++) {
        char ch = s[*i];
        if (t->trim && t->matched == 0 && sp_think_space(ch)) {
            run = *i + 1;
            continue;
        }
        t->trim = false;
        if (ch == sp_think_close[t->matched]) {
            if (t->matched == 0)
                st = sp_think_emit(fn, u, true, s, run, *i);
            if (++t->matched == sizeof sp_think_close - 1) { /* the block closes */
                t->mode = SP_THINK_AFTER;
                t->matched = 0;
                t->trim = true;
                (*i)++;
                return st;
            }
            run = *i + 1;
            continue;
        }
        if (t->matched) { /* a false start: the held bytes were reasoning */
            st = sp_think_emit(fn, u, true, sp_think_close, 0, t->matched);
            t->matched = 0;
            run = *i;
            if (ch == sp_think_close[0]) {
                t->matched = 1;
                run = *i + 1;
            }
        }
    }
    if (st == SP_OK && !t->matched)
        st = sp_think_emit(fn, u, true, s, run, n);
    return st;
}

/* ---- Harmony ---- */

enum { HP_HEAD, HP_REASONING, HP_ANSWER, HP_CALL }; /* sp_think.part */

static const char sp_harmony_message[] = "<|message|>";
static const char sp_harmony_start[] = "<|start|>";
static const char *const sp_harmony_ends[] = {"<|end|>", "<|call|>", "<|return|>", sp_harmony_start};

static bool sp_harmony_ends_with(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n >= l && !memcmp(s + n - l, lit, l);
}

/* Where the recipient of header h[0..n) is written (" to=..."), or -1. */
static long sp_harmony_recipient(const char *h, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i++)
        if (!memcmp(h + i, " to=", 4) && !(i + 13 <= n && !memcmp(h + i + 4, "assistant", 9)))
            return (long)i;
    return -1;
}

/* The header is complete: what its message's body is. */
static sp_status sp_harmony_header(struct sp_think *t, sp_think_fn fn, void *u)
{
    size_t n = t->n_head - (sizeof sp_harmony_message - 1);
    long to = sp_harmony_recipient(t->head, n);
    sp_status st = SP_OK;
    static const char chan[] = "<|channel|>analysis";
    bool analysis = false;
    for (size_t i = 0; i + sizeof chan - 1 <= n && !analysis; i++)
        analysis = !memcmp(t->head + i, chan, sizeof chan - 1);
    if (to >= 0) { /* a tool call: the parser reads it from the recipient on */
        t->part = HP_CALL;
        st = fn(u, false, t->head + to, t->n_head - (size_t)to);
    } else {
        t->part = analysis ? HP_REASONING : HP_ANSWER;
    }
    t->n_head = 0;
    return st;
}

static sp_status sp_harmony_body(struct sp_think *t, const char *s, size_t n, sp_think_fn fn, void *u)
{
    return n ? fn(u, t->part == HP_REASONING, s, n) : SP_OK;
}

/* HP_HEAD: the header up to <|message|>; one longer than SP_THINK_HEAD
 * is no header (a model that writes no channels): it is the answer. */
static sp_status sp_harmony_head(struct sp_think *t, const char *s, size_t n, size_t *i, sp_think_fn fn, void *u)
{
    for (; *i < n; (*i)++) {
        t->head[t->n_head++] = s[*i];
        if (sp_harmony_ends_with(t->head, t->n_head, sp_harmony_message)) {
            (*i)++;
            return sp_harmony_header(t, fn, u);
        }
        if (t->n_head == sizeof t->head) {
            t->part = HP_ANSWER;
            sp_status st = fn(u, false, t->head, t->n_head);
            t->n_head = 0;
            (*i)++;
            return st;
        }
    }
    return SP_OK;
}

/* How the held t->tag stands: -1 begins no end token, 0 may, else 1 + the token's index. */
static int sp_harmony_tag(const struct sp_think *t)
{
    int r = -1;
    for (size_t k = 0; k < sizeof sp_harmony_ends / sizeof sp_harmony_ends[0]; k++) {
        size_t l = strlen(sp_harmony_ends[k]);
        if (t->n_tag <= l && !memcmp(sp_harmony_ends[k], t->tag, t->n_tag))
            r = t->n_tag == l ? (int)k + 1 : r < 0 ? 0 : r;
    }
    return r;
}

/* A body up to its end token (held while it may be one). */
static sp_status sp_harmony_message_body(struct sp_think *t, const char *s, size_t n, size_t *i, sp_think_fn fn,
                                         void *u)
{
    size_t run = *i;
    sp_status st = SP_OK;
    for (; *i < n && st == SP_OK; (*i)++) {
        char ch = s[*i];
        if (!t->n_tag && ch != '<')
            continue;
        if (!t->n_tag)
            st = sp_harmony_body(t, s + run, *i - run, fn, u);
        t->tag[t->n_tag++] = ch;
        run = *i + 1;
        int m = sp_harmony_tag(t);
        if (m < 0) { /* the held bytes were the body's; a last '<' may begin a token */
            unsigned keep = ch == '<';
            if (st == SP_OK)
                st = sp_harmony_body(t, t->tag, t->n_tag - keep, fn, u);
            t->n_tag = keep;
            t->tag[0] = '<';
        } else if (m > 0) { /* the message ends; <|start|> begins the next one's header */
            t->n_tag = 0;
            t->part = HP_HEAD;
            if (sp_harmony_ends[m - 1] == sp_harmony_start) {
                memcpy(t->head, sp_harmony_start, sizeof sp_harmony_start - 1);
                t->n_head = sizeof sp_harmony_start - 1;
            }
            (*i)++;
            return st;
        }
    }
    if (st == SP_OK && !t->n_tag)
        st = sp_harmony_body(t, s + run, n - run, fn, u);
    return st;
}

static sp_status sp_harmony_feed(struct sp_think *t, const char *s, size_t n, bool last, sp_think_fn fn, void *u)
{
    size_t i = 0;
    sp_status st = SP_OK;
    while (st == SP_OK && i < n)
        st = t->part == HP_HEAD ? sp_harmony_head(t, s, n, &i, fn, u) : sp_harmony_message_body(t, s, n, &i, fn, u);
    if (st != SP_OK || !last)
        return st;
    /* the end: a header never finished (cut by max_tokens) is dropped;
     * text that began no header is the answer's */
    size_t k = 0;
    while (k < t->n_head && sp_think_space(t->head[k]))
        k++;
    bool header = (t->n_head - k >= 2 && !memcmp(t->head + k, "<|", 2)) ||
                  (t->n_head - k >= 3 && !memcmp(t->head + k, "to=", 3));
    if (t->part == HP_HEAD && !header)
        st = fn(u, false, t->head, t->n_head);
    else if (t->part != HP_HEAD)
        st = sp_harmony_body(t, t->tag, t->n_tag, fn, u);
    t->n_head = t->n_tag = 0;
    return st;
}

sp_status sp_think_feed(struct sp_think *t, const char *s, size_t n, bool last, sp_think_fn fn, void *u)
{
    size_t i = 0;
    sp_status st = SP_OK;
    if (t->mode == SP_THINK_HARMONY)
        return sp_harmony_feed(t, s, n, last, fn, u);
    while (st == SP_OK && i < n) {
        if (t->mode == SP_THINK_START) {
            st = sp_think_start(t, s, n, &i, fn, u);
        } else if (t->mode == SP_THINK_INSIDE) {
            st = sp_think_inside(t, s, n, &i, fn, u);
        } else {
            if (t->trim) {
                while (i < n && sp_think_space(s[i]))
                    i++;
                if (i < n)
                    t->trim = false;
            }
            st = sp_think_emit(fn, u, false, s, i, n);
            i = n;
        }
    }
    if (st != SP_OK || !last)
        return st;
    /* the end: what is still held was not a tag */
    if (t->mode == SP_THINK_START) {
        st = sp_think_emit(fn, u, false, t->space, 0, t->n_space);
        if (st == SP_OK)
            st = sp_think_emit(fn, u, false, sp_think_open, 0, t->matched);
    } else if (t->mode == SP_THINK_INSIDE) {
        st = sp_think_emit(fn, u, true, sp_think_close, 0, t->matched);
    }
    t->matched = t->n_space = 0;
    return st;
}

/* <think> blocks: where the output starts, from the generation prompt's end. */
static int sp_think_tags_mode(const sp_model *m, const sp_token *prompt, size_t n_prompt)
{
    /* the generation prompt's end: does it open the block itself? */
    size_t k = n_prompt < 8 ? n_prompt : 8, len = 0;
    char tail[512];
    if (k && sp_model_detokenize(m, prompt + n_prompt - k, k, true, tail, sizeof tail - 1, &len) == SP_OK) {
        while (len && sp_think_space(tail[len - 1]))
            len--;
        size_t o = sizeof sp_think_open - 1;
        if (len >= o && !memcmp(tail + len - o, sp_think_open, o))
            return SP_THINK_INSIDE;
    }
    return SP_THINK_START;
}

static int sp_think_harmony_mode(const sp_model *m, const sp_token *prompt, size_t n_prompt)
{
    (void)m;
    (void)prompt;
    (void)n_prompt;
    return SP_THINK_HARMONY;
}

/* The reasoning formats, by what their templates write (checked in order:
 * gpt-oss's template also mentions no <think>, but a Harmony one could). */
static const struct {
    const char *marker;
    int (*mode)(const sp_model *m, const sp_token *prompt, size_t n_prompt);
} sp_think_formats[] = {
    {"<|channel|>", sp_think_harmony_mode},
    {sp_think_open, sp_think_tags_mode},
};

int sp_think_mode_for(const sp_model *m, const sp_token *prompt, size_t n_prompt)
{
    const char *tmpl = m ? sp_model_chat_template(m) : NULL;
    for (size_t i = 0; tmpl && i < sizeof sp_think_formats / sizeof sp_think_formats[0]; i++)
        if (strstr(tmpl, sp_think_formats[i].marker))
            return sp_think_formats[i].mode(m, prompt, n_prompt);
    return SP_THINK_OFF;
}

/* ---- the thinking budget ---- */

#define SP_BUDGET_MAX_CLOSE 16 /* "</think>" takes at most 8 tokens (one a byte) */

struct sp_think_budget {
    sp_stage stage;              /* the request's gp.stages points here */
    const sp_model *model;
    int32_t budget;
    const char *open, *close_text; /* the block's tags */
    sp_token close[SP_BUDGET_MAX_CLOSE]; /* close_text as the model tokenizes it */
    size_t n_close;
    enum sp_think_mode start;    /* the mode the output starts in (a retry starts over) */
    /* each choice's copy: where its output is */
    enum sp_think_mode mode;
    int32_t n_think;             /* tokens drawn inside the block */
    size_t n_forced;             /* close tokens forced so far */
    bool forcing;
    char tail[32];               /* START: the output so far, less leading whitespace;
                                    INSIDE: its last bytes (a tag may span tokens) */
    size_t n_tail;
};

/* Appends piece to b->tail, keeping its last bytes (whole when start). */
static void sp_budget_tail(struct sp_think_budget *b, const char *piece, size_t n, bool start)
{
    for (size_t i = 0; i < n; i++) {
        if (start && b->n_tail == 0 && sp_think_space(piece[i]))
            continue;
        if (b->n_tail == sizeof b->tail) {
            memmove(b->tail, b->tail + 1, sizeof b->tail - 1);
            b->n_tail--;
        }
        b->tail[b->n_tail++] = piece[i];
    }
}

static bool sp_budget_has(const struct sp_think_budget *b, const char *tag)
{
    size_t n = strlen(tag);
    for (size_t i = 0; i + n <= b->n_tail; i++)
        if (!memcmp(b->tail + i, tag, n))
            return true;
    return false;
}

static void sp_budget_accept(void *user, sp_token t)
{
    struct sp_think_budget *b = user;
    char piece[64];
    size_t n = 0;
    if (b->mode == SP_THINK_AFTER || b->mode == SP_THINK_OFF)
        return;
    if (sp_model_token_to_piece(b->model, t, true, piece, sizeof piece, &n) != SP_OK)
        n = 0; /* a longer piece: no tag in it counts */
    if (b->mode == SP_THINK_START) { /* the output opens the block, or it never will */
        sp_budget_tail(b, piece, n, true);
        size_t o = strlen(b->open), k = b->n_tail < o ? b->n_tail : o;
        if (memcmp(b->tail, b->open, k))
            b->mode = SP_THINK_AFTER;
        else if (b->n_tail >= o) {
            b->mode = SP_THINK_INSIDE;
            b->n_tail = 0;
        }
        return;
    }
    if (b->forcing) {
        if (++b->n_forced == b->n_close)
            b->mode = SP_THINK_AFTER;
        return;
    }
    sp_budget_tail(b, piece, n, false);
    if (sp_budget_has(b, b->close_text))
        b->mode = SP_THINK_AFTER; /* the model closed it itself */
    else if (++b->n_think >= b->budget)
        b->forcing = true;
}

/* While forcing: the close tag's next token is the only candidate. */
static sp_status sp_budget_apply(void *user, sp_token_logit *cand, size_t *n, const sp_token *history,
                                 size_t n_history)
{
    (void)history;
    (void)n_history;
    const struct sp_think_budget *b = user;
    if (b->mode != SP_THINK_INSIDE || !b->forcing)
        return SP_OK;
    sp_token want = b->close[b->n_forced];
    for (size_t i = 0; i < *n; i++)
        if (cand[i].id == want) {
            cand[0] = cand[i];
            *n = 1;
            break;
        }
    return SP_OK;
}

static void sp_budget_reset(void *user)
{
    struct sp_think_budget *b = user;
    b->mode = b->start;
    b->n_think = 0;
    b->n_forced = 0;
    b->forcing = false;
    b->n_tail = 0;
}

static void *sp_budget_clone(void *user)
{
    struct sp_think_budget *b = malloc(sizeof *b);
    if (b) {
        memcpy(b, user, sizeof *b);
        sp_budget_reset(b);
    }
    return b;
}

sp_status sp_think_budget_attach(struct sp_api_request *r, const sp_model *m, int32_t budget)
{
    if (!m || !r->prompt || budget < 1)
        return SP_OK;
    enum sp_think_mode start = (enum sp_think_mode)sp_think_mode_for(m, r->prompt, r->n_prompt);
    if (start == SP_THINK_OFF) /* the template never thinks: nothing to bound */
        return SP_OK;
    struct sp_think_budget *b = calloc(1, sizeof *b);
    if (!b)
        return SP_ERR_NOMEM;
    bool harmony = start == SP_THINK_HARMONY;
    b->open = harmony ? "<|channel|>analysis<|message|>" : sp_think_open;
    b->close_text = harmony ? "<|end|>" : sp_think_close;
    if (harmony)
        start = SP_THINK_START;
    sp_status st = sp_model_tokenize(m, b->close_text, strlen(b->close_text), false, true, b->close,
                                     SP_BUDGET_MAX_CLOSE, &b->n_close);
    if (st != SP_OK || !b->n_close) {
        free(b);
        return st == SP_OK ? SP_ERR_ARG : st;
    }
    b->model = m;
    b->budget = budget;
    b->start = start;
    sp_budget_reset(b);
    b->stage = (sp_stage){.name = "think_budget", .before = SP_STAGE_LOGIT_BIAS, .user = b,
                          .apply = sp_budget_apply, .accept = sp_budget_accept, .reset = sp_budget_reset,
                          .clone = sp_budget_clone, .free = free};
    r->think_budget = b;
    r->gp.stages = &b->stage;
    r->gp.n_stages = 1;
    return SP_OK;
}

void sp_think_budget_free(struct sp_think_budget *b)
{
    free(b);
}
