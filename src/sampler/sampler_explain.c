/* explain: what each stage of the chain did to the most likely tokens
 * (struct sp_sampler_explain, include/spindle.h); recorded by the chain
 * when asked (sampler_stage.h), printed here. */
#include <string.h>

#include "sampler/sampler_stage.h"

void sp_sampler_explain_rows(struct sp_sampler_explain *ex, struct sp_cands *c)
{
    sp_cands_sort_prefix(c, SP_SAMPLER_EXPLAIN_TOP);
    for (size_t i = 0; i < c->sorted && i < SP_SAMPLER_EXPLAIN_TOP && ex->n_rows < SP_EXPLAIN_ROWS; i++) {
        size_t r = 0;
        while (r < ex->n_rows && ex->row[r] != c->cand[i].id)
            r++;
        if (r == ex->n_rows)
            ex->row[ex->n_rows++] = c->cand[i].id;
    }
}

/* Before the temperature stage (use_p false) the shares are the softmax of
 * the logits at T = 1 over the survivors. */
void sp_sampler_explain_column(struct sp_sampler_explain *ex, const struct sp_cands *c, const char *name,
                               float param, bool use_p)
{
    if (!ex || ex->n_stages == SP_EXPLAIN_STAGES)
        return;
    struct sp_explain_stage *st = &ex->stage[ex->n_stages++];
    snprintf(st->name, sizeof st->name, "%s", name);
    st->param = param;
    st->kept = (uint32_t)c->n;
    float mx = c->cand[sp_cands_best(c)].logit;
    double z = 0.0;
    for (size_t i = 0; i < c->n; i++)
        z += use_p ? c->cand[i].p : expf(c->cand[i].logit - mx);
    for (size_t r = 0; r < ex->n_rows; r++) {
        st->p[r] = -1.0f;
        for (size_t i = 0; i < c->n; i++) {
            if (c->cand[i].id != ex->row[r])
                continue;
            double w = use_p ? c->cand[i].p : expf(c->cand[i].logit - mx);
            st->p[r] = (float)(w / z);
            break;
        }
    }
}

void sp_sampler_explain_print(const struct sp_sampler_explain *ex, FILE *out,
                              sp_sampler_token_text_fn token_text, void *ctx)
{
    char head[32];
    fprintf(out, "%8s  %-16s %9s", "token", "text", "raw");
    for (uint32_t k = 0; k < ex->n_stages; k++) {
        if (isnan(ex->stage[k].param))
            snprintf(head, sizeof head, "%s", ex->stage[k].name);
        else
            snprintf(head, sizeof head, "%s %g", ex->stage[k].name, (double)ex->stage[k].param);
        fprintf(out, " %15s", head);
    }
    fprintf(out, "\n");
    for (uint32_t r = 0; r < ex->n_rows; r++) {
        const char *text = token_text ? token_text(ctx, ex->row[r]) : NULL;
        char shown[17];
        size_t j = 0;
        for (; text && text[j] && j < sizeof shown - 1; j++)
            shown[j] = (text[j] >= 0x20 && text[j] < 0x7f) ? text[j] : '.';
        shown[j] = '\0';
        fprintf(out, "%8d%c %-16s %9.4f", (int)ex->row[r], ex->row[r] == ex->chosen ? '*' : ' ',
                shown, (double)ex->raw[r]);
        for (uint32_t k = 0; k < ex->n_stages; k++) {
            if (ex->stage[k].p[r] < 0.0f)
                fprintf(out, " %15s", "-");
            else
                fprintf(out, " %15.4f", (double)ex->stage[k].p[r]);
        }
        fprintf(out, "\n");
    }
    fprintf(out, "%8s  %-16s %9u", "kept", "", ex->n_vocab);
    for (uint32_t k = 0; k < ex->n_stages; k++)
        fprintf(out, " %15u", ex->stage[k].kept);
    bool greedy = ex->n_stages && !strcmp(ex->stage[ex->n_stages - 1].name, "greedy");
    fprintf(out, "\nnext token: %d%s\n", (int)ex->chosen, greedy ? " (greedy)" : "");
    for (uint32_t k = 1; k < ex->n_stages; k++)
        if (!strcmp(ex->stage[k].name, "grammar"))
            fprintf(out, "grammar: removed %u of %u candidates\n", ex->stage[k - 1].kept - ex->stage[k].kept,
                    ex->stage[k - 1].kept);
}
