/* The event queue of a polled request (see struct sp_evq). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

static bool sp_evq_grow(struct sp_evq *q, size_t text_len)
{
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 16;
        struct sp_token_event *ev = realloc(q->ev, cap * sizeof *ev);
        if (ev)
            q->ev = ev;
        struct sp_token_logprobs *lp = realloc(q->lp, cap * sizeof *lp);
        if (lp)
            q->lp = lp;
        if (!ev || !lp)
            return false;
        q->cap = cap;
    }
    if (q->n_text + text_len > q->cap_text) {
        size_t cap = q->cap_text ? q->cap_text : 1024;
        while (cap < q->n_text + text_len)
            cap *= 2;
        char *t = realloc(q->text, cap);
        if (!t)
            return false;
        q->text = t;
        q->cap_text = cap;
    }
    return true;
}

void sp_evq_push(struct sp_evq *q, const struct sp_token_event *ev)
{
    if (ev->finish != SP_FINISH_NONE)
        q->n_final++;
    if (q->head == q->n)
        q->head = q->n = 0, q->n_text = 0;
    if (!sp_evq_grow(q, ev->len))
        return; /* dropped; the count of finals above still ends the request */
    struct sp_token_event *e = &q->ev[q->n];
    *e = *ev;
    e->text = (const char *)(uintptr_t)q->n_text;
    if (ev->lp)
        q->lp[q->n] = *ev->lp;
    if (ev->len)
        memcpy(q->text + q->n_text, ev->text, ev->len);
    q->n_text += ev->len;
    q->n++;
}

bool sp_evq_pop(struct sp_evq *q, struct sp_token_event *ev)
{
    if (q->head == q->n)
        return false;
    *ev = q->ev[q->head];
    ev->text = q->text ? q->text + (uintptr_t)ev->text : "";
    if (ev->lp)
        ev->lp = &q->lp[q->head];
    q->head++;
    return true;
}

void sp_evq_free(struct sp_evq *q)
{
    free(q->ev);
    free(q->lp);
    free(q->text);
    memset(q, 0, sizeof *q);
}
