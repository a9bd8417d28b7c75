/* Sequence memory over the KV pool and the state pool (see memory.h). */
#include "memory/memory.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct sp_memory {
    struct sp_kv *kv;
    struct sp_state *st; /* NULL: no linear layers */
};

sp_status sp_memory_new(struct sp_memory **out, const struct sp_memory_shape *shape)
{
    sp_status s;
    *out = NULL;
    struct sp_memory *mem = calloc(1, sizeof *mem);
    if (!mem)
        return sp_error_set(SP_ERR_NOMEM, "memory: no memory");
    if ((s = sp_kv_new(&mem->kv, &shape->kv, shape->n_blocks)) != SP_OK ||
        (s = sp_state_new(&mem->st, &shape->state)) != SP_OK) {
        sp_memory_free(mem);
        return s;
    }
    *out = mem;
    return SP_OK;
}

void sp_memory_touch(struct sp_memory *mem) { sp_kv_touch(mem->kv); }

void sp_memory_free(struct sp_memory *mem)
{
    if (!mem)
        return;
    sp_kv_free(mem->kv);
    sp_state_free(mem->st);
    free(mem);
}

void sp_memory_stats(const struct sp_memory *mem, uint32_t seqs, struct sp_memory_stats *o)
{
    sp_kv_stats(mem->kv, seqs, &o->kv);
    sp_state_stats(mem->st, &o->state);
}

uint32_t sp_memory_available(const struct sp_memory *mem) { return sp_kv_available(mem->kv); }

bool sp_memory_has_state(const struct sp_memory *mem) { return mem->st != NULL; }

sp_status sp_memory_seq_reserve(struct sp_memory *mem, struct sp_memory_seq *seq, uint32_t n_pos)
{
    sp_status s;
    if (mem->st && n_pos <= seq->st.n_pos) /* checked before anything changes */
        return sp_state_seq_reserve(mem->st, &seq->st, n_pos);
    if ((s = sp_kv_seq_reserve(mem->kv, &seq->kv, n_pos)) != SP_OK)
        return s;
    if (mem->st && (s = sp_state_seq_reserve(mem->st, &seq->st, n_pos)) != SP_OK) {
        sp_kv_seq_truncate(mem->kv, &seq->kv, seq->st.n_pos); /* only the blocks just taken */
        return s;
    }
    return SP_OK;
}

sp_status sp_memory_seq_truncate(struct sp_memory *mem, struct sp_memory_seq *seq, uint32_t n_pos)
{
    sp_status s;
    if (mem->st && (s = sp_state_seq_truncate(mem->st, &seq->st, n_pos)) != SP_OK)
        return s;
    if (n_pos < seq->snap_at)
        seq->snap_at = 0;
    return sp_kv_seq_truncate(mem->kv, &seq->kv, n_pos);
}

sp_status sp_memory_seq_fork(struct sp_memory *mem, struct sp_memory_seq *dst, const struct sp_memory_seq *src)
{
    sp_status s;
    memset(dst, 0, sizeof *dst);
    if ((s = sp_kv_seq_fork(mem->kv, &dst->kv, &src->kv)) != SP_OK ||
        (mem->st && (s = sp_state_seq_fork(mem->st, &dst->st, &src->st)) != SP_OK)) {
        sp_memory_seq_release(mem, dst);
        return s;
    }
    dst->snap_at = src->snap_at;
    dst->snap_key = src->snap_key;
    return SP_OK;
}

void sp_memory_seq_release(struct sp_memory *mem, struct sp_memory_seq *seq)
{
    sp_kv_seq_release(mem->kv, &seq->kv);
    if (mem->st)
        sp_state_seq_release(mem->st, &seq->st);
    seq->snap_at = 0;
}

uint32_t sp_memory_seq_len(const struct sp_memory_seq *seq) { return sp_kv_seq_len(&seq->kv); }

/* A prefix can be resumed after block i when it ends at a grid point with
 * a snapshot filed under its key. */
static bool sp_memory_resumable(void *ud, uint32_t i, uint64_t key)
{
    const struct sp_memory *mem = ud;
    struct sp_kv_stats ks;
    sp_kv_stats(mem->kv, 0, &ks);
    uint32_t end = (i + 1) * ks.block_tokens;
    return end % SP_STATE_CHUNK == 0 && sp_state_snapshot_find(mem->st, key) == end;
}

uint32_t sp_memory_prefix_attach(struct sp_memory *mem, struct sp_memory_seq *seq, const sp_token *tokens,
                                 uint32_t max_tokens)
{
    if (!mem->st)
        return sp_kv_prefix_attach(mem->kv, &seq->kv, tokens, max_tokens);
    uint32_t n = sp_kv_prefix_attach_if(mem->kv, &seq->kv, tokens, max_tokens, sp_memory_resumable, mem);
    if (!n)
        return 0;
    if (sp_state_snapshot_load(mem->st, &seq->st, sp_kv_prefix_key(&seq->kv)) != SP_OK) { /* no slot: start from nothing */
        sp_memory_seq_release(mem, seq);
        return 0;
    }
    return n;
}

/* The snapshot to take while registering: the key of the block that ends
 * at the grid point the state holds, and of the newest block ending at a
 * later grid point (taken by a later commit). */
struct sp_memory_commit {
    uint32_t block_tokens, at, pend_at;
    uint64_t key, pend_key;
};

static void sp_memory_commit_block(void *ud, uint32_t i, uint64_t key)
{
    struct sp_memory_commit *c = ud;
    uint32_t end = (i + 1) * c->block_tokens;
    if (end == c->at) {
        c->key = key;
    } else if (end > c->at && end % SP_STATE_CHUNK == 0) {
        c->pend_at = end;
        c->pend_key = key;
    }
}

void sp_memory_prefix_commit(struct sp_memory *mem, struct sp_memory_seq *seq, const sp_token *tokens)
{
    if (!mem->st) {
        sp_kv_prefix_commit(mem->kv, &seq->kv, tokens);
        return;
    }
    struct sp_kv_stats ks;
    sp_kv_stats(mem->kv, 0, &ks);
    struct sp_memory_commit c = {ks.block_tokens, sp_state_seq_point(mem->st, &seq->st), seq->snap_at, 0,
                                 seq->snap_key};
    sp_kv_prefix_commit_each(mem->kv, &seq->kv, tokens, sp_memory_commit_block, &c);
    if (!c.key && c.pend_at && c.pend_at == c.at)
        c.key = c.pend_key;
    seq->snap_at = c.pend_at > c.at ? c.pend_at : 0;
    seq->snap_key = c.pend_key;
    if (c.key)
        sp_state_snapshot_save(mem->st, &seq->st, c.key);
}

struct sp_kv *sp_memory_kv(struct sp_memory *mem) { return mem->kv; }

const struct sp_kv_seq *sp_memory_seq_kv(const struct sp_memory_seq *seq) { return &seq->kv; }

struct sp_state_view sp_memory_state_view(const struct sp_memory *mem, const struct sp_memory_seq *seq, uint32_t layer)
{
    return sp_state_view(mem->st, &seq->st, layer);
}
