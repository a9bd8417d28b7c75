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

static void sp_key(const struct sp_model *m, const char *suffix, char *key, size_t size)
{
    snprintf(key, size, "%s.%s", m->arch->name, suffix);
}

/* Reads "<arch>.<suffix>". */
static sp_status sp_hp_u32(const struct sp_model *m, const char *suffix, bool required, uint32_t *out)
{
    char key[128];
    sp_key(m, suffix, key, sizeof key);
    return sp_gguf_get_u32(&m->gguf, key, required, out);
}

static sp_status sp_hp_f32(const struct sp_model *m, const char *suffix, bool required, float *out)
{
    char key[128];
    sp_key(m, suffix, key, sizeof key);
    return sp_gguf_get_f32(&m->gguf, key, required, out);
}

/* An optional positive finite float key (left at its default when absent). */
static sp_status sp_hp_pos(const struct sp_model *m, const char *suffix, float *out)
{
    sp_status st = sp_hp_f32(m, suffix, false, out);
    if (st == SP_OK && !(*out > 0.0f && isfinite(*out)))
        st = sp_error_set(SP_ERR_FORMAT, "key '%s.%s': %g, expected a finite value > 0", m->arch->name, suffix,
                          *out);
    return st;
}

static bool sp_key_present(const struct sp_model *m, const char *suffix)
{
    char key[128];
    sp_key(m, suffix, key, sizeof key);
    return sp_gguf_find(&m->gguf, key) != NULL;
}

static bool sp_arch_has_longrope(const struct sp_arch *a)
{
    return a->rope_factors != SP_ROPE_FACTORS_NONE;
}

static bool sp_arch_has_moe(const struct sp_arch *a)
{
    return a->moe != SP_MOE_NONE;
}

/* YaRN's keys, and the cos/sin scale llama.cpp's context derives from them
 * (llama_context's yarn_attn_factor: mscale(factor) / mscale(factor,
 * yarn_log_multiplier), divided by ggml's own correction 1 + 0.1 ln factor,
 * which sp_rope_table multiplies back, times rope.scaling.attn_factor). */
static sp_status sp_model_yarn(struct sp_model *m)
{
    struct sp_hparams *hp = &m->hp;
    float log_mul = 0.0f, factor = 1.0f / hp->rope_freq_scale;
    sp_status st;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    if ((st = sp_hp_pos(m, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast)) ||
        (st = sp_hp_pos(m, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow)) ||
        (st = sp_hp_f32(m, "rope.scaling.yarn_log_multiplier", false, &log_mul)))
        return st;
    if (!(log_mul >= 0.0f && log_mul < 100.0f))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.scaling.yarn_log_multiplier': %g, expected 0..100",
                            m->arch->name, log_mul);
    if (m->arch->mla) /* DeepSeek's converter writes 0.1 mscale_all_dim (llama.cpp divides it back) */
        log_mul /= 0.1f;
    hp->yarn_log_mul = log_mul;
    float ms1 = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
    float msl = factor <= 1.0f ? 1.0f : 0.1f * log_mul * logf(factor) + 1.0f;
    /* DeepSeek: mscale is taken equal to mscale_all_dim, so their ratio is 1 (llama.cpp's rule) */
    float af = log_mul != 0.0f ? (m->arch->mla ? 1.0f : ms1 / msl) : ms1;
    af *= 1.0f / (1.0f + 0.1f * logf(factor));
    hp->rope_mscale *= af;
    return SP_OK;
}

/* RoPE scaling: none, linear (factor), YaRN (families whose row allows it), or LongRoPE (per-frequency factor
 * tensors, chosen by context length, and an attention factor scaling cos
 * and sin); as llama.cpp, rope.scaling.factor divides the frequencies
 * under either scaling type. */
static sp_status sp_model_rope_scaling(struct sp_model *m)
{
    struct sp_hparams *hp = &m->hp;
    const char *a = m->arch->name;
    struct sp_gguf_str scaling = {"none", 4};
    char key[128];
    sp_status st;
    sp_key(m, "rope.scaling.type", key, sizeof key);
    if ((st = sp_gguf_get_str(&m->gguf, key, false, &scaling)))
        return st;
    bool linear = sp_gguf_str_eq(scaling, "linear");
    bool longrope = sp_gguf_str_eq(scaling, "longrope");
    hp->yarn = m->arch->yarn && sp_gguf_str_eq(scaling, "yarn");
    if (!linear && !longrope && !hp->yarn && !sp_gguf_str_eq(scaling, "none"))
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s': rope scaling '%.*s' is not supported (supported: none, "
                            "linear, longrope%s)", key, (int)(scaling.len < 32 ? scaling.len : 32), scaling.ptr,
                            m->arch->yarn ? ", yarn" : "");
    if (longrope && !sp_arch_has_longrope(m->arch)) {
        char names[256];
        sp_arch_list(names, sizeof names, sp_arch_has_longrope);
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s': rope scaling 'longrope' is not supported for %s "
                            "(supported: %s)", key, a, names);
    }
    float factor = 1.0f;
    if ((st = sp_hp_f32(m, "rope.scaling.factor", linear || hp->yarn, &factor)))
        return st;
    if (!(factor >= 1.0f) || isinf(factor))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.scaling.factor': %g, expected >= 1", a, factor);
    hp->rope_freq_scale = 1.0f / factor;
    hp->rope_mscale = 1.0f;
    hp->n_ctx_orig = hp->n_ctx_train;
    if ((st = sp_hp_pos(m, "rope.scaling.attn_factor", &hp->rope_mscale)) ||
        (st = sp_hp_u32(m, "rope.scaling.original_context_length", false, &hp->n_ctx_orig)))
        return st;
    if (hp->n_ctx_orig == 0)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.scaling.original_context_length': 0, expected > 0", a);
    return hp->yarn ? sp_model_yarn(m) : SP_OK;
}

/* Sliding window and soft-capping, as the family defines them. */
static sp_status sp_model_attn_keys(struct sp_model *m, uint32_t *swa_pattern)
{
    const struct sp_arch *ar = m->arch;
    struct sp_hparams *hp = &m->hp;
    sp_status st;
    *swa_pattern = ar->swa_pattern;
    if (ar->swa == SP_SWA_PATTERN && ar->swa_layers && hp->n_layer != ar->swa_layers) {
        /* every layer global: llama.cpp reads no window for this model */
    } else if (ar->swa == SP_SWA_PATTERN) {
        hp->n_swa = ar->swa_default;
        if ((st = sp_hp_u32(m, "attention.sliding_window", ar->swa_default == 0, &hp->n_swa)) ||
            (st = sp_hp_u32(m, "attention.sliding_window_pattern", false, swa_pattern)))
            return st;
        if (*swa_pattern == 0 || hp->n_swa == 0)
            return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.sliding_window%s': 0, expected > 0", ar->name,
                                hp->n_swa ? "_pattern" : "");
    } else if (ar->swa == SP_SWA_ALL && (st = sp_hp_u32(m, "attention.sliding_window", false, &hp->n_swa))) {
        return st;
    } else if (ar->swa == SP_SWA_LIST) { /* which layers: sp_model_swa_list */
        if ((st = sp_hp_u32(m, "attention.sliding_window", true, &hp->n_swa)))
            return st;
        if (hp->n_swa == 0)
            return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.sliding_window': 0, expected > 0", ar->name);
    }
    if (ar->final_softcap && sp_key_present(m, "final_logit_softcapping") &&
        (st = sp_hp_pos(m, "final_logit_softcapping", &hp->final_softcap)))
        return st;
    if (ar->softcap) {
        hp->attn_softcap = 50.0f;
        hp->final_softcap = 30.0f;
        if ((st = sp_hp_pos(m, "attn_logit_softcapping", &hp->attn_softcap)) ||
            (st = sp_hp_pos(m, "final_logit_softcapping", &hp->final_softcap)))
            return st;
    }
    return SP_OK;
}

/* Expert counts and widths; every inconsistency is refused. */
static sp_status sp_model_expert_keys(struct sp_model *m)
{
    const struct sp_arch *ar = m->arch;
    struct sp_hparams *hp = &m->hp;
    const char *a = ar->name;
    sp_status st;
    if ((st = sp_hp_u32(m, "expert_count", ar->moe == SP_MOE_REQUIRED, &hp->n_expert)) ||
        (st = sp_hp_u32(m, "expert_used_count", hp->n_expert > 0, &hp->n_expert_used)))
        return st;
    if (ar->moe == SP_MOE_NONE && (hp->n_expert || sp_key_present(m, "expert_used_count"))) {
        char names[256];
        sp_arch_list(names, sizeof names, sp_arch_has_moe);
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.expert_count': %s has no mixture-of-experts layers (experts "
                            "run in: %s)", a, a, names);
    }
    if (hp->n_expert == 0) {
        if (hp->n_expert_used || ar->moe == SP_MOE_REQUIRED)
            return sp_error_set(SP_ERR_FORMAT, "key '%s.expert_count': 0, but expert_used_count is %u%s", a,
                                hp->n_expert_used, ar->moe == SP_MOE_REQUIRED ? " (this family needs experts)" : "");
        return SP_OK;
    }
    if (hp->n_expert > SP_MOE_MAX_EXPERTS)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.expert_count': %u experts, at most %d are supported", a,
                            hp->n_expert, SP_MOE_MAX_EXPERTS);
    if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.expert_used_count': %u, expected 1..%u (expert_count)", a,
                            hp->n_expert_used, hp->n_expert);
    hp->n_ff_exp = ar->moe_ff_key ? hp->n_ff / hp->n_expert_used : hp->n_ff;
    if (ar->moe_ff_key && (st = sp_hp_u32(m, "expert_feed_forward_length", false, &hp->n_ff_exp)))
        return st;
    if (ar->shared_expert) {
        hp->n_ff_shexp = ar->shexp_ungated ? hp->n_ff_exp : hp->n_ff;
        if ((st = sp_hp_u32(m, "expert_shared_feed_forward_length", false, &hp->n_ff_shexp)))
            return st;
    }
    if (hp->n_ff_exp == 0 || (ar->shared_expert && hp->n_ff_shexp == 0))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.expert_%sfeed_forward_length': 0, expected > 0", a,
                            hp->n_ff_exp ? "shared_" : "");
    return SP_OK;
}

/* M-RoPE (rope.dimension_sections, required as llama.cpp requires it):
 * text positions are equal in its first three sections, so every rotated
 * pair rotates by the position, as RoPE halves, as long as no pair falls
 * in the fourth section (position 0 for text); a file where one does is
 * refused. */
static sp_status sp_model_mrope(struct sp_model *m)
{
    const struct sp_gguf_kv *kv;
    char key[128];
    sp_key(m, "rope.dimension_sections", key, sizeof key);
    sp_status st = sp_gguf_get_arr(&m->gguf, key, true, SP_GGUF_INT32, &kv);
    if (st != SP_OK)
        return st;
    int64_t s[4], total = 0;
    for (int i = 0; i < 4; i++) {
        s[i] = i < (int)kv->arr_n ? sp_gguf_arr_i32(kv, (uint64_t)i) : 0;
        if (s[i] < 0 || s[i] > 4096)
            return sp_error_set(SP_ERR_FORMAT, "key '%s': section %d is %lld", key, i, (long long)s[i]);
        total += s[i];
    }
    if (kv->arr_n != 4 || total == 0)
        return sp_error_set(SP_ERR_FORMAT, "key '%s': %llu sections summing to %lld, expected 4 with a positive sum",
                            key, (unsigned long long)kv->arr_n, (long long)total);
    for (uint32_t p = 0; p < m->hp.n_rot / 2; p++) { /* ggml's interleaved M-RoPE sectors */
        int64_t sec = p % total;
        bool text = (sec % 3 == 0 && sec < 3 * s[0]) || (sec % 3 == 1 && sec < 3 * s[1]) ||
                    (sec % 3 == 2 && sec < 3 * s[2]);
        if (!text)
            return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s': rotated pair %u falls in the fourth section "
                                "(not supported)", key, p);
    }
    return SP_OK;
}

/* A key holding one value for every layer or an array of one per layer
 * (block_count): the largest, each checked > 0 (`required`: present). */
static sp_status sp_model_u32_widest(struct sp_model *m, const char *suffix, bool required, uint32_t *out)
{
    char key[128];
    sp_key(m, suffix, key, sizeof key);
    const struct sp_gguf_kv *kv = sp_gguf_find(&m->gguf, key);
    if (!kv || kv->type != SP_GGUF_ARRAY)
        return sp_gguf_get_u32(&m->gguf, key, required, out);
    uint32_t most = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        uint32_t n = 0;
        sp_status st = sp_gguf_get_u32_at(&m->gguf, key, il, m->hp.n_layer_all, true, &n);
        if (st != SP_OK)
            return st;
        if (n == 0)
            return sp_error_set(SP_ERR_FORMAT, "key '%s': layer %u's value is 0, expected > 0", key, il);
        most = n > most ? n : most;
    }
    *out = most;
    return SP_OK;
}

/* Multi-head latent attention's widths, checked against each other: the
 * cache's one KV head is the latent then the RoPE key (key_length), its
 * values the latent (value_length); a head's query is mla_k wide, its
 * RoPE part last.  The attention scale is llama.cpp's for DeepSeek: YaRN's
 * mscale (1 + 0.1 mscale_all_dim ln factor, times the cos/sin scale before
 * ggml's own correction) squared over sqrt(mla_k). */
static sp_status sp_model_mla_keys(struct sp_model *m, uint32_t v_len)
{
    struct sp_hparams *hp = &m->hp;
    const char *a = m->arch->name;
    sp_status st;
    if ((st = sp_hp_u32(m, "attention.q_lora_rank", false, &hp->n_lora_q)) ||
        (st = sp_hp_u32(m, "attention.kv_lora_rank", true, &hp->n_lora_kv)) ||
        (st = sp_hp_u32(m, "attention.key_length_mla", true, &hp->mla_k)) ||
        (st = sp_hp_u32(m, "attention.value_length_mla", true, &hp->mla_v)))
        return st;
    if (hp->n_head_kv != 1 || hp->n_lora_kv == 0 || hp->head_dim != hp->n_lora_kv + hp->n_rot ||
        v_len != hp->n_lora_kv)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.key_length': %u, value_length %u, head_count_kv "
                            "%u, kv_lora_rank %u, rope.dimension_count %u: multi-head latent attention needs one KV "
                            "head of the latent then the RoPE key (a current converter's layout)", a, hp->head_dim,
                            v_len, hp->n_head_kv, hp->n_lora_kv, hp->n_rot);
    if (hp->mla_k <= hp->n_rot || hp->mla_k - hp->n_rot > hp->n_lora_kv || hp->mla_v == 0 ||
        hp->mla_v > hp->head_dim || hp->n_lora_q > 65536)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.key_length_mla': %u (value_length_mla %u, "
                            "q_lora_rank %u), expected above rope.dimension_count %u and at most it plus kv_lora_rank "
                            "%u, values at most key_length wide", a, hp->mla_k, hp->mla_v, hp->n_lora_q, hp->n_rot,
                            hp->n_lora_kv);
    if (sp_key_present(m, "attention.temperature_scale"))
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.temperature_scale': attention temperature is not "
                            "supported with multi-head latent attention", a);
    const float lf = logf(1.0f / hp->rope_freq_scale);
    const float mscale = hp->rope_mscale * (1.0f + 0.1f * lf) * (1.0f + 0.1f * hp->yarn_log_mul * lf);
    hp->attn_scale = mscale * mscale / sqrtf((float)hp->mla_k);
    return SP_OK;
}

/* DeepSeek's expert keys: the gating function (1 softmax, 2 sigmoid; absent:
 * softmax), renormalization and scale of the selected weights, expert
 * groups, shared experts and the dense leading layers. */
static sp_status sp_model_mla_moe_keys(struct sp_model *m)
{
    struct sp_hparams *hp = &m->hp;
    const char *a = m->arch->name;
    uint32_t gating = 0, shared = 0;
    char key[128];
    sp_status st;
    sp_key(m, "expert_weights_norm", key, sizeof key);
    if ((st = sp_hp_u32(m, "leading_dense_block_count", false, &hp->n_dense_lead)) ||
        (st = sp_hp_u32(m, "expert_shared_count", true, &shared)) ||
        (st = sp_hp_f32(m, "expert_weights_scale", false, &hp->exp_w_scale)) ||
        (st = sp_gguf_get_bool(&m->gguf, key, false, &hp->moe_norm)) ||
        (st = sp_hp_u32(m, "expert_gating_func", false, &gating)) ||
        (st = sp_hp_u32(m, "expert_group_count", false, &hp->n_group)) ||
        (st = sp_hp_u32(m, "expert_group_used_count", false, &hp->n_group_used)))
        return st;
    if (gating > 2)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.expert_gating_func': %u, supported: 1 (softmax), 2 (sigmoid)",
                            a, gating);
    hp->router = gating == 2 ? SP_ROUTER_SIGMOID : SP_ROUTER_SOFTMAX;
    if (!isfinite(hp->exp_w_scale))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.expert_weights_scale': %g, expected a finite value", a,
                            hp->exp_w_scale);
    if (hp->n_dense_lead > hp->n_layer)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.leading_dense_block_count': %u of %u layers", a, hp->n_dense_lead,
                            hp->n_layer);
    if (shared == 0 || shared > 64)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.expert_shared_count': %u, expected 1..64", a, shared);
    hp->n_ff_shexp = hp->n_ff_exp * shared;
    if (hp->n_group > 1) {
        uint32_t per = hp->n_expert / hp->n_group;
        if (hp->n_expert % hp->n_group || per < 2 || hp->n_group_used == 0 || hp->n_group_used > hp->n_group ||
            hp->n_expert_used > per * hp->n_group_used)
            return sp_error_set(SP_ERR_FORMAT, "key '%s.expert_group_count': %u groups (%u used) of %u experts (%u "
                                "used), expected groups of 2 or more experts holding the used ones", a, hp->n_group,
                                hp->n_group_used, hp->n_expert, hp->n_expert_used);
    } else {
        hp->n_group = hp->n_group_used = 0;
    }
    return SP_OK;
}

/* Head counts and widths, RoPE, windows and soft-caps: the attention
 * layers' keys. */
static sp_status sp_model_attn_hparams(struct sp_model *m, uint32_t *swa_pattern)
{
    struct sp_hparams *hp = &m->hp;
    const char *a = m->arch->name;
    sp_status st;
    if (hp->n_head == 0)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.head_count': 0, expected > 0", a);
    if (hp->n_head > 4096)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.head_count': %u heads is implausible", a, hp->n_head);
    hp->n_head_kv = hp->n_head;
    if (m->arch->kinds == SP_KINDS_KV_ZERO || m->arch->kinds == SP_KINDS_KV_FF) { /* per layer; 0: not attention */
        char key[128];
        uint32_t most = 0;
        sp_key(m, "attention.head_count_kv", key, sizeof key);
        for (uint32_t il = 0; il < hp->n_layer; il++) {
            uint32_t n = 0;
            if ((st = sp_gguf_get_u32_at(&m->gguf, key, il, hp->n_layer_all, true, &n)))
                return st;
            if (n && most && n != most)
                return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s': %u and %u KV heads in different layers", key,
                                    most, n);
            most = n ? n : most;
        }
        hp->n_head_kv = most ? most : hp->n_head;
    } else if ((st = sp_model_u32_widest(m, "attention.head_count_kv", false, &hp->n_head_kv))) {
        return st;
    }
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
    if (v_len != hp->head_dim && !m->arch->mla) /* mla: the latent's width (sp_model_mla_keys) */
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.value_length': %u differs from key_length %u", a,
                            v_len, hp->head_dim);
    hp->head_dim_swa = hp->head_dim;
    if ((st = sp_hp_u32(m, "attention.key_length_swa", false, &hp->head_dim_swa)))
        return st;
    uint32_t v_swa = v_len; /* as llama.cpp: each _swa length defaults to its global one */
    if ((st = sp_hp_u32(m, "attention.value_length_swa", false, &v_swa)))
        return st;
    if ((v_swa != hp->head_dim_swa && !m->arch->mla) || hp->head_dim_swa == 0 || hp->head_dim_swa > 4096)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.value_length_swa': %u, key_length_swa %u (expected "
                            "equal, 1..4096)", a, v_swa, hp->head_dim_swa);
    bool rope = !m->arch->abs_pos && !m->arch->nope; /* absolute positions: no RoPE */
    if (m->arch->granite) { /* Granite 4.0-H's attention has none (NoPE) unless the file says */
        char key[128];
        sp_key(m, "rope.scaling.finetuned", key, sizeof key);
        if ((st = sp_gguf_get_bool(&m->gguf, key, false, &rope)))
            return st;
    }
    hp->n_rot = rope ? hp->head_dim : 0;
    if (rope && (st = sp_hp_u32(m, "rope.dimension_count", false, &hp->n_rot)))
        return st;
    if ((hp->n_rot == 0 && rope) || hp->n_rot > hp->head_dim || hp->n_rot % 2 || hp->n_rot > SP_ROPE_MAX)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.dimension_count': %u, expected an even number <= %u", a,
                            hp->n_rot, hp->head_dim < SP_ROPE_MAX ? hp->head_dim : SP_ROPE_MAX);
    if (!(hp->rope_base > 0.0f) || isinf(hp->rope_base))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.freq_base': %g, expected > 0", a, hp->rope_base);
    hp->n_rot_swa = hp->n_rot;
    if (rope && (st = sp_hp_u32(m, "rope.dimension_count_swa", false, &hp->n_rot_swa)))
        return st;
    if ((hp->n_rot_swa == 0 && rope) || hp->n_rot_swa > hp->head_dim_swa || hp->n_rot_swa % 2 ||
        hp->n_rot_swa > SP_ROPE_MAX)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.rope.dimension_count_swa': %u, expected an even number <= %u", a,
                            hp->n_rot_swa, hp->head_dim_swa < SP_ROPE_MAX ? hp->head_dim_swa : SP_ROPE_MAX);
    if ((st = sp_model_rope_scaling(m)) || (st = sp_model_attn_keys(m, swa_pattern)))
        return st;
    if (m->arch->attn_temp && (st = sp_hp_f32(m, "attention.temperature_scale", false, &hp->attn_temp)))
        return st;
    hp->attn_temp_floor = hp->n_ctx_orig;
    if (!isfinite(hp->attn_temp))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.temperature_scale': %g, expected a finite value", a,
                            hp->attn_temp);
    uint32_t scale_dim = hp->head_dim;
    if (m->arch->wide_scale_layers && hp->n_layer == m->arch->wide_scale_layers)
        scale_dim = hp->n_embd / hp->n_head;
    hp->attn_scale = 1.0f / sqrtf((float)scale_dim);
    if ((m->arch->granite || m->arch->nope) && (st = sp_hp_pos(m, "attention.scale", &hp->attn_scale)))
        return st;
    if (m->arch->unit_scale)
        hp->attn_scale = 1.0f;
    if (!m->arch->mrope_text) { /* M-RoPE rotates halves by sections: not this family's RoPE */
        char key[128];
        sp_key(m, "rope.dimension_sections", key, sizeof key);
        if (sp_gguf_find(&m->gguf, key))
            return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s': M-RoPE sections (a vision model's RoPE) are not "
                                "supported in %s", key, a);
    }
    if (m->arch->mrope_text && (st = sp_model_mrope(m)))
        return st;
    if (m->arch->mla && (st = sp_model_mla_keys(m, v_len)))
        return st;
    return SP_OK;
}

/* Mamba-2 layers' sizes (ssm.*), each checked against the others. */
static sp_status sp_model_ssm_hparams(struct sp_model *m)
{
    struct sp_hparams *hp = &m->hp;
    const char *a = m->arch->name;
    sp_status st;
    if ((st = sp_hp_u32(m, "ssm.conv_kernel", true, &hp->ssm_conv)) ||
        (st = sp_hp_u32(m, "ssm.inner_size", true, &hp->ssm_inner)) ||
        (st = sp_hp_u32(m, "ssm.state_size", true, &hp->ssm_state)) ||
        (st = sp_hp_u32(m, "ssm.time_step_rank", true, &hp->ssm_heads)) ||
        (st = sp_hp_u32(m, "ssm.group_count", true, &hp->ssm_groups)))
        return st;
    if (hp->ssm_conv < 1 || hp->ssm_conv > SP_CONV_MAX_TAPS)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.ssm.conv_kernel': %u, expected 1..%d", a, hp->ssm_conv,
                            SP_CONV_MAX_TAPS);
    if (hp->ssm_state == 0 || hp->ssm_state > 4096 || hp->ssm_inner == 0 || hp->ssm_inner > (1u << 20))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.ssm.state_size'/'inner_size': %u, %u out of range", a,
                            hp->ssm_state, hp->ssm_inner);
    if (hp->ssm_heads == 0 || hp->ssm_inner % hp->ssm_heads)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.ssm.time_step_rank': %u heads do not divide inner_size %u", a,
                            hp->ssm_heads, hp->ssm_inner);
    if (hp->ssm_groups == 0 || hp->ssm_heads % hp->ssm_groups)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.ssm.group_count': %u groups do not divide %u heads", a,
                            hp->ssm_groups, hp->ssm_heads);
    hp->ssm_head_dim = hp->ssm_inner / hp->ssm_heads;
    return SP_OK;
}

/* block_count counts nextn_predict_layers multi-token-prediction layers
 * at its end, as llama.cpp reads it: the network runs the others; those
 * layers' tensors are left in the file (a draft head spindle does not
 * use), and per-layer arrays hold block_count entries. */
static sp_status sp_model_nextn(struct sp_model *m)
{
    struct sp_hparams *hp = &m->hp;
    uint32_t n_nextn = 0;
    sp_status st = sp_hp_u32(m, "nextn_predict_layers", false, &n_nextn);
    if (st != SP_OK)
        return st;
    if (hp->n_layer_all && n_nextn >= hp->n_layer_all)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.nextn_predict_layers': %u of %u layers, expected fewer",
                            m->arch->name, n_nextn, hp->n_layer_all);
    hp->n_layer = hp->n_layer_all - n_nextn;
    return SP_OK;
}

/* Nemotron-H: feed_forward_length per layer (0: not a feed-forward
 * layer); every feed-forward layer as wide. */
static sp_status sp_model_ff_layers(struct sp_model *m)
{
    struct sp_hparams *hp = &m->hp;
    char key[128];
    sp_status st;
    if (hp->n_layer == 0 || hp->n_layer > 4096)
        return SP_OK; /* refused by the caller */
    sp_key(m, "feed_forward_length", key, sizeof key);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        uint32_t n = 0;
        if ((st = sp_gguf_get_u32_at(&m->gguf, key, il, hp->n_layer_all, true, &n)))
            return st;
        if (n && hp->n_ff && n != hp->n_ff)
            return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s': %u and %u wide feed-forward layers", key, hp->n_ff,
                                n);
        hp->n_ff = n ? n : hp->n_ff;
    }
    return SP_OK;
}

/* Llama 4's keys: which layers have experts (interleave_moe_layer_step),
 * the attention chunk (llama.cpp runs 8192 whatever the file says, so a
 * file's other value is refused rather than read two ways) and the
 * temperature of the NoPE layers (llama.cpp's fixed values). */
static sp_status sp_model_interleave_keys(struct sp_model *m)
{
    const struct sp_arch *ar = m->arch;
    struct sp_hparams *hp = &m->hp;
    sp_status st;
    if (ar->moe_interleave && (st = sp_hp_u32(m, "interleave_moe_layer_step", true, &hp->n_moe_step)))
        return st;
    if (ar->swa_chunked && hp->n_swa != ar->swa_default)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.sliding_window': %u, but the attention chunk "
                            "is %u (llama.cpp's fixed size; no other is supported)", ar->name, hp->n_swa,
                            ar->swa_default);
    if (ar->nope_temp) {
        hp->attn_temp = 0.1f;
        hp->attn_temp_floor = 8192;
        hp->attn_temp_offset = 1.0f;
    }
    return SP_OK;
}

/* Gemma 3n / 4: the layers computing their own keys and values
 * (attention.shared_kv_layers: llama.cpp keeps at least two) and the
 * per-layer inputs' width. */
static sp_status sp_model_shared_keys(struct sp_model *m)
{
    const struct sp_arch *ar = m->arch;
    struct sp_hparams *hp = &m->hp;
    uint32_t shared = 0;
    sp_status st;
    hp->n_kv_own = hp->n_layer;
    if ((ar->kv_shared && (st = sp_hp_u32(m, "attention.shared_kv_layers", false, &shared))) ||
        (ar->per_layer_embd && (st = sp_hp_u32(m, "embedding_length_per_layer_input", true, &hp->n_embd_pl))))
        return st;
    if (shared && (shared > hp->n_layer_all || hp->n_layer_all - shared < 2))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.shared_kv_layers': %u of %u layers, expected at most "
                            "%u (two keep their own)", ar->name, shared, hp->n_layer_all,
                            hp->n_layer_all > 2 ? hp->n_layer_all - 2 : 0);
    if (shared && hp->n_layer_all - shared < hp->n_layer)
        hp->n_kv_own = hp->n_layer_all - shared;
    if (hp->n_embd_pl > 65536)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.embedding_length_per_layer_input': %u is implausible", ar->name,
                            hp->n_embd_pl);
    return SP_OK;
}

static sp_status sp_model_hparams(struct sp_model *m, uint32_t *swa_pattern)
{
    struct sp_hparams *hp = &m->hp;
    const struct sp_arch *ar = m->arch;
    const char *a = ar->name;
    const struct sp_gguf_kv *toks;
    sp_status st;
    hp->rope_base = 10000.0f;
    hp->rope_freq_scale = hp->rope_mscale = 1.0f;
    *swa_pattern = 1;
    if ((st = sp_hp_u32(m, "context_length", true, &hp->n_ctx_train)) ||
        (st = sp_hp_u32(m, "embedding_length", true, &hp->n_embd)) ||
        (st = sp_hp_u32(m, "block_count", true, &hp->n_layer_all)) || (st = sp_model_nextn(m)) ||
        (ar->kinds != SP_KINDS_KV_FF && (st = sp_model_u32_widest(m, "feed_forward_length", !ar->no_ffn, &hp->n_ff))) ||
        (ar->kinds == SP_KINDS_KV_FF && (st = sp_model_ff_layers(m))) ||
        (ar->nope && (st = sp_hp_f32(m, "attention.layer_norm_epsilon", true, &hp->eps))) ||
        (st = sp_hp_u32(m, "attention.head_count", ar->kinds != SP_KINDS_LINEAR, &hp->n_head)) ||
        (st = sp_hp_f32(m, ar->norm == SP_NORM_LAYER ? "attention.layer_norm_epsilon"
                                                     : "attention.layer_norm_rms_epsilon", !ar->nope, &hp->eps)) ||
        (st = sp_hp_f32(m, "rope.freq_base", false, &hp->rope_base)) ||
        (st = sp_hp_u32(m, "pooling_type", false, &hp->pooling)))
        return st;
    if (hp->n_embd == 0 || hp->n_layer == 0 || (hp->n_ff == 0 && !ar->no_ffn) || hp->n_ctx_train == 0)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.*': embedding_length, block_count, feed_forward_length "
                            "and context_length must be > 0", a);
    if (hp->n_layer_all > 4096)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.block_count': %u layers is implausible", a, hp->n_layer_all);
    if (ar->no_ffn && ar->kinds != SP_KINDS_KV_FF)
        hp->n_ff = 0; /* no feed-forward: the key is a placeholder */
    if (!(hp->eps > 0.0f && hp->eps < 1.0f))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.attention.layer_norm_%sepsilon': %g out of (0, 1)", a,
                            ar->norm == SP_NORM_LAYER ? "" : "rms_", hp->eps);
    if (ar->kinds != SP_KINDS_LINEAR && (st = sp_model_attn_hparams(m, swa_pattern)))
        return st;
    if (ar->kinds == SP_KINDS_LINEAR)
        hp->n_head = 0;
    if ((ar->linear == SP_MIXER_SSM || ar->linear == SP_MIXER_DELTA) && (st = sp_model_ssm_hparams(m)))
        return st;
    if (ar->linear == SP_MIXER_DELTA && hp->ssm_state > 1024)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.ssm.state_size': %u, at most 1024 for the delta rule", a,
                            hp->ssm_state);
    if (ar->linear == SP_MIXER_DELTA && hp->ssm_state != hp->ssm_head_dim)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.ssm.state_size': %u, but the value heads are %u wide "
                            "(inner_size / time_step_rank); the delta rule needs both equal", a, hp->ssm_state,
                            hp->ssm_head_dim);
    if (ar->kinds == SP_KINDS_INTERVAL && sp_key_present(m, "attention.recurrent_layers"))
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.recurrent_layers': not supported (the layers' "
                            "kinds come from full_attention_interval)", a);
    if (ar->linear == SP_MIXER_CONV) {
        if ((st = sp_hp_u32(m, "shortconv.l_cache", true, &hp->conv_taps)))
            return st;
        if (hp->conv_taps < 1 || hp->conv_taps > SP_CONV_MAX_TAPS)
            return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.shortconv.l_cache': %u, expected 1..%d", a,
                                hp->conv_taps, SP_CONV_MAX_TAPS);
    }
    hp->router = ar->router;
    hp->moe_norm = ar->moe_norm;
    if ((st = sp_model_expert_keys(m)) || (st = sp_model_interleave_keys(m)) || (st = sp_model_shared_keys(m)) ||
        (ar->mla && (st = sp_model_mla_moe_keys(m))))
        return st;
    if (ar->logit_mul && (st = sp_hp_f32(m, "logit_scale", true, &hp->logit_scale)))
        return st;
    if (ar->logit_mul && !isfinite(hp->logit_scale))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.logit_scale': %g, expected a finite value", a, hp->logit_scale);
    if (ar->granite && ((st = sp_hp_pos(m, "embedding_scale", &hp->embd_scale)) ||
                        (st = sp_hp_pos(m, "residual_scale", &hp->resid_scale)) ||
                        (st = sp_hp_pos(m, "logit_scale", &hp->logit_scale))))
        return st;
    if ((st = sp_gguf_get_arr(&m->gguf, "tokenizer.ggml.tokens", true, SP_GGUF_STRING, &toks)))
        return st;
    if (toks->arr_n == 0 || toks->arr_n > (1u << 24))
        return sp_error_set(SP_ERR_FORMAT, "key 'tokenizer.ggml.tokens': %llu tokens, expected 1..2^24",
                            (unsigned long long)toks->arr_n);
    hp->n_vocab = (uint32_t)toks->arr_n;
    return SP_OK;
}

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

/* The experts of layer il: 3-D stacks [n_expert][rows][row length], one
 * view per expert. */
static sp_status sp_model_experts(struct sp_loader *ld, uint32_t il)
{
    struct sp_model *m = ld->m;
    const struct sp_hparams *hp = &m->hp;
    struct sp_layer *L = &m->layers[il];
    static const char *const names[SP_EXP_KINDS] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    int64_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert;
    char name[96];
    sp_status st;
    SP_T(L->gate_inp, "ffn_gate_inp.weight", E, X, true);
    L->exps = m->exps + (size_t)il * SP_EXP_KINDS * hp->n_expert;
    for (int k = 0; k < SP_EXP_KINDS; k++) {
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
    if (m->arch->shared_expert) {
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
        sp_key(m, "full_attention_interval", key, sizeof key);
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
        sp_key(m, "attention.head_count_kv", key, sizeof key);
        sp_status st = sp_gguf_get_u32_at(&m->gguf, key, il, m->hp.n_layer_all, true, &n);
        if (st != SP_OK)
            return st;
        *out = n ? SP_MIXER_ATTN : ar->linear;
    }
    if (ar->kinds == SP_KINDS_KV_FF && *out != SP_MIXER_ATTN) {
        char key[128];
        uint32_t n = 0;
        sp_key(m, "feed_forward_length", key, sizeof key);
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
        sp_key(m, "attention.sliding_window_pattern", key, sizeof key);
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
        sp_key(m, "attention.head_count_kv", key, sizeof key);
        st = sp_gguf_get_u32_at(&m->gguf, key, il, hp->n_layer_all, false, &L->n_head_kv);
    }
    if (st == SP_OK && ar->kinds != SP_KINDS_KV_FF && !ar->no_ffn) {
        sp_key(m, "feed_forward_length", key, sizeof key);
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
                                      &L->dn_beta, &L->dn_alpha, &L->pl_gate, &L->pl_proj, &L->wq_a, &L->wkv_a};
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
        sp_key(m, "rope.scaling.type", key, sizeof key);
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
                                          "per_layer_model_proj.weight", "per_layer_proj_norm.weight"};
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
    return 2 + (size_t)m->hp.n_layer * (20 + 2 * (size_t)m->hp.n_head + SP_EXP_KINDS * (size_t)m->hp.n_expert);
}

static size_t sp_model_matrices(struct sp_model *m, struct sp_tensor **out)
{
    size_t n = 0;
    out[n++] = &m->output;
    if (m->pl_model_proj.data)
        out[n++] = &m->pl_model_proj;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        struct sp_layer *L = &m->layers[il];
        struct sp_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->gate_inp,
                                  &L->ssm_in, &L->ssm_out, &L->sc_in, &L->sc_out, &L->dn_qkv, &L->dn_z,
                                  &L->dn_beta, &L->dn_alpha, &L->pl_gate, &L->pl_proj, &L->wq_a, &L->wkv_a};
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
                                      L ? &L->kv_a_norm : NULL, L ? &L->exp_probs_b : NULL};
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
    if ((st = sp_hp_pos(m, "rope.freq_base_swa", &swa_base)) != SP_OK)
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
