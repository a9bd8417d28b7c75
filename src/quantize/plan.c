/* Which type each tensor is written as: llama.cpp's rules (llama-quant.cpp,
 * llama_tensor_get_type) for the file types in the preset table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quantize/quantize.h"

/* llama.cpp's file type ids (general.file_type) */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9, FT_Q2_K = 10,
    FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16,
    FT_Q5_K_M = 17, FT_Q6_K = 18, FT_BF16 = 32, FT_MXFP4_MOE = 38,
};

static const struct sp_quantize_ftype sp_ftypes[] = {
    {"Q4_0", FT_Q4_0, SP_TYPE_Q4_0, "4.5 bpw, 32-element blocks"},
    {"Q4_1", FT_Q4_1, SP_TYPE_Q4_1, "5.0 bpw, with block minimums"},
    {"Q5_0", FT_Q5_0, SP_TYPE_Q5_0, "5.5 bpw"},
    {"Q5_1", FT_Q5_1, SP_TYPE_Q5_1, "6.0 bpw, with block minimums"},
    {"Q8_0", FT_Q8_0, SP_TYPE_Q8_0, "8.5 bpw, near lossless"},
    {"Q2_K", FT_Q2_K, SP_TYPE_Q2_K, "Q2_K mix (Q3_K attention V and FFN down)"},
    {"Q3_K_S", FT_Q3_K_S, SP_TYPE_Q3_K, "Q3_K everywhere"},
    {"Q3_K_M", FT_Q3_K_M, SP_TYPE_Q3_K, "Q3_K, more bits for attention V/output and FFN down"},
    {"Q3_K_L", FT_Q3_K_L, SP_TYPE_Q3_K, "Q3_K, Q5_K attention V/output and FFN down"},
    {"Q4_K_S", FT_Q4_K_S, SP_TYPE_Q4_K, "Q4_K, Q5_K in the first layers' V and FFN down"},
    {"Q4_K_M", FT_Q4_K_M, SP_TYPE_Q4_K, "Q4_K, Q6_K in half of attention V and FFN down"},
    {"Q5_K_S", FT_Q5_K_S, SP_TYPE_Q5_K, "Q5_K everywhere"},
    {"Q5_K_M", FT_Q5_K_M, SP_TYPE_Q5_K, "Q5_K, Q6_K in half of attention V and FFN down"},
    {"Q6_K", FT_Q6_K, SP_TYPE_Q6_K, "6.56 bpw"},
    {"MXFP4_MOE", FT_MXFP4_MOE, SP_TYPE_MXFP4, "MXFP4 experts (4.25 bpw), Q8_0 elsewhere (gpt-oss)"},
    {"F16", FT_F16, SP_TYPE_F16, "16-bit float"},
    {"BF16", FT_BF16, SP_TYPE_BF16, "bfloat16"},
    {"F32", FT_F32, SP_TYPE_F32, "32-bit float"},
};
#define SP_N_FTYPES ((int)(sizeof sp_ftypes / sizeof sp_ftypes[0]))

static const struct {
    const char *alias, *name;
} sp_ftype_aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

const struct sp_quantize_ftype *sp_quantize_ftype_at(int i)
{
    return i >= 0 && i < SP_N_FTYPES ? &sp_ftypes[i] : NULL;
}

const struct sp_quantize_ftype *sp_quantize_ftype_find(const char *name)
{
    for (size_t i = 0; i < sizeof sp_ftype_aliases / sizeof sp_ftype_aliases[0]; i++)
        if (!strcasecmp(name, sp_ftype_aliases[i].alias))
            name = sp_ftype_aliases[i].name;
    for (int i = 0; i < SP_N_FTYPES; i++)
        if (!strcasecmp(name, sp_ftypes[i].name))
            return &sp_ftypes[i];
    return NULL;
}

/* ---- tensor categories ---- */

enum sp_cat { CAT_OTHER, CAT_TOKEN_EMBD, CAT_OUTPUT, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q, CAT_ATTN_OUT,
              CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN };

/* First match wins; exact names first. */
static const struct {
    const char *pattern;
    bool exact;
    enum sp_cat cat;
} sp_categories[] = {
    {"output.weight", true, CAT_OUTPUT},
    {"token_embd.weight", true, CAT_TOKEN_EMBD},
    {"per_layer_token_embd.weight", true, CAT_TOKEN_EMBD},
    {"attn_qkv.weight", false, CAT_ATTN_V}, /* llama.cpp treats fused QKV and kv_b as V */
    {"attn_kv_b.weight", false, CAT_ATTN_V},
    {"attn_v.weight", false, CAT_ATTN_V},
    {"attn_k.weight", false, CAT_ATTN_K},
    {"attn_q.weight", false, CAT_ATTN_Q},
    {"attn_output.weight", false, CAT_ATTN_OUT},
    {"ffn_up", false, CAT_FFN_UP},
    {"ffn_gate", false, CAT_FFN_GATE},
    {"ffn_down", false, CAT_FFN_DOWN},
};

static enum sp_cat sp_category(const char *name)
{
    for (size_t i = 0; i < sizeof sp_categories / sizeof sp_categories[0]; i++)
        if (sp_categories[i].exact ? !strcmp(name, sp_categories[i].pattern) : !!strstr(name, sp_categories[i].pattern))
            return sp_categories[i].cat;
    return CAT_OTHER;
}

/* Weights llama.cpp leaves as they are (small, or not matrices in use);
 * exact names are marked. */
static const struct {
    const char *pattern;
    bool exact;
} sp_keep[] = {
    {"_norm.weight", false}, {"ffn_gate_inp.weight", false}, {"ffn_gate_tid2eid.weight", false},
    {"altup", false}, {"laurel", false}, {"per_layer_model_proj", false},
    {"position_embd.weight", true}, {"token_types.weight", true},
    {"ssm_conv1d", false}, {"shortconv.conv.weight", false},
    {"indexer.k_proj.weight", false}, {"indexer.q_proj.weight", false},
    {"time_mix_first.weight", false}, {"time_mix_w0.weight", false}, {"time_mix_w1.weight", false},
    {"time_mix_w2.weight", false}, {"time_mix_v0.weight", false}, {"time_mix_v1.weight", false},
    {"time_mix_v2.weight", false}, {"time_mix_a0.weight", false}, {"time_mix_a1.weight", false},
    {"time_mix_a2.weight", false}, {"time_mix_g1.weight", false}, {"time_mix_g2.weight", false},
    {"time_mix_decay_w1.weight", false}, {"time_mix_decay_w2.weight", false},
    {"time_mix_lerp_fused.weight", false}, {"attn_rel_b.weight", false},
    {".position_embd", false}, {"sam.pos_embd", false}, {"sam.neck.", false}, {"sam.net_", false},
    {".rel_pos", false}, {".patch_embd", false}, {".patch_merger", false},
    {"a.rvq.codebook", false}, {"mm.a.code_embd", false},
};

/* Rank as ggml counts it: trailing dimensions of 1 do not count. */
static int sp_rank(const struct sp_gguf_tensor *t)
{
    for (int d = SP_GGUF_MAX_DIMS - 1; d > 0; d--)
        if (t->ne[d] > 1)
            return d + 1;
    return 1;
}

static bool sp_quantizable(const struct sp_gguf_tensor *t, const char *name)
{
    size_t n = strlen(name);
    if (sp_rank(t) < 2 || n < 6 || strcmp(name + n - 6, "weight"))
        return false;
    for (size_t i = 0; i < sizeof sp_keep / sizeof sp_keep[0]; i++)
        if (sp_keep[i].exact ? !strcmp(name, sp_keep[i].pattern) : !!strstr(name, sp_keep[i].pattern))
            return false;
    return true;
}

/* ---- the rules ---- */

struct sp_plan_state {
    uint32_t ftype;
    uint32_t n_layer, n_gqa, n_expert;
    bool is_70b, has_imatrix, tied;
    int n_attn_v, i_attn_v, i_ffn_down;
};

static bool sp_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static uint32_t sp_rule_attn_v(struct sp_plan_state *s, uint32_t type)
{
    switch (s->ftype) {
    case FT_Q2_K: type = s->n_gqa >= 4 ? SP_TYPE_Q4_K : SP_TYPE_Q3_K; break;
    case FT_Q3_K_M: type = s->i_attn_v < 2 ? SP_TYPE_Q5_K : SP_TYPE_Q4_K; break;
    case FT_Q3_K_L: type = SP_TYPE_Q5_K; break;
    case FT_Q4_K_M:
    case FT_Q5_K_M:
        if (sp_more_bits(s->i_attn_v, s->n_attn_v))
            type = SP_TYPE_Q6_K;
        break;
    case FT_Q4_K_S:
        if (s->i_attn_v < 4)
            type = SP_TYPE_Q5_K;
        break;
    }
    /* 70B: eight heads share each V row, so more bits cost little */
    if (s->is_70b && (type == SP_TYPE_Q3_K || type == SP_TYPE_Q4_K))
        type = SP_TYPE_Q5_K;
    if (s->n_expert == 8)
        type = SP_TYPE_Q8_0;
    s->i_attn_v++;
    return type;
}

static uint32_t sp_rule_ffn_down(struct sp_plan_state *s, uint32_t type, int i)
{
    int n = (int)s->n_layer;
    switch (s->ftype) {
    case FT_Q2_K: type = SP_TYPE_Q3_K; break;
    case FT_Q3_K_M: type = i < n / 16 ? SP_TYPE_Q5_K : SP_TYPE_Q4_K; break;
    case FT_Q3_K_L: type = SP_TYPE_Q5_K; break;
    case FT_Q4_K_M:
    case FT_Q5_K_M:
        if (sp_more_bits(i, n))
            type = SP_TYPE_Q6_K;
        break;
    case FT_Q4_K_S:
        if (i < n / 8)
            type = SP_TYPE_Q5_K;
        break;
    case FT_Q4_0:
    case FT_Q5_0:
        /* with an imatrix the first layers' FFN down gets a minimum too */
        if (s->has_imatrix && i < n / 8)
            type = s->ftype == FT_Q4_0 ? SP_TYPE_Q4_1 : SP_TYPE_Q5_1;
        break;
    }
    s->i_ffn_down++;
    return type;
}

static uint32_t sp_rule_attn_out(const struct sp_plan_state *s, uint32_t type)
{
    if (s->n_expert == 8) {
        switch (s->ftype) {
        case FT_Q2_K: case FT_Q3_K_S: case FT_Q3_K_M: case FT_Q4_K_S: case FT_Q4_K_M:
            return SP_TYPE_Q5_K;
        }
        return type;
    }
    switch (s->ftype) {
    case FT_Q2_K: return SP_TYPE_Q3_K;
    case FT_Q3_K_M: return SP_TYPE_Q4_K;
    case FT_Q3_K_L: return SP_TYPE_Q5_K;
    }
    return type;
}

/* Layer of a tensor for the FFN-down rule: the running count, or with
 * experts the number in its name. */
static sp_status sp_rule_layer(const struct sp_plan_state *s, const char *name, int *layer)
{
    *layer = s->i_ffn_down;
    if (s->n_expert > 1 && (sscanf(name, "blk.%d.", layer) != 1 || *layer < 0 || *layer >= (int)s->n_layer))
        return sp_error_set(SP_ERR_FORMAT, "tensor '%s': no layer number below %u in its name", name, s->n_layer);
    return SP_OK;
}

static uint32_t sp_block_of(uint32_t type) { return sp_type_get(type)->block_size; }

/* A type whose blocks fit rows of ncols, as llama.cpp falls back: a K type
 * to a 32-element type, then (a 32-element type at once) to F16 when 32
 * does not divide the rows either. */
static sp_status sp_fallback(const char *name, int64_t ncols, uint32_t type, uint32_t *out, uint32_t *n_fallback)
{
    *out = type;
    if (ncols % sp_block_of(type) == 0)
        return SP_OK;
    switch (type) {
    case SP_TYPE_Q2_K: case SP_TYPE_Q3_K: type = SP_TYPE_Q4_0; break;
    case SP_TYPE_Q4_K: type = SP_TYPE_Q5_0; break;
    case SP_TYPE_Q5_K: type = SP_TYPE_Q5_1; break;
    case SP_TYPE_Q6_K: type = SP_TYPE_Q8_0; break;
    default:
        if (sp_block_of(type) <= 32)
            break;
        return sp_error_set(SP_ERR_ARG, "tensor '%s': rows of %lld do not split into %s blocks", name,
                            (long long)ncols, sp_type_get(type)->name);
    }
    if (ncols % sp_block_of(type))
        type = SP_TYPE_F16;
    (*n_fallback)++;
    *out = type;
    return SP_OK;
}

static sp_status sp_plan_one(struct sp_plan_state *s, const struct sp_gguf_tensor *t, const char *name,
                             uint32_t base, uint32_t *out, uint32_t *n_fallback)
{
    enum sp_cat cat = sp_category(name);
    uint32_t type = base;
    int layer;
    sp_status st;
    const struct sp_type_traits *bt = sp_type_get(base);
    bool quantized = bt->block_size > 1; /* F32/F16/BF16 files take no rules */
    if (!sp_quantizable(t, name)) {
        *out = t->type;
        return SP_OK;
    }
    if (!quantized) {
        *out = base;
        return SP_OK;
    }
    if (s->ftype == FT_MXFP4_MOE) {
        /* llama.cpp: expert stacks (3-D) MXFP4, every other matrix Q8_0 */
        type = t->ne[2] > 1 && cat != CAT_OUTPUT && !(s->tied && cat == CAT_TOKEN_EMBD) ? SP_TYPE_MXFP4
                                                                                       : SP_TYPE_Q8_0;
    } else if (cat == CAT_OUTPUT || (s->tied && cat == CAT_TOKEN_EMBD)) {
        if (t->ne[0] % sp_block_of(type))
            type = SP_TYPE_Q8_0;
        else if (type != SP_TYPE_Q8_0)
            type = SP_TYPE_Q6_K;
    } else if (cat == CAT_ATTN_V) {
        type = sp_rule_attn_v(s, type);
    } else if (cat == CAT_ATTN_K) {
        if (s->n_expert == 8)
            type = SP_TYPE_Q8_0;
    } else if (cat == CAT_FFN_DOWN) {
        if ((st = sp_rule_layer(s, name, &layer)) != SP_OK)
            return st;
        type = sp_rule_ffn_down(s, type, layer);
    } else if (cat == CAT_ATTN_OUT) {
        type = sp_rule_attn_out(s, type);
    }
    return sp_fallback(name, t->ne[0], type, out, n_fallback);
}

/* ---- model facts the rules use ---- */

static sp_status sp_plan_hparams(const struct sp_gguf *g, struct sp_plan_state *s)
{
    struct sp_gguf_str arch = {0};
    char key[160];
    uint32_t n_head = 0, n_head_kv = 0;
    sp_status st = sp_gguf_get_str(g, "general.architecture", true, &arch);
    if (st != SP_OK)
        return sp_error_set(SP_ERR_FORMAT, "not a model: %s", sp_error_message());
    if (arch.len == 0 || arch.len > 64)
        return sp_error_set(SP_ERR_FORMAT, "not a model: general.architecture has length %llu",
                            (unsigned long long)arch.len);
#define SP_ARCH_KEY(suffix) (snprintf(key, sizeof key, "%.*s." suffix, (int)arch.len, arch.ptr), key)
    if ((st = sp_gguf_get_u32(g, SP_ARCH_KEY("block_count"), true, &s->n_layer)) != SP_OK)
        return sp_error_set(SP_ERR_FORMAT, "not a model: %s", sp_error_message());
    /* per-layer head counts (arrays) make the ratio unknown: take 1 */
    if (sp_gguf_get_u32(g, SP_ARCH_KEY("attention.head_count"), false, &n_head) != SP_OK)
        n_head = 0;
    if (sp_gguf_get_u32(g, SP_ARCH_KEY("attention.head_count_kv"), false, &n_head_kv) != SP_OK)
        n_head_kv = 0;
    if ((st = sp_gguf_get_u32(g, SP_ARCH_KEY("expert_count"), false, &s->n_expert)) != SP_OK)
        return st;
#undef SP_ARCH_KEY
    if (n_head && !n_head_kv)
        n_head_kv = n_head;
    s->n_gqa = n_head && n_head_kv ? n_head / n_head_kv : 1;
    s->is_70b = sp_gguf_str_eq(arch, "llama") && s->n_layer == 80;
    return SP_OK;
}

static int sp_layer_of(const struct sp_gguf_str *name)
{
    char buf[64];
    int layer = -1;
    snprintf(buf, sizeof buf, "%.*s", (int)name->len, name->ptr);
    if (sscanf(buf, "blk.%d.", &layer) != 1)
        layer = -1;
    return layer;
}

static const struct sp_gguf *sp_sort_g;

static int sp_order_cmp(const void *a, const void *b)
{
    const struct sp_gguf_str *x = &sp_sort_g->tensors[*(const uint64_t *)a].name;
    const struct sp_gguf_str *y = &sp_sort_g->tensors[*(const uint64_t *)b].name;
    int lx = sp_layer_of(x), ly = sp_layer_of(y);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    uint64_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->ptr, y->ptr, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

sp_status sp_quantize_order(const struct sp_gguf *g, uint64_t **order)
{
    uint64_t *o = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *o);
    if (!o)
        return sp_error_set(SP_ERR_NOMEM, "no memory for the tensor order");
    for (uint64_t i = 0; i < g->n_tensors; i++)
        o[i] = i;
    sp_sort_g = g; /* qsort has no context argument; planning is single-threaded */
    qsort(o, g->n_tensors, sizeof *o, sp_order_cmp);
    sp_sort_g = NULL;
    *order = o;
    return SP_OK;
}

sp_status sp_quantize_plan(const struct sp_gguf *g, const struct sp_quantize_ftype *ft, bool has_imatrix,
                           const uint64_t *order, uint32_t *types, uint32_t *n_fallback)
{
    struct sp_plan_state s = {.ftype = ft->id, .has_imatrix = has_imatrix, .tied = true};
    char name[64];
    sp_status st = sp_plan_hparams(g, &s);
    if (st != SP_OK)
        return st;
    *n_fallback = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct sp_gguf_tensor *t = &g->tensors[i];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        enum sp_cat cat = sp_category(name);
        if (cat == CAT_ATTN_V)
            s.n_attn_v++;
        if (cat == CAT_OUTPUT)
            s.tied = false;
    }
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        const struct sp_gguf_tensor *t = &g->tensors[order[k]];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if ((st = sp_plan_one(&s, t, name, ft->base_type, &types[order[k]], n_fallback)) != SP_OK)
            return st;
    }
    return SP_OK;
}
