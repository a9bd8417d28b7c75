#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/attention.h"
#include "quant/quant.h"

static size_t sp_fwd_max_act(const struct sp_model *m)
{
    size_t mx = sp_act_row_bytes(&m->output);
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const struct sp_layer *L = &m->layers[il];
        const struct sp_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            size_t b = sp_act_row_bytes(ts[i]);
            mx = b > mx ? b : mx;
        }
    }
    return (mx + 63) / 64 * 64;
}

/* 64-byte aligned, written once so its pages are resident from the start
 * (the process's memory is then what `spindle info` predicts, not what the
 * longest batch so far happened to touch); counted in s->bytes. */
static void *sp_fwd_alloc(struct sp_forward_scratch *s, size_t bytes)
{
    size_t n = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p)
        memset(p, 0, n);
    s->bytes += n;
    return p;
}

sp_status sp_forward_scratch_init(struct sp_forward_scratch *s, const struct sp_model *m, int n_batch,
                                  int n_ctx, int n_threads)
{
    const struct sp_hparams *hp = &m->hp;
    size_t B = (size_t)n_batch, E = hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim;
    size_t KV = (size_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    size_t W = E > Q ? E : Q;
    memset(s, 0, sizeof *s);
    s->n_batch = n_batch;
    s->n_ctx = n_ctx;
    s->act_stride = sp_fwd_max_act(m);
    s->attn_per_thread = sp_attention_scratch_floats(n_ctx, (int)hp->head_dim);
    s->x = sp_fwd_alloc(s, B * E * sizeof(float));
    s->h = sp_fwd_alloc(s, B * W * sizeof(float));
    s->q = sp_fwd_alloc(s, B * Q * sizeof(float));
    s->k = sp_fwd_alloc(s, B * KV * sizeof(float));
    s->v = sp_fwd_alloc(s, B * KV * sizeof(float));
    s->att = sp_fwd_alloc(s, B * Q * sizeof(float));
    s->g = sp_fwd_alloc(s, B * F * sizeof(float));
    s->u = sp_fwd_alloc(s, B * F * sizeof(float));
    s->tmp = sp_fwd_alloc(s, B * W * sizeof(float));
    s->act = sp_fwd_alloc(s, B * s->act_stride);
    s->rope = sp_fwd_alloc(s, B * hp->n_rot * sizeof(float));
    s->attn_plan = sp_fwd_alloc(s, sp_attention_plan_ints(n_batch, (int)hp->n_head) * sizeof(int32_t));
    s->attn = sp_fwd_alloc(s, (size_t)sp_pool_chunks_for(n_threads) * s->attn_per_thread * sizeof(float));
    if (!s->x || !s->h || !s->q || !s->k || !s->v || !s->att || !s->g || !s->u || !s->tmp || !s->act || !s->attn || !s->rope ||
        !s->attn_plan) {
        sp_forward_scratch_free(s);
        return sp_error_set(SP_ERR_NOMEM, "forward: no memory for a %d-token batch", n_batch);
    }
    return SP_OK;
}

void sp_forward_scratch_free(struct sp_forward_scratch *s)
{
    free(s->x); free(s->h); free(s->q); free(s->k); free(s->v); free(s->att);
    free(s->g); free(s->u); free(s->tmp); free(s->act); free(s->attn); free(s->rope);
    free(s->attn_plan);
    memset(s, 0, sizeof *s);
}

/* Quantizes x for w unless the buffer already holds x for w's activation type. */
struct sp_act_cache {
    const float *src;
    uint32_t type;
};

static void sp_fwd_mm(struct sp_forward_scratch *s, struct sp_pool *pool, struct sp_act_cache *c,
                      const struct sp_tensor *w, const float *x, size_t x_stride, int n, float *out,
                      size_t out_stride)
{
    uint32_t at = sp_type_get(w->type)->vec_dot_type;
    if (s->observe)
        s->observe(s->observe_ud, w, x, x_stride, n);
    if (c->src != x || c->type != at) {
        sp_act_quantize(pool, w, x, x_stride, n, s->act);
        c->src = x;
        c->type = at;
    }
    sp_matmul(pool, w, s->act, n, out, out_stride);
}

/* Matrices reading the same x: one pool run when their activation types
 * agree (the usual case), else one run each. */
static void sp_fwd_mm_multi(struct sp_forward_scratch *s, struct sp_pool *pool, struct sp_act_cache *c, int n_mat,
                            const struct sp_tensor *const *w, const float *x, size_t x_stride, int n,
                            float *const *out, const size_t *out_stride)
{
    uint32_t at = sp_type_get(w[0]->type)->vec_dot_type;
    bool same = true;
    for (int i = 1; i < n_mat; i++)
        same = same && sp_type_get(w[i]->type)->vec_dot_type == at && w[i]->ne0 == w[0]->ne0;
    if (!same) {
        for (int i = 0; i < n_mat; i++)
            sp_fwd_mm(s, pool, c, w[i], x, x_stride, n, out[i], out_stride[i]);
        return;
    }
    for (int i = 0; s->observe && i < n_mat; i++)
        s->observe(s->observe_ud, w[i], x, x_stride, n);
    if (c->src != x || c->type != at) {
        sp_act_quantize(pool, w[0], x, x_stride, n, s->act);
        c->src = x;
        c->type = at;
    }
    sp_matmul_multi(pool, n_mat, w, s->act, n, out, out_stride);
}

/* ---- per-token stages, spread over the pool ----
 * Each token's row is computed by one call in one fixed order, so splitting
 * the tokens across threads changes no result (batch invariance).  A stage
 * whose output feeds a matmul also quantizes the row for it (job.qw), while
 * the row is in cache, instead of a separate pool run over the batch. */

enum sp_fwd_stage {
    SP_FWD_ATTN_IN,   /* rmsnorm(x) -> h with attn_norm */
    SP_FWD_QK,        /* q/k norm and RoPE, then K/V into the cache */
    SP_FWD_ATTN_OUT,  /* (post-norm) tmp, x += tmp, rmsnorm(x) -> h with ffn_norm */
    SP_FWD_GLU,       /* g = act(g) * u */
    SP_FWD_FFN_OUT,   /* (post-norm) tmp, x += tmp, then the next layer's SP_FWD_ATTN_IN */
};

struct sp_fwd_job {
    enum sp_fwd_stage stage;
    const struct sp_model *m;
    const struct sp_layer *L;
    const struct sp_layer *next;  /* SP_FWD_FFN_OUT: the next layer, NULL after the last */
    const struct sp_tensor *qw;   /* quantize the stage's output row for this matrix; NULL: none */
    struct sp_forward_scratch *s;
    struct sp_kv *kv;
    const struct sp_forward_batch *b;
    uint32_t il;
};

static void sp_fwd_token(const struct sp_fwd_job *j, int t)
{
    const struct sp_hparams *hp = &j->m->hp;
    const struct sp_arch *ar = j->m->arch;
    const struct sp_layer *L = j->L;
    struct sp_forward_scratch *s = j->s;
    const int E = (int)hp->n_embd, D = (int)hp->head_dim, H = (int)hp->n_head, HKV = (int)hp->n_head_kv;
    const int Q = H * D, KVW = HKV * D, F = (int)hp->n_ff, NR = (int)hp->n_rot;
    float *x = s->x + (size_t)t * E, *h = s->h + (size_t)t * E;
    switch (j->stage) {
    case SP_FWD_ATTN_IN:
        sp_rmsnorm(x, L->attn_norm.data, h, E, hp->eps);
        break;
    case SP_FWD_QK: {
        const float *cs = s->rope + (size_t)t * NR;
        for (int h = 0; h < H; h++) {
            float *qh = s->q + (size_t)t * Q + (size_t)h * D;
            if (ar->qk_norm)
                sp_rmsnorm(qh, L->q_norm.data, qh, D, hp->eps);
            sp_rope_apply(qh, cs, NR, ar->rope_neox);
        }
        for (int h = 0; h < HKV; h++) {
            float *kh = s->k + (size_t)t * KVW + (size_t)h * D;
            if (ar->qk_norm)
                sp_rmsnorm(kh, L->k_norm.data, kh, D, hp->eps);
            sp_rope_apply(kh, cs, NR, ar->rope_neox);
        }
        sp_kv_store(j->kv, j->b->seqs[t], j->il, (uint32_t)j->b->pos[t], s->k + (size_t)t * KVW,
                    s->v + (size_t)t * KVW);
        break;
    }
    case SP_FWD_ATTN_OUT:
    case SP_FWD_FFN_OUT: {
        float *o = s->tmp + (size_t)t * E;
        const struct sp_tensor *pn = j->stage == SP_FWD_ATTN_OUT ? &L->post_attn_norm : &L->post_ffn_norm;
        if (ar->post_norms)
            sp_rmsnorm(o, pn->data, o, E, hp->eps);
        for (int i = 0; i < E; i++)
            x[i] += o[i];
        if (j->stage == SP_FWD_ATTN_OUT)
            sp_rmsnorm(x, L->ffn_norm.data, h, E, hp->eps);
        else if (j->next) /* while the row is hot */
            sp_rmsnorm(x, j->next->attn_norm.data, h, E, hp->eps);
        break;
    }
    case SP_FWD_GLU: {
        float *g = s->g + (size_t)t * F, *u = s->u + (size_t)t * F;
        if (ar->ffn_act == SP_FFN_GELU)
            sp_geglu(g, u, g, F);
        else
            sp_swiglu(g, u, g, F);
        if (j->qw)
            sp_act_quantize_row(j->qw, g, s->act + (size_t)t * sp_act_row_bytes(j->qw));
        return;
    }
    }
    if (j->qw) /* the stages ending in h */
        sp_act_quantize_row(j->qw, h, s->act + (size_t)t * sp_act_row_bytes(j->qw));
}

static void sp_fwd_job_run(void *arg, int ith, int nth)
{
    const struct sp_fwd_job *j = arg;
    long lo, hi;
    sp_pool_split(j->b->n_tok, 1, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++)
        sp_fwd_token(j, (int)t);
}

/* Runs one stage for every token of the batch: on this thread for a few
 * tokens (a pool run costs more than the work), over the pool otherwise.
 * qw: the matrix the stage's output feeds (its activations are then in
 * s->act, as c records), or NULL. */
static void sp_fwd_stage(struct sp_fwd_job *j, struct sp_pool *pool, enum sp_fwd_stage stage,
                         const struct sp_tensor *qw, struct sp_act_cache *c)
{
    j->stage = stage;
    j->qw = qw;
    if (j->b->n_tok < 4) {
        for (int t = 0; t < j->b->n_tok; t++)
            sp_fwd_token(j, t);
    } else {
        sp_pool_run(pool, sp_fwd_job_run, j);
    }
    if (qw) {
        c->src = stage == SP_FWD_GLU ? j->s->g : j->s->h;
        c->type = sp_type_get(qw->type)->vec_dot_type;
    }
}

sp_status sp_forward(const struct sp_model *m, struct sp_kv *kv, struct sp_forward_scratch *s,
                     struct sp_pool *pool, const struct sp_forward_batch *b, float *logits)
{
    const struct sp_hparams *hp = &m->hp;
    const struct sp_arch *ar = m->arch;
    const int T = b->n_tok, E = (int)hp->n_embd, D = (int)hp->head_dim, H = (int)hp->n_head;
    const int HKV = (int)hp->n_head_kv, Q = H * D, KVW = HKV * D, F = (int)hp->n_ff;
    struct sp_act_cache cache = {0};
    int max_pos = 0;
    s->rope_base = 0.0f; /* the table is per batch */

    if (T <= 0 || T > s->n_batch || b->n_out > T)
        return sp_error_set(SP_ERR_INTERNAL, "forward: batch of %d tokens (%d outputs), limit %d", T, b->n_out,
                            s->n_batch);
    for (int t = 0; t < T; t++) {
        if (b->tokens[t] < 0 || (uint32_t)b->tokens[t] >= hp->n_vocab)
            return sp_error_set(SP_ERR_ARG, "forward: token id %d out of range 0..%u", b->tokens[t], hp->n_vocab - 1);
        if (b->pos[t] < 0 || b->pos[t] >= s->n_ctx)
            return sp_error_set(SP_ERR_CONTEXT, "forward: position %d outside the context of %d", b->pos[t], s->n_ctx);
        max_pos = b->pos[t] + 1 > max_pos ? b->pos[t] + 1 : max_pos;
    }

    /* x [T][E]: embeddings */
    float escale = ar->embed_scale ? sqrtf((float)E) : 1.0f;
    for (int t = 0; t < T; t++) {
        float *x = s->x + (size_t)t * E;
        sp_tensor_row(&m->tok_embd, b->tokens[t], x);
        if (ar->embed_scale)
            for (int i = 0; i < E; i++)
                x[i] *= escale;
    }

    const uint32_t n_layer = b->n_layer && b->n_layer < hp->n_layer ? b->n_layer : hp->n_layer;
    struct sp_fwd_job job = {.m = m, .s = s, .kv = kv, .b = b};
    for (uint32_t il = 0; il < n_layer; il++) {
        const struct sp_layer *L = &m->layers[il];
        job.L = L;
        job.il = il;
        /* attention block */
        if (il == 0) /* later layers: part of the previous one's SP_FWD_FFN_OUT */
            sp_fwd_stage(&job, pool, SP_FWD_ATTN_IN, &L->wq, &cache);
        {
            const struct sp_tensor *w3[3] = {&L->wq, &L->wk, &L->wv};
            float *o3[3] = {s->q, s->k, s->v};
            const size_t st3[3] = {(size_t)Q, (size_t)KVW, (size_t)KVW};
            sp_fwd_mm_multi(s, pool, &cache, 3, w3, s->h, E, T, o3, st3);
        }
        const int NR = (int)hp->n_rot;
        if (s->rope_base != L->rope_base) { /* layers sharing a base share the table */
            for (int t = 0; t < T; t++)
                sp_rope_table(s->rope + (size_t)t * NR, NR, b->pos[t], L->rope_base, hp->rope_freq_scale);
            s->rope_base = L->rope_base;
        }
        sp_fwd_stage(&job, pool, SP_FWD_QK, NULL, &cache);
        struct sp_attn_args aa = {
            .kv = kv, .layer = il, .n_tok = T, .q = s->q, .q_stride = (size_t)Q, .seqs = b->seqs, .pos = b->pos,
            .n_head = H, .n_head_kv = HKV, .head_dim = D, .scale = hp->attn_scale,
            .window = L->swa ? (int)hp->n_swa : 0, .out = s->att, .out_stride = (size_t)Q,
            .scratch = s->attn, .scratch_per_thread = s->attn_per_thread, .max_pos = max_pos,
            .plan = s->attn_plan,
        };
        sp_attention(pool, &aa);
        sp_fwd_mm(s, pool, &cache, &L->wo, s->att, Q, T, s->tmp, E);
        sp_fwd_stage(&job, pool, SP_FWD_ATTN_OUT, &L->w_gate, &cache);
        /* feed-forward block */
        {
            const struct sp_tensor *w2[2] = {&L->w_gate, &L->w_up};
            float *o2[2] = {s->g, s->u};
            const size_t st2[2] = {(size_t)F, (size_t)F};
            sp_fwd_mm_multi(s, pool, &cache, 2, w2, s->h, E, T, o2, st2);
        }
        sp_fwd_stage(&job, pool, SP_FWD_GLU, &L->w_down, &cache);
        sp_fwd_mm(s, pool, &cache, &L->w_down, s->g, F, T, s->tmp, E);
        job.next = il + 1 < n_layer ? &m->layers[il + 1] : NULL;
        sp_fwd_stage(&job, pool, SP_FWD_FFN_OUT, job.next ? &job.next->wq : NULL, &cache);
    }

    /* output head over the tokens that want logits */
    for (int i = 0; i < b->n_out; i++)
        sp_rmsnorm(s->x + (size_t)b->out_idx[i] * E, m->out_norm.data, s->h + (size_t)i * E, E, hp->eps);
    cache.src = NULL;
    if (b->n_out > 0)
        sp_fwd_mm(s, pool, &cache, &m->output, s->h, E, b->n_out, logits, hp->n_vocab);
    return SP_OK;
}
