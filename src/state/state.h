/* Recurrent state of linear layers (a short causal convolution, a
 * selective scan, a gated delta rule): one slot per live sequence, and
 * the snapshots of the prefix cache.
 *
 * A linear layer's state advances on a grid of SP_STATE_CHUNK positions
 * aligned to absolute positions 0, C, 2C, ...: the state at a grid point g
 * is the chunked form applied to the chunk [g - C, g) from the state at
 * g - C.  Between grid points a slot keeps the inputs of the positions since,
 * and the output at a position is computed from the last grid state and
 * those inputs (the forward pass, src/model/forward_linear.c).  So every
 * output is one fixed function of the tokens before it, however the
 * positions were batched.
 *
 * Per linear layer a slot holds (struct sp_state_view):
 *   grid       the state at one grid point, the slot's held point (*held);
 *   conv_held  the causal convolution's raw inputs of the history positions
 *              before the held grid point (what a snapshot takes with the
 *              grid state);
 *   conv       the causal convolution's raw inputs, position q in row
 *              q % conv_ring (SP_STATE_ROLLBACK + the convolution's
 *              history: a roll back's positions and the history before);
 *   in         the chunked state's per-position inputs, position s in row
 *              s % in_ring (C - 1 + SP_STATE_ROLLBACK: the positions from
 *              the held grid point on).
 * Nothing here knows what the floats mean; the forward pass writes them.
 *
 * One grid state per layer, and roll backs: a roll back goes no further
 * than the sequence's floor, which the forward pass sets: the first
 * position of its latest batch's run when that run was of at most
 * SP_STATE_ROLLBACK positions (a speculative step: the step's last token
 * and its drafts), else the end of it (sp_state_floor_after).  The slot
 * holds the state at the floor's grid point, not at the latest one: a position past a newer grid point gets that grid
 * point's state by the chunked form from the held state and the ring's
 * inputs, computed where the forward pass needs it (the same function of
 * the same inputs, so the same bits) and stored when the floor passes the
 * grid point.  A plain decode step moves the floor to its own position, so
 * it computes each grid state once, as the step that crosses the grid point
 * needs it; a speculative step that crosses one computes it again in the
 * next step.  speculate.c checks SP_SPEC_K_MAX + 1 against
 * SP_STATE_ROLLBACK.
 *
 * Slots are allocated on first use (at most n_slots), reused after.
 * Owned by the engine's thread; not thread-safe. */
#ifndef SP_STATE_H
#define SP_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

/* Positions per chunk of the grid: a multiple of the KV block (16), so a
 * grid point is a block boundary (prefix snapshots). */
#define SP_STATE_CHUNK 64u
/* Most positions one roll back goes back (fewer than SP_STATE_CHUNK). */
#define SP_STATE_ROLLBACK 33u

/* What one layer keeps per sequence; all zero: not a linear layer. */
struct sp_state_layer {
    uint32_t conv_ch;     /* channels of the convolution's raw inputs (0: no convolution) */
    uint32_t conv_hist;   /* positions before its own a convolution output reads (kernel - 1) */
    uint32_t in_floats;   /* floats of one position's inputs to the chunked state (0: none) */
    uint32_t grid_floats; /* floats of one grid state (0: none) */
};

struct sp_state_shape {
    uint32_t n_layer;
    const struct sp_state_layer *layers; /* [n_layer] */
    uint32_t n_slots;                    /* most sequences holding a slot at once */
    uint32_t n_snapshots;                /* most prefix-cache snapshots (0: none) ... */
    uint64_t snapshot_budget;            /* ... and most bytes they take */
};

struct sp_state;

/* A sequence's place in the state pool.  The caller owns the storage
 * (zeroed before first use); its fields belong to this room. */
struct sp_state_seq {
    uint32_t slot;   /* slot + 1 (0: none yet) */
    uint32_t n_pos;  /* positions reserved (the forward pass writes them) */
};

/* A pool for this shape; *out NULL (and SP_OK) when no layer is linear. */
sp_status sp_state_new(struct sp_state **out, const struct sp_state_shape *shape);
void sp_state_free(struct sp_state *st);

struct sp_state_stats {
    uint64_t slot_bytes;      /* one sequence's state: every linear layer's grid state and rings (allocated) */
    uint32_t slots_total, slots_used;
    uint64_t snapshot_bytes;  /* one snapshot (a grid state and the convolution's history per layer) */
    uint32_t snapshots_max, snapshots_used;
    uint64_t snapshot_hits;
};
void sp_state_stats(const struct sp_state *st, struct sp_state_stats *out);

/* Makes positions [0, n_pos) of seq writable (taking a slot first):
 * positions are appended in order, so n_pos must exceed what seq holds
 * (SP_ERR_INTERNAL otherwise: a position is never written twice without a
 * roll back between).  SP_ERR_FULL when no slot is free. */
sp_status sp_state_seq_reserve(struct sp_state *st, struct sp_state_seq *seq, uint32_t n_pos);
/* Rolls seq back to its first n_pos positions; SP_ERR_INTERNAL below its
 * floor (before the latest forward pass's run, or into a run of more than
 * SP_STATE_ROLLBACK positions: what that needs is gone). */
sp_status sp_state_seq_truncate(struct sp_state *st, struct sp_state_seq *seq, uint32_t n_pos);
/* dst (empty) gets a copy of src's slot (a state is not shared: the next
 * token changes all of it).  SP_ERR_FULL when no slot is free. */
sp_status sp_state_seq_fork(struct sp_state *st, struct sp_state_seq *dst, const struct sp_state_seq *src);
void sp_state_seq_release(struct sp_state *st, struct sp_state_seq *seq);

/* One layer's memory of one sequence (it holds a slot).  The forward pass
 * reads the state at *held; after a run of positions [p0, p0 + n) it
 * leaves there the state at the grid point of the new floor f =
 * sp_state_floor_after(p0, n) (>= *held: p0 is at or past the old floor),
 * with *held = sp_state_grid(f) and *floor = f, and when *held moves, the
 * convolution inputs of the history before it in conv_held. */
struct sp_state_view {
    float *grid;      /* the state at grid point *held (NULL: the layer has none) */
    uint32_t *held;   /* this layer's */
    uint32_t *floor;  /* the slot's: the lowest position a roll back may go to */
    float *conv_held; /* [conv_hist][conv_ch] */
    float *conv, *in;
    uint32_t conv_ring, in_ring;
};
struct sp_state_view sp_state_view(const struct sp_state *st, const struct sp_state_seq *seq, uint32_t layer);

/* ---- prefix snapshots ----
 * A snapshot is a slot's state at grid point g (a multiple of
 * SP_STATE_CHUNK): every layer's grid state there and the convolution
 * inputs of the positions just before it.  key names the prefix (the
 * cached KV block that ends at g); snapshots live within the byte budget,
 * the least recently used evicted first. */

/* The grid point a snapshot of seq now holds: its slot's held grid point. */
uint32_t sp_state_seq_point(const struct sp_state *st, const struct sp_state_seq *seq);
/* Saves seq's state at sp_state_seq_point (g > 0) under key; nothing when
 * it is already saved or there is no budget. */
void sp_state_snapshot_save(struct sp_state *st, const struct sp_state_seq *seq, uint64_t key);
/* The grid point a snapshot under key holds (0: none). */
uint32_t sp_state_snapshot_find(const struct sp_state *st, uint64_t key);
/* Gives an empty seq a slot holding the snapshot under key: its positions
 * are then [0, g).  SP_ERR_FULL when no slot is free, SP_ERR_INTERNAL when
 * there is no such snapshot. */
sp_status sp_state_snapshot_load(struct sp_state *st, struct sp_state_seq *seq, uint64_t key);

/* The grid point at or before n_pos. */
static inline uint32_t sp_state_grid(uint32_t n_pos)
{
    return n_pos / SP_STATE_CHUNK * SP_STATE_CHUNK;
}

/* The floor after a forward run of positions [p0, p0 + n): a run of at
 * most SP_STATE_ROLLBACK positions may be rolled back whole, a longer one
 * (a prompt) not at all. */
static inline uint32_t sp_state_floor_after(uint32_t p0, uint32_t n)
{
    return n <= SP_STATE_ROLLBACK ? p0 : p0 + n;
}

#endif
