/* The state room and the memory room over it: slots taken on first use and
 * refused (SP_ERR_FULL) when all are held, positions written once, one
 * grid state per layer kept at the floor's grid point, roll backs allowed
 * over the latest reserve of at most SP_STATE_ROLLBACK positions (past a
 * grid point: the older grid state is the one held) and refused further,
 * forks copying a slot, snapshots filed under a block's key at the grid
 * point the slot holds, found, loaded and evicted least-recently-used, and
 * the memory room composing KV blocks and slots: a model of linear layers
 * only has blocks without rows, the prefix cache attaches only up to a grid
 * point with a snapshot, and a grid point's snapshot waits for the commit
 * after the state holds it. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "memory/memory.h"
#include "state/state.h"

#define C SP_STATE_CHUNK
#define R SP_STATE_ROLLBACK

/* Two linear layers around an attention-like one (all zero). */
static const struct sp_state_layer LAYERS[3] = {
    {.conv_ch = 8, .conv_hist = 3, .in_floats = 5, .grid_floats = 12},
    {0},
    {.conv_ch = 4, .conv_hist = 2},
};

/* What the forward pass does after a run of positions [p0, n_pos): the
 * floor it sets, every linear layer's slot holding the state at the
 * floor's grid point, layer 0's filled with a pattern of v (NAN: left as it
 * is). */
static void forward(struct sp_state *st, const struct sp_state_seq *seq, uint32_t p0, float v)
{
    for (uint32_t l = 0; l < 3; l++) {
        struct sp_state_view w = sp_state_view(st, seq, l);
        if (l == 0 && v == v)
            for (int i = 0; i < 12; i++)
                w.grid[i] = v + (float)i;
        *w.floor = sp_state_floor_after(p0, seq->n_pos - p0);
        *w.held = sp_state_grid(*w.floor);
    }
}

/* forward() through the memory room, a run of one position. */
static void forward_mem(struct sp_memory *mem, const struct sp_memory_seq *seq)
{
    for (uint32_t l = 0; l < 3; l++) {
        struct sp_state_view w = sp_memory_state_view(mem, seq, l);
        *w.floor = seq->st.n_pos - 1;
        *w.held = sp_state_grid(*w.floor);
    }
}

static float grid_at(struct sp_state *st, const struct sp_state_seq *seq, int i)
{
    return sp_state_view(st, seq, 0).grid[i];
}

static void test_slots_and_rollback(void)
{
    const struct sp_state_shape shape = {.n_layer = 3, .layers = LAYERS, .n_slots = 2, .n_snapshots = 2,
                                         .snapshot_budget = 1 << 20};
    struct sp_state *st;
    CHECK(sp_state_new(&st, &shape) == SP_OK && st, "new");
    struct sp_state_stats ss;
    sp_state_stats(st, &ss);
    /* per layer: grid state, the history before it, convolution ring, input
     * ring; then the floor and 3 held grid points */
    const uint64_t want = 4 * ((uint64_t)12 + 3 * 8 + (R + 3) * 8 + (C - 1 + R) * 5 + 2 * 4 + (R + 2) * 4 + 3 + 1);
    CHECK(ss.slot_bytes == want, "slot bytes %llu, want %llu", (unsigned long long)ss.slot_bytes,
          (unsigned long long)want);
    CHECK(ss.snapshot_bytes == 4 * (12 + 3 * 8 + 2 * 4), "snapshot bytes %llu", (unsigned long long)ss.snapshot_bytes);
    struct sp_state_view v0 = {0};
    struct sp_state_seq a = {0}, b = {0}, c = {0};
    CHECK(sp_state_seq_reserve(st, &a, 10) == SP_OK, "reserve a");
    CHECK(sp_state_seq_reserve(st, &a, 10) == SP_ERR_INTERNAL, "a position is written once");
    CHECK(sp_state_seq_reserve(st, &b, 1) == SP_OK, "reserve b");
    CHECK(sp_state_seq_reserve(st, &c, 1) == SP_ERR_FULL, "two slots: the third sequence waits");
    v0 = sp_state_view(st, &a, 0);
    CHECK(v0.conv_ring == R + 3 && v0.in_ring == C - 1 + R, "rings %u %u", v0.conv_ring, v0.in_ring);
    CHECK(*v0.held == 0 && *v0.floor == 0 && !sp_state_view(st, &a, 2).grid, "a new slot holds the state at 0");
    forward(st, &a, 0, NAN);
    CHECK(sp_state_seq_truncate(st, &a, 0) == SP_OK, "a run of 10 positions rolls back whole");
    CHECK(sp_state_seq_reserve(st, &a, 10) == SP_OK, "written again");
    forward(st, &a, 0, NAN);
    /* a prompt of 2C positions: no roll back into it, its end's grid point
     * held */
    CHECK(sp_state_seq_reserve(st, &a, 2 * C + 10) == SP_OK, "grow a");
    forward(st, &a, 10, 200.0f);
    CHECK(*sp_state_view(st, &a, 0).held == 2 * C && *sp_state_view(st, &a, 2).held == 2 * C, "2C held");
    CHECK(sp_state_seq_truncate(st, &a, 2 * C + 9) == SP_ERR_INTERNAL, "no roll back into a long run");
    /* decode steps, then a speculative one of R positions over the grid
     * point 3C: the slot keeps the state at 2C until a run starts past 3C */
    for (uint32_t p = 2 * C + 11; p <= 3 * C - 5; p++) {
        CHECK(sp_state_seq_reserve(st, &a, p) == SP_OK, "decode %u", p);
        forward(st, &a, p - 1, NAN);
    }
    for (uint32_t p = 3 * C - 4; p <= 3 * C - 5 + R; p++) /* the engine reserves a position at a time */
        CHECK(sp_state_seq_reserve(st, &a, p) == SP_OK, "a speculative step: %u", p);
    forward(st, &a, 3 * C - 5, NAN);
    CHECK(*sp_state_view(st, &a, 0).held == 2 * C, "its first position's grid point is held");
    CHECK(sp_state_seq_truncate(st, &a, 3 * C - 6) == SP_ERR_INTERNAL, "before the run: refused");
    CHECK(sp_state_seq_truncate(st, &a, 3 * C + 2) == SP_OK, "into the run, past the grid point");
    CHECK(sp_state_seq_truncate(st, &a, 3 * C - 5) == SP_OK, "to the run's first position, before it");
    CHECK(grid_at(st, &a, 3) == 203.0f, "the state at 2C is there");
    /* what was rolled back past is reserved again, not yet written: the
     * floor stays */
    CHECK(sp_state_seq_reserve(st, &a, 3 * C + 1) == SP_OK, "grow a again");
    CHECK(sp_state_seq_truncate(st, &a, 3 * C - 6) == SP_ERR_INTERNAL, "still not below 3C - 5");
    CHECK(sp_state_seq_truncate(st, &a, 3 * C - 5) == SP_OK, "to the floor exactly");
    CHECK(sp_state_seq_reserve(st, &a, 3 * C + 1) == SP_OK, "and on");
    forward(st, &a, 3 * C - 5, NAN);
    CHECK(sp_state_seq_reserve(st, &a, 3 * C + 2) == SP_OK, "one more");
    forward(st, &a, 3 * C + 1, 300.0f);
    CHECK(*sp_state_view(st, &a, 0).held == 3 * C, "a run from past 3C holds the state at 3C");
    CHECK(sp_state_seq_truncate(st, &a, 3 * C) == SP_ERR_INTERNAL, "and rolls back no further than its start");
    /* fork: a copy of the slot, independent */
    sp_state_seq_release(st, &b);
    CHECK(sp_state_seq_fork(st, &c, &a) == SP_OK && c.n_pos == a.n_pos, "fork");
    CHECK(*sp_state_view(st, &c, 0).held == 3 * C && *sp_state_view(st, &c, 0).floor == 3 * C + 1,
          "the fork holds what a holds");
    forward(st, &c, 3 * C + 1, 7.0f);
    CHECK(grid_at(st, &a, 0) == 300.0f && grid_at(st, &c, 0) == 7.0f, "a fork's state is its own");
    CHECK(sp_state_seq_fork(st, &b, &a) == SP_ERR_FULL, "no slot for a third copy");
    sp_state_seq_release(st, &a);
    sp_state_seq_release(st, &c);
    sp_state_stats(st, &ss);
    CHECK(ss.slots_used == 0, "every slot back (%u used)", ss.slots_used);
    sp_state_free(st);
}

static void test_snapshots(void)
{
    const struct sp_state_shape shape = {.n_layer = 3, .layers = LAYERS, .n_slots = 4, .n_snapshots = 2,
                                         .snapshot_budget = 1 << 20};
    struct sp_state *st;
    CHECK(sp_state_new(&st, &shape) == SP_OK, "new");
    struct sp_state_seq a = {0}, b = {0};
    CHECK(sp_state_seq_reserve(st, &a, 2 * C + 3) == SP_OK, "reserve");
    forward(st, &a, 0, 50.0f);
    CHECK(sp_state_seq_point(st, &a) == 2 * C, "the slot holds 2C");
    struct sp_state_view w = sp_state_view(st, &a, 2);
    for (uint32_t q = 2 * C - 2; q < 2 * C; q++) /* layer 2's convolution history before the grid point */
        for (int i = 0; i < 4; i++)
            w.conv_held[(q - (2 * C - 2)) * 4 + i] = (float)(q * 10 + (uint32_t)i);
    sp_state_snapshot_save(st, &a, 111);
    CHECK(sp_state_snapshot_find(st, 111) == 2 * C && sp_state_snapshot_find(st, 222) == 0, "found under its key");
    CHECK(sp_state_snapshot_load(st, &b, 111) == SP_OK && b.n_pos == 2 * C, "loaded: %u positions", b.n_pos);
    CHECK(grid_at(st, &b, 5) == 55.0f && *sp_state_view(st, &b, 0).held == 2 * C, "the grid state came back");
    struct sp_state_view wb = sp_state_view(st, &b, 2);
    CHECK(wb.conv[((2 * C - 1) % wb.conv_ring) * 4 + 3] == (float)((2 * C - 1) * 10 + 3) &&
          wb.conv_held[4 + 3] == (float)((2 * C - 1) * 10 + 3), "the history came back, into the ring too");
    CHECK(sp_state_seq_truncate(st, &b, 2 * C - 1) == SP_ERR_INTERNAL, "nothing before the snapshot's grid point");
    /* two fit: a third evicts the least recently used */
    sp_state_snapshot_save(st, &a, 333);
    CHECK(sp_state_snapshot_find(st, 111) && sp_state_snapshot_find(st, 333), "two held");
    sp_state_snapshot_find(st, 111);
    CHECK(sp_state_snapshot_load(st, &(struct sp_state_seq){0}, 999) == SP_ERR_INTERNAL, "no such snapshot");
    struct sp_state_seq d = {0};
    CHECK(sp_state_snapshot_load(st, &d, 111) == SP_OK, "use 111 again");
    sp_state_seq_release(st, &d);
    sp_state_snapshot_save(st, &a, 444);
    CHECK(sp_state_snapshot_find(st, 444) && sp_state_snapshot_find(st, 111) && !sp_state_snapshot_find(st, 333),
          "the least recently used (333) went");
    /* the slot keeps the history before its held grid point: a snapshot
     * there a chunk later */
    CHECK(sp_state_seq_reserve(st, &a, 3 * C + 5) == SP_OK, "on past 3C");
    CHECK(sp_state_seq_point(st, &a) == 2 * C, "still holding 2C");
    sp_state_snapshot_save(st, &a, 555);
    CHECK(sp_state_snapshot_find(st, 555) == 2 * C, "a snapshot at 2C");
    sp_state_seq_release(st, &a);
    sp_state_seq_release(st, &b);
    sp_state_free(st);
}

static void test_memory(void)
{
    /* linear layers only: blocks without rows */
    const bool stateless[3] = {true, true, true};
    const struct sp_state_layer only[3] = {LAYERS[0], LAYERS[0], LAYERS[2]};
    struct sp_memory_shape shape = {
        .kv = {.n_layer = 3, .stateless = stateless}, .n_blocks = 32,
        .state = {.n_layer = 3, .layers = only, .n_slots = 2, .n_snapshots = 4, .snapshot_budget = 1 << 20},
    };
    struct sp_memory *mem;
    CHECK(sp_memory_new(&mem, &shape) == SP_OK, "memory: %s", sp_error_message());
    CHECK(sp_memory_has_state(mem), "has state");
    struct sp_memory_stats ms;
    sp_memory_stats(mem, 1, &ms);
    CHECK(ms.kv.bytes == 0 && ms.kv.blocks_total == 32 && ms.state.slot_bytes > 0, "no KV bytes, %u blocks",
          ms.kv.blocks_total);
    sp_token toks[4 * C];
    for (uint32_t i = 0; i < 4 * C; i++)
        toks[i] = 1000 + (sp_token)i;
    struct sp_memory_seq a = {0}, b = {0}, c = {0};
    for (uint32_t p = 1; p <= 2 * C; p++) {
        CHECK(sp_memory_seq_reserve(mem, &a, p) == SP_OK, "reserve %u", p);
        forward_mem(mem, &a);
    }
    /* the blocks ending at C and 2C are registered while the state holds C:
     * a snapshot at C now, the one at 2C waits */
    sp_memory_prefix_commit(mem, &a, toks);
    sp_memory_stats(mem, 1, &ms);
    CHECK(ms.state.snapshots_used == 1, "one snapshot yet (%u)", ms.state.snapshots_used);
    for (uint32_t p = 2 * C + 1; p <= 2 * C + 20; p++) {
        CHECK(sp_memory_seq_reserve(mem, &a, p) == SP_OK, "reserve %u", p);
        forward_mem(mem, &a);
    }
    CHECK(sp_memory_seq_reserve(mem, &a, 5) == SP_ERR_INTERNAL, "written once");
    CHECK(sp_memory_seq_len(&a) == 2 * C + 20, "len %u", sp_memory_seq_len(&a));
    sp_memory_prefix_commit(mem, &a, toks);
    sp_memory_stats(mem, 1, &ms);
    CHECK(ms.state.snapshots_used == 2, "two snapshots (at %u and %u)", C, 2 * C);
    /* a prompt sharing 2C + 20 tokens resumes at 2C; one sharing less than
     * 2C at C, less than C at nothing */
    CHECK(sp_memory_prefix_attach(mem, &b, toks, 2 * C + 20) == 2 * C, "resumed at 2C");
    CHECK(sp_memory_seq_len(&b) == 2 * C, "b holds 2C");
    CHECK(sp_memory_seq_reserve(mem, &c, 1) == SP_ERR_FULL, "two slots held: the third waits");
    CHECK(sp_memory_seq_len(&c) == 0, "nothing changed");
    sp_memory_seq_release(mem, &c);
    sp_memory_seq_release(mem, &b);
    CHECK(sp_memory_prefix_attach(mem, &c, toks, 2 * C - 1) == C, "resumed at C");
    sp_memory_seq_release(mem, &c);
    CHECK(sp_memory_prefix_attach(mem, &c, toks, C - 1) == 0, "no snapshot below C");
    sp_memory_seq_release(mem, &a);
    sp_memory_seq_release(mem, &b);
    sp_memory_seq_release(mem, &c);
    sp_memory_free(mem);
    /* no linear layer: no state pool */
    const struct sp_memory_shape plain = {.kv = {.n_layer = 2, .n_head_kv = 1, .head_dim = 64}, .n_blocks = 8};
    CHECK(sp_memory_new(&mem, &plain) == SP_OK && !sp_memory_has_state(mem), "attention only: no state");
    sp_memory_free(mem);
}

int main(void)
{
    test_slots_and_rollback();
    test_snapshots();
    test_memory();
    return sp_check_report("state");
}
