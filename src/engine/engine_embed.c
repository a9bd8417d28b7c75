/* sp_engine_embed: inputs packed into forward passes without the output
 * head, each input its own KV sequence (so its tokens attend to it alone),
 * the pooled rows handed to the embed room.  The same batch buffers and KV
 * pool as generation; runs beside running requests. */
#include <stdlib.h>

#include "core/error.h"
#include "embed/embed.h"
#include "engine/engine_internal.h"
#include "model/forward.h"

int sp_engine_n_embd(const struct sp_engine *e) { return (int)e->model->hp.n_embd; }

int sp_engine_embed_max_tokens(const struct sp_engine *e) { return e->n_ctx < e->n_batch ? e->n_ctx : e->n_batch; }

/* Adds input tokens [0, n) as sequence seq, marking the rows the pooling
 * reads as outputs; false (nothing added) when the KV cache cannot hold it. */
static bool sp_embed_add(struct sp_engine *e, int *n, int *n_out, const sp_token *toks, int n_tok,
                         sp_pooling pooling, struct sp_memory_seq *seq)
{
    int first, count, n0 = *n;
    for (int i = 0; i < n_tok; i++)
        if (!sp_engine_batch_add(e, n, toks[i], i, seq)) {
            sp_memory_seq_release(e->mem, seq);
            *n = n0;
            return false;
        }
    sp_embed_rows(pooling, n_tok, &first, &count);
    for (int i = 0; i < count; i++)
        e->b_out_idx[(*n_out)++] = n0 + first + i;
    return true;
}

sp_status sp_engine_embed(struct sp_engine *e, const sp_token *const *inputs, const size_t *n_tokens,
                          size_t n_inputs, const sp_embed_params *p, float *out)
{
    const int E = (int)e->model->hp.n_embd, max_tok = sp_engine_embed_max_tokens(e);
    sp_pooling pooling = p && p->pooling ? p->pooling : sp_embed_pooling_of(e->model->hp.pooling);
    if (!sp_pooling_name(pooling))
        return sp_error_set(SP_ERR_ARG, "embed: unknown pooling %d", (int)pooling);
    if (n_inputs == 0 || !inputs || !n_tokens || !out)
        return sp_error_set(SP_ERR_ARG, "embed: no inputs");
    for (size_t i = 0; i < n_inputs; i++)
        if (n_tokens[i] == 0 || n_tokens[i] > (size_t)max_tok)
            return sp_error_set(SP_ERR_CONTEXT, "embed: input %zu has %zu tokens; an input takes 1 to %d", i,
                                n_tokens[i], max_tok);
    size_t n_seq = n_inputs < (size_t)e->n_batch ? n_inputs : (size_t)e->n_batch;
    struct sp_memory_seq *seqs = calloc(n_seq, sizeof *seqs);
    if (!seqs)
        return sp_error_set(SP_ERR_NOMEM, "embed: no memory for %zu sequences", n_seq);
    sp_status st = SP_OK;
    for (size_t done = 0; done < n_inputs && st == SP_OK;) {
        int n = 0, n_out = 0;
        size_t k = 0; /* inputs in this pass */
        while (done + k < n_inputs && (size_t)n + n_tokens[done + k] <= (size_t)e->n_batch &&
               sp_embed_add(e, &n, &n_out, inputs[done + k], (int)n_tokens[done + k], pooling, &seqs[k]))
            k++;
        if (k == 0) {
            st = sp_error_set(SP_ERR_FULL, "embed: the KV cache cannot hold input %zu (%zu tokens)", done,
                              n_tokens[done]);
            break;
        }
        struct sp_forward_batch fb = {n, e->b_tokens, e->b_pos, e->b_seqs, e->b_out_idx, n_out, 0};
        st = sp_forward(e->model, e->mem, &e->fs, e->pool, &fb, NULL);
        const float *h = sp_forward_hidden(&e->fs);
        for (size_t i = 0, row = 0; i < k; i++) {
            int first, count;
            sp_embed_rows(pooling, (int)n_tokens[done + i], &first, &count);
            if (st == SP_OK)
                sp_embed_pool(pooling, h + row * E, (size_t)E, count, E, !(p && p->no_normalize),
                              out + (done + i) * E);
            row += (size_t)count;
            sp_memory_seq_release(e->mem, &seqs[i]);
        }
        done += k;
    }
    free(seqs);
    return st;
}
