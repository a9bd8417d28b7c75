/* Model drafts: the draft model over its own KV cache, or the target's
 * first layers over the target's cache (self-speculation: those layers'
 * K/V are exactly what the target's verification writes again).
 *
 * Every drafting sequence advances in the same forwards: each forward feeds
 * every position a sequence still lacks (a draft model catches up on the
 * tokens accepted since it last ran, in batch-sized chunks) and gives one
 * draft per sequence from the logits of its last position, until each has
 * its k. */
#include <time.h>

#include "model/model.h"
#include "spec/spec_internal.h"

static double sp_spec_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Draws draft j of job `jb` from the draft logits: through the request's
 * own chain, from q when the request samples (q kept for the acceptance
 * rule), else its argmax as a point guess.  False when no token is
 * possible. */
static bool sp_spec_pick(struct sp_spec *sp, struct sp_spec_job *jb, uint32_t j, const float *logits)
{
    struct sp_spec_seq *ss = jb->ss;
    const uint32_t n_hist = jb->n_tokens + j;
    sp_token x;
    ss->q_n[j] = 0;
    if (!ss->dense) {
        x = sp_sampler_sample(ss->sampler, logits, jb->tokens, n_hist, NULL);
    } else {
        const struct sp_candidate *q;
        size_t n_q;
        double logz;
        if (sp_sampler_dist(ss->sampler, logits, jb->tokens, n_hist, NULL, &q, &n_q, &logz) != SP_OK)
            return false;
        size_t best = 0;
        for (size_t i = 1; i < n_q; i++)
            best = q[i].p > q[best].p ? i : best;
        x = q[best].id;
        if (n_q > 1 && n_q <= SP_SPEC_Q_MAX) {
            sp_token *ids = ss->q_id + (size_t)j * SP_SPEC_Q_MAX;
            float *ps = ss->q_p + (size_t)j * SP_SPEC_Q_MAX;
            double u = sp_rng_uniform(&ss->rng), cum = 0.0;
            bool drawn = false;
            for (size_t i = 0; i < n_q; i++) {
                ids[i] = q[i].id;
                ps[i] = q[i].p;
                cum += q[i].p;
                if (!drawn && u < cum && q[i].p > 0.0f)
                    x = q[i].id, drawn = true;
            }
            ss->q_n[j] = (uint32_t)n_q;
        }
    }
    if (x < 0)
        return false;
    jb->tokens[n_hist] = x;
    return true;
}

void sp_spec_model_draft(struct sp_spec *sp, struct sp_spec_job *jobs, int n_jobs)
{
    const bool self = sp->dmem == sp->t.mem;
    for (int i = 0; i < n_jobs; i++) {
        struct sp_memory_seq *seq = self ? jobs[i].seq : &jobs[i].ss->dseq;
        jobs[i].n_draft = 0;
        if (!self)
            sp_memory_seq_truncate(sp->dmem, seq, jobs[i].n_tokens - 1);
        sp->next[i] = self ? jobs[i].n_tokens - 1 : sp_memory_seq_len(seq);
    }
    for (;;) {
        int n = 0, n_out = 0;
        for (int i = 0; i < n_jobs && n < sp->t.n_batch; i++) {
            struct sp_spec_job *jb = &jobs[i];
            struct sp_memory_seq *seq = self ? jb->seq : &jb->ss->dseq;
            const uint32_t last = jb->n_tokens - 1 + jb->n_draft; /* the last position with a token */
            if (jb->n_draft >= sp->k[i])
                continue;
            for (; sp->next[i] <= last && n < sp->t.n_batch; sp->next[i]++, n++) {
                const uint32_t p = sp->next[i];
                if (sp_memory_seq_reserve(sp->dmem, seq, p + 1) != SP_OK) {
                    sp->k[i] = jb->n_draft; /* no room: the drafts so far */
                    break;
                }
                sp->b_tokens[n] = jb->tokens[p];
                sp->b_pos[n] = (int32_t)p;
                sp->b_seqs[n] = seq;
            }
            if (sp->next[i] == last + 1 && jb->n_draft < sp->k[i]) {
                sp->b_out[n_out] = n - 1;
                sp->b_job[n_out++] = i;
            }
        }
        if (n == 0)
            break;
        struct sp_forward_batch fb = {n, sp->b_tokens, sp->b_pos, sp->b_seqs, sp->b_out, n_out, sp->layers};
        double t0 = sp_spec_now();
        if (sp_forward(sp->dm, sp->dmem, sp->dfs, sp->t.pool, &fb, sp->logits) != SP_OK) {
            for (int i = 0; i < n_jobs; i++)
                sp->k[i] = jobs[i].n_draft;
            break;
        }
        if (n == n_out) { /* a pure drafting forward: what one draft depth costs */
            double dt = sp_spec_now() - t0;
            sp->t_draft = sp->draft_seen ? sp->t_draft + 0.2 * (dt - sp->t_draft) : dt;
            sp->draft_seen = true;
        }
        for (int o = 0; o < n_out; o++) {
            struct sp_spec_job *jb = &jobs[sp->b_job[o]];
            if (sp_spec_pick(sp, jb, jb->n_draft, sp->logits + (size_t)o * sp->n_vocab))
                jb->n_draft++;
            else
                sp->k[sp->b_job[o]] = jb->n_draft;
        }
    }
}
