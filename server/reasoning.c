/* Reasoning output: a chat template that has the model think between
 * <think> and </think> (Qwen3, DeepSeek-R1, SmolLM3 ...) gets its thinking
 * separated from its answer, incrementally, as a stream arrives.
 *
 * The open tag counts only at the start of the output (after whitespace),
 * as llama-server reads it: a model that writes "<think>" in the middle of
 * an answer is quoting it.  A template whose generation prompt already
 * opened the block (DeepSeek-R1's "<think>\n") starts inside.  Whitespace
 * right after either tag is dropped.  A byte that may begin a tag is held
 * until the next one decides (at most the tag's length); nothing is
 * allocated. */
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

sp_status sp_think_feed(struct sp_think *t, const char *s, size_t n, bool last, sp_think_fn fn, void *u)
{
    size_t i = 0;
    sp_status st = SP_OK;
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

int sp_think_mode_for(const sp_model *m, const sp_token *prompt, size_t n_prompt)
{
    const char *tmpl = m ? sp_model_chat_template(m) : NULL;
    if (!tmpl || !strstr(tmpl, sp_think_open))
        return SP_THINK_OFF;
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
