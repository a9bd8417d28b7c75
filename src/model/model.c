/* Model loading: hyper-parameters from metadata, weight views by name, and
 * every cross-check between them. */
#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/error.h"
#include "gguf/split.h"
#include "kernels/scan.h"
#include "quant/quant.h"

sp_status sp_model_open_gguf(struct sp_mapping *map, struct sp_gguf *g, struct sp_gguf_parts *parts,
                             const char *path, unsigned map_flags)
{
    sp_quant_init();
    if (parts)
        return sp_gguf_split_open(map, g, parts, path, map_flags);
    sp_status st = sp_mapping_init(map, path, map_flags);
    if (st != SP_OK)
        return st;
    st = sp_gguf_init(g, map->data, map->size);
    if (st != SP_OK) {
        sp_error_wrap(st, "%s", path);
        sp_mapping_free(map);
    }
    return st;
}

/* File i of the model (0: the first; NULL past the last). */
static struct sp_mapping *sp_model_map(struct sp_model *m, uint32_t i)
{
    return i == 0 ? &m->map : i <= m->parts.n ? &m->parts.maps[i - 1] : NULL;
}

/* Where p lies in the model's files taken as one (file i's bytes after file
 * i - 1's): the offsets of struct sp_span in m->repacked.  False: in none. */
static bool sp_model_file_offset(struct sp_model *m, const void *p, size_t *off)
{
    const struct sp_mapping *f;
    size_t base = 0;
    for (uint32_t i = 0; (f = sp_model_map(m, i)); base += f->size, i++)
        if (f->data && (const uint8_t *)p >= f->data && (const uint8_t *)p < f->data + f->size) {
            *off = base + (size_t)((const uint8_t *)p - f->data);
            return true;
        }
    return false;
}

/* The inverse: a pointer to offset `off` of the files taken as one. */
static const uint8_t *sp_model_file_ptr(struct sp_model *m, size_t off)
{
    const struct sp_mapping *f;
    for (uint32_t i = 0; (f = sp_model_map(m, i)); off -= f->size, i++)
        if (off < f->size)
            return f->data + off;
    return NULL;
}

/* sp_mapping_drop on whichever file holds [p, p + len). */
static void sp_model_drop(struct sp_model *m, const void *p, size_t len)
{
    const struct sp_mapping *f;
    for (uint32_t i = 0; (f = sp_model_map(m, i)); i++)
        sp_mapping_drop(f, p, len);
}

/* Loading state beside the model: which tensors were taken (a file's
 * tensors that no family reads are refused by name, not ignored). */
struct sp_loader {
    struct sp_model *m;
    uint8_t *used; /* [n_tensors] */
};

/* Looks up `name` and checks its shape ne[0..rank), and that a matrix has
 * a matmul kernel and a vector is F32.  Trailing dimensions of 1 are the
 * same shape whatever rank the file records (llama.cpp's converter writes
 * some vectors as [n, 1], and its loader accepts them so).  Absent and
 * optional: *out is NULL. */
static sp_status sp_model_find(struct sp_loader *ld, const char *name, uint32_t rank, const int64_t *ne,
                               bool required, const struct sp_gguf_tensor **out)
{
    const struct sp_gguf *g = &ld->m->gguf;
    const struct sp_gguf_tensor *t = sp_gguf_tensor_find(g, name);
    *out = NULL;
    if (!t)
        return required ? sp_error_set(SP_ERR_FORMAT, "tensor '%s': missing", name) : SP_OK;
    bool ok = true;
    for (uint32_t i = 0; i < SP_GGUF_MAX_DIMS; i++)
        ok = ok && t->ne[i] == (i < rank ? ne[i] : 1);
    if (!ok) {
        char want[96] = "", got[96] = "";
        for (uint32_t i = 0, n1 = 0, n2 = 0; i < SP_GGUF_MAX_DIMS; i++) {
            if (i < rank)
                n1 += (uint32_t)snprintf(want + n1, sizeof want - n1, "%s%lld", i ? ", " : "", (long long)ne[i]);
            if (i < t->n_dims)
                n2 += (uint32_t)snprintf(got + n2, sizeof got - n2, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
        }
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': shape [%s] (rank %u), expected [%s] (rank %u)", name, got,
                            t->n_dims, want, rank);
    }
    const struct sp_type_traits *tt = sp_type_get(t->type);
    if (rank == 1 && t->type != SP_TYPE_F32)
        return sp_error_set(SP_ERR_UNSUPPORTED, "tensor '%s': type %s, expected F32 for a vector", name, tt->name);
    if (rank > 1 && (!tt->vec_dot || !sp_type_get(tt->vec_dot_type)->from_float))
        return sp_error_set(SP_ERR_UNSUPPORTED, "tensor '%s': type %s has no matmul kernel", name, tt->name);
    ld->used[t - g->tensors] = 1;
    *out = t;
    return SP_OK;
}

/* A vector [ne0] or matrix [ne1][ne0] as a view (data NULL when absent). */
static sp_status sp_model_tensor(struct sp_loader *ld, const char *name, int64_t ne0, int64_t ne1, bool required,
                                 struct sp_tensor *out)
{
    const struct sp_gguf_tensor *t;
    const int64_t ne[2] = {ne0, ne1};
    memset(out, 0, sizeof *out);
    sp_status st = sp_model_find(ld, name, ne1 ? 2 : 1, ne, required, &t);
    if (st != SP_OK || !t)
        return st;
    out->type = t->type;
    out->ne0 = t->ne[0];
    out->ne1 = t->ne[1];
    out->data = t->data;
    out->row_bytes = (size_t)(t->nbytes / (uint64_t)t->ne[1]);
    return SP_OK;
}

/* An F32 array of the given dimensions (ne[0] first), stored with or
 * without dimensions of 1 anywhere (llama.cpp's converter writes Mamba-2's
 * A and D as [1, heads]): a vector view of all its values. */
static sp_status sp_model_f32(struct sp_loader *ld, const char *name, const int64_t *ne, uint32_t rank, bool required,
                              struct sp_tensor *out)
{
    const struct sp_gguf *g = &ld->m->gguf;
    const struct sp_gguf_tensor *t = sp_gguf_tensor_find(g, name);
    memset(out, 0, sizeof *out);
    if (!t)
        return required ? sp_error_set(SP_ERR_FORMAT, "tensor '%s': missing", name) : SP_OK;
    int64_t want[SP_GGUF_MAX_DIMS], got[SP_GGUF_MAX_DIMS], n = 1;
    uint32_t nw = 0, ng = 0;
    for (uint32_t i = 0; i < rank; i++) {
        n *= ne[i];
        if (ne[i] != 1)
            want[nw++] = ne[i];
    }
    for (uint32_t i = 0; i < t->n_dims && i < SP_GGUF_MAX_DIMS; i++)
        if (t->ne[i] != 1)
            got[ng++] = t->ne[i];
    bool ok = nw == ng;
    for (uint32_t i = 0; ok && i < nw; i++)
        ok = want[i] == got[i];
    if (!ok) {
        char w[96] = "", h[96] = "";
        for (uint32_t i = 0, n1 = 0, n2 = 0; i < SP_GGUF_MAX_DIMS; i++) {
            if (i < rank)
                n1 += (uint32_t)snprintf(w + n1, sizeof w - n1, "%s%lld", i ? ", " : "", (long long)ne[i]);
            if (i < t->n_dims)
                n2 += (uint32_t)snprintf(h + n2, sizeof h - n2, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
        }
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': shape [%s], expected [%s]", name, h, w);
    }
    if (t->type != SP_TYPE_F32)
        return sp_error_set(SP_ERR_UNSUPPORTED, "tensor '%s': type %s, expected F32", name, sp_type_get(t->type)->name);
    ld->used[t - g->tensors] = 1;
    out->type = SP_TYPE_F32;
    out->ne0 = n;
    out->ne1 = 1;
    out->data = t->data;
    out->row_bytes = (size_t)n * sizeof(float);
    return SP_OK;
}

/* Rows [r0, r0 + n) of a matrix as a matrix of its own (the parts of a
 * fused tensor). */
static struct sp_tensor sp_rows(const struct sp_tensor *t, int64_t r0, int64_t n)
{
    struct sp_tensor v = *t;
    v.data = (const uint8_t *)t->data + (size_t)r0 * t->row_bytes;
    v.ne1 = n;
    return v;
}

/* Elements [i0, i0 + n) of an F32 vector (data NULL stays NULL). */
static struct sp_tensor sp_elems(const struct sp_tensor *t, int64_t i0, int64_t n)
{
    struct sp_tensor v = *t;
    if (t->data) {
        v.data = (const float *)t->data + i0;
        v.ne0 = n;
        v.row_bytes = (size_t)n * sizeof(float);
    }
    return v;
}

static uint64_t sp_bytes(const struct sp_tensor *t)
{
    return t->data ? t->row_bytes * (uint64_t)t->ne1 : 0;
}

#define SP_T(field, suffix, ne0, ne1, req)                                                           \
    do {                                                                                            \
        snprintf(name, sizeof name, "blk.%u.%s", il, suffix);                                       \
        if ((st = sp_model_tensor(ld, name, ne0, ne1, req, &(field))) != SP_OK)                     \
            return st;                                                                              \
    } while (0)

/* Q, K and V: one fused attn_qkv (rows q, then k, then v) or three
 * matrices; biases required by the family or optional. */
static sp_status sp_model_attn(struct sp_loader *ld, uint32_t il)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    const struct sp_arch *ar = m->arch;
    struct sp_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * L->head_dim, KV = (int64_t)L->n_head_kv * L->head_dim;
    const bool own = L->kv_src == il;
    char name[96];
    sp_status st;
    struct sp_tensor qkv, bqkv;
    SP_T(qkv, "attn_qkv.weight", E, Q + 2 * KV, false);
    if (ar->q_gate) { /* each head's query, then its gate */
        SP_T(L->wq, "attn_q.weight", E, 2 * Q, true);
        SP_T(L->wk, "attn_k.weight", E, KV, true);
        SP_T(L->wv, "attn_v.weight", E, KV, true);
    } else if (qkv.data) {
        SP_T(bqkv, "attn_qkv.bias", Q + 2 * KV, 0, ar->qkv_bias);
        L->wq = sp_rows(&qkv, 0, Q), L->wk = sp_rows(&qkv, Q, KV), L->wv = sp_rows(&qkv, Q + KV, KV);
        L->bq = sp_elems(&bqkv, 0, Q), L->bk = sp_elems(&bqkv, Q, KV), L->bv = sp_elems(&bqkv, Q + KV, KV);
        m->qkv_fused = true;
    } else {
        SP_T(L->wq, "attn_q.weight", E, Q, true);
        SP_T(L->wk, "attn_k.weight", E, KV, own);
        SP_T(L->wv, "attn_v.weight", E, KV, own && !ar->v_from_k);
        SP_T(L->bq, "attn_q.bias", Q, 0, ar->qkv_bias);
        SP_T(L->bk, "attn_k.bias", KV, 0, ar->qkv_bias);
        SP_T(L->bv, "attn_v.bias", KV, 0, ar->qkv_bias);
    }
    SP_T(L->wo, "attn_output.weight", Q, E, true);
    if (ar->out_bias)
        SP_T(L->bo, "attn_output.bias", E, 0, true);
    if (ar->attn_sinks)
        SP_T(L->sinks, "attn_sinks.weight", hp->n_head, 0, true);
    bool full = ar->qk_norm == SP_QK_NORM_FULL;
    bool weighted = full || ar->qk_norm == SP_QK_NORM_HEAD; /* SP_QK_NORM_L2 has no weights */
    SP_T(L->q_norm, "attn_q_norm.weight", full ? Q : L->head_dim, 0, weighted);
    SP_T(L->k_norm, "attn_k_norm.weight", full ? KV : L->head_dim, 0, weighted && own);
    if (!own) { /* its keys and values are another layer's: what the file has for its own (llama.cpp loads
                   them too) is not computed */
        static const struct sp_tensor none;
        L->wk = L->wv = L->k_norm = L->bk = L->bv = none;
    }
    if (!ar->ffn_norm_post) /* else the feed-forward's norm (sp_model_layer) */
        SP_T(L->post_attn_norm, "post_attention_norm.weight", E, 0, ar->post_norms);
    return SP_OK;
}

/* Per-head views of a 3-D [n_head][rows][row length] tensor (attn_k_b,
 * attn_v_b) into out[n_head]. */
static sp_status sp_model_head_views(struct sp_loader *ld, uint32_t il, const char *suffix, int64_t ne0, int64_t ne1,
                                     struct sp_tensor *out)
{
    const int64_t H = ld->m->hp.n_head, ne[3] = {ne0, ne1, H};
    const struct sp_gguf_tensor *t;
    char name[96];
    snprintf(name, sizeof name, "blk.%u.%s", il, suffix);
    sp_status st = sp_model_find(ld, name, 3, ne, true, &t);
    if (st != SP_OK)
        return st;
    const size_t row_bytes = (size_t)(t->nbytes / (uint64_t)(ne1 * H));
    for (int64_t h = 0; h < H; h++)
        out[h] = (struct sp_tensor){.type = t->type, .ne0 = ne0, .ne1 = ne1, .row_bytes = row_bytes,
                                    .data = (const uint8_t *)t->data + (size_t)(h * ne1) * row_bytes};
    return SP_OK;
}

/* altup: the n_altup - 1 matrices [n_embd -> n_embd] of a 3-D global
 * tensor (altup_proj, altup_unembd_proj) as views into out[]. */
static sp_status sp_model_stack(struct sp_loader *ld, const char *name, struct sp_tensor *out)
{
    struct sp_model *m = ld->m;
    const int64_t E = m->hp.n_embd, N = m->hp.n_altup - 1, ne[3] = {E, E, N};
    const struct sp_gguf_tensor *t;
    sp_status st = sp_model_find(ld, name, 3, ne, true, &t);
    if (st != SP_OK)
        return st;
    const size_t row_bytes = (size_t)(t->nbytes / (uint64_t)(E * N));
    for (int64_t i = 0; i < N; i++) {
        out[i] = (struct sp_tensor){.type = t->type, .ne0 = E, .ne1 = E, .row_bytes = row_bytes,
                                    .data = (const uint8_t *)t->data + (size_t)(i * E) * row_bytes};
        m->weights_bytes += sp_bytes(&out[i]);
    }
    return SP_OK;
}

/* Multi-head latent attention's tensors, as a current llama.cpp converter
 * writes them (attn_k_b and attn_v_b; an older file's attn_kv_b is
 * refused). */
static sp_status sp_model_mla(struct sp_loader *ld, uint32_t il)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    struct sp_layer *L = &m->layers[il];
    const int64_t E = hp->n_embd, H = hp->n_head, R = hp->n_lora_q, C = hp->n_lora_kv, NR = hp->n_rot;
    const int64_t K = hp->mla_k, V = hp->mla_v;
    char name[96];
    sp_status st;
    snprintf(name, sizeof name, "blk.%u.attn_kv_b.weight", il);
    if (sp_gguf_tensor_find(&m->gguf, name))
        return sp_error_set(SP_ERR_UNSUPPORTED, "tensor '%s': the unsplit latent projection of older conversions is "
                            "not supported (a current llama.cpp converter writes attn_k_b and attn_v_b)", name);
    if (R) {
        SP_T(L->wq_a, "attn_q_a.weight", E, R, true);
        SP_T(L->q_a_norm, "attn_q_a_norm.weight", R, 0, true);
        SP_T(L->wq, "attn_q_b.weight", R, H * K, true);
    } else {
        SP_T(L->wq, "attn_q.weight", E, H * K, true);
    }
    SP_T(L->wkv_a, "attn_kv_a_mqa.weight", E, C + NR, true);
    SP_T(L->kv_a_norm, "attn_kv_a_norm.weight", C, 0, true);
    L->wk_b = m->heads + (size_t)il * 2 * H;
    L->wv_b = L->wk_b + H;
    if ((st = sp_model_head_views(ld, il, "attn_k_b.weight", K - NR, C, L->wk_b)) ||
        (st = sp_model_head_views(ld, il, "attn_v_b.weight", C, V, L->wv_b)))
        return st;
    SP_T(L->wo, "attn_output.weight", H * V, E, true);
    return SP_OK;
}

/* Layer il's gate and up experts as one fused [n_expert][2 * n_ff_exp][n_embd]
 * stack, as llama.cpp's converter writes gate_up_proj (Gemma 4 and others):
 * each expert's first n_ff_exp rows are its gate, the next its up.  Absent:
 * *fused false. */
static sp_status sp_model_experts_fused(struct sp_loader *ld, uint32_t il, bool *fused)
{
    struct sp_model *m = ld->m;
    struct sp_layer *L = &m->layers[il];
    const int64_t F = m->hp.n_ff_exp, X = m->hp.n_expert, ne[3] = {m->hp.n_embd, 2 * F, X};
    const struct sp_gguf_tensor *t;
    char name[96];
    snprintf(name, sizeof name, "blk.%u.ffn_gate_up_exps.weight", il);
    *fused = false;
    if (m->arch->moe_bias) /* its per-expert biases come unfused: the fused weight is left unused (refused) */
        return SP_OK;
    sp_status st = sp_model_find(ld, name, 3, ne, false, &t);
    if (st != SP_OK || !t)
        return st;
    const size_t row_bytes = (size_t)(t->nbytes / (uint64_t)(ne[1] * X));
    for (int64_t e = 0; e < X; e++) {
        const uint8_t *base = (const uint8_t *)t->data + (size_t)(e * ne[1]) * row_bytes;
        for (int k = SP_EXP_GATE; k <= SP_EXP_UP; k++)
            L->exps[k * X + e] = (struct sp_tensor){.type = t->type, .ne0 = ne[0], .ne1 = F, .row_bytes = row_bytes,
                                                    .data = base + (k == SP_EXP_UP ? (size_t)F * row_bytes : 0)};
    }
    *fused = true;
    return SP_OK;
}

/* The experts of layer il: 3-D stacks [n_expert][rows][row length], one
 * view per expert (gate and up one stack or two). */
static sp_status sp_model_experts(struct sp_loader *ld, uint32_t il)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    struct sp_layer *L = &m->layers[il];
    static const char *const names[SP_EXP_KINDS] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    int64_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert;
    char name[96];
    sp_status st;
    bool fused;
    SP_T(L->gate_inp, "ffn_gate_inp.weight", E, X, true);
    L->exps = m->exps + (size_t)il * SP_EXP_KINDS * hp->n_expert;
    if ((st = sp_model_experts_fused(ld, il, &fused)) != SP_OK)
        return st;
    for (int k = fused ? SP_EXP_DOWN : 0; k < SP_EXP_KINDS; k++) {
        const int64_t ne[3] = {k == SP_EXP_DOWN ? F : E, k == SP_EXP_DOWN ? E : F, X};
        const struct sp_gguf_tensor *t;
        snprintf(name, sizeof name, "blk.%u.%s.weight", il, names[k]);
        if ((st = sp_model_find(ld, name, 3, ne, true, &t)) != SP_OK)
            return st;
        size_t row_bytes = (size_t)(t->nbytes / (uint64_t)(ne[1] * X));
        for (int64_t e = 0; e < X; e++)
            L->exps[k * X + e] = (struct sp_tensor){.type = t->type, .ne0 = ne[0], .ne1 = ne[1],
                                                    .row_bytes = row_bytes,
                                                    .data = (const uint8_t *)t->data + (size_t)e * ne[1] * row_bytes};
        if (m->arch->moe_bias) {
            const int64_t nb[2] = {ne[1], X};
            snprintf(name, sizeof name, "blk.%u.%s.bias", il, names[k]);
            if ((st = sp_model_f32(ld, name, nb, 2, true, &L->exps_b[k])) != SP_OK)
                return st;
        }
    }
    if (m->arch->moe_bias)
        SP_T(L->gate_inp_b, "ffn_gate_inp.bias", X, 0, true);
    if (m->arch->moe_dense) {
        const int64_t FD = L->n_ff;
        SP_T(L->w_gate, "ffn_gate.weight", E, FD, true);
        SP_T(L->w_up, "ffn_up.weight", E, FD, true);
        SP_T(L->w_down, "ffn_down.weight", FD, E, true);
        SP_T(L->ffn_post1, "post_ffw_norm_1.weight", E, 0, true);
        SP_T(L->ffn_pre2, "pre_ffw_norm_2.weight", E, 0, true);
        SP_T(L->ffn_post2, "post_ffw_norm_2.weight", E, 0, true);
        SP_T(L->gate_inp_s, "ffn_gate_inp.scale", E, 0, true);
        SP_T(L->exps_s, "ffn_down_exps.scale", X, 0, false);
    }
    if (m->arch->mla)
        SP_T(L->exp_probs_b, "exp_probs_b.bias", X, 0, false);
    if (hp->n_ff_shexp) {
        int64_t S = hp->n_ff_shexp;
        if (!m->arch->shexp_ungated)
            SP_T(L->shexp_gate, "ffn_gate_inp_shexp.weight", E, 0, true);
        SP_T(L->w_gate, "ffn_gate_shexp.weight", E, S, true);
        SP_T(L->w_up, "ffn_up_shexp.weight", E, S, true);
        SP_T(L->w_down, "ffn_down_shexp.weight", S, E, true);
    }
    return SP_OK;
}

/* A Mamba-2 mixer, as llama.cpp's converter writes it. */
static sp_status sp_model_ssm(struct sp_loader *ld, uint32_t il)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    struct sp_layer *L = &m->layers[il];
    const int64_t E = hp->n_embd, DI = hp->ssm_inner, NH = hp->ssm_heads, NG = hp->ssm_groups;
    const int64_t CONV = DI + 2 * NG * hp->ssm_state, IN = DI + CONV + NH;
    char name[96];
    sp_status st;
    const int64_t conv_ne[2] = {hp->ssm_conv, CONV}, heads[2] = {1, NH}, norm[2] = {DI / NG, NG};
#define SP_A(field, suffix, ne, rank, req)                                                           \
    do {                                                                                            \
        snprintf(name, sizeof name, "blk.%u.%s", il, suffix);                                       \
        if ((st = sp_model_f32(ld, name, ne, rank, req, &(field))) != SP_OK)                        \
            return st;                                                                              \
    } while (0)
    SP_T(L->ssm_in, "ssm_in.weight", E, IN, true);
    SP_A(L->ssm_conv, "ssm_conv1d.weight", conv_ne, 2, true);
    SP_A(L->ssm_conv_b, "ssm_conv1d.bias", &CONV, 1, !m->arch->granite); /* optional in Granite's */
    SP_A(L->ssm_dt_b, "ssm_dt.bias", &NH, 1, true);
    SP_A(L->ssm_a, "ssm_a", heads, 2, true);
    SP_A(L->ssm_d, "ssm_d", heads, 2, true);
    SP_A(L->ssm_norm, "ssm_norm.weight", norm, 2, true);
#undef SP_A
    SP_T(L->ssm_out, "ssm_out.weight", DI, E, true);
    const float *a = L->ssm_a.data;
    for (int64_t h = 0; h < NH; h++)
        if (!(a[h] <= 0.0f && isfinite(a[h])))
            return sp_error_set(SP_ERR_FORMAT, "tensor 'blk.%u.ssm_a': %g in head %lld, expected a finite value <= 0 "
                                "(A = -exp(A_log))", il, a[h], (long long)h);
    return SP_OK;
}

/* An LFM2 short convolution. */
static sp_status sp_model_shortconv(struct sp_loader *ld, uint32_t il)
{
    struct sp_model *m = ld->m;
    struct sp_layer *L = &m->layers[il];
    const int64_t E = m->hp.n_embd, ne[2] = {m->hp.conv_taps, E};
    char name[96];
    sp_status st;
    SP_T(L->sc_in, "shortconv.in_proj.weight", E, 3 * E, true);
    snprintf(name, sizeof name, "blk.%u.shortconv.conv.weight", il);
    if ((st = sp_model_f32(ld, name, ne, 2, true, &L->sc_conv)) != SP_OK)
        return st;
    SP_T(L->sc_out, "shortconv.out_proj.weight", E, E, true);
    return SP_OK;
}

/* A Qwen3.5 / Qwen3-Next gated delta rule (linear attention). */
static sp_status sp_model_delta(struct sp_loader *ld, uint32_t il)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    struct sp_layer *L = &m->layers[il];
    const int64_t E = hp->n_embd, NV = hp->ssm_heads, DV = hp->ssm_head_dim;
    const int64_t KD = (int64_t)hp->ssm_groups * hp->ssm_state, VD = NV * DV, CONV = 2 * KD + VD;
    const int64_t conv_ne[2] = {hp->ssm_conv, CONV};
    char name[96];
    sp_status st;
    snprintf(name, sizeof name, "blk.%u.ssm_in.weight", il);
    if (sp_gguf_tensor_find(&m->gguf, name)) /* older conversions: q, k, v, z interleaved per key head */
        return sp_error_set(SP_ERR_UNSUPPORTED, "tensor '%s': a fused q/k/v/z projection is not supported (a "
                            "current llama.cpp converter writes attn_qkv and attn_gate instead)", name);
    SP_T(L->dn_qkv, "attn_qkv.weight", E, CONV, true);
    SP_T(L->dn_z, "attn_gate.weight", E, VD, true);
    if (m->arch->dn_grouped) {
        SP_T(L->dn_beta, "ssm_ba.weight", E, 2 * NV, true);
    } else {
        SP_T(L->dn_beta, "ssm_beta.weight", E, NV, true);
        SP_T(L->dn_alpha, "ssm_alpha.weight", E, NV, true);
    }
    SP_T(L->ssm_out, "ssm_out.weight", VD, E, true);
    const struct {
        struct sp_tensor *t;
        const char *suffix;
        const int64_t *ne;
        uint32_t rank;
    } arrs[] = {{&L->ssm_conv, "ssm_conv1d.weight", conv_ne, 2}, {&L->ssm_dt_b, "ssm_dt.bias", &NV, 1},
                {&L->ssm_a, "ssm_a", &NV, 1}, {&L->ssm_norm, "ssm_norm.weight", &DV, 1}};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        snprintf(name, sizeof name, "blk.%u.%s", il, arrs[i].suffix);
        if ((st = sp_model_f32(ld, name, arrs[i].ne, arrs[i].rank, true, arrs[i].t)) != SP_OK)
            return st;
    }
    const float *a = L->ssm_a.data;
    for (int64_t h = 0; h < NV; h++)
        if (!(a[h] <= 0.0f && isfinite(a[h])))
            return sp_error_set(SP_ERR_FORMAT, "tensor 'blk.%u.ssm_a': %g in head %lld, expected a finite value <= 0 "
                                "(A = -exp(A_log))", il, a[h], (long long)h);
    return SP_OK;
}

/* The mixer of layer il by the family's layer kinds. */
static sp_status sp_model_mixer(struct sp_model *m, uint32_t il, enum sp_mixer *out)
{
    const struct sp_arch *ar = m->arch;
    *out = SP_MIXER_ATTN;
    if (ar->kinds == SP_KINDS_LINEAR)
        *out = ar->linear;
    if (ar->kinds == SP_KINDS_INTERVAL) {
        uint32_t every = 4;
        char key[128];
        sp_model_key(m, "full_attention_interval", key, sizeof key);
        sp_status st = sp_gguf_get_u32(&m->gguf, key, false, &every);
        if (st != SP_OK)
            return st;
        if (every == 0)
            return sp_error_set(SP_ERR_FORMAT, "key '%s': 0, expected > 0", key);
        *out = (il + 1) % every == 0 ? SP_MIXER_ATTN : ar->linear;
    }
    if (ar->kinds == SP_KINDS_KV_ZERO || ar->kinds == SP_KINDS_KV_FF) {
        char key[128];
        uint32_t n = 0;
        sp_model_key(m, "attention.head_count_kv", key, sizeof key);
        sp_status st = sp_gguf_get_u32_at(&m->gguf, key, il, m->hp.n_layer_all, true, &n);
        if (st != SP_OK)
            return st;
        *out = n ? SP_MIXER_ATTN : ar->linear;
    }
    if (ar->kinds == SP_KINDS_KV_FF && *out != SP_MIXER_ATTN) {
        char key[128];
        uint32_t n = 0;
        sp_model_key(m, "feed_forward_length", key, sizeof key);
        sp_status st = sp_gguf_get_u32_at(&m->gguf, key, il, m->hp.n_layer_all, true, &n);
        if (st != SP_OK)
            return st;
        *out = n ? SP_MIXER_MLP : ar->linear;
    }
    return SP_OK;
}

/* Whether layer il is local (the family's pattern, or its list of
 * attention.sliding_window_pattern), and whose keys and values it reads
 * (kv_shared: the last layer of its kind before the first sharing one, as
 * llama.cpp pairs them). */
static sp_status sp_model_layer_kind(struct sp_model *m, uint32_t il, uint32_t swa_pattern)
{
    const struct sp_hparams *hp = &m->hp;
    const struct sp_arch *ar = m->arch;
    struct sp_layer *L = &m->layers[il];
    bool local = ar->swa == SP_SWA_ALL || (ar->swa == SP_SWA_PATTERN && (il + 1) % swa_pattern != 0);
    if (ar->swa == SP_SWA_LIST) {
        const struct sp_gguf_kv *kv;
        char key[128];
        sp_model_key(m, "attention.sliding_window_pattern", key, sizeof key);
        sp_status st = sp_gguf_get_arr(&m->gguf, key, true, SP_GGUF_BOOL, &kv);
        if (st != SP_OK)
            return st;
        if (kv->arr_n != hp->n_layer_all)
            return sp_error_set(SP_ERR_FORMAT, "key '%s': %llu values, expected one per layer (%u)", key,
                                (unsigned long long)kv->arr_n, hp->n_layer_all);
        local = kv->arr_data[il] != 0;
    }
    L->swa = L->mixer == SP_MIXER_ATTN && hp->n_swa && local;
    L->rope_ff = ar->rope_factors != SP_ROPE_FACTORS_GLOBAL || !L->swa;
    L->head_dim = L->swa ? hp->head_dim_swa : hp->head_dim;
    L->n_rot = L->swa ? hp->n_rot_swa : hp->n_rot;
    L->n_head_kv = hp->n_head_kv;
    L->n_ff = hp->n_ff;
    char key[128];
    sp_status st = SP_OK;
    if (ar->kinds != SP_KINDS_KV_ZERO && ar->kinds != SP_KINDS_KV_FF && ar->kinds != SP_KINDS_LINEAR) {
        sp_model_key(m, "attention.head_count_kv", key, sizeof key);
        st = sp_gguf_get_u32_at(&m->gguf, key, il, hp->n_layer_all, false, &L->n_head_kv);
    }
    if (st == SP_OK && ar->kinds != SP_KINDS_KV_FF && !ar->no_ffn) {
        sp_model_key(m, "feed_forward_length", key, sizeof key);
        st = sp_gguf_get_u32_at(&m->gguf, key, il, hp->n_layer_all, false, &L->n_ff);
    }
    if (st != SP_OK)
        return st;
    if (L->mixer == SP_MIXER_ATTN && (L->n_head_kv == 0 || hp->n_head % L->n_head_kv))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.head_count_kv': layer %u's %u does not divide head_count "
                            "%u", ar->name, il, L->n_head_kv, hp->n_head);
    L->kv_src = il;
    if (il >= hp->n_kv_own) {
        const uint32_t src = hp->n_kv_own - (L->swa ? 2 : 1);
        const struct sp_layer *S = &m->layers[src];
        if (L->mixer != SP_MIXER_ATTN || S->mixer != SP_MIXER_ATTN || S->swa != L->swa ||
            S->n_head_kv != L->n_head_kv)
            return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.shared_kv_layers': layer %u (%s) would read the "
                                "keys and values of layer %u (%s); only layers of one kind share", ar->name, il,
                                L->swa ? "local" : "global", src, S->swa ? "local" : "global");
        L->kv_src = src;
    }
    return SP_OK;
}

/* Layer il's per-layer input block (per_layer_embd) and output scale
 * (out_scale: F32 [1], 1 when absent). */
static sp_status sp_model_layer_extras(struct sp_loader *ld, uint32_t il)
{
    struct sp_model *m = ld->m;
    struct sp_layer *L = &m->layers[il];
    const int64_t E = m->hp.n_embd, P = m->hp.n_embd_pl, one = 1;
    char name[96];
    sp_status st;
    if (P) {
        SP_T(L->pl_gate, "inp_gate.weight", E, P, true);
        SP_T(L->pl_proj, "proj.weight", P, E, true);
        SP_T(L->pl_norm, "post_norm.weight", E, 0, true);
    }
    if (m->arch->altup) {
        const int64_t A = m->hp.n_altup;
        SP_T(L->alt_router, "altup_router.weight", E, A, true);
        SP_T(L->alt_rnorm, "altup_router_norm.weight", E, 0, true);
        SP_T(L->alt_pred, "altup_predict_coef.weight", A, A * A, true);
        SP_T(L->alt_corr, "altup_correct_coef.weight", A, A, true);
        SP_T(L->alt_cscale, "altup_correct_scale.weight", E, 0, true);
    }
    if (m->arch->laurel) {
        snprintf(name, sizeof name, "blk.%u.laurel_l.weight", il);
        const struct sp_gguf_tensor *t = sp_gguf_tensor_find(&m->gguf, name);
        if (!t)
            return sp_error_set(SP_ERR_FORMAT, "tensor '%s': missing", name);
        if (il == 0) /* the first layer's rank is every layer's */
            m->hp.laurel_rank = t->ne[1] > 0 && t->ne[1] <= E ? (uint32_t)t->ne[1] : 0;
        if (!m->hp.laurel_rank)
            return sp_error_set(SP_ERR_FORMAT, "tensor '%s': %lld rows, expected 1..n_embd", name,
                                (long long)t->ne[1]);
        SP_T(L->lau_l, "laurel_l.weight", E, m->hp.laurel_rank, true);
        SP_T(L->lau_r, "laurel_r.weight", m->hp.laurel_rank, E, true);
        SP_T(L->lau_norm, "laurel_post_norm.weight", E, 0, true);
    }
    L->sparse = il < m->arch->sparse_layers;
    L->out_scale = 1.0f;
    if (m->arch->out_scale) {
        struct sp_tensor t;
        snprintf(name, sizeof name, "blk.%u.layer_output_scale.weight", il);
        if ((st = sp_model_f32(ld, name, &one, 1, false, &t)) != SP_OK)
            return st;
        if (t.data)
            memcpy(&L->out_scale, t.data, sizeof L->out_scale);
        if (!isfinite(L->out_scale))
            return sp_error_set(SP_ERR_FORMAT, "tensor '%s': %g, expected a finite value", name, L->out_scale);
    }
    return SP_OK;
}

static sp_status sp_model_layer(struct sp_loader *ld, uint32_t il, uint32_t swa_pattern, float swa_base)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    const struct sp_arch *ar = m->arch;
    struct sp_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, F;
    char name[96];
    sp_status st;
    bool pre = !ar->post_ln, ln = ar->norm == SP_NORM_LAYER;
    if ((st = sp_model_mixer(m, il, &L->mixer)) != SP_OK || (st = sp_model_layer_kind(m, il, swa_pattern)))
        return st;
    F = L->n_ff;
    L->moe = hp->n_expert && (!ar->moe_interleave || (hp->n_moe_step && (il + 1) % hp->n_moe_step == 0)) &&
             il >= hp->n_dense_lead;
    SP_T(L->attn_norm, "attn_norm.weight", E, 0, pre && !ar->no_pre_norm);
    if (L->mixer == SP_MIXER_MLP) {
        SP_T(L->w_up, "ffn_up.weight", E, F, true);
        SP_T(L->w_down, "ffn_down.weight", F, E, true);
    } else {
        st = L->mixer == SP_MIXER_SSM     ? sp_model_ssm(ld, il)
             : L->mixer == SP_MIXER_CONV  ? sp_model_shortconv(ld, il)
             : L->mixer == SP_MIXER_DELTA ? sp_model_delta(ld, il)
             : ar->mla                    ? sp_model_mla(ld, il)
                                          : sp_model_attn(ld, il);
        if (st != SP_OK)
            return st;
    }
    m->hp.n_linear += L->mixer == SP_MIXER_SSM || L->mixer == SP_MIXER_CONV || L->mixer == SP_MIXER_DELTA;
    SP_T(L->ffn_norm, ar->ffn_norm_post ? "post_attention_norm.weight" : "ffn_norm.weight", E, 0,
         pre && !ar->no_ffn && !ar->parallel && !ar->no_pre_norm);
    SP_T(L->attn_out_norm, "attn_output_norm.weight", E, 0, !pre);
    SP_T(L->ffn_out_norm, "layer_output_norm.weight", E, 0, !pre);
    if (!pre && ln) {
        SP_T(L->attn_out_norm_b, "attn_output_norm.bias", E, 0, true);
        SP_T(L->ffn_out_norm_b, "layer_output_norm.bias", E, 0, true);
    }
    if (ar->layer_bias) {
        SP_T(L->bo, "attn_output.bias", E, 0, true);
        SP_T(L->b_up, "ffn_up.bias", F, 0, true);
        SP_T(L->b_down, "ffn_down.bias", E, 0, true);
    }
    if (ar->no_ffn) {
        /* the mixer and its residual only */
    } else if (L->moe) {
        if ((st = sp_model_experts(ld, il)) != SP_OK)
            return st;
    } else if (ar->ffn_fused) {
        struct sp_tensor up;
        SP_T(up, "ffn_up.weight", E, 2 * F, true);
        L->w_gate = sp_rows(&up, 0, F), L->w_up = sp_rows(&up, F, F);
        SP_T(L->w_down, "ffn_down.weight", F, E, true);
    } else {
        SP_T(L->w_gate, "ffn_gate.weight", E, F, !ar->ffn_plain);
        SP_T(L->w_up, "ffn_up.weight", E, F, true);
        SP_T(L->w_down, "ffn_down.weight", F, E, true);
    }
    SP_T(L->post_ffn_norm, "post_ffw_norm.weight", E, 0, ar->post_norms);
    if ((st = sp_model_layer_extras(ld, il)) != SP_OK)
        return st;
    L->rope_base = L->swa ? swa_base : hp->rope_base;
    L->nope = L->mixer == SP_MIXER_ATTN && ((ar->nope_interval && (il + 1) % ar->nope_interval == 0) ||
                                            (ar->nope_global && hp->n_swa && !L->swa));
    L->qk_l2 = ar->qk_norm == SP_QK_NORM_L2 && L->mixer == SP_MIXER_ATTN && !L->nope && hp->n_expert != 128;
    const struct sp_tensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->gate_inp,
                                      &L->ssm_in, &L->ssm_out, &L->sc_in, &L->sc_out, &L->dn_qkv, &L->dn_z,
                                      &L->dn_beta, &L->dn_alpha, &L->pl_gate, &L->pl_proj, &L->wq_a, &L->wkv_a,
                                      &L->alt_router, &L->alt_pred, &L->alt_corr, &L->lau_l, &L->lau_r};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        m->weights_bytes += sp_bytes(mats[i]);
    for (uint32_t h = 0; L->wk_b && h < hp->n_head; h++)
        m->weights_bytes += sp_bytes(&L->wk_b[h]) + sp_bytes(&L->wv_b[h]);
    if (L->moe) /* a token reads its n_expert_used experts */
        for (int k = 0; k < SP_EXP_KINDS; k++)
            m->weights_bytes += sp_bytes(&L->exps[k * hp->n_expert]) * hp->n_expert_used;
    return SP_OK;
}
#undef SP_T

/* Per-frequency rope factors: F32 [n_rot / 2], one set or LongRoPE's pair. */
static sp_status sp_model_rope_factors_load(struct sp_loader *ld)
{
    struct sp_model *m = ld->m;
    int64_t n = m->hp.n_rot / 2;
    struct sp_tensor f, lo, sh;
    sp_status st;
    bool longrope = m->arch->rope_factors == SP_ROPE_FACTORS_LONGROPE;
    if (m->arch->rope_factors == SP_ROPE_FACTORS_FREQS) {
        char key[128];
        struct sp_gguf_str type = {"none", 4};
        sp_model_key(m, "rope.scaling.type", key, sizeof key);
        sp_gguf_get_str(&m->gguf, key, false, &type);
        longrope = sp_gguf_str_eq(type, "longrope");
    }
    if (longrope) {
        if ((st = sp_model_tensor(ld, "rope_factors_long.weight", n, 0, false, &lo)) ||
            (st = sp_model_tensor(ld, "rope_factors_short.weight", n, 0, false, &sh)))
            return st;
        if (!lo.data != !sh.data)
            return sp_error_set(SP_ERR_FORMAT, "tensor 'rope_factors_%s.weight': missing (LongRoPE needs both the "
                                "long and the short factors)", lo.data ? "short" : "long");
        m->rope_long = lo.data, m->rope_short = sh.data;
    } else if (m->arch->rope_factors == SP_ROPE_FACTORS_FREQS || m->arch->rope_factors == SP_ROPE_FACTORS_GLOBAL) {
        if ((st = sp_model_tensor(ld, "rope_freqs.weight", n, 0, m->arch->rope_factors == SP_ROPE_FACTORS_GLOBAL,
                                  &f)))
            return st;
        m->rope_freqs = f.data;
    }
    const float *sets[] = {m->rope_freqs, m->rope_long, m->rope_short};
    for (size_t s = 0; s < 3; s++)
        for (int64_t i = 0; sets[s] && i < n; i++)
            if (!(sets[s][i] > 0.0f && isfinite(sets[s][i])))
                return sp_error_set(SP_ERR_FORMAT, "tensor '%s': factor %lld is %g, expected a finite value > 0",
                                    s == 0 ? "rope_freqs.weight" : s == 1 ? "rope_factors_long.weight"
                                                                        : "rope_factors_short.weight",
                                    (long long)i, sets[s][i]);
    return SP_OK;
}

const float *sp_model_rope_factors(const struct sp_model *m, int n_ctx)
{
    if (m->rope_freqs)
        return m->rope_freqs;
    return (uint32_t)n_ctx > m->hp.n_ctx_orig ? m->rope_long : m->rope_short;
}

/* Every tensor of the file that names a part of the network (a layer's
 * "blk.N." tensors, rope factors, output biases) must have been taken:
 * one the family does not read (a bias we do not add, experts stored one
 * matrix each) would otherwise be silently ignored. */
static sp_status sp_model_check_unused(struct sp_loader *ld)
{
    const struct sp_gguf *g = &ld->m->gguf;
    static const char *const globals[] = {"rope_freqs.weight", "rope_factors_long.weight",
                                          "rope_factors_short.weight", "output.bias", "output_norm.bias",
                                          "token_embd_norm.weight", "token_embd_norm.bias", "position_embd.weight",
                                          "token_types.weight", "per_layer_token_embd.weight",
                                          "per_layer_model_proj.weight", "per_layer_proj_norm.weight",
                                          "altup_proj.weight", "altup_unembd_proj.weight"};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (ld->used[i])
            continue;
        struct sp_gguf_str n = g->tensors[i].name;
        bool part = n.len > 4 && memcmp(n.ptr, "blk.", 4) == 0;
        if (part && ld->m->hp.n_layer < ld->m->hp.n_layer_all) { /* a multi-token-prediction layer's: not run */
            uint64_t il = 0;
            size_t k = 4;
            for (; k < n.len && k < 12 && n.ptr[k] >= '0' && n.ptr[k] <= '9'; k++)
                il = il * 10 + (uint64_t)(n.ptr[k] - '0');
            part = !(k > 4 && k < n.len && n.ptr[k] == '.' && il >= ld->m->hp.n_layer && il < ld->m->hp.n_layer_all);
        }
        for (size_t k = 0; k < sizeof globals / sizeof globals[0]; k++)
            part = part || sp_gguf_str_eq(n, globals[k]);
        if (part)
            return sp_error_set(SP_ERR_UNSUPPORTED, "tensor '%.*s': not part of a %s model as spindle runs it "
                                "(unsupported layout)", (int)(n.len < 96 ? n.len : 96), n.ptr, ld->m->arch->name);
    }
    return SP_OK;
}

/* Matrices the forward pass multiplies by (not tok_embd: its rows are read
 * one at a time); out[] must hold sp_model_n_matrices(). */
static size_t sp_model_n_matrices(const struct sp_model *m)
{
    return 2 + 2 * (SP_ALTUP_MAX - 1) +
           (size_t)m->hp.n_layer * (23 + 2 * (size_t)m->hp.n_head + SP_EXP_KINDS * (size_t)m->hp.n_expert);
}

static size_t sp_model_matrices(struct sp_model *m, struct sp_tensor **out)
{
    size_t n = 0;
    out[n++] = &m->output;
    if (m->pl_model_proj.data)
        out[n++] = &m->pl_model_proj;
    for (int i = 0; i < SP_ALTUP_MAX - 1; i++) {
        if (m->alt_proj[i].data)
            out[n++] = &m->alt_proj[i];
        if (m->alt_unembd[i].data)
            out[n++] = &m->alt_unembd[i];
    }
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        struct sp_layer *L = &m->layers[il];
        struct sp_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->gate_inp,
                                  &L->ssm_in, &L->ssm_out, &L->sc_in, &L->sc_out, &L->dn_qkv, &L->dn_z,
                                  &L->dn_beta, &L->dn_alpha, &L->pl_gate, &L->pl_proj, &L->wq_a, &L->wkv_a,
                                  &L->alt_router, &L->lau_l, &L->lau_r};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            if (ts[i]->data)
                out[n++] = ts[i];
        for (uint32_t h = 0; L->wk_b && h < 2 * m->hp.n_head; h++) /* attn_k_b's views, then attn_v_b's */
            out[n++] = &L->wk_b[h];
        for (size_t e = 0; L->exps && e < SP_EXP_KINDS * (size_t)m->hp.n_expert; e++)
            out[n++] = &L->exps[e];
    }
    return n;
}

/* Copies the matrices the active ISA has a packed kernel for into one owned
 * buffer in the packed layout (src/quant/packed.c); the file's pages for
 * them are not read again and leave the resident set.  Sizes are the
 * file's, already bounds-checked. */
static sp_status sp_model_repack(struct sp_model *m, const struct sp_progress *progress)
{
    sp_status st = SP_OK;
    struct sp_tensor **mats = malloc(sp_model_n_matrices(m) * sizeof *mats);
    if (!mats)
        return sp_error_set(SP_ERR_NOMEM, "model: no memory");
    size_t n = sp_model_matrices(m, mats), total = 0;
    for (size_t i = 0; i < n; i++)
        if (sp_type_packed_for(mats[i]->type, mats[i]->ne1))
            total += (mats[i]->row_bytes * (size_t)mats[i]->ne1 + 63) / 64 * 64;
    if (total) {
        m->packed = sp_huge_alloc(total);
        m->repacked = malloc(n * sizeof *m->repacked);
        if (!m->packed || !m->repacked) {
            st = sp_error_set(SP_ERR_NOMEM, "model: no memory to repack %zu bytes of weights", total);
            goto free_mats;
        }
        m->packed_bytes = total;
    }
    uint8_t *dst = m->packed;
    size_t done = 0;
    for (size_t i = 0; i < n; i++) {
        struct sp_tensor *t = mats[i];
        uint32_t pt = sp_type_packed_for(t->type, t->ne1);
        if (!pt)
            continue;
        sp_type_get(pt)->pack(t->data, t->row_bytes, dst, t->ne0, t->ne1);
        m->repacked[m->n_packed] = (struct sp_span){0, t->row_bytes * (size_t)t->ne1};
        sp_model_file_offset(m, t->data, &m->repacked[m->n_packed].off); /* a view into a file */
        /* a tied head's embedding rows map back in one page at a time */
        sp_model_drop(m, t->data, t->row_bytes * (size_t)t->ne1);
        t->type = pt;
        t->data = dst;
        dst += (t->row_bytes * (size_t)t->ne1 + 63) / 64 * 64;
        done += (t->row_bytes * (size_t)t->ne1 + 63) / 64 * 64;
        sp_progress_report(progress, "repacking weights", done, total);
        m->n_packed++;
    }
    for (size_t i = 0; i < n; i++)
        m->resident_bytes += sp_bytes(mats[i]);
free_mats:
    free(mats);
    return st;
}

/* Copies the vectors (norm weights, biases, shared-expert gates, attention
 * sinks; the experts' bias arrays) into one
 * owned buffer.  Read in place they sit between matrices whose pages were
 * dropped after repacking, and each one read maps its whole page-cache
 * folio back in (up to megabytes of matrix data on kernels with large
 * folios): resident memory would depend on how the file came into the
 * page cache. */
static sp_status sp_model_own_vectors(struct sp_model *m)
{
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) { /* sizes, then copies */
        uint8_t *dst = m->vectors;
        for (uint32_t il = 0; il <= m->hp.n_layer; il++) {
            struct sp_layer *L = il < m->hp.n_layer ? &m->layers[il] : NULL;
            struct sp_tensor *lv[] = {L ? &L->attn_norm : &m->out_norm, L ? &L->q_norm : NULL,
                                      L ? &L->k_norm : NULL, L ? &L->post_attn_norm : NULL,
                                      L ? &L->ffn_norm : NULL, L ? &L->post_ffn_norm : NULL,
                                      L ? &L->bq : NULL, L ? &L->bk : NULL, L ? &L->bv : NULL,
                                      L ? &L->bo : &m->embd_norm, L ? &L->b_up : &m->embd_norm_b,
                                      L ? &L->b_down : NULL, L ? &L->attn_out_norm : NULL,
                                      L ? &L->attn_out_norm_b : NULL, L ? &L->ffn_out_norm : NULL,
                                      L ? &L->ffn_out_norm_b : NULL, L ? &L->shexp_gate : NULL,
                                      L ? &L->ssm_conv : NULL, L ? &L->ssm_conv_b : NULL, L ? &L->ssm_dt_b : NULL,
                                      L ? &L->ssm_a : NULL, L ? &L->ssm_d : NULL, L ? &L->ssm_norm : NULL,
                                      L ? &L->sc_conv : NULL, L ? &L->sinks : NULL, L ? &L->gate_inp_b : NULL,
                                      L ? &L->exps_b[SP_EXP_GATE] : NULL, L ? &L->exps_b[SP_EXP_UP] : NULL,
                                      L ? &L->exps_b[SP_EXP_DOWN] : NULL, L ? &L->pl_norm : &m->pl_proj_norm,
                                      L ? &L->ffn_post1 : NULL, L ? &L->ffn_pre2 : NULL, L ? &L->ffn_post2 : NULL,
                                      L ? &L->gate_inp_s : NULL, L ? &L->exps_s : NULL, L ? &L->q_a_norm : NULL,
                                      L ? &L->kv_a_norm : NULL, L ? &L->exp_probs_b : NULL,
                                      L ? &L->alt_rnorm : NULL, L ? &L->alt_cscale : NULL, L ? &L->lau_norm : NULL};
            for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++) {
                if (!lv[i] || !lv[i]->data)
                    continue;
                size_t bytes = lv[i]->row_bytes * (size_t)lv[i]->ne1;
                if (pass == 0) {
                    total += (bytes + 63) / 64 * 64;
                    continue;
                }
                if (L && (lv[i] == &L->ssm_conv || lv[i] == &L->sc_conv)) { /* [channels][taps] -> [taps][channels] */
                    const size_t k = lv[i] == &L->ssm_conv ? m->hp.ssm_conv : m->hp.conv_taps;
                    const size_t ch = (size_t)lv[i]->ne0 / k;
                    const float *src = lv[i]->data;
                    for (size_t c = 0; c < ch; c++)
                        for (size_t j = 0; j < k; j++)
                            ((float *)(void *)dst)[j * ch + c] = src[c * k + j];
                } else {
                    memcpy(dst, lv[i]->data, bytes);
                }
                lv[i]->data = dst;
                dst += (bytes + 63) / 64 * 64;
            }
        }
        if (pass == 0 && total && !(m->vectors = aligned_alloc(64, total)))
            return sp_error_set(SP_ERR_NOMEM, "model: no memory for %zu bytes of norm weights", total);
        if (pass == 0)
            m->resident_bytes += total;
        if (!total)
            return SP_OK;
    }
    return SP_OK;
}

/* abs_pos families: position and token-type embeddings (rows read one at
 * a time, F32 or any type with a row reader) and the embeddings' norm. */
static sp_status sp_model_embd_extras(struct sp_loader *ld)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    sp_status st;
    if (!m->arch->abs_pos)
        return SP_OK;
    uint32_t n_types = 2;
    if ((st = sp_gguf_get_u32(&m->gguf, "tokenizer.ggml.token_type_count", false, &n_types)))
        return st;
    if (n_types == 0 || n_types > 1024)
        return sp_error_set(SP_ERR_FORMAT, "key 'tokenizer.ggml.token_type_count': %u, expected 1..1024", n_types);
    if ((st = sp_model_tensor(ld, "position_embd.weight", hp->n_embd, hp->n_ctx_train, true, &m->pos_embd)) ||
        (st = sp_model_tensor(ld, "token_types.weight", hp->n_embd, n_types, true, &m->tok_types)) ||
        (st = sp_model_tensor(ld, "token_embd_norm.weight", hp->n_embd, 0, true, &m->embd_norm)) ||
        (st = sp_model_tensor(ld, "token_embd_norm.bias", hp->n_embd, 0, m->arch->norm == SP_NORM_LAYER,
                              &m->embd_norm_b)))
        return st;
    return SP_OK;
}

/* Hyper-parameters, then every tensor (each checked against them). */
static sp_status sp_model_read(struct sp_loader *ld, const struct sp_progress *progress)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    uint32_t swa_pattern;
    sp_status st;
    if ((st = sp_model_hparams(m, &swa_pattern)) != SP_OK)
        return st;
    float swa_base = m->arch->swa_rope_base > 0.0f ? m->arch->swa_rope_base : hp->rope_base;
    if ((st = sp_model_hp_pos(m, "rope.freq_base_swa", &swa_base)) != SP_OK)
        return st;
    if ((st = sp_model_tensor(ld, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->tok_embd)) != SP_OK ||
        (st = sp_model_tensor(ld, m->arch->out_norm_embd ? "token_embd_norm.weight" : "output_norm.weight",
                              hp->n_embd, 0, !m->arch->post_ln, &m->out_norm)) != SP_OK ||
        (st = sp_model_embd_extras(ld)) != SP_OK ||
        (st = sp_model_tensor(ld, "output.weight", hp->n_embd, hp->n_vocab, false, &m->output)) != SP_OK ||
        (st = sp_model_rope_factors_load(ld)) != SP_OK)
        return st;
    if (hp->n_embd_pl) { /* n_embd_pl <= 65536, n_layer <= 4096: the product fits */
        const int64_t NP = (int64_t)hp->n_embd_pl * hp->n_layer;
        if ((st = sp_model_tensor(ld, "per_layer_token_embd.weight", NP, hp->n_vocab, true, &m->pl_tok_embd)) ||
            (st = sp_model_tensor(ld, "per_layer_model_proj.weight", hp->n_embd, NP, true, &m->pl_model_proj)) ||
            (st = sp_model_tensor(ld, "per_layer_proj_norm.weight", hp->n_embd_pl, 0, true, &m->pl_proj_norm)))
            return st;
        m->weights_bytes += sp_bytes(&m->pl_model_proj);
    }
    if (m->arch->altup && ((st = sp_model_stack(ld, "altup_proj.weight", m->alt_proj)) ||
                           (st = sp_model_stack(ld, "altup_unembd_proj.weight", m->alt_unembd))))
        return st;
    m->tied_output = !m->output.data;
    if (m->tied_output)
        m->output = m->tok_embd;
    m->weights_bytes += sp_bytes(&m->output);
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (hp->n_expert)
        m->exps = calloc((size_t)hp->n_layer * SP_EXP_KINDS * hp->n_expert, sizeof *m->exps);
    if (m->arch->mla)
        m->heads = calloc((size_t)hp->n_layer * 2 * hp->n_head, sizeof *m->heads);
    if (!m->layers || (hp->n_expert && !m->exps) || (m->arch->mla && !m->heads))
        return sp_error_set(SP_ERR_NOMEM, "model: no memory for %u layers", hp->n_layer);
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if ((st = sp_model_layer(ld, il, swa_pattern, swa_base)) != SP_OK)
            return st;
    if ((st = sp_model_check_unused(ld)) != SP_OK)
        return st;
    if ((st = sp_model_repack(m, progress)) != SP_OK)
        return st;
    return sp_model_own_vectors(m);
}

/* Whether [p, p + len) overlaps t's data. */
static bool sp_overlaps(const struct sp_tensor *t, const uint8_t *p, size_t len)
{
    const uint8_t *d = t->data;
    return d && d < p + len && p < d + sp_bytes(t);
}

/* Keeps in m->repacked only the repacked matrices' spans that no tensor
 * read in place shares (a tied output head is the token embedding table,
 * whose rows are read from the file), and counts the file's other bytes,
 * which sp_model_detach copies. */
static sp_status sp_model_copy_plan(struct sp_model *m)
{
    struct sp_tensor **mats = malloc((sp_model_n_matrices(m) + 4) * sizeof *mats);
    if (!mats)
        return sp_error_set(SP_ERR_NOMEM, "model: no memory");
    size_t n = sp_model_matrices(m, mats);
    mats[n++] = &m->tok_embd;
    mats[n++] = &m->pos_embd;
    mats[n++] = &m->tok_types;
    mats[n++] = &m->pl_tok_embd;
    uint64_t skipped = 0;
    m->n_skip = 0;
    for (uint32_t i = 0; i < m->n_packed; i++) {
        const uint8_t *p = sp_model_file_ptr(m, m->repacked[i].off);
        bool shared = false;
        size_t at;
        for (size_t k = 0; k < n && !shared; k++)
            shared = mats[k]->data && sp_model_file_offset(m, mats[k]->data, &at) &&
                     sp_overlaps(mats[k], p, m->repacked[i].len);
        if (!shared) {
            skipped += m->repacked[i].len;
            m->repacked[m->n_skip++] = m->repacked[i];
        }
    }
    free(mats);
    m->copy_bytes = m->file_bytes > skipped ? m->file_bytes - skipped : 0;
    return SP_OK;
}

sp_status sp_model_open(struct sp_model **out, const char *path, unsigned map_flags,
                        const struct sp_progress *progress)
{
    struct sp_model *m;
    struct sp_gguf_str arch;
    struct sp_loader ld = {0};
    sp_status st;
    *out = NULL;
    m = calloc(1, sizeof *m);
    if (!m)
        return sp_error_set(SP_ERR_NOMEM, "model: no memory");
    if ((st = sp_model_open_gguf(&m->map, &m->gguf, &m->parts, path, map_flags)) != SP_OK)
        goto free_model;
    for (uint32_t i = 0; sp_model_map(m, i); i++)
        m->file_bytes += sp_model_map(m, i)->size;
    ld.m = m;
    ld.used = calloc(m->gguf.n_tensors ? m->gguf.n_tensors : 1, 1);
    if (!ld.used) {
        st = sp_error_set(SP_ERR_NOMEM, "model: no memory");
        goto fail;
    }
    if ((st = sp_gguf_get_str(&m->gguf, "general.architecture", true, &arch)) != SP_OK)
        goto fail;
    m->arch = sp_arch_find(arch);
    if (!m->arch) {
        char names[256];
        sp_arch_list(names, sizeof names, NULL);
        st = sp_error_set(SP_ERR_UNSUPPORTED, "key 'general.architecture': '%.*s' is not supported (supported: %s)",
                          (int)(arch.len < 64 ? arch.len : 64), arch.ptr, names);
        goto fail;
    }
    if ((st = sp_model_read(&ld, progress)) != SP_OK || (st = sp_model_copy_plan(m)) != SP_OK)
        goto fail;
    sp_model_features(m, m->features, sizeof m->features);
    free(ld.used);
    ld.used = NULL;
    if ((map_flags & SP_MAP_LOCK) && m->packed && mlock(m->packed, m->packed_bytes) != 0) {
        st = sp_error_set(SP_ERR_NOMEM, "mlock of %zu bytes of repacked weights: %s (see ulimit -l)",
                          m->packed_bytes, strerror(errno));
        goto fail;
    }
    /* Reading a tensor can map a whole huge page-cache folio (2 MiB and
     * more) that spans tensors already repacked and dropped; drop the data
     * section once more, so what stays resident is what the forward pass
     * reads in place (it maps back as it is read), whatever state the page
     * cache was in.  Locked pages stay. */
    for (uint32_t i = 0; i <= m->parts.n; i++) {
        const struct sp_gguf *g = i ? &m->parts.g[i - 1] : &m->gguf;
        sp_mapping_drop(sp_model_map(m, i), g->base + g->data_offset, g->size - g->data_offset);
    }
    *out = m;
    return SP_OK;

fail:
    free(ld.used);
    sp_error_wrap(st, "%s", path);
    sp_huge_free(m->packed, m->packed_bytes);
    free(m->repacked);
    free(m->vectors);
    free(m->exps);
    free(m->heads);
    free(m->layers);
    sp_gguf_free(&m->gguf);
    sp_mapping_free(&m->map);
    sp_gguf_parts_free(&m->parts);
free_model:
    free(m);
    return st;
}

void sp_model_close(struct sp_model *m)
{
    if (!m)
        return;
    sp_huge_free(m->packed, m->packed_bytes);
    free(m->repacked);
    free(m->vectors);
    free(m->exps);
    free(m->heads);
    free(m->layers);
    sp_gguf_free(&m->gguf);
    sp_mapping_free(&m->map);
    sp_gguf_parts_free(&m->parts);
    free(m);
}

const char *sp_model_chat_format(const struct sp_model *m) { return m->arch->chat_format; }

sp_status sp_model_detach(struct sp_model *m, bool lock)
{
    struct sp_span *skip = malloc((m->n_skip ? m->n_skip : 1) * sizeof *skip);
    struct sp_mapping *f;
    sp_status st = SP_OK;
    size_t base = 0;
    if (!skip)
        return sp_error_set(SP_ERR_NOMEM, "model: no memory");
    /* each file with the repacked spans inside it, as offsets into it */
    for (uint32_t i = 0; st == SP_OK && (f = sp_model_map(m, i)); base += f->size, i++) {
        size_t n = 0;
        for (uint32_t k = 0; k < m->n_skip; k++)
            if (m->repacked[k].off >= base && m->repacked[k].off - base < f->size)
                skip[n++] = (struct sp_span){m->repacked[k].off - base, m->repacked[k].len};
        st = sp_mapping_detach(f, skip, n, lock);
    }
    free(skip);
    return st;
}
