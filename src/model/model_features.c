/* `spindle info`'s features line: a model's family differences in words
 * (sp_model_features, model.h). */
#include "model/model.h"

#include <math.h>
#include <stdio.h>

void sp_model_features(const struct sp_model *m, char *buf, size_t size)
{
    const struct sp_arch *ar = m->arch;
    const struct sp_hparams *hp = &m->hp;
    const struct sp_layer *L0 = &m->layers[0];
    size_t n = 0;
    uint32_t n_local = 0, n_nope = 0, n_moe = 0, n_l2 = 0, n_shared = 0, n_vk = 0, n_scaled = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct sp_layer *L = &m->layers[l];
        n_shared += L->kv_src != l;
        n_vk += L->mixer == SP_MIXER_ATTN && L->kv_src == l && L->wk.data && !L->wv.data;
        n_scaled += L->out_scale != 1.0f;
        n_local += m->layers[l].swa;
        n_nope += m->layers[l].nope;
        n_moe += m->layers[l].moe;
        n_l2 += m->layers[l].qk_l2;
    }
#define SP_F(...)                                                                                    \
    do {                                                                                            \
        if (n < size)                                                                               \
            n += (size_t)snprintf(buf + n, size - n, "%s", n ? ", " : "");                          \
        if (n < size)                                                                               \
            n += (size_t)snprintf(buf + n, size - n, __VA_ARGS__);                                  \
    } while (0)
    buf[0] = 0;
    if (hp->n_linear && ar->linear == SP_MIXER_SSM)
        SP_F("Mamba-2 on %u of %u layers (%u heads x %u, state %u, %u group%s, convolution %u)", hp->n_linear,
             hp->n_layer, hp->ssm_heads, hp->ssm_head_dim, hp->ssm_state, hp->ssm_groups,
             hp->ssm_groups > 1 ? "s" : "", hp->ssm_conv);
    if (hp->n_linear && ar->linear == SP_MIXER_DELTA)
        SP_F("gated delta rule on %u of %u layers (%u value heads x %u, %u key heads, convolution %u)", hp->n_linear,
             hp->n_layer, hp->ssm_heads, hp->ssm_head_dim, hp->ssm_groups, hp->ssm_conv);
    if (hp->n_linear && ar->dn_grouped)
        SP_F("value heads grouped by key head");
    if (ar->q_gate)
        SP_F("gated attention (sigmoid)");
    if (hp->n_linear && ar->linear == SP_MIXER_CONV)
        SP_F("gated short convolutions on %u of %u layers (%u taps)", hp->n_linear, hp->n_layer, hp->conv_taps);
    uint32_t n_mlp = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        n_mlp += m->layers[l].mixer == SP_MIXER_MLP;
    if (n_mlp)
        SP_F("feed-forward alone on %u layers (%s, no gate)", n_mlp, ar->ffn_act == SP_FFN_RELU2 ? "ReLU^2" : "GELU");
    else if (ar->no_ffn)
        SP_F("no feed-forward");
    else if (ar->ffn_plain)
        SP_F("%s feed-forward (no gate)", ar->ffn_act == SP_FFN_GELU ? "GELU" : "SiLU");
    else
        SP_F("%s", ar->ffn_act == SP_FFN_GELU ? "GeGLU" : ar->ffn_act == SP_FFN_SWIGLU_OAI ? "clamped SwiGLU" : "SwiGLU");
    if (ar->abs_pos)
        SP_F("absolute position embeddings, token types");
    else if (hp->n_head && hp->n_rot)
        SP_F("RoPE %s", ar->rope_neox ? "halves (NEOX)" : "adjacent pairs");
    else if (hp->n_head)
        SP_F("no position encoding in attention (NoPE)");
    if (n_nope && hp->n_rot && ar->nope_interval)
        SP_F("no RoPE on %u of %u layers (NoPE every %u layers)", n_nope, hp->n_layer, ar->nope_interval);
    else if (n_nope && hp->n_rot)
        SP_F("no RoPE on the global layers (%u of %u, NoPE)", n_nope, hp->n_layer);
    if (ar->granite && (hp->embd_scale || hp->resid_scale || hp->logit_scale))
        SP_F("scales: embeddings %g, residuals %g, logits 1/%g", hp->embd_scale, hp->resid_scale, hp->logit_scale);
    if (ar->logit_mul && hp->logit_scale != 1.0f)
        SP_F("logits x %g", hp->logit_scale);
    if (ar->parallel)
        SP_F("parallel attention and feed-forward");
    if (ar->no_pre_norm)
        SP_F("no pre-norms");
    if (ar->bidirectional)
        SP_F("bidirectional attention (embeddings only)");
    if (ar->norm == SP_NORM_LAYER)
        SP_F("LayerNorm %s", ar->post_ln ? "with bias after each residual" : "without bias");
    if (ar->layer_bias)
        SP_F("output and feed-forward biases");
    if (ar->out_bias)
        SP_F("attention output bias");
    if (ar->moe_bias)
        SP_F("router and expert biases");
    if (ar->attn_sinks)
        SP_F("attention sinks");
    if (ar->mla)
        SP_F("multi-head latent attention (cache: latent %u + RoPE key %u per position; heads %u/%u wide%s)",
             hp->n_lora_kv, hp->n_rot, hp->mla_k, hp->mla_v, hp->n_lora_q ? ", query LoRA" : "");
    else if (hp->n_head_kv < hp->n_head)
        SP_F("grouped-query attention (%u query heads per KV head)", hp->n_head / hp->n_head_kv);
    if (L0->bq.data)
        SP_F("QKV bias");
    if (ar->qk_norm == SP_QK_NORM_L2 && n_l2)
        SP_F("QK-norm (L2 per head after RoPE, on %u of %u layers)", n_l2, hp->n_layer);
    else if (ar->qk_norm && ar->qk_norm != SP_QK_NORM_L2)
        SP_F("QK-norm (%s)", ar->qk_norm == SP_QK_NORM_HEAD ? "per head" : "whole rows");
    if (m->rope_freqs)
        SP_F("RoPE frequency factors (rope_freqs)%s",
             ar->rope_factors == SP_ROPE_FACTORS_GLOBAL ? " on the global layers" : "");
    if (m->rope_long)
        SP_F("LongRoPE (long factors above %u positions, attention factor %g)", hp->n_ctx_orig, hp->rope_mscale);
    if (hp->yarn)
        SP_F("YaRN RoPE scaling %g (original context %u, beta %g/%g, attention factor %g)",
             1.0f / hp->rope_freq_scale, hp->n_ctx_orig, hp->yarn_beta_fast, hp->yarn_beta_slow,
             hp->rope_mscale * (1.0f + 0.1f * logf(1.0f / hp->rope_freq_scale))); /* sp_rope_table's scale */
    else if (hp->rope_freq_scale != 1.0f)
        SP_F("linear RoPE scaling %g", 1.0f / hp->rope_freq_scale);
    if (hp->attn_temp != 0.0f)
        SP_F("attention temperature %g per %u positions%s", hp->attn_temp, hp->attn_temp_floor,
             ar->nope_temp ? " on the NoPE layers" : "");
    if (n_local)
        SP_F("%s %u on %u of %u layers", ar->swa_chunked ? "attention chunks of" : "sliding window", hp->n_swa,
             n_local, hp->n_layer);
    if (hp->attn_softcap > 0.0f)
        SP_F("soft-cap: attention %g, final logits %g", hp->attn_softcap, hp->final_softcap);
    else if (hp->final_softcap > 0.0f)
        SP_F("soft-cap: final logits %g", hp->final_softcap);
    if (ar->unit_scale)
        SP_F("attention scale 1");
    if (ar->v_norm)
        SP_F("values RMS-normed");
    if (n_vk)
        SP_F("values = keys on %u of %u layers", n_vk, hp->n_layer);
    const struct sp_layer *loc = NULL, *glo = NULL;
    uint32_t ff_lo = UINT32_MAX, ff_hi = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct sp_layer *L = &m->layers[l];
        if (L->mixer == SP_MIXER_ATTN && L->swa && !loc)
            loc = L;
        if (L->mixer == SP_MIXER_ATTN && !L->swa && !glo)
            glo = L;
        if (!L->moe && L->n_ff) {
            ff_lo = L->n_ff < ff_lo ? L->n_ff : ff_lo;
            ff_hi = L->n_ff > ff_hi ? L->n_ff : ff_hi;
        }
    }
    if (loc && glo && (loc->head_dim != glo->head_dim || loc->n_head_kv != glo->n_head_kv))
        SP_F("local layers %u KV heads of %u, global layers %u of %u", loc->n_head_kv, loc->head_dim, glo->n_head_kv,
             glo->head_dim);
    if (ff_hi > ff_lo && ff_lo != UINT32_MAX)
        SP_F("feed-forward widths %u to %u by layer", ff_lo, ff_hi);
    if (n_shared)
        SP_F("%u of %u layers read an earlier layer's keys and values (shared KV)", n_shared, hp->n_layer);
    if (hp->n_embd_pl)
        SP_F("per-layer embeddings (%u per layer)", hp->n_embd_pl);
    if (n_scaled)
        SP_F("layer output scales on %u of %u layers", n_scaled, hp->n_layer);
    if (ar->altup)
        SP_F("AltUp (%u streams, stream %u active)", hp->n_altup, hp->altup_act);
    if (ar->laurel)
        SP_F("Laurel (rank %u)", hp->laurel_rank);
    if (ar->sparse_layers)
        SP_F("sparse feed-forward gates (Gaussian top-k) on %u of %u layers",
             ar->sparse_layers < hp->n_layer ? ar->sparse_layers : hp->n_layer, hp->n_layer);
    if (ar->post_norms)
        SP_F("post-norms");
    if (ar->embed_scale)
        SP_F("embeddings x sqrt(n_embd)");
    if (hp->n_expert)
        SP_F("%u experts (%u used, %s router%s, width %u)%s", hp->n_expert, hp->n_expert_used,
             hp->router == SP_ROUTER_SOFTMAX ? "softmax" : hp->router == SP_ROUTER_SIGMOID ? "sigmoid"
             : "top-k softmax", hp->moe_norm ? ", weights renormalized" : "",
             hp->n_ff_exp, hp->n_ff_shexp ? " + shared expert" : ar->moe_dense ? " beside the dense feed-forward" : "");
    if (hp->n_expert && ar->moe_dense)
        SP_F("expert output scales, router input scale");
    if (hp->n_group)
        SP_F("expert groups: %u best of %u", hp->n_group_used, hp->n_group);
    if (hp->exp_w_scale != 0.0f && hp->exp_w_scale != 1.0f)
        SP_F("expert weights x %g", hp->exp_w_scale);
    if (hp->n_expert && n_moe < hp->n_layer)
        SP_F("experts on %u of %u layers (the others dense)%s", n_moe, hp->n_layer,
             ar->moe_weight_in ? ", router weights on the expert input" : "");
    if (m->qkv_fused)
        SP_F("fused QKV");
    if (ar->ffn_fused && !hp->n_expert)
        SP_F("fused gate-up");
#undef SP_F
}
