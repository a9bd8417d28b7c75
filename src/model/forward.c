#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/attention.h"
#include "model/forward_altup.h"
#include "model/forward_linear.h"
#include "quant/quant.h"

/* Bytes of the widest quantized activation row of the dense matrices
 * (experts = false) or of the experts' (experts = true). */
static size_t sp_fwd_max_act(const struct sp_model *m, bool experts)
{
    size_t mx = experts ? 0 : sp_act_row_bytes(&m->output);
    if (!experts && m->pl_model_proj.data) {
        size_t b = sp_act_row_bytes(&m->pl_model_proj);
        mx = b > mx ? b : mx;
    }
    for (int i = 0; !experts && i < SP_ALTUP_MAX - 1; i++) {
        size_t b = m->alt_proj[i].data ? sp_act_row_bytes(&m->alt_proj[i]) : 0;
        size_t u = m->alt_unembd[i].data ? sp_act_row_bytes(&m->alt_unembd[i]) : 0;
        mx = b > mx ? b : mx;
        mx = u > mx ? u : mx;
    }
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const struct sp_layer *L = &m->layers[il];
        const struct sp_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                                        &L->gate_inp, &L->ssm_in, &L->ssm_out, &L->sc_in, &L->sc_out, &L->dn_qkv,
                                        &L->dn_z, &L->dn_beta, &L->dn_alpha, &L->pl_gate, &L->pl_proj, &L->wq_a,
                                        &L->wkv_a, &L->alt_router, &L->lau_l, &L->lau_r};
        for (size_t i = 0; !experts && i < sizeof ts / sizeof ts[0]; i++) {
            size_t b = ts[i]->data ? sp_act_row_bytes(ts[i]) : 0;
            mx = b > mx ? b : mx;
        }
        for (uint32_t h = 0; !experts && L->wk_b && h < 2 * m->hp.n_head; h++) { /* attn_k_b's, attn_v_b's */
            size_t b = sp_act_row_bytes(&L->wk_b[h]);
            mx = b > mx ? b : mx;
        }
        for (int k = 0; experts && L->exps && k < SP_EXP_KINDS; k++) {
            size_t b = sp_act_row_bytes(&L->exps[k * m->hp.n_expert]);
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

/* Width of the widest dense feed-forward: a dense layer's, or a
 * mixture-of-experts layer's shared expert (0: none). */
static int sp_fwd_ff(const struct sp_model *m)
{
    uint32_t f = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        uint32_t w = m->layers[il].moe && !m->arch->moe_dense ? m->hp.n_ff_shexp : m->layers[il].n_ff;
        f = w > f ? w : f;
    }
    f = m->hp.n_embd_pl > f ? m->hp.n_embd_pl : f; /* g also holds the per-layer gate */
    return (int)f;
}

sp_status sp_forward_scratch_init(struct sp_forward_scratch *s, const struct sp_model *m, int n_batch,
                                  int n_ctx, int n_threads)
{
    const struct sp_hparams *hp = &m->hp;
    size_t D = 0, KV = 0, NR = 0; /* the widest layer's head, keys and values, rotated dimensions */
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct sp_layer *L = &m->layers[il];
        D = L->head_dim > D ? L->head_dim : D;
        KV = (size_t)L->n_head_kv * L->head_dim > KV ? (size_t)L->n_head_kv * L->head_dim : KV;
        NR = L->n_rot > NR ? L->n_rot : NR;
    }
    size_t B = (size_t)n_batch, E = hp->n_embd, Q = (size_t)hp->n_head * D, F = (size_t)sp_fwd_ff(m);
    if ((size_t)hp->n_head * hp->mla_k > Q) /* mla: att holds the query rows before absorption */
        Q = (size_t)hp->n_head * hp->mla_k;
    size_t W = E > Q ? E : Q, X = hp->n_expert, R = B * hp->n_expert_used; /* routed rows */
    W = W > hp->n_lora_q ? W : hp->n_lora_q; /* mla: tmp holds the query LoRA's rows */
    memset(s, 0, sizeof *s);
    s->n_batch = n_batch;
    s->n_ctx = n_ctx;
    s->act_stride = sp_fwd_max_act(m, false);
    s->attn_per_thread = sp_attention_scratch_floats(n_ctx, (int)D);
    s->x = sp_fwd_alloc(s, B * E * sizeof(float));
    s->h = sp_fwd_alloc(s, B * W * sizeof(float));
    s->q = sp_fwd_alloc(s, B * Q * sizeof(float));
    s->k = sp_fwd_alloc(s, B * KV * sizeof(float));
    s->v = sp_fwd_alloc(s, B * KV * sizeof(float));
    s->att = sp_fwd_alloc(s, B * Q * sizeof(float));
    s->g = sp_fwd_alloc(s, B * (F ? F : 1) * sizeof(float));
    s->u = sp_fwd_alloc(s, B * (F ? F : 1) * sizeof(float));
    s->tmp = sp_fwd_alloc(s, B * W * sizeof(float));
    s->act = sp_fwd_alloc(s, B * s->act_stride);
    s->rope = sp_fwd_alloc(s, B * (NR ? NR : 1) * sizeof(float));
    s->attn_plan = sp_fwd_alloc(s, sp_attention_plan_ints(n_batch, (int)hp->n_head) * sizeof(int32_t));
    s->attn_pos = sp_fwd_alloc(s, B * sizeof(int32_t));
    s->attn = sp_fwd_alloc(s, (size_t)sp_pool_chunks_for(n_threads) * s->attn_per_thread * sizeof(float));
    s->kv_seqs = sp_fwd_alloc(s, B * sizeof *s->kv_seqs);
    if (m->arch->q_gate)
        s->qg = sp_fwd_alloc(s, B * 2 * Q * sizeof(float));
    if (m->arch->moe_dense && hp->n_expert)
        s->ffn2 = sp_fwd_alloc(s, B * E * sizeof(float));
    const size_t NP = (size_t)hp->n_embd_pl * hp->n_layer;
    if (NP) {
        s->ple = sp_fwd_alloc(s, B * NP * sizeof(float));
        s->ple_row = sp_fwd_alloc(s, NP * sizeof(float));
    }
    const size_t AE = (size_t)hp->n_altup * E;
    if (m->arch->altup) {
        s->alt = sp_fwd_alloc(s, B * AE * sizeof(float));
        s->pred = sp_fwd_alloc(s, B * AE * sizeof(float));
        s->mod = sp_fwd_alloc(s, B * SP_ALTUP_MAX * sizeof(float));
    }
    if (m->arch->laurel) {
        s->lau = sp_fwd_alloc(s, B * E * sizeof(float));
        s->lrank = sp_fwd_alloc(s, B * (hp->laurel_rank ? hp->laurel_rank : 1) * sizeof(float));
    }
    bool ok = (!m->arch->altup || (s->alt && s->pred && s->mod)) && (!m->arch->laurel || (s->lau && s->lrank)) &&
              s->x && s->h && s->q && s->k && s->v && s->att && s->g && s->u && s->tmp && s->act && s->attn &&
              s->rope && s->attn_plan && s->attn_pos && s->kv_seqs && (s->qg || !m->arch->q_gate) &&
              (!NP || (s->ple && s->ple_row)) && (s->ffn2 || !(m->arch->moe_dense && hp->n_expert));
    struct sp_fwd_linear_sizes ls;
    sp_fwd_linear_sizes(m, &ls);
    if (ok && ls.lin) {
        s->lin_stride = ls.lin;
        s->lin_in_floats = ls.in;
        s->lin = sp_fwd_alloc(s, B * ls.lin * sizeof(float));
        s->lin_in = sp_fwd_alloc(s, B * ls.in * sizeof(float));
        s->lin_cb = sp_fwd_alloc(s, B * ls.cb * sizeof(float));
        s->lin_y = sp_fwd_alloc(s, B * ls.y * sizeof(float));
        s->lin_h_floats = ls.h;
        s->lin_h = sp_fwd_alloc(s, (size_t)sp_pool_chunks_for(n_threads) * 2 * (ls.h ? ls.h : 1) * sizeof(float));
        s->runs = sp_fwd_alloc(s, B * sp_fwd_run_bytes());
        s->tok_run = sp_fwd_alloc(s, B * sizeof *s->tok_run);
        ok = s->lin && s->lin_in && s->lin_cb && s->lin_y && s->lin_h && s->runs && s->tok_run;
    }
    if (ok && X) {
        size_t FX = hp->n_ff_exp;
        s->moe_logits = sp_fwd_alloc(s, B * X * sizeof(float));
        s->moe_w = sp_fwd_alloc(s, R * sizeof(float));
        s->moe_ids = sp_fwd_alloc(s, R * sizeof(int32_t));
        s->moe_tok = sp_fwd_alloc(s, R * sizeof(int32_t));
        s->moe_row = sp_fwd_alloc(s, R * sizeof(int32_t));
        s->moe_exp = sp_fwd_alloc(s, R * sizeof(int32_t));
        s->moe_act = sp_fwd_alloc(s, R * sp_fwd_max_act(m, true));
        s->moe_g = sp_fwd_alloc(s, R * FX * sizeof(float));
        s->moe_u = sp_fwd_alloc(s, R * FX * sizeof(float));
        s->moe_d = sp_fwd_alloc(s, R * E * sizeof(float));
        s->moe_groups = sp_fwd_alloc(s, 2 * X * sizeof *s->moe_groups);
        ok = s->moe_logits && s->moe_w && s->moe_ids && s->moe_tok && s->moe_row && s->moe_exp && s->moe_act && s->moe_g &&
             s->moe_u && s->moe_d && s->moe_groups;
    }
    if (!ok) {
        sp_forward_scratch_free(s);
        return sp_error_set(SP_ERR_NOMEM, "forward: no memory for a %d-token batch", n_batch);
    }
    return SP_OK;
}

const float *sp_forward_hidden(const struct sp_forward_scratch *s)
{
    return s->h;
}

void sp_forward_scratch_free(struct sp_forward_scratch *s)
{
    free(s->x); free(s->h); free(s->q); free(s->k); free(s->v); free(s->att);
    free(s->g); free(s->u); free(s->tmp); free(s->act); free(s->attn); free(s->rope);
    free(s->attn_plan); free(s->attn_pos);
    free(s->moe_logits); free(s->moe_w); free(s->moe_ids); free(s->moe_tok); free(s->moe_row); free(s->moe_exp);
    free(s->moe_act); free(s->moe_g); free(s->moe_u); free(s->moe_d); free(s->moe_groups);
    free(s->alt); free(s->pred); free(s->mod); free(s->lau); free(s->lrank);
    free(s->kv_seqs); free(s->qg); free(s->ple); free(s->ple_row); free(s->ffn2); free(s->lin); free(s->lin_in); free(s->lin_cb); free(s->lin_y); free(s->lin_h); free(s->runs); free(s->tok_run);
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
    SP_FWD_GATE,      /* q_gate: the attention output times sigmoid(gate) */
    SP_FWD_QK,        /* q/k norm and RoPE, then K/V into the cache */
    SP_FWD_MLA_Q,     /* mla: the query LoRA's norm over tmp's rows */
    SP_FWD_MLA,       /* mla: the query's RoPE part, the latent's norm and the key's RoPE, then the
                         latent and RoPE key into the cache */
    SP_FWD_ATTN_OUT,  /* (post-norm) tmp, x += tmp, rmsnorm(x) -> h with ffn_norm */
    SP_FWD_GLU,       /* g = act(g) * u */
    SP_FWD_FFN_OUT,   /* (post-norm) tmp, x += tmp, then the next layer's SP_FWD_ATTN_IN (per_layer_embd:
                         h = x, for inp_gate) */
    SP_FWD_MOE_IN,    /* moe_dense: ffn2 = rmsnorm(tmp) (the dense half, post_ffw_norm_1), h = the experts'
                         input (pre_ffw_norm_2), tmp = the router's input */
    SP_FWD_MOE_OUT,   /* moe_dense: tmp = rmsnorm(tmp) (post_ffw_norm_2) + ffn2 */
    SP_FWD_PLE_GLU,   /* g = gelu(g) * the layer's per-layer input */
    SP_FWD_PLE_OUT,   /* rmsnorm(tmp) with post_norm, x += tmp, then the next layer's SP_FWD_ATTN_IN */
    SP_FWD_ALT_STREAMS, /* altup: stream 0 = x; stream i = tmp rescaled to |x| (alt_i: the i-th of
                           j->ff's streams being made) */
    SP_FWD_ALT_PRED_IN, /* altup: h = the router's input from the active stream */
    SP_FWD_ALT_PRED,  /* altup: the predictions, x = the active one, h = rmsnorm(x) with attn_norm */
    SP_FWD_LAUREL,    /* laurel: lau = rmsnorm(lau) with laurel_post_norm + h */
    SP_FWD_ALT_CORR_IN, /* altup: h = the router's input from x (the layer's output) */
    SP_FWD_ALT_CORR,  /* altup: the corrected streams, h = the active one times altup_correct_scale */
    SP_FWD_ALT_PLE_OUT, /* altup: rmsnorm(tmp) with post_norm added to the streams other than 0 */
    SP_FWD_ALT_MERGE, /* altup: x += tmp rescaled to the active stream's size (stream j->ff's share);
                         the last share also divides by n_altup */
};

struct sp_fwd_job {
    enum sp_fwd_stage stage;
    const struct sp_model *m;
    const struct sp_layer *L;
    int ff;                       /* SP_FWD_GLU: width of g and u */
    const struct sp_layer *next;  /* SP_FWD_FFN_OUT: the next layer, NULL after the last */
    int alt_i;                    /* SP_FWD_ALT_STREAMS, SP_FWD_ALT_MERGE: the stream (1..n_altup - 1) */
    const struct sp_tensor *qw;   /* quantize the stage's output row for this matrix; NULL: none */
    struct sp_forward_scratch *s;
    struct sp_kv *kv;
    const struct sp_forward_batch *b;
    uint32_t il;
};

/* A token's q row (is_q) or k row of n_head heads gets its bias, norm,
 * RoPE and, for q, the prescale: in llama.cpp's order. */
static void sp_fwd_qk_row(const struct sp_fwd_job *j, int t, float *x, int n_head, const struct sp_tensor *bias,
                          const struct sp_tensor *norm, bool is_q)
{
    const struct sp_hparams *hp = &j->m->hp;
    const struct sp_arch *ar = j->m->arch;
    const int D = (int)j->L->head_dim, NR = (int)j->L->n_rot, W = n_head * D;
    const float *cs = j->s->rope + (size_t)t * NR;
    if (bias->data)
        for (int i = 0; i < W; i++)
            x[i] += ((const float *)bias->data)[i];
    if (ar->qk_norm == SP_QK_NORM_FULL)
        sp_rmsnorm(x, norm->data, x, W, hp->eps);
    for (int h = 0; h < n_head; h++) {
        float *xh = x + (size_t)h * D;
        if (ar->qk_norm == SP_QK_NORM_HEAD)
            sp_rmsnorm(xh, norm->data, xh, D, hp->eps);
        if (!j->L->nope)
            sp_rope_apply(xh, cs, NR, ar->rope_neox);
        if (j->L->qk_l2) /* after RoPE, as llama.cpp */
            sp_rmsnorm(xh, NULL, xh, D, hp->eps);
    }
    if (is_q && ar->q_prescale)
        for (int i = 0; i < W; i++)
            x[i] *= hp->attn_scale;
    if (is_q && hp->attn_temp != 0.0f && (!ar->nope_temp || j->L->nope)) {
        /* as llama.cpp's attn_temp input: in double, then rounded */
        const float pos = (float)j->b->pos[t] + hp->attn_temp_offset;
        const float floors = floorf(pos / (float)hp->attn_temp_floor);
        const float sc = (float)(log((double)floors + 1.0) * (double)hp->attn_temp + 1.0);
        for (int i = 0; i < W; i++)
            x[i] *= sc;
    }
}

/* The family's norm of one row of n_embd (bias: LayerNorm's, data NULL: none). */
static void sp_fwd_norm(const struct sp_model *m, const float *x, const struct sp_tensor *w,
                        const struct sp_tensor *bias, float *y)
{
    if (m->arch->norm == SP_NORM_LAYER)
        sp_layernorm(x, w->data, bias->data, y, m->hp.n_embd, m->hp.eps);
    else
        sp_rmsnorm(x, w->data, y, m->hp.n_embd, m->hp.eps);
}

static void sp_fwd_add(float *restrict x, const struct sp_tensor *bias, int n)
{
    const float *restrict b = bias->data;
    if (!b) /* no bias; tested once, so the loop vectorizes */
        return;
    for (int i = 0; i < n; i++)
        x[i] += b[i];
}

static const struct sp_tensor sp_fwd_none;

/* Multi-head latent attention's per-token part: each head's RoPE query
 * (the last n_rot of its mla_k in att) roped into q after its absorbed
 * part, and the cache row (k: latent then RoPE key) normed, roped and
 * stored as both key and value (the value sum reads the latent part; one
 * KV head for every query head). */
static void sp_fwd_mla_token(const struct sp_fwd_job *j, int t)
{
    const struct sp_hparams *hp = &j->m->hp;
    struct sp_forward_scratch *s = j->s;
    const int H = (int)hp->n_head, D = (int)hp->head_dim, NR = (int)hp->n_rot, C = (int)hp->n_lora_kv;
    const int K = (int)hp->mla_k;
    const float *cs = s->rope + (size_t)t * NR;
    for (int h = 0; h < H; h++) {
        float *qr = s->q + (size_t)t * H * D + (size_t)h * D + C;
        memcpy(qr, s->att + (size_t)t * H * K + (size_t)h * K + (K - NR), (size_t)NR * sizeof *qr);
        sp_rope_apply(qr, cs, NR, false);
    }
    float *k = s->k + (size_t)t * D;
    sp_rmsnorm(k, j->L->kv_a_norm.data, k, C, hp->eps);
    sp_rope_apply(k + C, cs, NR, false);
    sp_kv_store(j->kv, s->kv_seqs[t], j->il, (uint32_t)j->b->pos[t], k, k);
}

/* The altup and laurel stages of token t; true when the stage's output is
 * h (then quantized for j->qw). */
static bool sp_fwd_altup_token(const struct sp_fwd_job *j, int t)
{
    const struct sp_model *m = j->m;
    const struct sp_layer *L = j->L;
    struct sp_forward_scratch *s = j->s;
    const int E = (int)m->hp.n_embd, A = (int)m->hp.n_altup, act = (int)m->hp.altup_act;
    float *x = s->x + (size_t)t * E, *h = s->h + (size_t)t * E, *o = s->tmp + (size_t)t * E;
    float *alt = s->alt + (size_t)t * A * E, *pred = s->pred + (size_t)t * A * E;
    float *mod = s->mod + (size_t)t * SP_ALTUP_MAX;
    switch (j->stage) {
    case SP_FWD_ALT_STREAMS:
        if (j->alt_i == 1)
            memcpy(alt, x, (size_t)E * sizeof *x);
        sp_altup_rescale(o, x, E);
        memcpy(alt + (size_t)j->alt_i * E, o, (size_t)E * sizeof *o);
        return false;
    case SP_FWD_ALT_PRED_IN:
        sp_altup_router_in(m, L, alt + (size_t)act * E, h);
        return true;
    case SP_FWD_ALT_PRED:
        sp_altup_predict(m, L, mod, alt, pred);
        memcpy(x, pred + (size_t)act * E, (size_t)E * sizeof *x);
        sp_rmsnorm(x, L->attn_norm.data, h, E, m->hp.eps);
        return true;
    case SP_FWD_LAUREL: {
        float *l = s->lau + (size_t)t * E;
        sp_rmsnorm(l, L->lau_norm.data, l, E, m->hp.eps);
        for (int i = 0; i < E; i++)
            l[i] += h[i];
        return false;
    }
    case SP_FWD_ALT_CORR_IN:
        sp_altup_router_in(m, L, x, h);
        return true;
    case SP_FWD_ALT_CORR: {
        const float *sc = L->alt_cscale.data, *a = alt + (size_t)act * E;
        sp_altup_correct(m, L, mod, x, pred, alt);
        for (int i = 0; i < E; i++)
            h[i] = a[i] * sc[i];
        return true;
    }
    case SP_FWD_ALT_PLE_OUT:
        sp_rmsnorm(o, L->pl_norm.data, o, E, m->hp.eps);
        for (int k = 1; k < A; k++)
            for (int i = 0; i < E; i++)
                alt[(size_t)k * E + i] += o[i];
        return false;
    case SP_FWD_ALT_MERGE:
        if (j->alt_i == 1)
            memcpy(x, alt, (size_t)E * sizeof *x);
        sp_altup_rescale(o, alt + (size_t)act * E, E);
        for (int i = 0; i < E; i++)
            x[i] += o[i];
        for (int i = 0; j->alt_i == A - 1 && i < E; i++)
            x[i] *= 1.0f / (float)A;
        return false;
    default:
        return false;
    }
}

static void sp_fwd_token(const struct sp_fwd_job *j, int t)
{
    const struct sp_hparams *hp = &j->m->hp;
    const struct sp_arch *ar = j->m->arch;
    const struct sp_layer *L = j->L;
    struct sp_forward_scratch *s = j->s;
    const int E = (int)hp->n_embd, D = (int)L->head_dim, H = (int)hp->n_head, HKV = (int)L->n_head_kv;
    const int Q = H * D, KVW = HKV * D, F = j->ff;
    float *x = s->x + (size_t)t * E, *h = s->h + (size_t)t * E;
    switch (j->stage) {
    case SP_FWD_ATTN_IN:
        if (ar->post_ln || ar->no_pre_norm)
            memcpy(h, x, (size_t)E * sizeof *h);
        else
            sp_fwd_norm(j->m, x, &L->attn_norm, &sp_fwd_none, h);
        break;
    case SP_FWD_GATE: {
        float *a = s->att + (size_t)t * Q;
        const float *qg = s->qg + (size_t)t * 2 * Q;
        for (int hh = 0; hh < H; hh++)
            for (int d = 0; d < D; d++) /* as ggml: 1 / (1 + e^-x) */
                a[hh * D + d] *= 1.0f / (1.0f + expf(-qg[(size_t)hh * 2 * D + D + d]));
        if (j->qw)
            sp_act_quantize_row(j->qw, a, s->act + (size_t)t * sp_act_row_bytes(j->qw));
        return;
    }
    case SP_FWD_QK: {
        float *vt = s->v + (size_t)t * KVW, *kt = s->k + (size_t)t * KVW;
        if (ar->q_gate) /* each head's query, out of its (query, gate) pair */
            for (int hh = 0; hh < H; hh++)
                memcpy(s->q + (size_t)t * Q + (size_t)hh * D, s->qg + (size_t)t * 2 * Q + (size_t)hh * 2 * D,
                       (size_t)D * sizeof(float));
        sp_fwd_qk_row(j, t, s->q + (size_t)t * Q, H, &L->bq, &L->q_norm, true);
        if (L->kv_src != j->il) /* the keys and values are another layer's, in the cache */
            break;
        if (!L->wv.data) /* v_from_k: the values are the keys before their norm and RoPE */
            memcpy(vt, kt, (size_t)KVW * sizeof *vt);
        sp_fwd_qk_row(j, t, kt, HKV, &L->bk, &L->k_norm, false);
        if (L->bv.data)
            for (int i = 0; i < KVW; i++)
                vt[i] += ((const float *)L->bv.data)[i];
        for (int hh = 0; ar->v_norm && hh < HKV; hh++)
            sp_rmsnorm(vt + (size_t)hh * D, NULL, vt + (size_t)hh * D, D, hp->eps);
        sp_kv_store(j->kv, s->kv_seqs[t], j->il, (uint32_t)j->b->pos[t], kt, vt);
        break;
    }
    case SP_FWD_MLA_Q: {
        float *r = s->tmp + (size_t)t * hp->n_lora_q;
        sp_rmsnorm(r, L->q_a_norm.data, r, (int64_t)hp->n_lora_q, hp->eps);
        if (j->qw)
            sp_act_quantize_row(j->qw, r, s->act + (size_t)t * sp_act_row_bytes(j->qw));
        return;
    }
    case SP_FWD_MLA:
        sp_fwd_mla_token(j, t);
        return;
    case SP_FWD_ATTN_OUT:
    case SP_FWD_FFN_OUT: {
        float *o = s->tmp + (size_t)t * E;
        const bool attn = j->stage == SP_FWD_ATTN_OUT;
        sp_fwd_add(o, attn ? &L->bo : &L->b_down, E);
        if (ar->post_norms)
            sp_rmsnorm(o, (attn ? &L->post_attn_norm : &L->post_ffn_norm)->data, o, E, hp->eps);
        if (hp->resid_scale) /* Granite: the block's output scaled before its residual add */
            for (int i = 0; i < E; i++)
                o[i] *= hp->resid_scale;
        for (int i = 0; i < E; i++)
            x[i] += o[i];
        if (attn && ar->laurel) { /* the attention's residual and the laurel branch, averaged in size */
            const float *l = s->lau + (size_t)t * E, r = 1.0f / sqrtf(2.0f);
            for (int i = 0; i < E; i++)
                x[i] = (x[i] + l[i]) * r;
        }
        if (!attn && ar->altup) /* the correction reads x (sp_fwd_altup_end) */
            return;
        if (!attn && j->m->hp.n_embd_pl) { /* the per-layer block reads x (sp_fwd_ple) */
            memcpy(h, x, (size_t)E * sizeof *h);
            break;
        }
        for (int i = 0; !attn && L->out_scale != 1.0f && i < E; i++)
            x[i] *= L->out_scale;
        if (ar->post_ln) { /* the norm is on the residual stream itself */
            sp_fwd_norm(j->m, x, attn ? &L->attn_out_norm : &L->ffn_out_norm,
                        attn ? &L->attn_out_norm_b : &L->ffn_out_norm_b, x);
            memcpy(h, x, (size_t)E * sizeof *h);
        } else if (attn && ar->parallel) {
            /* the feed-forward reads the attention's input, still in h */
        } else if (ar->no_pre_norm) {
            memcpy(h, x, (size_t)E * sizeof *h);
        } else if (attn) {
            sp_fwd_norm(j->m, x, &L->ffn_norm, &sp_fwd_none, h);
        } else if (j->next) { /* while the row is hot */
            sp_fwd_norm(j->m, x, &j->next->attn_norm, &sp_fwd_none, h);
        }
        break;
    }
    case SP_FWD_GLU: {
        float *g = s->g + (size_t)t * F, *u = s->u + (size_t)t * F;
        if (ar->ffn_plain && ar->ffn_act == SP_FFN_RELU2) { /* g holds ffn_up's output */
            for (int i = 0; i < F; i++) { /* as ggml: relu, then the square */
                float r = g[i] > 0.0f ? g[i] : 0.0f;
                g[i] = r * r;
            }
        } else if (ar->ffn_plain) { /* g holds ffn_up's output */
            sp_fwd_add(g, &L->b_up, F);
            sp_gelu(g, g, F);
        } else if (ar->ffn_act == SP_FFN_GELU) {
            if (L->sparse)
                sp_altup_topk(g, F);
            sp_geglu(g, u, g, F);
        } else {
            sp_swiglu(g, u, g, F);
        }
        if (j->qw)
            sp_act_quantize_row(j->qw, g, s->act + (size_t)t * sp_act_row_bytes(j->qw));
        return;
    }
    case SP_FWD_MOE_IN: {
        float *o = s->tmp + (size_t)t * E;
        const float *sc = L->gate_inp_s.data, r = 1.0f / sqrtf((float)E);
        sp_rmsnorm(o, L->ffn_post1.data, s->ffn2 + (size_t)t * E, E, hp->eps);
        sp_rmsnorm(x, L->ffn_pre2.data, h, E, hp->eps);
        sp_rmsnorm(x, NULL, o, E, hp->eps);
        for (int i = 0; i < E; i++)
            o[i] = o[i] * r * sc[i];
        return;
    }
    case SP_FWD_MOE_OUT: {
        float *o = s->tmp + (size_t)t * E;
        const float *d = s->ffn2 + (size_t)t * E;
        sp_rmsnorm(o, L->ffn_post2.data, o, E, hp->eps);
        for (int i = 0; i < E; i++)
            o[i] += d[i];
        return;
    }
    case SP_FWD_PLE_GLU: {
        const int P = (int)hp->n_embd_pl;
        float *g = s->g + (size_t)t * P;
        const float *in = s->ple + ((size_t)t * hp->n_layer + j->il) * P;
        sp_gelu(g, g, P);
        for (int i = 0; i < P; i++)
            g[i] *= in[i];
        sp_act_quantize_row(j->qw, g, s->act + (size_t)t * sp_act_row_bytes(j->qw));
        return;
    }
    case SP_FWD_ALT_STREAMS:
    case SP_FWD_ALT_PRED_IN:
    case SP_FWD_ALT_PRED:
    case SP_FWD_LAUREL:
    case SP_FWD_ALT_CORR_IN:
    case SP_FWD_ALT_CORR:
    case SP_FWD_ALT_PLE_OUT:
    case SP_FWD_ALT_MERGE:
        if (!sp_fwd_altup_token(j, t))
            return;
        break;
    case SP_FWD_PLE_OUT: {
        float *o = s->tmp + (size_t)t * E;
        sp_rmsnorm(o, L->pl_norm.data, o, E, hp->eps);
        for (int i = 0; i < E; i++)
            x[i] = (x[i] + o[i]) * L->out_scale;
        if (j->next)
            sp_fwd_norm(j->m, x, &j->next->attn_norm, &sp_fwd_none, h);
        break;
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
        c->src = stage == SP_FWD_GLU || stage == SP_FWD_PLE_GLU ? j->s->g
                 : stage == SP_FWD_GATE                       ? j->s->att
                 : stage == SP_FWD_MLA_Q                      ? j->s->tmp
                                                              : j->s->h;
        c->type = sp_type_get(qw->type)->vec_dot_type;
    }
}

/* ---- feed-forward ---- */

/* Dense SwiGLU/GeGLU over every token: s->h -> s->tmp (gate and up in
 * one pool run, the activation stage quantizing for down). */
static void sp_fwd_dense(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *c,
                         const struct sp_layer *L, int F)
{
    struct sp_forward_scratch *s = job->s;
    const int T = job->b->n_tok, E = (int)job->m->hp.n_embd;
    const struct sp_tensor *w2[2] = {&L->w_gate, &L->w_up};
    float *o2[2] = {s->g, s->u};
    const size_t st2[2] = {(size_t)F, (size_t)F};
    if (L->w_gate.data)
        sp_fwd_mm_multi(s, pool, c, 2, w2, s->h, E, T, o2, st2);
    else /* ffn_plain: up alone, into g */
        sp_fwd_mm(s, pool, c, &L->w_up, s->h, E, T, s->g, (size_t)F);
    job->ff = F;
    sp_fwd_stage(job, pool, SP_FWD_GLU, &L->w_down, c);
    sp_fwd_mm(s, pool, c, &L->w_down, s->g, F, T, s->tmp, E);
}

/* The routed rows' activation (gate * up into moe_g, after their
 * experts' biases if any) and its quantization for the down matrices,
 * rows [lo, hi). */
struct sp_moe_glu {
    const struct sp_model *m;
    struct sp_forward_scratch *s;
    const struct sp_layer *L;
    const struct sp_tensor *down;
    int n_rows;
};

static void sp_moe_glu_rows(const struct sp_moe_glu *j, long lo, long hi)
{
    const int FX = (int)j->m->hp.n_ff_exp;
    const size_t ab = sp_act_row_bytes(j->down);
    const float *bg = j->L->exps_b[SP_EXP_GATE].data, *bu = j->L->exps_b[SP_EXP_UP].data;
    for (long r = lo; r < hi; r++) {
        float *g = j->s->moe_g + (size_t)r * FX, *u = j->s->moe_u + (size_t)r * FX;
        if (bg) { /* the row's expert's biases (moe_bias families have both) */
            const size_t e = (size_t)j->s->moe_exp[r] * FX;
            for (int i = 0; i < FX; i++) {
                g[i] += bg[e + i];
                u[i] += bu[e + i];
            }
        }
        if (j->m->arch->ffn_act == SP_FFN_SWIGLU_OAI)
            sp_swiglu_oai(g, u, g, FX);
        else if (j->m->arch->ffn_act == SP_FFN_GELU)
            sp_geglu(g, u, g, FX);
        else
            sp_swiglu(g, u, g, FX);
        sp_act_quantize_row(j->down, g, (uint8_t *)j->s->moe_act + (size_t)r * ab);
    }
}

static void sp_moe_glu_run(void *arg, int ith, int nth)
{
    const struct sp_moe_glu *j = arg;
    long lo, hi;
    sp_pool_split(j->n_rows, 1, ith, nth, &lo, &hi);
    sp_moe_glu_rows(j, lo, hi);
}

/* Each token's output, tokens [lo, hi): its experts' down rows (plus
 * their experts' down biases, if any) times their weights, summed in
 * selection order (in the first expert's row), plus the
 * shared expert's output in s->tmp times sigmoid(h · shexp_gate); into
 * s->tmp. */
struct sp_moe_sum {
    const struct sp_model *m;
    struct sp_forward_scratch *s;
    const struct sp_layer *L;
    int n_tok;
};

static void sp_moe_sum_rows(const struct sp_moe_sum *j, long lo, long hi)
{
    const struct sp_hparams *hp = &j->m->hp;
    struct sp_forward_scratch *s = j->s;
    const int E = (int)hp->n_embd, K = (int)hp->n_expert_used;
    for (long t = lo; t < hi; t++) {
        float *o = s->tmp + (size_t)t * E, *acc = s->moe_d + (size_t)s->moe_row[t * K] * E;
        const float *w = s->moe_w + t * K, *bd = j->L->exps_b[SP_EXP_DOWN].data;
        for (int k = 0; bd && k < K; k++) { /* as llama.cpp: bias, then weight */
            float *d = s->moe_d + (size_t)s->moe_row[t * K + k] * E;
            const float *b = bd + (size_t)s->moe_ids[t * K + k] * E;
            for (int i = 0; i < E; i++)
                d[i] += b[i];
        }
        for (int i = 0; i < E; i++)
            acc[i] *= w[0];
        for (int k = 1; k < K; k++) {
            const float *d = s->moe_d + (size_t)s->moe_row[t * K + k] * E;
            for (int i = 0; i < E; i++)
                acc[i] += w[k] * d[i];
        }
        if (!hp->n_ff_shexp) {
            memcpy(o, acc, (size_t)E * sizeof *o);
            continue;
        }
        if (j->m->arch->shexp_ungated) {
            for (int i = 0; i < E; i++)
                o[i] = acc[i] + o[i];
            continue;
        }
        const float *h = s->h + (size_t)t * E, *g = j->L->shexp_gate.data;
        float z = 0.0f;
        for (int i = 0; i < E; i++)
            z += h[i] * g[i];
        const float gate = 1.0f / (1.0f + expf(-z));
        for (int i = 0; i < E; i++)
            o[i] = acc[i] + o[i] * gate;
    }
}

static void sp_moe_sum_run(void *arg, int ith, int nth)
{
    const struct sp_moe_sum *j = arg;
    long lo, hi;
    sp_pool_split(j->n_tok, 1, ith, nth, &lo, &hi);
    sp_moe_sum_rows(j, lo, hi);
}

/* Groups of the routed rows for matrix kind k: one per expert with rows,
 * q its activation rows (row_bytes apart), out its output rows. */
static int sp_moe_groups(const struct sp_layer *L, const struct sp_hparams *hp, int kind, const int32_t *off,
                         const void *q, size_t row_bytes, float *out, size_t out_stride, struct sp_mm_group *g)
{
    int n = 0;
    for (uint32_t e = 0; e < hp->n_expert; e++)
        if (off[e + 1] > off[e])
            g[n++] = (struct sp_mm_group){.w = &L->exps[kind * hp->n_expert + e],
                                          .q = (const uint8_t *)q + (size_t)off[e] * row_bytes,
                                          .n_tok = off[e + 1] - off[e],
                                          .out = out + (size_t)off[e] * out_stride, .out_stride = out_stride};
    return n;
}

/* Quantizes s->h for w (unless the buffer holds it) and copies each routed
 * row's token row into moe_act in grouped order. */
static void sp_moe_gather(struct sp_forward_scratch *s, struct sp_pool *pool, struct sp_act_cache *c,
                          const struct sp_tensor *w, int T, int E, int n_rows)
{
    uint32_t at = sp_type_get(w->type)->vec_dot_type;
    if (c->src != s->h || c->type != at) {
        sp_act_quantize(pool, w, s->h, (size_t)E, T, s->act);
        c->src = s->h;
        c->type = at;
    }
    const size_t ab = sp_act_row_bytes(w);
    for (int r = 0; r < n_rows; r++)
        memcpy((uint8_t *)s->moe_act + (size_t)r * ab, (const uint8_t *)s->act + (size_t)s->moe_tok[r] * ab, ab);
}

/* moe_weight_in: each routed row is its token's row of s->h times its
 * router weight, quantized for w into moe_act in grouped order (in float
 * it passes through moe_d, which the down matrices fill only later). */
static void sp_moe_gather_weighted(struct sp_forward_scratch *s, const struct sp_tensor *w, int T, int E, int K)
{
    const size_t ab = sp_act_row_bytes(w);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            const int r = s->moe_row[t * K + k];
            const float *h = s->h + (size_t)t * E, wt = s->moe_w[t * K + k];
            float *x = s->moe_d + (size_t)r * E;
            for (int i = 0; i < E; i++)
                x[i] = h[i] * wt;
            sp_act_quantize_row(w, x, (uint8_t *)s->moe_act + (size_t)r * ab);
        }
}

/* The routed rows' input for w: the token's row, or (moe_weight_in) it
 * times the router weight. */
static void sp_moe_input(const struct sp_model *m, struct sp_forward_scratch *s, struct sp_pool *pool,
                         struct sp_act_cache *c, const struct sp_tensor *w, int T, int E, int K)
{
    if (m->arch->moe_weight_in)
        sp_moe_gather_weighted(s, w, T, E, K);
    else
        sp_moe_gather(s, pool, c, w, T, E, T * K);
}

/* Mixture-of-experts feed-forward: s->h -> s->tmp.  The router picks each
 * token's experts; the (token, expert) rows are grouped by expert, so each
 * expert's matrices are read once per step, for all its tokens, and only
 * the selected experts are read at all.  Each token's output is the sum
 * of its experts' outputs times their weights in selection order (then the
 * shared expert's, times its sigmoid gate), whatever else is in the batch. */
static void sp_fwd_moe(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *c, const struct sp_layer *L,
                       const float *router_in)
{
    const struct sp_model *m = job->m;
    const struct sp_hparams *hp = &m->hp;
    struct sp_forward_scratch *s = job->s;
    const int T = job->b->n_tok, E = (int)hp->n_embd, X = (int)hp->n_expert, K = (int)hp->n_expert_used;
    const int FX = (int)hp->n_ff_exp, R = T * K;
    int32_t off[SP_MOE_MAX_EXPERTS + 1] = {0}, fill[SP_MOE_MAX_EXPERTS];

    const struct sp_moe_rule rule = {.router = hp->router, .norm = hp->moe_norm, .sel_bias = L->exp_probs_b.data,
                                     .n_group = (int)hp->n_group, .n_group_used = (int)hp->n_group_used,
                                     .scale = hp->exp_w_scale};
    sp_fwd_mm(s, pool, c, &L->gate_inp, router_in, (size_t)E, T, s->moe_logits, (size_t)X);
    for (int t = 0; t < T; t++) {
        sp_fwd_add(s->moe_logits + (size_t)t * X, &L->gate_inp_b, X);
        sp_moe_route_rule(s->moe_logits + (size_t)t * X, X, K, &rule, s->moe_ids + t * K, s->moe_w + t * K);
        for (int k = 0; L->exps_s.data && k < K; k++) /* each expert's output scale, on its weight */
            s->moe_w[t * K + k] *= ((const float *)L->exps_s.data)[s->moe_ids[t * K + k]];
        for (int k = 0; k < K; k++)
            off[s->moe_ids[t * K + k] + 1]++;
    }
    for (int e = 0; e < X; e++) {
        off[e + 1] += off[e];
        fill[e] = off[e];
    }
    for (int t = 0; t < T; t++) /* within an expert, tokens ascending */
        for (int k = 0; k < K; k++) {
            int r = fill[s->moe_ids[t * K + k]]++;
            s->moe_tok[r] = t;
            s->moe_exp[r] = s->moe_ids[t * K + k];
            s->moe_row[t * K + k] = r;
        }

    const struct sp_tensor *gate = &L->exps[SP_EXP_GATE * X], *up = &L->exps[SP_EXP_UP * X];
    const struct sp_tensor *down = &L->exps[SP_EXP_DOWN * X];
    struct sp_mm_group *g = s->moe_groups;
    sp_moe_input(m, s, pool, c, gate, T, E, K);
    int n = sp_moe_groups(L, hp, SP_EXP_GATE, off, s->moe_act, sp_act_row_bytes(gate), s->moe_g, (size_t)FX, g);
    if (sp_type_get(up->type)->vec_dot_type == sp_type_get(gate->type)->vec_dot_type) {
        n += sp_moe_groups(L, hp, SP_EXP_UP, off, s->moe_act, sp_act_row_bytes(up), s->moe_u, (size_t)FX, g + n);
        sp_matmul_grouped(pool, n, g);
    } else {
        sp_matmul_grouped(pool, n, g);
        sp_moe_input(m, s, pool, c, up, T, E, K);
        n = sp_moe_groups(L, hp, SP_EXP_UP, off, s->moe_act, sp_act_row_bytes(up), s->moe_u, (size_t)FX, g);
        sp_matmul_grouped(pool, n, g);
    }
    for (int r = 0; m->arch->moe_weight_in && r < R; r++) /* applied to the input */
        s->moe_w[r] = 1.0f;
    struct sp_moe_glu glu = {m, s, L, down, R};
    if ((long)R * FX < 65536) /* a decode step's few rows: less than a pool run costs */
        sp_moe_glu_rows(&glu, 0, R);
    else
        sp_pool_run(pool, sp_moe_glu_run, &glu);
    n = sp_moe_groups(L, hp, SP_EXP_DOWN, off, s->moe_act, sp_act_row_bytes(down), s->moe_d, (size_t)E, g);
    sp_matmul_grouped(pool, n, g);

    if (hp->n_ff_shexp) /* into s->tmp */
        sp_fwd_dense(job, pool, c, L, (int)hp->n_ff_shexp);
    struct sp_moe_sum sum = {m, s, L, T};
    if (T < 4)
        sp_moe_sum_rows(&sum, 0, T);
    else
        sp_pool_run(pool, sp_moe_sum_run, &sum);
}

/* Final-logit soft-capping (cap > 0) or scaling (scale != 0: Granite's
 * 1 / logit_scale, Cohere's logit_scale) over [n][n_vocab], elements split across the pool. */
struct sp_cap_job {
    float *x;
    long n;
    float cap, scale;
};

static void sp_cap_run(void *arg, int ith, int nth)
{
    const struct sp_cap_job *j = arg;
    long lo, hi;
    sp_pool_split(j->n, 64, ith, nth, &lo, &hi);
    if (hi > lo && j->cap > 0.0f)
        sp_softcap(j->x + lo, hi - lo, j->cap);
    for (long i = lo; j->scale != 0.0f && i < hi; i++)
        j->x[i] *= j->scale;
}

/* The first matrix that reads a layer's normed input (its stage quantizes
 * for it). */
static const struct sp_tensor *sp_fwd_first(const struct sp_layer *L)
{
    return L->mixer == SP_MIXER_SSM ? &L->ssm_in : L->mixer == SP_MIXER_CONV ? &L->sc_in
           : L->mixer == SP_MIXER_MLP ? &L->w_up : L->mixer == SP_MIXER_DELTA ? &L->dn_qkv
           : L->wq_a.data ? &L->wq_a : &L->wq;
}

/* The batch's cos/sin table for the layer's RoPE base (layers sharing a
 * base share it). */
static void sp_fwd_rope_table(struct sp_fwd_job *job, const float *rope_factors)
{
    const struct sp_hparams *hp = &job->m->hp;
    const struct sp_layer *L = job->L;
    struct sp_forward_scratch *s = job->s;
    const float base = L->rope_base;
    const int NR = (int)L->n_rot;
    if (!L->rope_ff)
        rope_factors = NULL;
    if (s->rope_base == base && s->rope_ff == rope_factors && s->rope_nr == NR) /* shared by layers alike */
        return;
    float yarn[2];
    if (hp->yarn)
        sp_rope_yarn_dims(NR, hp->n_ctx_orig, base, hp->yarn_beta_fast, hp->yarn_beta_slow, yarn);
    for (int t = 0; t < job->b->n_tok; t++)
        sp_rope_table(s->rope + (size_t)t * NR, NR, job->b->pos[t], base, hp->rope_freq_scale, rope_factors,
                      hp->rope_mscale, hp->yarn ? yarn : NULL);
    s->rope_base = base;
    s->rope_ff = rope_factors;
    s->rope_nr = NR;
}

/* Multi-head latent attention (the absorbed form, as llama.cpp runs a
 * current conversion): s->h -> s->tmp.  The query rows (att) come from
 * attn_q or the query LoRA; each head's no-RoPE part is absorbed into the
 * latent by its attn_k_b view (q gets [absorbed, RoPE part] per head),
 * the keys are the cached [latent, RoPE key] rows of one KV head, so
 * q . k = q_nope . k_nope + q_pe . k_pe of the decompressed heads; each
 * head's output latent (the first n_lora_kv of its attention output) is
 * widened by its attn_v_b view, then attn_output. */
static void sp_fwd_mla(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *cache,
                       const float *rope_factors, const int32_t *attn_pos, int max_pos)
{
    const struct sp_model *m = job->m;
    const struct sp_hparams *hp = &m->hp;
    const struct sp_layer *L = job->L;
    struct sp_forward_scratch *s = job->s;
    const int T = job->b->n_tok, E = (int)hp->n_embd, H = (int)hp->n_head, D = (int)hp->head_dim;
    const size_t K = hp->mla_k, V = hp->mla_v, R = hp->n_lora_q, QD = (size_t)H * (size_t)D, QK = (size_t)H * K;
    if (L->wq_a.data) {
        const struct sp_tensor *w2[2] = {&L->wq_a, &L->wkv_a};
        float *o2[2] = {s->tmp, s->k};
        const size_t st2[2] = {R, (size_t)D};
        sp_fwd_mm_multi(s, pool, cache, 2, w2, s->h, (size_t)E, T, o2, st2);
        sp_fwd_stage(job, pool, SP_FWD_MLA_Q, &L->wq, cache);
        sp_fwd_mm(s, pool, cache, &L->wq, s->tmp, R, T, s->att, QK);
    } else {
        const struct sp_tensor *w2[2] = {&L->wq, &L->wkv_a};
        float *o2[2] = {s->att, s->k};
        const size_t st2[2] = {QK, (size_t)D};
        sp_fwd_mm_multi(s, pool, cache, 2, w2, s->h, (size_t)E, T, o2, st2);
    }
    for (int h = 0; h < H; h++) /* q_nope of head h -> its absorbed query */
        sp_fwd_mm(s, pool, cache, &L->wk_b[h], s->att + (size_t)h * K, QK, T, s->q + (size_t)h * D, QD);
    sp_fwd_rope_table(job, rope_factors);
    sp_fwd_stage(job, pool, SP_FWD_MLA, NULL, cache);
    struct sp_attn_args aa = {
        .kv = job->kv, .layer = job->il, .n_tok = T, .q = s->q, .q_stride = QD, .seqs = s->kv_seqs, .pos = attn_pos,
        .n_head = H, .n_head_kv = 1, .head_dim = D, .scale = hp->attn_scale, .out = s->att, .out_stride = QD,
        .scratch = s->attn, .scratch_per_thread = s->attn_per_thread, .max_pos = max_pos, .plan = s->attn_plan,
    };
    sp_attention(pool, &aa);
    cache->src = NULL; /* att holds the attention's output now, not the query rows */
    for (int h = 0; h < H; h++) /* head h's output latent -> its values */
        sp_fwd_mm(s, pool, cache, &L->wv_b[h], s->att + (size_t)h * D, QD, T, s->q + (size_t)h * V, (size_t)H * V);
    sp_fwd_mm(s, pool, cache, &L->wo, s->q, (size_t)H * V, T, s->tmp, E);
}

/* The attention block of layer il: s->h -> s->tmp (attention output
 * projected). */
static void sp_fwd_attention(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *cache,
                             const float *rope_factors, const int32_t *attn_pos, int max_pos)
{
    const struct sp_model *m = job->m;
    const struct sp_hparams *hp = &m->hp;
    const struct sp_layer *L = job->L;
    const struct sp_forward_batch *b = job->b;
    struct sp_forward_scratch *s = job->s;
    const int T = b->n_tok, E = (int)hp->n_embd, D = (int)L->head_dim, H = (int)hp->n_head;
    const int HKV = (int)L->n_head_kv, Q = H * D, KVW = HKV * D;
    const struct sp_tensor *w3[3] = {&L->wq, &L->wk, &L->wv};
    float *o3[3] = {m->arch->q_gate ? s->qg : s->q, s->k, s->v};
    const size_t st3[3] = {(size_t)(m->arch->q_gate ? 2 * Q : Q), (size_t)KVW, (size_t)KVW};
    /* q alone where the keys and values are another layer's; q and k where the values are the keys */
    sp_fwd_mm_multi(s, pool, cache, !L->wk.data ? 1 : !L->wv.data ? 2 : 3, w3, s->h, E, T, o3, st3);
    sp_fwd_rope_table(job, rope_factors);
    sp_fwd_stage(job, pool, SP_FWD_QK, NULL, cache);
    struct sp_attn_args aa = {
        .kv = job->kv, .layer = job->il, .n_tok = T, .q = s->q, .q_stride = (size_t)Q, .seqs = s->kv_seqs,
        .pos = attn_pos, .n_head = H, .n_head_kv = HKV, .head_dim = D,
        .scale = m->arch->q_prescale ? 1.0f : hp->attn_scale, .softcap = hp->attn_softcap,
        .window = L->swa ? (int)hp->n_swa : 0, .chunked = m->arch->swa_chunked, .sinks = L->sinks.data, .out = s->att,
        .out_stride = (size_t)Q, .scratch = s->attn, .scratch_per_thread = s->attn_per_thread, .max_pos = max_pos,
        .plan = s->attn_plan,
    };
    sp_attention(pool, &aa);
    if (m->arch->q_gate)
        sp_fwd_stage(job, pool, SP_FWD_GATE, &L->wo, cache);
    sp_fwd_mm(s, pool, cache, &L->wo, s->att, Q, T, s->tmp, E);
}

/* ---- per-layer embeddings (per_layer_embd) ---- */

/* Each token's input of every layer, s->ple [T][n_layer][P], as llama.cpp
 * forms it: the scaled embeddings x projected by per_layer_model_proj and
 * times 1/sqrt(n_embd), each layer's P RMS-normed with per_layer_proj_norm,
 * plus the token's per_layer_token_embd row times sqrt(P), all times
 * 1/sqrt(2).  One token at a time, in one order: batch invariant. */
void sp_forward_ple_inputs(const struct sp_model *m, struct sp_forward_scratch *s, struct sp_pool *pool,
                           const sp_token *tokens, int T)
{
    const struct sp_hparams *hp = &m->hp;
    const int E = (int)hp->n_embd, P = (int)hp->n_embd_pl, NL = (int)hp->n_layer;
    const size_t NP = (size_t)P * NL;
    struct sp_act_cache c = {0};
    const float ps = 1.0f / sqrtf((float)E), ts = sqrtf((float)P), is = 1.0f / sqrtf(2.0f);
    sp_fwd_mm(s, pool, &c, &m->pl_model_proj, s->x, (size_t)E, T, s->ple, NP);
    for (int t = 0; t < T; t++) {
        float *r = s->ple + (size_t)t * NP;
        sp_tensor_row(&m->pl_tok_embd, tokens[t], s->ple_row);
        for (int l = 0; l < NL; l++) {
            float *p = r + (size_t)l * P;
            const float *e = s->ple_row + (size_t)l * P;
            for (int i = 0; i < P; i++)
                p[i] *= ps;
            sp_rmsnorm(p, m->pl_proj_norm.data, p, P, hp->eps);
            for (int i = 0; i < P; i++)
                p[i] = (p[i] + e[i] * ts) * is;
        }
    }
}

/* Layer il's per-layer block after its feed-forward (s->h holds x, and
 * s->act its activations for inp_gate): x += rmsnorm(proj(gelu(inp_gate x)
 * * its input)), then x times the layer's output scale, then the next
 * layer's attention input. */
static void sp_fwd_ple(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *c, const struct sp_layer *L)
{
    struct sp_forward_scratch *s = job->s;
    const int T = job->b->n_tok, E = (int)job->m->hp.n_embd, P = (int)job->m->hp.n_embd_pl;
    sp_fwd_mm(s, pool, c, &L->pl_gate, s->h, (size_t)E, T, s->g, (size_t)P);
    sp_fwd_stage(job, pool, SP_FWD_PLE_GLU, &L->pl_proj, c);
    sp_fwd_mm(s, pool, c, &L->pl_proj, s->g, (size_t)P, T, s->tmp, (size_t)E);
    if (job->m->arch->altup)
        sp_fwd_stage(job, pool, SP_FWD_ALT_PLE_OUT, NULL, c);
    else
        sp_fwd_stage(job, pool, SP_FWD_PLE_OUT, job->next ? sp_fwd_first(job->next) : NULL, c);
}

/* ---- AltUp and Laurel (altup, laurel: Gemma 3n) ---- */

/* The n_altup streams from the scaled embeddings in x: x itself, then
 * altup_proj's matrices of it, each rescaled to x's size. */
static void sp_fwd_altup_streams(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *c)
{
    struct sp_forward_scratch *s = job->s;
    const int T = job->b->n_tok, E = (int)job->m->hp.n_embd;
    job->L = &job->m->layers[0]; /* the stages read a layer (none here) */
    for (uint32_t i = 1; i < job->m->hp.n_altup; i++) {
        sp_fwd_mm(s, pool, c, &job->m->alt_proj[i - 1], s->x, (size_t)E, T, s->tmp, (size_t)E);
        job->alt_i = (int)i;
        sp_fwd_stage(job, pool, SP_FWD_ALT_STREAMS, NULL, c);
    }
}

/* A layer's start: the router reads the active stream, the streams are
 * predicted, x = the active prediction and h its attn_norm; laurel's
 * branch of h into s->lau. */
static void sp_fwd_altup_begin(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *c,
                               const struct sp_layer *L)
{
    struct sp_forward_scratch *s = job->s;
    const int T = job->b->n_tok, E = (int)job->m->hp.n_embd, R = (int)job->m->hp.laurel_rank;
    sp_fwd_stage(job, pool, SP_FWD_ALT_PRED_IN, &L->alt_router, c);
    sp_fwd_mm(s, pool, c, &L->alt_router, s->h, (size_t)E, T, s->mod, SP_ALTUP_MAX);
    sp_fwd_stage(job, pool, SP_FWD_ALT_PRED, job->m->arch->laurel ? &L->lau_l : sp_fwd_first(L), c);
    if (!job->m->arch->laurel)
        return;
    sp_fwd_mm(s, pool, c, &L->lau_l, s->h, (size_t)E, T, s->lrank, (size_t)R);
    sp_fwd_mm(s, pool, c, &L->lau_r, s->lrank, (size_t)R, T, s->lau, (size_t)E);
    sp_fwd_stage(job, pool, SP_FWD_LAUREL, NULL, c);
}

/* A layer's end (x: its output for the active stream): the router reads
 * x, the streams are corrected, and the per-layer block of the corrected
 * active stream is added to the others. */
static void sp_fwd_altup_end(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *c,
                             const struct sp_layer *L)
{
    struct sp_forward_scratch *s = job->s;
    const int T = job->b->n_tok, E = (int)job->m->hp.n_embd;
    sp_fwd_stage(job, pool, SP_FWD_ALT_CORR_IN, &L->alt_router, c);
    sp_fwd_mm(s, pool, c, &L->alt_router, s->h, (size_t)E, T, s->mod, SP_ALTUP_MAX);
    sp_fwd_stage(job, pool, SP_FWD_ALT_CORR, &L->pl_gate, c);
    sp_fwd_ple(job, pool, c, L);
}

/* After the last layer: x = the mean of stream 0 and altup_unembd_proj's
 * matrices of the others, each rescaled to the active stream's size. */
static void sp_fwd_altup_merge(struct sp_fwd_job *job, struct sp_pool *pool, struct sp_act_cache *c)
{
    struct sp_forward_scratch *s = job->s;
    const size_t E = job->m->hp.n_embd, A = job->m->hp.n_altup;
    for (size_t i = 1; i < A; i++) {
        sp_fwd_mm(s, pool, c, &job->m->alt_unembd[i - 1], s->alt + i * E, A * E, job->b->n_tok, s->tmp, E);
        job->alt_i = (int)i;
        sp_fwd_stage(job, pool, SP_FWD_ALT_MERGE, NULL, c);
    }
}

static sp_status sp_forward_held(const struct sp_model *m, struct sp_memory *mem, struct sp_forward_scratch *s,
                                 struct sp_pool *pool, const struct sp_forward_batch *b, float *logits);

sp_status sp_forward(const struct sp_model *m, struct sp_memory *mem, struct sp_forward_scratch *s,
                     struct sp_pool *pool, const struct sp_forward_batch *b, float *logits)
{
    sp_pool_hold(pool); /* a pool other engines share: this pass's turn */
    sp_status st = sp_forward_held(m, mem, s, pool, b, logits);
    sp_pool_release(pool);
    return st;
}

static sp_status sp_forward_held(const struct sp_model *m, struct sp_memory *mem, struct sp_forward_scratch *s,
                                 struct sp_pool *pool, const struct sp_forward_batch *b, float *logits)
{
    const struct sp_hparams *hp = &m->hp;
    const struct sp_arch *ar = m->arch;
    const int T = b->n_tok, E = (int)hp->n_embd;
    const float *rope_factors = sp_model_rope_factors(m, s->n_ctx);
    struct sp_act_cache cache = {0};
    int max_pos = 0;
    s->rope_base = 0.0f; /* the table is per batch */
    s->rope_ff = NULL;
    s->rope_nr = 0;

    if (T <= 0 || T > s->n_batch || b->n_out > T)
        return sp_error_set(SP_ERR_INTERNAL, "forward: batch of %d tokens (%d outputs), limit %d", T, b->n_out,
                            s->n_batch);
    for (int t = 0; t < T; t++) {
        if (b->tokens[t] < 0 || (uint32_t)b->tokens[t] >= hp->n_vocab)
            return sp_error_set(SP_ERR_ARG, "forward: token id %d out of range 0..%u", b->tokens[t], hp->n_vocab - 1);
        if (b->pos[t] < 0 || b->pos[t] >= s->n_ctx)
            return sp_error_set(SP_ERR_CONTEXT, "forward: position %d outside the context of %d", b->pos[t], s->n_ctx);
        max_pos = b->pos[t] + 1 > max_pos ? b->pos[t] + 1 : max_pos;
        s->kv_seqs[t] = sp_memory_seq_kv(b->seqs[t]);
    }
    if (hp->n_linear) {
        sp_status st = sp_fwd_runs(s, b);
        if (st != SP_OK)
            return st;
        if (b->n_layer && b->n_layer < hp->n_layer)
            return sp_error_set(SP_ERR_UNSUPPORTED, "forward: an early exit would leave the linear layers' state "
                                "behind the tokens");
    }

    /* x [T][E]: embeddings */
    float escale = ar->embed_scale ? sqrtf((float)E) : hp->embd_scale;
    for (int t = 0; t < T; t++) {
        float *x = s->x + (size_t)t * E;
        sp_tensor_row(&m->tok_embd, b->tokens[t], x);
        if (ar->embed_scale || hp->embd_scale)
            for (int i = 0; i < E; i++)
                x[i] *= escale;
        if (ar->abs_pos) { /* + position row + token type 0 row, then the embeddings' norm */
            float *r = s->tmp + (size_t)t * E;
            sp_tensor_row(&m->pos_embd, b->pos[t], r);
            for (int i = 0; i < E; i++)
                x[i] += r[i];
            sp_tensor_row(&m->tok_types, 0, r);
            for (int i = 0; i < E; i++)
                x[i] += r[i];
            sp_fwd_norm(m, x, &m->embd_norm, &m->embd_norm_b, x);
        }
    }
    if (hp->n_embd_pl)
        sp_forward_ple_inputs(m, s, pool, b->tokens, T);
    /* the last position each query sees: its own, or (bidirectional) its
     * sequence's last, the sequence being one run of the batch */
    const int32_t *attn_pos = b->pos;
    if (ar->bidirectional) {
        for (int t = 0, r = 0; t < T; t = r) {
            int32_t last = b->pos[t];
            for (r = t + 1; r < T && b->seqs[r] == b->seqs[t]; r++)
                last = b->pos[r] > last ? b->pos[r] : last;
            for (int i = t; i < r; i++)
                s->attn_pos[i] = last;
        }
        attn_pos = s->attn_pos;
    }

    const uint32_t n_layer = b->n_layer && b->n_layer < hp->n_layer ? b->n_layer : hp->n_layer;
    struct sp_fwd_job job = {.m = m, .s = s, .kv = sp_memory_kv(mem), .b = b};
    if (ar->altup)
        sp_fwd_altup_streams(&job, pool, &cache);
    for (uint32_t il = 0; il < n_layer; il++) {
        const struct sp_layer *L = &m->layers[il];
        job.L = L;
        job.il = il;
        /* the mixer: attention, or a linear layer */
        if (ar->altup)
            sp_fwd_altup_begin(&job, pool, &cache, L);
        else if (il == 0) /* later layers: part of the previous one's SP_FWD_FFN_OUT */
            sp_fwd_stage(&job, pool, SP_FWD_ATTN_IN, sp_fwd_first(L), &cache);
        if (L->mixer == SP_MIXER_SSM) {
            sp_fwd_mm(s, pool, &cache, &L->ssm_in, s->h, E, T, s->lin, s->lin_stride);
            sp_fwd_ssm(m, mem, s, pool, b, il);
            sp_fwd_mm(s, pool, &cache, &L->ssm_out, s->lin_y, hp->ssm_inner, T, s->tmp, E);
        } else if (L->mixer == SP_MIXER_DELTA) {
            /* q, k, v; z; beta; alpha (or beta and alpha fused): one row of s->lin */
            const struct sp_tensor *w3[3] = {&L->dn_qkv, &L->dn_z, &L->dn_beta};
            const size_t CONV = (size_t)L->dn_qkv.ne1, VD = (size_t)L->dn_z.ne1, NB = (size_t)L->dn_beta.ne1;
            float *o3[3] = {s->lin, s->lin + CONV, s->lin + CONV + VD};
            const size_t st3[3] = {s->lin_stride, s->lin_stride, s->lin_stride};
            sp_fwd_mm_multi(s, pool, &cache, 3, w3, s->h, E, T, o3, st3);
            if (L->dn_alpha.data)
                sp_fwd_mm(s, pool, &cache, &L->dn_alpha, s->h, E, T, s->lin + CONV + VD + NB, s->lin_stride);
            sp_fwd_delta(m, mem, s, pool, b, il);
            sp_fwd_mm(s, pool, &cache, &L->ssm_out, s->lin_y, VD, T, s->tmp, E);
        } else if (L->mixer == SP_MIXER_MLP) {
            sp_fwd_dense(&job, pool, &cache, L, (int)L->n_ff);
        } else if (L->mixer == SP_MIXER_CONV) {
            sp_fwd_mm(s, pool, &cache, &L->sc_in, s->h, E, T, s->lin, s->lin_stride);
            sp_fwd_shortconv(m, mem, s, pool, b, il);
            sp_fwd_mm(s, pool, &cache, &L->sc_out, s->lin_y, E, T, s->tmp, E);
        } else if (ar->mla) {
            sp_fwd_mla(&job, pool, &cache, rope_factors, attn_pos, max_pos);
        } else {
            sp_fwd_attention(&job, pool, &cache, rope_factors, attn_pos, max_pos);
        }
        /* feed-forward block */
        if (ar->no_ffn) {
            /* the mixer's residual add is the SP_FWD_FFN_OUT stage below */
        } else if (L->moe && ar->moe_dense) { /* the dense half into ffn2, then the experts beside it */
            sp_fwd_stage(&job, pool, SP_FWD_ATTN_OUT, &L->w_gate, &cache);
            sp_fwd_dense(&job, pool, &cache, L, (int)L->n_ff);
            sp_fwd_stage(&job, pool, SP_FWD_MOE_IN, NULL, &cache);
            sp_fwd_moe(&job, pool, &cache, L, s->tmp);
            sp_fwd_stage(&job, pool, SP_FWD_MOE_OUT, NULL, &cache);
        } else if (L->moe) {
            sp_fwd_stage(&job, pool, SP_FWD_ATTN_OUT, NULL, &cache);
            sp_fwd_moe(&job, pool, &cache, L, s->h);
        } else {
            /* the stage quantizes for the first matrix that reads h: gate, or up alone (ffn_plain) */
            sp_fwd_stage(&job, pool, SP_FWD_ATTN_OUT, L->w_gate.data ? &L->w_gate : &L->w_up, &cache);
            sp_fwd_dense(&job, pool, &cache, L, (int)L->n_ff);
        }
        job.next = il + 1 < n_layer ? &m->layers[il + 1] : NULL;
        if (ar->altup) {
            sp_fwd_stage(&job, pool, SP_FWD_FFN_OUT, NULL, &cache);
            sp_fwd_altup_end(&job, pool, &cache, L);
        } else if (hp->n_embd_pl) {
            sp_fwd_stage(&job, pool, SP_FWD_FFN_OUT, &L->pl_gate, &cache);
            sp_fwd_ple(&job, pool, &cache, L);
        } else {
            sp_fwd_stage(&job, pool, SP_FWD_FFN_OUT, job.next ? sp_fwd_first(job.next) : NULL, &cache);
        }
    }

    if (ar->altup)
        sp_fwd_altup_merge(&job, pool, &cache);
    /* output head over the tokens that want logits */
    for (int i = 0; i < b->n_out; i++) {
        const float *x = s->x + (size_t)b->out_idx[i] * E;
        if (m->out_norm.data)
            sp_fwd_norm(m, x, &m->out_norm, &sp_fwd_none, s->h + (size_t)i * E);
        else /* post_ln: the stream is normed already */
            memmove(s->h + (size_t)i * E, x, (size_t)E * sizeof *x);
    }
    cache.src = NULL;
    if (b->n_out > 0 && logits) {
        sp_fwd_mm(s, pool, &cache, &m->output, s->h, E, b->n_out, logits, hp->n_vocab);
        if (hp->final_softcap > 0.0f || hp->logit_scale) {
            float scale = ar->logit_mul ? hp->logit_scale : hp->logit_scale ? 1.0f / hp->logit_scale : 0.0f;
            struct sp_cap_job cj = {logits, (long)b->n_out * hp->n_vocab, hp->final_softcap, scale};
            sp_pool_run(pool, sp_cap_run, &cj);
        }
    }
    return SP_OK;
}
