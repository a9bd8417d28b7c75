/* sp_model: loading, description, metadata, vocabulary and chat (see
 * include/spindle.h for the contracts). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "core/cpu.h"
#include "core/error.h"
#include "embed/embed.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "chat/chat.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "quant/quant.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

void sp_free(void *p) { free(p); }

const char *sp_version(void)
{
#define SP_STR2(x) #x
#define SP_STR(x) SP_STR2(x)
    return SP_STR(SPINDLE_VERSION_MAJOR) "." SP_STR(SPINDLE_VERSION_MINOR) "." SP_STR(SPINDLE_VERSION_PATCH);
#undef SP_STR
#undef SP_STR2
}

void sp_model_params_default(sp_model_params *p)
{
    memset(p, 0, sizeof *p);
    p->use_mmap = true;
}

static const struct sp_gguf *sp_api_gguf(const sp_model *m)
{
    return m->weights ? &m->weights->gguf : &m->gguf;
}

static const struct sp_gguf_parts *sp_api_parts(const sp_model *m, const struct sp_mapping **first)
{
    *first = m->weights ? &m->weights->map : &m->map;
    return m->weights ? &m->weights->parts : &m->parts;
}

sp_status sp_model_load(const sp_model_params *p, sp_model **out)
{
    sp_status st;
    if (!out)
        return sp_error_set(SP_ERR_ARG, "sp_model_load: out is NULL");
    *out = NULL;
    if (!p || !p->path)
        return sp_error_set(SP_ERR_ARG, "sp_model_load: no model path");
    if ((st = sp_isa_select(p->isa)) != SP_OK)
        return st;
    sp_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(p->path))) {
        free(m);
        return sp_error_set(SP_ERR_NOMEM, "model: no memory");
    }
    m->n_threads = p->n_threads;
    pthread_mutex_init(&m->grammar_mu, NULL);
    unsigned flags = (p->use_mmap ? 0 : SP_MAP_READ) | (p->use_mlock ? SP_MAP_LOCK : 0);
    st = p->vocab_only ? sp_model_open_gguf(&m->map, &m->gguf, &m->parts, p->path, flags)
                       : sp_model_open(&m->weights, p->path, flags,
                                       &(struct sp_progress){p->progress, p->progress_user});
    if (st == SP_OK && m->weights && p->private_copy)
        st = sp_model_detach(m->weights, p->use_mlock);
    if (st != SP_OK)
        goto fail;
    const struct sp_gguf *g = sp_api_gguf(m);
    if ((st = sp_vocab_init(&m->vocab, g)) != SP_OK) {
        sp_error_wrap(st, "%s", p->path);
        goto fail;
    }
    if (m->weights && sp_vocab_size(m->vocab) != m->weights->hp.n_vocab) {
        st = sp_error_set(SP_ERR_FORMAT, "%s: vocabulary has %u tokens but token_embd.weight has %u rows", p->path,
                          sp_vocab_size(m->vocab), m->weights->hp.n_vocab);
        goto fail;
    }
    struct sp_gguf_str arch = {0};
    if (sp_gguf_get_str(g, "general.architecture", false, &arch) == SP_OK && arch.ptr &&
        !(m->arch = strndup(arch.ptr, (size_t)arch.len))) {
        st = sp_error_set(SP_ERR_NOMEM, "model: no memory");
        goto fail;
    }
    sp_error_clear();
    *out = m;
    return SP_OK;
fail:
    sp_model_free(m);
    return st;
}

void sp_model_free(sp_model *m)
{
    if (!m)
        return;
    sp_grammar_tokens_free(m->grammar_tokens);
    pthread_mutex_destroy(&m->grammar_mu);
    sp_vocab_free(m->vocab);
    sp_model_close(m->weights);
    sp_gguf_free(&m->gguf);
    sp_mapping_free(&m->map);
    sp_gguf_parts_free(&m->parts);
    free(m->arch);
    free(m->path);
    free(m);
}

sp_pooling sp_model_pooling(const sp_model *m)
{
    return sp_embed_pooling_of(m->weights ? m->weights->hp.pooling : 0);
}

sp_status sp_model_sampling_defaults(const sp_model *m, sp_sampler_params *p, int *n_from_model)
{
    if (!m->weights) {
        sp_sampler_params_default(p);
        *n_from_model = 0;
        return SP_OK;
    }
    return sp_engine_sampling_defaults(m->weights, p, n_from_model);
}

void sp_isa_info_get(sp_isa_info *out)
{
    struct sp_isa_paths ip;
    sp_isa_paths(&ip);
    *out = (sp_isa_info){.level = ip.level, .quant = ip.quant, .packed = ip.packed, .attention = ip.attention,
                         .ops = ip.ops};
}

void sp_model_info_get(const sp_model *m, sp_model_info *o)
{
    const struct sp_gguf *g = sp_api_gguf(m);
    const struct sp_model *w = m->weights;
    memset(o, 0, sizeof *o);
    o->path = m->path;
    o->architecture = m->arch;
    o->tokenizer = sp_vocab_model_name(m->vocab);
    o->tokenizer_pre = sp_vocab_pre_name(m->vocab);
    o->isa = sp_isa_name(sp_isa_active());
    o->gguf_version = g->version;
    o->n_tensors = g->n_tensors;
    o->n_meta = g->n_kv;
    for (uint32_t i = 0; i < sp_model_n_files(m); i++) {
        uint64_t bytes = 0;
        sp_model_file_get(m, i, NULL, &bytes, NULL);
        o->file_bytes += bytes;
    }
    o->n_vocab = sp_vocab_size(m->vocab);
    o->bos = sp_vocab_bos(m->vocab);
    o->eos = sp_vocab_eos(m->vocab);
    o->has_chat_template = sp_vocab_chat_template(m->vocab) != NULL;
    o->vocab_only = !w;
    if (!w)
        return;
    const struct sp_hparams *hp = &w->hp;
    o->weights_bytes = w->weights_bytes;
    o->private_copy_bytes = w->copy_bytes;
    o->n_ctx_train = hp->n_ctx_train;
    o->n_embd = hp->n_embd;
    o->n_layer = hp->n_layer;
    o->n_ff = hp->n_ff;
    o->n_head = hp->n_head;
    o->n_head_kv = hp->n_head_kv;
    o->head_dim = hp->head_dim;
    o->n_rot = hp->n_rot;
    o->n_swa = hp->n_swa;
    o->swa_chunked = w->arch->swa_chunked;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        o->n_swa_layers += w->layers[l].swa;
    o->rope_base = hp->rope_base;
    o->rope_freq_scale = hp->rope_freq_scale;
    for (uint32_t l = 0; l < hp->n_layer && o->rope_base_swa == 0.0f; l++)
        if (w->layers[l].swa && w->layers[l].rope_base != hp->rope_base)
            o->rope_base_swa = w->layers[l].rope_base;
    o->norm_eps = hp->eps;
    o->tied_output = w->tied_output;
    o->n_packed = w->n_packed;
    o->packed_bytes = w->packed_bytes;
    o->features = w->features;
}

uint32_t sp_model_n_files(const sp_model *m)
{
    const struct sp_mapping *first;
    return sp_api_parts(m, &first)->n + 1;
}

sp_status sp_model_file_get(const sp_model *m, uint32_t i, const char **path, uint64_t *n_bytes, uint64_t *n_tensors)
{
    const struct sp_mapping *first;
    const struct sp_gguf_parts *parts = sp_api_parts(m, &first);
    const struct sp_gguf *g = sp_api_gguf(m);
    const struct sp_mapping *f = sp_gguf_parts_map(parts, first, i);
    if (!f)
        return sp_error_set(SP_ERR_ARG, "file %u: the model has %u", i, parts->n + 1);
    if (path)
        *path = parts->paths[i];
    if (n_bytes)
        *n_bytes = f->size;
    if (n_tensors) {
        *n_tensors = 0;
        for (uint64_t k = 0; k < g->n_tensors; k++)
            *n_tensors += g->tensors[k].part == i;
    }
    return SP_OK;
}

sp_status sp_model_tensor_get(const sp_model *m, uint64_t i, sp_tensor_info *o)
{
    const struct sp_gguf *g = sp_api_gguf(m);
    if (i >= g->n_tensors)
        return sp_error_set(SP_ERR_ARG, "tensor %" PRIu64 ": the file has %" PRIu64, i, g->n_tensors);
    const struct sp_gguf_tensor *t = &g->tensors[i];
    const struct sp_type_traits *tt = sp_type_get(t->type);
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%.*s", (int)(t->name.len < sizeof o->name ? t->name.len : sizeof o->name - 1),
             t->name.ptr);
    o->type = t->type;
    o->type_name = tt ? tt->name : "?";
    o->n_dims = t->n_dims;
    for (int d = 0; d < 4; d++)
        o->ne[d] = t->ne[d];
    o->n_bytes = t->nbytes;
    return SP_OK;
}

/* Copies s[0..n) and a NUL into buf (cap bytes); *len = n. */
static sp_status sp_api_copy_text(const char *s, size_t n, char *buf, size_t cap, size_t *len)
{
    *len = n;
    if (n >= cap)
        return sp_error_set(SP_ERR_ARG, "the text needs %zu bytes and a NUL; the buffer holds %zu", n, cap);
    memcpy(buf, s, n);
    buf[n] = '\0';
    return SP_OK;
}

sp_status sp_model_meta_key(const sp_model *m, uint64_t i, char *buf, size_t cap, size_t *len)
{
    const struct sp_gguf *g = sp_api_gguf(m);
    *len = 0;
    if (i >= g->n_kv)
        return sp_error_set(SP_ERR_ARG, "metadata key %" PRIu64 ": the file has %" PRIu64, i, g->n_kv);
    return sp_api_copy_text(g->kv[i].key.ptr, (size_t)g->kv[i].key.len, buf, cap, len);
}

sp_status sp_model_meta_value(const sp_model *m, const char *key, char *buf, size_t cap, size_t *len)
{
    const struct sp_gguf_kv *kv = sp_gguf_find(sp_api_gguf(m), key);
    char num[64];
    *len = 0;
    if (!kv)
        return sp_error_set(SP_ERR_ARG, "metadata key '%s' is not in the file", key);
    /* scalars are little-endian bytes in the file, read at their width */
#define SP_META_FMT(T, fmt, cast)                                   \
    do {                                                            \
        T x;                                                        \
        memcpy(&x, kv->value, sizeof x);                            \
        snprintf(num, sizeof num, fmt, cast x);                     \
    } while (0)
    switch (kv->type) {
    case SP_GGUF_STRING: return sp_api_copy_text(kv->str.ptr, (size_t)kv->str.len, buf, cap, len);
    case SP_GGUF_ARRAY:
        snprintf(num, sizeof num, "[%" PRIu64 " x %s]", kv->arr_n, sp_gguf_vtype_name(kv->arr_type));
        break;
    case SP_GGUF_UINT8: SP_META_FMT(uint8_t, "%u", (unsigned)); break;
    case SP_GGUF_INT8: SP_META_FMT(int8_t, "%d", (int)); break;
    case SP_GGUF_UINT16: SP_META_FMT(uint16_t, "%u", (unsigned)); break;
    case SP_GGUF_INT16: SP_META_FMT(int16_t, "%d", (int)); break;
    case SP_GGUF_UINT32: SP_META_FMT(uint32_t, "%" PRIu32, ); break;
    case SP_GGUF_INT32: SP_META_FMT(int32_t, "%" PRId32, ); break;
    case SP_GGUF_UINT64: SP_META_FMT(uint64_t, "%" PRIu64, ); break;
    case SP_GGUF_INT64: SP_META_FMT(int64_t, "%" PRId64, ); break;
    case SP_GGUF_FLOAT32: SP_META_FMT(float, "%.9g", (double)); break;
    case SP_GGUF_FLOAT64: SP_META_FMT(double, "%.17g", ); break;
    case SP_GGUF_BOOL: snprintf(num, sizeof num, "%s", kv->value[0] ? "true" : "false"); break;
    default: snprintf(num, sizeof num, "?"); break;
    }
#undef SP_META_FMT
    return sp_api_copy_text(num, strlen(num), buf, cap, len);
}

/* ---- vocabulary ---- */

uint32_t sp_model_n_vocab(const sp_model *m) { return sp_vocab_size(m->vocab); }
sp_token sp_model_token_bos(const sp_model *m) { return sp_vocab_bos(m->vocab); }
sp_token sp_model_token_eos(const sp_model *m) { return sp_vocab_eos(m->vocab); }
bool sp_model_token_is_eog(const sp_model *m, sp_token t) { return sp_vocab_is_eog(m->vocab, t); }
bool sp_model_token_is_control(const sp_model *m, sp_token t) { return sp_vocab_is_control(m->vocab, t); }
const char *sp_model_token_text(const sp_model *m, sp_token t) { return sp_vocab_token_text(m->vocab, t); }

/* Token texts for sp_explain_print: the decoded piece, one at a time. */
struct sp_api_piece {
    const sp_model *m;
    char buf[256];
};

static const char *sp_api_piece_text(void *ctx, sp_token id)
{
    struct sp_api_piece *p = ctx;
    size_t n;
    if (sp_model_token_to_piece(p->m, id, false, p->buf, sizeof p->buf - 1, &n) != SP_OK)
        return NULL;
    p->buf[n] = '\0';
    return p->buf;
}

void sp_explain_print(const sp_explain *x, const sp_model *m, FILE *out)
{
    struct sp_api_piece p = {.m = m};
    sp_sampler_explain_print(x, out, m ? sp_api_piece_text : NULL, &p);
}

sp_status sp_model_tokenize(const sp_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                            sp_token *out, size_t cap, size_t *n_out)
{
    return sp_tokenize(m->vocab, text, len, add_special, parse_special, out, cap, n_out);
}

/* n as the tokenizer's piece functions return it: -1 for a bad id, else
 * the full length, which may exceed cap. */
static sp_status sp_api_piece_result(int64_t n, size_t cap, size_t *len)
{
    *len = n > 0 ? (size_t)n : 0;
    if (n < 0)
        return sp_error_set(SP_ERR_ARG, "token id out of range 0..vocabulary size - 1");
    if ((uint64_t)n > cap)
        return sp_error_set(SP_ERR_ARG, "the text needs %" PRId64 " bytes; the buffer holds %zu", n, cap);
    return SP_OK;
}

sp_status sp_model_token_to_piece(const sp_model *m, sp_token t, bool special, char *buf, size_t cap, size_t *len)
{
    return sp_api_piece_result(sp_token_to_piece(m->vocab, t, special, buf, cap), cap, len);
}

sp_status sp_model_detokenize(const sp_model *m, const sp_token *toks, size_t n, bool special, char *buf, size_t cap,
                              size_t *len)
{
    return sp_api_piece_result(sp_detokenize(m->vocab, toks, n, special, buf, cap), cap, len);
}

struct sp_detokenizer {
    struct sp_detok d;
};

sp_status sp_detokenizer_create(const sp_model *m, bool special, sp_detokenizer **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return sp_error_set(SP_ERR_NOMEM, "detokenizer: no memory");
    sp_detok_init(&(*out)->d, m->vocab, special);
    return SP_OK;
}

static sp_status sp_api_detok_result(int n, size_t cap, size_t *len)
{
    *len = n > 0 ? (size_t)n : 0;
    if (n < 0)
        return sp_error_set(SP_ERR_ARG, "detokenizer: a bad token id, or %zu bytes are too few for the text", cap);
    return SP_OK;
}

sp_status sp_detokenizer_push(sp_detokenizer *d, sp_token t, char *buf, size_t cap, size_t *len)
{
    return sp_api_detok_result(sp_detok_push(&d->d, t, buf, cap), cap, len);
}

sp_status sp_detokenizer_flush(sp_detokenizer *d, char *buf, size_t cap, size_t *len)
{
    return sp_api_detok_result(sp_detok_flush(&d->d, buf, cap), cap, len);
}

void sp_detokenizer_free(sp_detokenizer *d) { free(d); }

/* ---- chat ---- */

/* The architecture's built-in chat format (NULL for vocab_only: ChatML). */
const char *sp_api_chat_format(const sp_model *m)
{
    return m->weights ? sp_model_chat_format(m->weights) : NULL;
}

const char *sp_model_chat_template(const sp_model *m)
{
    return sp_chat_template_for(m->vocab, sp_api_chat_format(m));
}

sp_status sp_model_chat_apply(const sp_model *m, const sp_chat_msg *msgs, size_t n, bool add_generation_prompt,
                              char **text)
{
    return sp_chat_prompt_text(m->vocab, sp_api_chat_format(m), msgs, n, NULL, NULL, NULL, add_generation_prompt, text);
}

sp_status sp_model_chat_tokenize(const sp_model *m, const sp_chat_msg *msgs, size_t n, sp_token **out, size_t *n_out)
{
    return sp_chat_prompt(m->vocab, sp_api_chat_format(m), msgs, n, NULL, NULL, NULL, out, n_out);
}
