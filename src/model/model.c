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
#include "quant/quant.h"

sp_status sp_model_open_gguf(struct sp_mapping *map, struct sp_gguf *g, const char *path, unsigned map_flags)
{
    sp_status st = sp_mapping_init(map, path, map_flags);
    if (st != SP_OK)
        return st;
    sp_quant_init();
    st = sp_gguf_init(g, map->data, map->size);
    if (st != SP_OK) {
        sp_error_wrap(st, "%s", path);
        sp_mapping_free(map);
    }
    return st;
}

/* Reads "<arch>.<suffix>" as u32. */
static sp_status sp_hp_u32(const struct sp_model *m, const char *suffix, bool required, uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    return sp_gguf_get_u32(&m->gguf, key, required, out);
}

static sp_status sp_hp_f32(const struct sp_model *m, const char *suffix, bool required, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    return sp_gguf_get_f32(&m->gguf, key, required, out);
}

static sp_status sp_model_hparams(struct sp_model *m)
{
    struct sp_hparams *hp = &m->hp;
    const char *a = m->arch->name;
    const struct sp_gguf_kv *toks;
    sp_status st;
    hp->rope_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    if ((st = sp_hp_u32(m, "context_length", true, &hp->n_ctx_train)) ||
        (st = sp_hp_u32(m, "embedding_length", true, &hp->n_embd)) ||
        (st = sp_hp_u32(m, "block_count", true, &hp->n_layer)) ||
        (st = sp_hp_u32(m, "feed_forward_length", true, &hp->n_ff)) ||
        (st = sp_hp_u32(m, "attention.head_count", true, &hp->n_head)) ||
        (st = sp_hp_f32(m, "attention.layer_norm_rms_epsilon", true, &hp->eps)) ||
        (st = sp_hp_f32(m, "rope.freq_base", false, &hp->rope_base)))
        return st;
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_ff == 0 || hp->n_head == 0 || hp->n_ctx_train == 0)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.*': embedding_length, block_count, feed_forward_length, "
                            "head_count and context_length must be > 0", a);
    if (hp->n_layer > 4096 || hp->n_head > 4096)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.block_count'/'head_count': %u layers, %u heads is implausible",
                            a, hp->n_layer, hp->n_head);
    hp->n_head_kv = hp->n_head;
    if ((st = sp_hp_u32(m, "attention.head_count_kv", false, &hp->n_head_kv)))
        return st;
    if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.head_count_kv': %u does not divide head_count %u", a,
                            hp->n_head_kv, hp->n_head);
    if (hp->n_embd % hp->n_head)
        hp->head_dim = 0;
    else
        hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = sp_hp_u32(m, "attention.key_length", false, &hp->head_dim)))
        return st;
    if (hp->head_dim == 0)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.head_count': %u does not divide embedding_length %u", a,
                            hp->n_head, hp->n_embd);
    uint32_t v_len = hp->head_dim;
    if ((st = sp_hp_u32(m, "attention.value_length", false, &v_len)))
        return st;
    if (v_len != hp->head_dim)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.value_length': %u differs from key_length %u", a,
                            v_len, hp->head_dim);
    hp->n_rot = hp->head_dim;
    if ((st = sp_hp_u32(m, "rope.dimension_count", false, &hp->n_rot)))
        return st;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.dimension_count': %u, expected an even number <= %u", a,
                            hp->n_rot, hp->head_dim);
    if (!(hp->eps > 0.0f && hp->eps < 1.0f))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.layer_norm_rms_epsilon': %g out of (0, 1)", a, hp->eps);
    if (!(hp->rope_base > 0.0f) || isinf(hp->rope_base))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.freq_base': %g, expected > 0", a, hp->rope_base);
    struct sp_gguf_str scaling = {"none", 4};
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    if ((st = sp_gguf_get_str(&m->gguf, key, false, &scaling)))
        return st;
    if (sp_gguf_str_eq(scaling, "linear")) {
        float factor = 1.0f;
        if ((st = sp_hp_f32(m, "rope.scaling.factor", true, &factor)))
            return st;
        if (!(factor >= 1.0f) || isinf(factor))
            return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.scaling.factor': %g, expected >= 1", a, factor);
        hp->rope_freq_scale = 1.0f / factor;
    } else if (!sp_gguf_str_eq(scaling, "none")) {
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s': rope scaling '%.*s' is not supported", key,
                            (int)(scaling.len < 32 ? scaling.len : 32), scaling.ptr);
    }
    if (sp_gguf_tensor_find(&m->gguf, "rope_freqs.weight"))
        return sp_error_set(SP_ERR_UNSUPPORTED, "tensor 'rope_freqs.weight': per-frequency rope factors are not supported");
    if (m->arch->swa_pattern && (st = sp_hp_u32(m, "attention.sliding_window", true, &hp->n_swa)))
        return st;
    if ((st = sp_gguf_get_arr(&m->gguf, "tokenizer.ggml.tokens", true, SP_GGUF_STRING, &toks)))
        return st;
    if (toks->arr_n == 0 || toks->arr_n > (1u << 24))
        return sp_error_set(SP_ERR_FORMAT, "key 'tokenizer.ggml.tokens': %llu tokens, expected 1..2^24",
                            (unsigned long long)toks->arr_n);
    hp->n_vocab = (uint32_t)toks->arr_n;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    return SP_OK;
}

/* Looks up `name` and checks its shape [ne1][ne0] (ne1 == 0: a 1-D tensor).
 * Norm vectors must be F32.  Absent and optional: out->data stays NULL. */
static sp_status sp_model_tensor(struct sp_model *m, const char *name, int64_t ne0, int64_t ne1, bool required,
                                 struct sp_tensor *out)
{
    const struct sp_gguf_tensor *t = sp_gguf_tensor_find(&m->gguf, name);
    memset(out, 0, sizeof *out);
    if (!t)
        return required ? sp_error_set(SP_ERR_FORMAT, "tensor '%s': missing", name) : SP_OK;
    uint32_t want_dims = ne1 ? 2 : 1;
    if (t->n_dims != want_dims || t->ne[0] != ne0 || t->ne[1] != (ne1 ? ne1 : 1))
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': shape [%lld, %lld] (rank %u), expected [%lld, %lld] (rank %u)",
                            name, (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)ne0,
                            (long long)(ne1 ? ne1 : 1), want_dims);
    if (!ne1 && t->type != SP_TYPE_F32)
        return sp_error_set(SP_ERR_UNSUPPORTED, "tensor '%s': type %s, expected F32 for a norm vector", name,
                            sp_type_get(t->type)->name);
    if (ne1) {
        const struct sp_type_traits *tt = sp_type_get(t->type);
        if (!tt->vec_dot || !sp_type_get(tt->vec_dot_type)->from_float)
            return sp_error_set(SP_ERR_UNSUPPORTED, "tensor '%s': type %s has no matmul kernel", name, tt->name);
    }
    out->type = t->type;
    out->ne0 = t->ne[0];
    out->ne1 = t->ne[1];
    out->data = t->data;
    out->row_bytes = ne1 ? (size_t)(t->nbytes / (uint64_t)t->ne[1]) : (size_t)t->nbytes;
    return SP_OK;
}

static sp_status sp_model_layer(struct sp_model *m, uint32_t il)
{
    const struct sp_hparams *hp = &m->hp;
    struct sp_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[96];
    sp_status st;
#define SP_T(field, suffix, ne0, ne1, req)                                            \
    do {                                                                             \
        snprintf(name, sizeof name, "blk.%u.%s.weight", il, suffix);                 \
        if ((st = sp_model_tensor(m, name, ne0, ne1, req, &L->field)) != SP_OK)      \
            return st;                                                               \
    } while (0)
    SP_T(attn_norm, "attn_norm", E, 0, true);
    SP_T(wq, "attn_q", E, Q, true);
    SP_T(wk, "attn_k", E, KV, true);
    SP_T(wv, "attn_v", E, KV, true);
    SP_T(wo, "attn_output", Q, E, true);
    SP_T(ffn_norm, "ffn_norm", E, 0, true);
    SP_T(w_gate, "ffn_gate", E, hp->n_ff, true);
    SP_T(w_up, "ffn_up", E, hp->n_ff, true);
    SP_T(w_down, "ffn_down", hp->n_ff, E, true);
    SP_T(q_norm, "attn_q_norm", hp->head_dim, 0, m->arch->qk_norm);
    SP_T(k_norm, "attn_k_norm", hp->head_dim, 0, m->arch->qk_norm);
    SP_T(post_attn_norm, "post_attention_norm", E, 0, m->arch->post_norms);
    SP_T(post_ffn_norm, "post_ffw_norm", E, 0, m->arch->post_norms);
#undef SP_T
    L->swa = m->arch->swa_pattern && (il + 1) % m->arch->swa_pattern != 0;
    L->rope_base = L->swa ? m->arch->swa_rope_base : hp->rope_base;
    const struct sp_tensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        m->weights_bytes += mats[i]->row_bytes * (uint64_t)mats[i]->ne1;
    return SP_OK;
}

/* Matrices the forward pass multiplies by (not tok_embd: its rows are read
 * one at a time); out[] must hold 1 + 7 * n_layer. */
static size_t sp_model_matrices(struct sp_model *m, struct sp_tensor **out)
{
    size_t n = 0;
    out[n++] = &m->output;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        struct sp_layer *L = &m->layers[il];
        struct sp_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) out[n++] = ts[i];
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
    struct sp_tensor **mats = malloc((1 + 7 * (size_t)m->hp.n_layer) * sizeof *mats);
    if (!mats)
        return sp_error_set(SP_ERR_NOMEM, "model: no memory");
    size_t n = sp_model_matrices(m, mats), total = 0;
    for (size_t i = 0; i < n; i++)
        if (sp_type_packed_for(mats[i]->type, mats[i]->ne1))
            total += (mats[i]->row_bytes * (size_t)mats[i]->ne1 + 63) / 64 * 64;
    if (total) {
        m->packed = sp_huge_alloc(total);
        if (!m->packed) {
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
        /* a tied head's embedding rows map back in one page at a time */
        sp_mapping_drop(&m->map, t->data, t->row_bytes * (size_t)t->ne1);
        t->type = pt;
        t->data = dst;
        dst += (t->row_bytes * (size_t)t->ne1 + 63) / 64 * 64;
        done += (t->row_bytes * (size_t)t->ne1 + 63) / 64 * 64;
        sp_progress_report(progress, "repacking weights", done, total);
        m->n_packed++;
    }
free_mats:
    free(mats);
    return st;
}

/* Copies the vectors (norm weights) into one owned buffer.  Read in place
 * they sit between matrices whose pages were dropped after repacking, and
 * each one read maps its whole page-cache folio back in (up to megabytes of
 * matrix data on kernels with large folios): resident memory would depend
 * on how the file came into the page cache. */
static sp_status sp_model_own_vectors(struct sp_model *m)
{
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) { /* sizes, then copies */
        uint8_t *dst = m->vectors;
        for (uint32_t il = 0; il <= m->hp.n_layer; il++) {
            struct sp_layer *L = il < m->hp.n_layer ? &m->layers[il] : NULL;
            struct sp_tensor *lv[] = {L ? &L->attn_norm : &m->out_norm, L ? &L->q_norm : NULL,
                                      L ? &L->k_norm : NULL, L ? &L->post_attn_norm : NULL,
                                      L ? &L->ffn_norm : NULL, L ? &L->post_ffn_norm : NULL};
            for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++) {
                if (!lv[i] || !lv[i]->data)
                    continue;
                size_t bytes = lv[i]->row_bytes * (size_t)lv[i]->ne1;
                if (pass == 0) {
                    total += (bytes + 63) / 64 * 64;
                    continue;
                }
                memcpy(dst, lv[i]->data, bytes);
                lv[i]->data = dst;
                dst += (bytes + 63) / 64 * 64;
            }
        }
        if (pass == 0 && total && !(m->vectors = aligned_alloc(64, total)))
            return sp_error_set(SP_ERR_NOMEM, "model: no memory for %zu bytes of norm weights", total);
        if (!total)
            return SP_OK;
    }
    return SP_OK;
}

sp_status sp_model_open(struct sp_model **out, const char *path, unsigned map_flags,
                        const struct sp_progress *progress)
{
    struct sp_model *m;
    struct sp_gguf_str arch;
    sp_status st;
    *out = NULL;
    m = calloc(1, sizeof *m);
    if (!m)
        return sp_error_set(SP_ERR_NOMEM, "model: no memory");
    if ((st = sp_model_open_gguf(&m->map, &m->gguf, path, map_flags)) != SP_OK)
        goto free_model;
    m->file_bytes = m->map.size;
    if ((st = sp_gguf_get_str(&m->gguf, "general.architecture", true, &arch)) != SP_OK)
        goto fail;
    m->arch = sp_arch_find(arch);
    if (!m->arch) {
        st = sp_error_set(SP_ERR_UNSUPPORTED, "key 'general.architecture': '%.*s' is not supported (supported: llama, gemma3)",
                          (int)(arch.len < 64 ? arch.len : 64), arch.ptr);
        goto fail;
    }
    if ((st = sp_model_hparams(m)) != SP_OK)
        goto fail;
    const struct sp_hparams *hp = &m->hp;
    if ((st = sp_model_tensor(m, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->tok_embd)) != SP_OK ||
        (st = sp_model_tensor(m, "output_norm.weight", hp->n_embd, 0, true, &m->out_norm)) != SP_OK ||
        (st = sp_model_tensor(m, "output.weight", hp->n_embd, hp->n_vocab, false, &m->output)) != SP_OK)
        goto fail;
    if (!m->output.data)
        m->output = m->tok_embd; /* tied head */
    m->weights_bytes = m->output.row_bytes * (uint64_t)m->output.ne1;
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = sp_error_set(SP_ERR_NOMEM, "model: no memory for %u layers", hp->n_layer);
        goto fail;
    }
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if ((st = sp_model_layer(m, il)) != SP_OK)
            goto fail;
    if ((st = sp_model_repack(m, progress)) != SP_OK || (st = sp_model_own_vectors(m)) != SP_OK)
        goto fail;
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
    sp_mapping_drop(&m->map, m->map.data + m->gguf.data_offset, m->map.size - m->gguf.data_offset);
    *out = m;
    return SP_OK;

fail:
    sp_error_wrap(st, "%s", path);
    sp_huge_free(m->packed, m->packed_bytes);
    free(m->vectors);
    free(m->layers);
    sp_gguf_free(&m->gguf);
    sp_mapping_free(&m->map);
free_model:
    free(m);
    return st;
}

void sp_model_close(struct sp_model *m)
{
    if (!m)
        return;
    sp_huge_free(m->packed, m->packed_bytes);
    free(m->vectors);
    free(m->layers);
    sp_gguf_free(&m->gguf);
    sp_mapping_free(&m->map);
    free(m);
}

const char *sp_model_chat_format(const struct sp_model *m) { return m->arch->chat_format; }
