/* Sequence memory: what a sequence remembers, whatever its model's layers
 * are.  Full-attention layers keep K/V in paged blocks and local layers in
 * rings (src/kv), linear layers their recurrent state in a slot
 * (src/state); this room composes the two by the model's layer kinds, and
 * the engine asks it and nothing below it.  A model without linear layers
 * has no state pool and behaves exactly as the KV cache alone.
 *
 * Every operation is the pair's: reserving positions takes blocks and a
 * slot, forking shares blocks and copies the slot, rolling back drops
 * blocks (the state's slot still holds the grid state from before the
 * latest step), the prefix cache attaches cached blocks up to a point
 * where a state snapshot exists.  Running out of blocks or slots is
 * SP_ERR_FULL, nothing changed.
 * Owned by the engine's thread; not thread-safe. */
#ifndef SP_MEMORY_H
#define SP_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv.h"
#include "spindle.h"
#include "state/state.h"

struct sp_memory_shape {
    struct sp_kv_shape kv;       /* .stateless marks the linear layers */
    uint32_t n_blocks;
    struct sp_state_shape state; /* no linear layer: no state pool */
};

/* A sequence's memory; the caller owns the storage (zeroed before first
 * use), the fields are this room's. */
struct sp_memory_seq {
    struct sp_kv_seq kv;
    struct sp_state_seq st;
    /* a block registered at a grid point the state does not hold yet: its
     * snapshot is taken at a later commit, once the state holds it */
    uint32_t snap_at;
    uint64_t snap_key;
};

struct sp_memory;

sp_status sp_memory_new(struct sp_memory **out, const struct sp_memory_shape *shape);
/* Writes the paged pool once so its pages are resident from the start. */
void sp_memory_touch(struct sp_memory *mem);
void sp_memory_free(struct sp_memory *mem);

struct sp_memory_stats {
    struct sp_kv_stats kv;       /* bytes: the blocks plus the rings asked for */
    struct sp_state_stats state; /* all zero without linear layers */
};
/* `seqs`: sequences whose rings to count in kv.bytes. */
void sp_memory_stats(const struct sp_memory *mem, uint32_t seqs, struct sp_memory_stats *out);
/* Blocks not held by any sequence. */
uint32_t sp_memory_available(const struct sp_memory *mem);
/* Whether sequences keep recurrent state (a roll back is then limited to
 * fewer than SP_STATE_CHUNK positions, and positions are written once). */
bool sp_memory_has_state(const struct sp_memory *mem);

/* Makes positions [0, n_pos) writable (kv's and state's contracts: with
 * state, n_pos must be past what seq holds). */
sp_status sp_memory_seq_reserve(struct sp_memory *mem, struct sp_memory_seq *seq, uint32_t n_pos);
sp_status sp_memory_seq_truncate(struct sp_memory *mem, struct sp_memory_seq *seq, uint32_t n_pos);
sp_status sp_memory_seq_fork(struct sp_memory *mem, struct sp_memory_seq *dst, const struct sp_memory_seq *src);
void sp_memory_seq_release(struct sp_memory *mem, struct sp_memory_seq *seq);
uint32_t sp_memory_seq_len(const struct sp_memory_seq *seq);

/* Prefix cache: attaches to an empty seq the longest cached prefix of
 * tokens[0, max_tokens) that it can resume from (whole blocks; with state,
 * ending at a grid point with a snapshot); returns the positions covered. */
uint32_t sp_memory_prefix_attach(struct sp_memory *mem, struct sp_memory_seq *seq, const sp_token *tokens,
                                 uint32_t max_tokens);
/* Registers seq's full blocks (tokens[0, written positions)) and, with
 * state, a snapshot at the grid point its slot holds, filed under the key
 * of the block ending there (registered now, or by an earlier commit before
 * the slot held that grid point). */
void sp_memory_prefix_commit(struct sp_memory *mem, struct sp_memory_seq *seq, const sp_token *tokens);

/* ---- for the forward pass ---- */
struct sp_kv *sp_memory_kv(struct sp_memory *mem);
const struct sp_kv_seq *sp_memory_seq_kv(const struct sp_memory_seq *seq);
/* A linear layer's state of seq (reserved). */
struct sp_state_view sp_memory_state_view(const struct sp_memory *mem, const struct sp_memory_seq *seq,
                                          uint32_t layer);

#endif
