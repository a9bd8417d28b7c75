/* Prefix cache: a cached block is reused only when every token before it
 * and in it equals the new prompt's, whatever the lookup hash says.
 *
 * COLLIDE_A and COLLIDE_B are two different 16-token blocks with the same
 * chained 64-bit FNV-1a hash from an empty prefix (found with a
 * distinguished-point search over the last two tokens): a prompt starting
 * with B must not be given the cached block that followed A. */
#include <string.h>

#include "check.h"
#include "kv/kv.h"

#define BT 16

static const sp_token COLLIDE_A[BT] = {1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007,
                                       1008, 1009, 1010, 1011, 1012, 1013, (sp_token)1617040103u,
                                       (sp_token)3532903410u};
static const sp_token COLLIDE_B[BT] = {1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007,
                                       1008, 1009, 1010, 1011, 1012, 1013, (sp_token)2383464620u,
                                       (sp_token)2812417001u};

/* Fills n positions of a new sequence with `toks` and registers its full
 * blocks; the sequence is released (its blocks stay cached). */
static void cache_prompt(struct sp_kv *kv, const sp_token *toks, uint32_t n)
{
    struct sp_kv_seq s = {0};
    CHECK(sp_kv_seq_reserve(kv, &s, n) == SP_OK, "reserve %u", n); /* counts as written */
    sp_kv_prefix_commit(kv, &s, toks);
    sp_kv_seq_release(kv, &s);
}

static uint32_t attach(struct sp_kv *kv, const sp_token *toks, uint32_t n)
{
    struct sp_kv_seq s = {0};
    uint32_t got = sp_kv_prefix_attach(kv, &s, toks, n);
    sp_kv_seq_release(kv, &s);
    return got;
}

int main(void)
{
    const struct sp_kv_shape shape = {.n_layer = 2, .n_head_kv = 2, .head_dim = 32};
    struct sp_kv *kv = NULL;
    sp_token a[3 * BT], b[3 * BT], c[3 * BT];
    CHECK(sp_kv_new(&kv, &shape, 32) == SP_OK, "init");
    struct sp_kv_stats st;
    sp_kv_stats(kv, 0, &st);
    CHECK(st.block_tokens == BT, "blocks of %u positions", st.block_tokens);
    for (int i = 0; i < BT; i++) {
        a[i] = COLLIDE_A[i];
        b[i] = COLLIDE_B[i];
    }
    for (int i = BT; i < 3 * BT; i++)
        a[i] = b[i] = 7 + i; /* the same tokens after the colliding blocks */
    memcpy(c, a, sizeof c);
    c[2 * BT - 1] = 99;      /* differs from a in its second block */

    cache_prompt(kv, a, 3 * BT);  /* A, then two blocks after A */
    cache_prompt(kv, b, BT);      /* the block B alone */
    CHECK(attach(kv, a, 3 * BT) == 3 * BT, "a's own prefix is found whole");
    CHECK(attach(kv, b, 3 * BT) == BT,
          "only B's own block is reused: the blocks cached after A hold another prefix (got %u)",
          attach(kv, b, 3 * BT));
    CHECK(attach(kv, c, 3 * BT) == BT, "a prompt differing in block 2 reuses block 1 only");

    /* b's full prompt registered too: both chains are cached side by side */
    cache_prompt(kv, b, 3 * BT);
    CHECK(attach(kv, b, 3 * BT) == 3 * BT, "b's own chain is found whole");
    CHECK(attach(kv, a, 3 * BT) == 3 * BT, "a's chain is still found whole");

    /* evicting a parent makes its children unreachable even when the
     * parent's block is taken again for other tokens */
    sp_kv_free(kv);
    CHECK(sp_kv_new(&kv, &shape, 3) == SP_OK, "init small");
    cache_prompt(kv, a, 3 * BT);  /* all three blocks cached, idle */
    struct sp_kv_seq s = {0};
    CHECK(sp_kv_seq_reserve(kv, &s, BT) == SP_OK, "take one block (evicts A's first)");
    sp_kv_prefix_commit(kv, &s, b);  /* that block now holds B */
    sp_kv_seq_release(kv, &s);
    CHECK(attach(kv, b, 3 * BT) == BT, "a reused block does not adopt the evicted one's children (got %u)",
          attach(kv, b, 3 * BT));
    sp_kv_free(kv);
    return sp_check_report("test_prefix");
}
