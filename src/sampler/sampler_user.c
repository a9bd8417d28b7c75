/* A caller's stage (sp_stage, include/spindle.h) as a stage of the chain:
 * its candidates are copied out as {id, logit} pairs, checked when they
 * come back, and written into the set so that the chain's invariants
 * (sampler_stage.h) hold again. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sampler/sampler_stage.h"

struct user_stage {
    sp_stage def;       /* the caller's callbacks; def.name points at name */
    void *user;         /* this chain's copy of the state (def.user without clone) */
    bool owned;         /* user came from def.clone: def.free frees it */
    char name[32];
};

/* Checks what apply returned: no new or repeated ids, at least one logit
 * above -inf.  user_seen is all zero before and after. */
static sp_status user_check(const struct user_stage *u, struct sp_cands *c, size_t n, size_t was)
{
    const sp_token_logit *b = c->user_buf;
    sp_status st = SP_OK;
    size_t i = 0;
    bool live = false;
    if (n > was)
        return sp_error_set(SP_ERR_ARG, "sampler stage %s: %zu candidates came back from %zu", u->name, n, was);
    if (n == 0)
        return sp_error_set(SP_ERR_ARG, "sampler stage %s: no candidate is left", u->name);
    for (; i < n; i++) {
        sp_token id = b[i].id;
        if (id < 0 || (uint32_t)id >= c->n_vocab) {
            st = sp_error_set(SP_ERR_ARG, "sampler stage %s: token %d is outside 0..%u", u->name, (int)id,
                              c->n_vocab - 1);
            break;
        }
        uint64_t bit = 1ull << ((uint32_t)id & 63);
        if (c->user_seen[(uint32_t)id >> 6] & bit) {
            st = sp_error_set(SP_ERR_ARG, "sampler stage %s: token %d appears twice", u->name, (int)id);
            break;
        }
        c->user_seen[(uint32_t)id >> 6] |= bit;
        live |= sp_sampler_clamp(b[i].logit) > -INFINITY;
    }
    for (size_t j = 0; j < i; j++)
        c->user_seen[(uint32_t)b[j].id >> 6] = 0;
    if (st == SP_OK && !live)
        st = sp_error_set(SP_ERR_ARG, "sampler stage %s: every token left is banned", u->name);
    return st;
}

static sp_status user_apply(struct sp_sampler_stage *st, struct sp_cands *c)
{
    struct user_stage *u = st->state;
    sp_token_logit *b = c->user_buf;
    size_t n = c->n, was = c->n;
    for (size_t i = 0; i < n; i++) {
        b[i].id = c->cand[i].id;
        b[i].logit = c->cand[i].logit;
    }
    sp_status s = u->def.apply(u->user, b, &n, c->hist, c->n_hist);
    if (s != SP_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", sp_error_message());
        return sp_error_set(s, "sampler stage %s: %s", u->name, why);
    }
    if ((s = user_check(u, c, n, was)) != SP_OK)
        return s;
    if (c->identity) {
        /* the logit bias and the penalties may follow: dropped is banned */
        for (uint32_t i = 0; i < c->n_vocab; i++)
            c->cand[i].logit = -INFINITY;
        for (size_t i = 0; i < n; i++)
            c->cand[b[i].id].logit = sp_sampler_clamp(b[i].logit);
        return SP_OK;
    }
    for (size_t i = 0; i < n; i++) {
        c->cand[i].id = b[i].id;
        c->cand[i].logit = sp_sampler_clamp(b[i].logit);
        c->cand[i].p = 0.0f;
        c->cand[i].aux = 0.0f;
    }
    c->n = n;
    c->sorted = 0;
    if (c->have_p)
        sp_cands_softmax(c);
    return SP_OK;
}

static void user_accept(struct sp_sampler_stage *st, sp_token t)
{
    struct user_stage *u = st->state;
    if (u->def.accept)
        u->def.accept(u->user, t);
}

static void user_reset(struct sp_sampler_stage *st)
{
    struct user_stage *u = st->state;
    if (u->def.reset)
        u->def.reset(u->user);
}

static void user_free(struct sp_sampler_stage *st)
{
    struct user_stage *u = st->state;
    if (!u)
        return;
    if (u->owned && u->def.free)
        u->def.free(u->user);
    free(u);
}

static sp_status user_wrap(struct sp_sampler_stage *out, const struct user_stage *from, void *template);

static sp_status user_clone(const struct sp_sampler_stage *st, struct sp_sampler_stage *out)
{
    const struct user_stage *u = st->state;
    return user_wrap(out, u, u->user);
}

static const struct sp_sampler_stage_ops user_ops = {user_apply, user_accept, user_reset, user_clone, user_free};

/* out gets a copy of from with its own clone of `template`. */
static sp_status user_wrap(struct sp_sampler_stage *out, const struct user_stage *from, void *template)
{
    struct user_stage *u = malloc(sizeof *u);
    if (!u)
        return sp_error_set(SP_ERR_NOMEM, "sampler stage %s: out of memory", from->name);
    *u = *from;
    u->def.name = u->name;
    u->user = template;
    u->owned = false;
    if (u->def.clone) {
        u->user = u->def.clone(template);
        if (!u->user) {
            free(u);
            return sp_error_set(SP_ERR_NOMEM, "sampler stage %s: clone failed", from->name);
        }
        u->owned = true;
    }
    memset(out, 0, sizeof *out);
    out->ops = &user_ops;
    out->state = u;
    out->name = u->name;
    out->param = NAN;
    return SP_OK;
}

sp_status sp_sampler_stage_user(struct sp_sampler_stage *out, const sp_stage *def, size_t idx)
{
    struct user_stage from;
    memset(out, 0, sizeof *out);
    if (!def->name || !def->name[0])
        return sp_error_set(SP_ERR_ARG, "stages[%zu]: no name", idx);
    if (!def->apply)
        return sp_error_set(SP_ERR_ARG, "stages[%zu] (%.31s): no apply", idx, def->name);
    memset(&from, 0, sizeof from);
    from.def = *def;
    snprintf(from.name, sizeof from.name, "%s", def->name);
    return user_wrap(out, &from, def->user);
}
