/* The state pool (see state.h).  A slot is one allocation: for each linear
 * layer in order, its grid state, then its convolution ring, then its
 * input ring (offsets per layer in off); after them the slot's floor and
 * every layer's held grid point (uint32_t each).  A snapshot is one
 * allocation too: per layer the grid state, then conv_hist rows of the
 * convolution's inputs, oldest first. */
#include "state/state.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"

#define SP_STATE_NONE UINT32_MAX

_Static_assert(SP_STATE_ROLLBACK < SP_STATE_CHUNK, "the rings hold a chunk and a roll back");

struct sp_state_lay {
    struct sp_state_layer shape;
    uint32_t conv_ring, in_ring;
    size_t off;       /* floats from the slot's start to the layer's grid state */
    size_t snap_off;  /* floats from a snapshot's start to the layer's part */
};

struct sp_state {
    uint32_t n_layer;
    struct sp_state_lay *lay;  /* [n_layer] */
    size_t slot_floats, snap_floats;
    size_t slot_bytes;         /* the floats, then the floor and n_layer held grid points */
    uint32_t first_linear;
    uint32_t n_slots;
    float **slots;             /* [n_slots], allocated on first use */
    uint32_t *slot_free;       /* stack of free slot ids */
    uint32_t n_slot_free;
    /* snapshots: fixed count within the budget, allocated on first use */
    uint32_t n_snaps, n_snaps_used;
    float **snaps;             /* [n_snaps] */
    uint64_t *snap_key;        /* [n_snaps] 0: unused */
    uint32_t *snap_grid;       /* [n_snaps] the grid point held */
    uint64_t *snap_lru;        /* [n_snaps] last use stamp */
    uint64_t clock, hits;
};

static bool sp_state_linear(const struct sp_state_layer *l)
{
    return l->conv_ch || l->in_floats || l->grid_floats;
}

sp_status sp_state_new(struct sp_state **out, const struct sp_state_shape *shape)
{
    *out = NULL;
    uint32_t n_linear = 0;
    for (uint32_t l = 0; l < shape->n_layer; l++)
        n_linear += sp_state_linear(&shape->layers[l]);
    if (!n_linear)
        return SP_OK;
    if (!shape->n_slots)
        return sp_error_set(SP_ERR_ARG, "state: no slots");
    struct sp_state *st = calloc(1, sizeof *st);
    if (!st)
        return sp_error_set(SP_ERR_NOMEM, "state: no memory");
    st->n_layer = shape->n_layer;
    st->lay = calloc(shape->n_layer, sizeof *st->lay);
    if (!st->lay)
        goto nomem;
    uint64_t slot = 0, snap = 0;
    for (uint32_t l = 0; l < shape->n_layer; l++) {
        struct sp_state_lay *y = &st->lay[l];
        const struct sp_state_layer *s = &shape->layers[l];
        uint64_t conv, in, grid, hist;
        y->shape = *s;
        if (!sp_state_linear(s))
            continue;
        if (s->conv_hist >= SP_STATE_CHUNK) {
            sp_state_free(st);
            return sp_error_set(SP_ERR_ARG, "state: a convolution of %u positions", s->conv_hist + 1);
        }
        y->conv_ring = s->conv_ch ? SP_STATE_ROLLBACK + s->conv_hist : 0;
        y->in_ring = s->in_floats ? SP_STATE_CHUNK - 1 + SP_STATE_ROLLBACK : 0;
        y->off = (size_t)slot;
        y->snap_off = (size_t)snap;
        if (!sp_mul_u64(s->conv_ch, y->conv_ring, &conv) || !sp_mul_u64(s->in_floats, y->in_ring, &in) ||
            !sp_mul_u64(s->grid_floats, 1, &grid) || !sp_mul_u64(s->conv_ch, s->conv_hist, &hist) ||
            !sp_add_u64(slot, conv + in + grid + hist, &slot) || !sp_add_u64(snap, s->grid_floats + hist, &snap) ||
            slot > ((uint64_t)1 << 36)) {
            sp_state_free(st);
            return sp_error_set(SP_ERR_NOMEM, "state: a slot's size overflows");
        }
    }
    st->slot_floats = (size_t)slot;
    st->slot_bytes = (size_t)slot * sizeof(float) + ((size_t)shape->n_layer + 1) * sizeof(uint32_t);
    st->snap_floats = (size_t)snap;
    for (uint32_t l = shape->n_layer; l-- > 0;)
        if (sp_state_linear(&shape->layers[l]))
            st->first_linear = l;
    st->n_slots = shape->n_slots;
    st->slots = calloc(st->n_slots, sizeof *st->slots);
    st->slot_free = malloc(st->n_slots * sizeof *st->slot_free);
    uint64_t snap_bytes = snap * sizeof(float);
    uint64_t n_snaps = snap_bytes ? shape->snapshot_budget / snap_bytes : 0;
    if (n_snaps > shape->n_snapshots)
        n_snaps = shape->n_snapshots;
    st->n_snaps = n_snaps > 65536 ? 65536 : (uint32_t)n_snaps;
    if (st->n_snaps) {
        st->snaps = calloc(st->n_snaps, sizeof *st->snaps);
        st->snap_key = calloc(st->n_snaps, sizeof *st->snap_key);
        st->snap_grid = calloc(st->n_snaps, sizeof *st->snap_grid);
        st->snap_lru = calloc(st->n_snaps, sizeof *st->snap_lru);
    }
    if (!st->slots || !st->slot_free ||
        (st->n_snaps && (!st->snaps || !st->snap_key || !st->snap_grid || !st->snap_lru)))
        goto nomem;
    for (uint32_t i = 0; i < st->n_slots; i++)
        st->slot_free[i] = st->n_slots - 1 - i;
    st->n_slot_free = st->n_slots;
    *out = st;
    return SP_OK;
nomem:
    sp_state_free(st);
    return sp_error_set(SP_ERR_NOMEM, "state: no memory");
}

void sp_state_free(struct sp_state *st)
{
    if (!st)
        return;
    for (uint32_t i = 0; st->slots && i < st->n_slots; i++)
        free(st->slots[i]);
    for (uint32_t i = 0; st->snaps && i < st->n_snaps; i++)
        free(st->snaps[i]);
    free(st->slots);
    free(st->slot_free);
    free(st->snaps);
    free(st->snap_key);
    free(st->snap_grid);
    free(st->snap_lru);
    free(st->lay);
    free(st);
}

void sp_state_stats(const struct sp_state *st, struct sp_state_stats *o)
{
    memset(o, 0, sizeof *o);
    if (!st)
        return;
    o->slot_bytes = st->slot_bytes;
    o->slots_total = st->n_slots;
    o->slots_used = st->n_slots - st->n_slot_free;
    o->snapshot_bytes = (uint64_t)st->snap_floats * sizeof(float);
    o->snapshots_max = st->n_snaps;
    o->snapshots_used = st->n_snaps_used;
    o->snapshot_hits = st->hits;
}

/* Slot s's floor, then every layer's held grid point. */
static uint32_t *sp_state_trailer(const struct sp_state *st, uint32_t s)
{
    return (uint32_t *)(st->slots[s] + st->slot_floats);
}

static uint32_t *sp_state_held(const struct sp_state *st, uint32_t s)
{
    return sp_state_trailer(st, s) + 1;
}

/* Gives seq a slot (its memory allocated on the slot's first use), holding
 * the state at 0. */
static sp_status sp_state_take(struct sp_state *st, struct sp_state_seq *seq)
{
    if (seq->slot)
        return SP_OK;
    if (!st->n_slot_free)
        return sp_error_set(SP_ERR_FULL, "state: all %u recurrent-state slots are in use", st->n_slots);
    uint32_t s = st->slot_free[st->n_slot_free - 1];
    if (!st->slots[s]) {
        st->slots[s] = aligned_alloc(64, (st->slot_bytes + 63) / 64 * 64);
        if (!st->slots[s])
            return sp_error_set(SP_ERR_NOMEM, "state: no memory for a slot of %zu bytes", st->slot_bytes);
    }
    st->n_slot_free--;
    memset(sp_state_trailer(st, s), 0, ((size_t)st->n_layer + 1) * sizeof(uint32_t));
    seq->slot = s + 1;
    return SP_OK;
}

sp_status sp_state_seq_reserve(struct sp_state *st, struct sp_state_seq *seq, uint32_t n_pos)
{
    if (n_pos <= seq->n_pos)
        return sp_error_set(SP_ERR_INTERNAL, "state: position %u written again without a roll back (%u held)",
                            n_pos - 1, seq->n_pos);
    sp_status s = sp_state_take(st, seq);
    if (s != SP_OK)
        return s;
    seq->n_pos = n_pos;
    return SP_OK;
}

sp_status sp_state_seq_truncate(struct sp_state *st, struct sp_state_seq *seq, uint32_t n_pos)
{
    if (n_pos >= seq->n_pos)
        return SP_OK;
    const uint32_t floor = seq->slot ? sp_state_trailer(st, seq->slot - 1)[0] : 0;
    /* A target t >= floor needs the state at grid(t), which the held state
     * at grid(floor) gives (the chunks between by the chunked form), the
     * input rows [grid(floor), t) and the convolution's rows [t - history,
     * t).  Positions before floor + SP_STATE_ROLLBACK at most were written
     * (the latest run, or a longer run ending at the floor), so the rings
     * keep what a target needs: C - 1 + SP_STATE_ROLLBACK input rows cover
     * [grid(floor), floor + SP_STATE_ROLLBACK), SP_STATE_ROLLBACK + history
     * convolution rows [floor - history, floor + SP_STATE_ROLLBACK). */
    if (n_pos < floor)
        return sp_error_set(SP_ERR_INTERNAL, "state: cannot roll back from %u to %u positions (the state before %u is "
                            "gone)", seq->n_pos, n_pos, floor);
    seq->n_pos = n_pos;
    return SP_OK;
}

sp_status sp_state_seq_fork(struct sp_state *st, struct sp_state_seq *dst, const struct sp_state_seq *src)
{
    memset(dst, 0, sizeof *dst);
    if (!src->slot)
        return SP_OK;
    sp_status s = sp_state_take(st, dst);
    if (s != SP_OK)
        return s;
    memcpy(st->slots[dst->slot - 1], st->slots[src->slot - 1], st->slot_bytes);
    dst->n_pos = src->n_pos;
    return SP_OK;
}

void sp_state_seq_release(struct sp_state *st, struct sp_state_seq *seq)
{
    if (seq->slot)
        st->slot_free[st->n_slot_free++] = seq->slot - 1;
    memset(seq, 0, sizeof *seq);
}

struct sp_state_view sp_state_view(const struct sp_state *st, const struct sp_state_seq *seq, uint32_t layer)
{
    const struct sp_state_lay *y = &st->lay[layer];
    float *base = st->slots[seq->slot - 1] + y->off;
    const size_t grid = y->shape.grid_floats, hist = (size_t)y->shape.conv_ch * y->shape.conv_hist;
    struct sp_state_view v = {
        .grid = grid ? base : NULL,
        .held = sp_state_held(st, seq->slot - 1) + layer,
        .floor = sp_state_trailer(st, seq->slot - 1),
        .conv_held = base + grid,
        .conv = base + grid + hist,
        .in = base + grid + hist + (size_t)y->shape.conv_ch * y->conv_ring,
        .conv_ring = y->conv_ring,
        .in_ring = y->in_ring,
    };
    return v;
}

uint32_t sp_state_seq_point(const struct sp_state *st, const struct sp_state_seq *seq)
{
    if (!st || !seq->slot)
        return 0;
    return sp_state_held(st, seq->slot - 1)[st->first_linear];
}

/* ---- snapshots ---- */

static uint32_t sp_state_snap_index(const struct sp_state *st, uint64_t key)
{
    for (uint32_t i = 0; key && i < st->n_snaps; i++)
        if (st->snap_key[i] == key)
            return i;
    return SP_STATE_NONE;
}

/* Copies between a slot's layers and a snapshot at grid point g (to_snap:
 * slot -> snapshot). */
static void sp_state_snap_copy(const struct sp_state *st, float *snap, const struct sp_state_seq *seq, uint32_t g,
                               bool to_snap)
{
    for (uint32_t l = 0; l < st->n_layer; l++) {
        const struct sp_state_lay *y = &st->lay[l];
        if (!sp_state_linear(&y->shape))
            continue;
        struct sp_state_view v = sp_state_view(st, seq, l);
        float *s = snap + y->snap_off, *grid = v.grid;
        const size_t gf = y->shape.grid_floats, ch = y->shape.conv_ch;
        if (gf && to_snap)
            memcpy(s, grid, gf * sizeof *s);
        else if (gf)
            memcpy(grid, s, gf * sizeof *s);
        if (!to_snap)
            *v.held = g;
        /* the history before g: the slot's copy of it, and on a load the
         * ring rows the next positions read too */
        const size_t hist = (size_t)y->shape.conv_hist * ch;
        if (hist && to_snap)
            memcpy(s + gf, v.conv_held, hist * sizeof *s);
        else if (hist)
            memcpy(v.conv_held, s + gf, hist * sizeof *s);
        for (uint32_t i = 0; i < y->shape.conv_hist && ch && !to_snap; i++) {
            uint32_t q = g - y->shape.conv_hist + i; /* g >= C > conv_hist */
            memcpy(v.conv + (size_t)(q % v.conv_ring) * ch, s + gf + (size_t)i * ch, ch * sizeof(float));
        }
    }
}

void sp_state_snapshot_save(struct sp_state *st, const struct sp_state_seq *seq, uint64_t key)
{
    uint32_t g = sp_state_seq_point(st, seq);
    if (!st || !st->n_snaps || !seq->slot || !key || g == 0)
        return;
    uint32_t i = sp_state_snap_index(st, key);
    if (i != SP_STATE_NONE) {
        st->snap_lru[i] = ++st->clock;
        return;
    }
    for (uint32_t j = 0; j < st->n_snaps; j++) /* a free one, else the least recently used */
        if (i == SP_STATE_NONE || !st->snap_key[j] || (st->snap_key[i] && st->snap_lru[j] < st->snap_lru[i]))
            i = j;
    if (!st->snaps[i] && !(st->snaps[i] = malloc(st->snap_floats * sizeof(float))))
        return; /* no memory: no snapshot, a later prompt recomputes */
    if (!st->snap_key[i])
        st->n_snaps_used++;
    sp_state_snap_copy(st, st->snaps[i], seq, g, true);
    st->snap_key[i] = key;
    st->snap_grid[i] = g;
    st->snap_lru[i] = ++st->clock;
}

uint32_t sp_state_snapshot_find(const struct sp_state *st, uint64_t key)
{
    uint32_t i = st ? sp_state_snap_index(st, key) : SP_STATE_NONE;
    return i == SP_STATE_NONE ? 0 : st->snap_grid[i];
}

sp_status sp_state_snapshot_load(struct sp_state *st, struct sp_state_seq *seq, uint64_t key)
{
    uint32_t i = sp_state_snap_index(st, key);
    if (i == SP_STATE_NONE)
        return sp_error_set(SP_ERR_INTERNAL, "state: no snapshot under key %llu", (unsigned long long)key);
    sp_status s = sp_state_take(st, seq);
    if (s != SP_OK)
        return s;
    uint32_t g = st->snap_grid[i];
    sp_state_snap_copy(st, st->snaps[i], seq, g, false);
    sp_state_trailer(st, seq->slot - 1)[0] = g;
    seq->n_pos = g;
    st->snap_lru[i] = ++st->clock;
    st->hits++;
    return SP_OK;
}
