/* The model's hyperparameters: the "<arch>.*" keys each family reads,
 * checked against each other (sp_model_hparams, model.h). */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/scan.h"

void sp_model_key(const struct sp_model *m, const char *suffix, char *key, size_t size)
{
    snprintf(key, size, "%s.%s", m->arch->name, suffix);
}

/* Reads "<arch>.<suffix>". */
static sp_status sp_hp_u32(const struct sp_model *m, const char *suffix, bool required, uint32_t *out)
{
    char key[128];
    sp_model_key(m, suffix, key, sizeof key);
    return sp_gguf_get_u32(&m->gguf, key, required, out);
}

static sp_status sp_hp_f32(const struct sp_model *m, const char *suffix, bool required, float *out)
{
    char key[128];
    sp_model_key(m, suffix, key, sizeof key);
    return sp_gguf_get_f32(&m->gguf, key, required, out);
}

/* An optional positive finite float key (left at its default when absent). */
sp_status sp_model_hp_pos(const struct sp_model *m, const char *suffix, float *out)
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
    sp_model_key(m, suffix, key, sizeof key);
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
    if ((st = sp_model_hp_pos(m, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast)) ||
        (st = sp_model_hp_pos(m, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow)) ||
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
    sp_model_key(m, "rope.scaling.type", key, sizeof key);
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
    if ((st = sp_model_hp_pos(m, "rope.scaling.attn_factor", &hp->rope_mscale)) ||
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
    if (ar->altup) /* Gemma 3n: capped at 30 without the key (llama.cpp's value; its converter writes none) */
        hp->final_softcap = 30.0f;
    if (ar->final_softcap && sp_key_present(m, "final_logit_softcapping") &&
        (st = sp_model_hp_pos(m, "final_logit_softcapping", &hp->final_softcap)))
        return st;
    if (ar->softcap) {
        hp->attn_softcap = 50.0f;
        hp->final_softcap = 30.0f;
        if ((st = sp_model_hp_pos(m, "attn_logit_softcapping", &hp->attn_softcap)) ||
            (st = sp_model_hp_pos(m, "final_logit_softcapping", &hp->final_softcap)))
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
        hp->n_ff_shexp = ar->shexp_keyed ? 0 : ar->shexp_ungated ? hp->n_ff_exp : hp->n_ff;
        if ((st = sp_hp_u32(m, "expert_shared_feed_forward_length", false, &hp->n_ff_shexp)))
            return st;
    }
    if (hp->n_ff_exp == 0 || (ar->shared_expert && !ar->shexp_keyed && hp->n_ff_shexp == 0))
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
    sp_model_key(m, "rope.dimension_sections", key, sizeof key);
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
    sp_model_key(m, suffix, key, sizeof key);
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
    sp_model_key(m, "expert_weights_norm", key, sizeof key);
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
        sp_model_key(m, "attention.head_count_kv", key, sizeof key);
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
        sp_model_key(m, "rope.scaling.finetuned", key, sizeof key);
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
    if ((m->arch->granite || m->arch->nope) && (st = sp_model_hp_pos(m, "attention.scale", &hp->attn_scale)))
        return st;
    if (m->arch->unit_scale)
        hp->attn_scale = 1.0f;
    if (!m->arch->mrope_text) { /* M-RoPE rotates halves by sections: not this family's RoPE */
        char key[128];
        sp_model_key(m, "rope.dimension_sections", key, sizeof key);
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
    sp_model_key(m, "feed_forward_length", key, sizeof key);
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
    if (ar->kv_from && sp_key_present(m, "attention.shared_kv_layers") &&
        (hp->n_layer_all > ar->kv_from ? hp->n_layer_all - shared != ar->kv_from : shared != 0))
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.attention.shared_kv_layers': %u of %u layers; %s shares the "
                            "KV of the layers from %u on (as llama.cpp)", ar->name, shared, hp->n_layer_all,
                            ar->name, ar->kv_from);
    if (ar->kv_from)
        shared = hp->n_layer_all > ar->kv_from ? hp->n_layer_all - ar->kv_from : 0;
    if (shared && hp->n_layer_all - shared < hp->n_layer)
        hp->n_kv_own = hp->n_layer_all - shared;
    if (hp->n_embd_pl > 65536)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.embedding_length_per_layer_input': %u is implausible", ar->name,
                            hp->n_embd_pl);
    return SP_OK;
}

/* Gemma 3n's AltUp streams (altup_num_inputs, default 4) and the active
 * one (altup_active_idx, default 0); Laurel's rank comes from its tensors. */
static sp_status sp_model_altup_keys(struct sp_model *m)
{
    struct sp_hparams *hp = &m->hp;
    sp_status st;
    hp->n_altup = 4;
    hp->altup_act = 0;
    if ((st = sp_hp_u32(m, "altup_num_inputs", false, &hp->n_altup)) ||
        (st = sp_hp_u32(m, "altup_active_idx", false, &hp->altup_act)))
        return st;
    if (hp->n_altup < 2 || hp->n_altup > SP_ALTUP_MAX)
        return sp_error_set(SP_ERR_UNSUPPORTED, "key '%s.altup_num_inputs': %u, expected 2..%d", m->arch->name,
                            hp->n_altup, SP_ALTUP_MAX);
    if (hp->altup_act >= hp->n_altup)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.altup_active_idx': %u, expected < altup_num_inputs (%u)",
                            m->arch->name, hp->altup_act, hp->n_altup);
    if (!hp->n_embd_pl)
        return sp_error_set(SP_ERR_FORMAT, "key '%s.embedding_length_per_layer_input': 0, expected > 0",
                            m->arch->name);
    return SP_OK;
}

sp_status sp_model_hparams(struct sp_model *m, uint32_t *swa_pattern)
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
        (ar->mla && (st = sp_model_mla_moe_keys(m))) || (ar->altup && (st = sp_model_altup_keys(m))))
        return st;
    if (ar->logit_mul && (st = sp_hp_f32(m, "logit_scale", true, &hp->logit_scale)))
        return st;
    if (ar->logit_mul && !isfinite(hp->logit_scale))
        return sp_error_set(SP_ERR_FORMAT, "key '%s.logit_scale': %g, expected a finite value", a, hp->logit_scale);
    if (ar->granite && ((st = sp_model_hp_pos(m, "embedding_scale", &hp->embd_scale)) ||
                        (st = sp_model_hp_pos(m, "residual_scale", &hp->resid_scale)) ||
                        (st = sp_model_hp_pos(m, "logit_scale", &hp->logit_scale))))
        return st;
    if ((st = sp_gguf_get_arr(&m->gguf, "tokenizer.ggml.tokens", true, SP_GGUF_STRING, &toks)))
        return st;
    if (toks->arr_n == 0 || toks->arr_n > (1u << 24))
        return sp_error_set(SP_ERR_FORMAT, "key 'tokenizer.ggml.tokens': %llu tokens, expected 1..2^24",
                            (unsigned long long)toks->arr_n);
    hp->n_vocab = (uint32_t)toks->arr_n;
    return SP_OK;
}
