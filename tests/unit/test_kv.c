/* KV cache: every (layer, head, position, element) has its own place in the
 * layout, written by sp_kv_store and read back through a view (blocks and
 * a sliding-window ring); copy-on-write copies a shared block of every
 * layer and head; a sequence gets consecutive blocks, ascending, also after
 * others were released (what lets a long context stream through the
 * hardware prefetcher), and sequences growing side by side keep runs of an
 * extent, or a few runs each in a cache of their size. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "kv/kv.h"
#include "quant/quant.h"

#define NL 3  /* layers */
#define HKV 2 /* KV heads */
#define D 32  /* head size */
#define BT 16 /* positions per block */

/* a value unique to (seq tag, layer, head, position, element, key or
 * value) within one seq tag, as the bits of a finite f16 (so it survives
 * the f32 -> f16 store exactly) */
static uint16_t tag(int s, int l, int h, int p, int d, int is_v)
{
    uint32_t t = (uint32_t)(((((s * NL + l) * HKV + h) * 128 + p) * D + d) * 2 + is_v) % (2 * 0x7c00);
    return (uint16_t)(t < 0x7c00 ? t : t - 0x7c00 + 0x8000);
}

static float f16_value(uint16_t bits)
{
    _Float16 h;
    memcpy(&h, &bits, sizeof h);
    return (float)h;
}

static void write_seq(struct sp_kv *kv, struct sp_kv_seq *seq, int s, int p0, int p1)
{
    float k[HKV * D], v[HKV * D];
    for (int l = 0; l < NL; l++)
        for (int p = p0; p < p1; p++) {
            for (int h = 0; h < HKV; h++)
                for (int d = 0; d < D; d++) {
                    k[h * D + d] = f16_value(tag(s, l, h, p, d, 0));
                    v[h * D + d] = f16_value(tag(s, l, h, p, d, 1));
                }
            sp_kv_store(kv, seq, (uint32_t)l, (uint32_t)p, k, v);
        }
}

/* positions [p0, p1) of seq read back through a view as written with tag s */
static int seq_matches(struct sp_kv *kv, struct sp_kv_seq *seq, int s, int p0, int p1)
{
    int bad = 0;
    for (int l = 0; l < NL; l++) {
        const struct sp_kv_view w = sp_kv_view(kv, seq, (uint32_t)l);
        for (int p = p0; p < p1; p++)
            for (int h = 0; h < HKV; h++) {
                const uint16_t *k = sp_kv_view_k(&w, (uint32_t)p, (uint32_t)h);
                const uint16_t *v = sp_kv_view_v(&w, (uint32_t)p, (uint32_t)h);
                for (int d = 0; d < D; d++)
                    bad += k[(size_t)d * SP_KV_TILE] != tag(s, l, h, p, d, 0) || v[d] != tag(s, l, h, p, d, 1);
            }
    }
    return bad;
}

static int consecutive(const struct sp_kv_seq *seq)
{
    for (uint32_t i = 1; i < seq->n_blocks; i++)
        if (seq->blocks[i] != seq->blocks[i - 1] + 1)
            return 0;
    return 1;
}

static struct sp_kv *new_kv(uint32_t n_blocks)
{
    const struct sp_kv_shape shape = {.n_layer = NL, .n_head_kv = HKV, .head_dim = D};
    struct sp_kv *kv = NULL;
    CHECK(sp_kv_new(&kv, &shape, n_blocks) == SP_OK, "init %u blocks", n_blocks);
    return kv;
}

/* ---- quantized caches ---- */

/* a value of (seq tag, layer, head, position, element, key or value) in
 * [-2, 2), with blocks of unequal ranges */
static float qvalue(int s, int l, int h, int p, int d, int is_v)
{
    uint32_t x = (uint32_t)(((((s * NL + l) * HKV + h) * 128 + p) * D + d) * 2 + is_v) * 2654435761u;
    return ((float)(x >> 8) / (float)(1 << 24) * 4.0f - 2.0f) * (1.0f + (float)((p + d / 32) % 3));
}

static void qwrite_seq(struct sp_kv *kv, struct sp_kv_seq *seq, int s, int p0, int p1)
{
    float k[HKV * D], v[HKV * D];
    for (int l = 0; l < NL; l++)
        for (int p = p0; p < p1; p++) {
            for (int h = 0; h < HKV; h++)
                for (int d = 0; d < D; d++) {
                    k[h * D + d] = qvalue(s, l, h, p, d, 0);
                    v[h * D + d] = qvalue(s, l, h, p, d, 1);
                }
            sp_kv_store(kv, seq, (uint32_t)l, (uint32_t)p, k, v);
        }
}

/* what a cache of type t holds for the row x: the reference quantizer's
 * round trip of the rotated row (rot: H x); *err the largest error of an
 * element in quantization steps (a block's largest |value| / 127 or / 8) */
static void qexpect(sp_cache_type t, const float *x, float *rot, float *out)
{
    uint8_t blk[D / 32 * 34];
    const struct sp_type_traits *tr = sp_type_get_ref(t == SP_CACHE_Q8_0 ? SP_TYPE_Q8_0 : SP_TYPE_Q4_0);
    memcpy(rot, x, sizeof(float) * D);
    sp_kv_rotate(rot, D, false);
    tr->from_float(rot, blk, D);
    tr->to_float(blk, out, D);
}

static double steps(sp_cache_type t, const float *rot, const float *got)
{
    double worst = 0;
    for (int b = 0; b < D; b += 32) {
        /* plain comparisons, not fmax: Debian's aarch64 gcc 12 crashes
         * vectorizing an fmax reduction at -O3 */
        double amax = 0;
        for (int i = b; i < b + 32; i++)
            amax = fabs(rot[i]) > amax ? fabs(rot[i]) : amax;
        const double step = amax / (t == SP_CACHE_Q8_0 ? 127 : 8);
        for (int i = b; i < b + 32; i++) {
            const double e = fabs(got[i] - rot[i]) / step;
            worst = e > worst ? e : worst;
        }
    }
    return worst;
}

/* positions [p0, p1) of seq read back (sp_kv_qkey, sp_kv_qval) as the
 * reference quantizer's round trip of the rotated rows written with tag s;
 * *worst: the largest error in quantization steps */
static int qseq_matches(struct sp_kv *kv, struct sp_kv_seq *seq, int s, int p0, int p1, double *worst)
{
    int bad = 0;
    for (int l = 0; l < NL; l++) {
        const struct sp_kv_view w = sp_kv_view(kv, seq, (uint32_t)l);
        for (int p = p0; p < p1; p++)
            for (int h = 0; h < HKV; h++) {
                float x[2][D], rot[2][D], want[2][D], got[2][D];
                for (int d = 0; d < D; d++)
                    x[0][d] = qvalue(s, l, h, p, d, 0), x[1][d] = qvalue(s, l, h, p, d, 1);
                qexpect(w.kt, x[0], rot[0], want[0]);
                qexpect(w.vt, x[1], rot[1], want[1]);
                const uint8_t *kt = sp_kv_view_ktile(&w, (uint32_t)p, (uint32_t)h);
                const uint8_t *vr = sp_kv_view_vrow(&w, (uint32_t)p, (uint32_t)h);
                for (int d = 0; d < D; d++) {
                    got[0][d] = sp_kv_qkey(kt, w.kt, p % SP_KV_TILE, d), got[1][d] = sp_kv_qval(vr, w.vt, d);
                    bad += got[0][d] != want[0][d] || got[1][d] != want[1][d];
                }
                *worst = fmax(*worst, fmax(steps(w.kt, rot[0], got[0]), steps(w.vt, rot[1], got[1])));
                /* rotated back, the row is the written one up to the error
                 * (relative squared error: q8_0 ~3e-5, q4_0 ~1e-2 here) */
                sp_kv_rotate(got[0], D, true);
                double e = 0, n = 0;
                for (int d = 0; d < D; d++)
                    e += (got[0][d] - x[0][d]) * (got[0][d] - x[0][d]), n += x[0][d] * x[0][d];
                bad += !(e < n * (w.kt == SP_CACHE_Q8_0 ? 1e-4 : 5e-2));
            }
    }
    return bad;
}

/* sp_kv_rotate against the transform one pair at a time, stage by stage
 * (its contract), bit for bit, for every head size a quantized cache takes
 * up to 1024 (r from 32 to 1024), both directions */
static void test_rotate(void)
{
    static float x[1024], want[1024];
    unsigned s = 5;
    int bad = 0;
    for (uint32_t n = 32; n <= 1024; n += 32)
        for (int back = 0; back < 2; back++) {
            for (uint32_t i = 0; i < n; i++) {
                s = s * 1103515245u + 12345u;
                x[i] = want[i] = (float)((int)(s >> 9) % 20001 - 10000) * 1e-3f * (float)(1 + (s & 7));
            }
            const uint32_t r = n & -n;
            for (uint32_t b = 0; b < n; b += r) {
                float *y = want + b;
                for (uint32_t len = 1; len < r; len <<= 1)
                    for (uint32_t i = 0; i < r; i += 2 * len)
                        for (uint32_t j = i; j < i + len; j++) {
                            const float u = y[j], v = y[j + len];
                            y[j] = u + v, y[j + len] = u - v;
                        }
                for (uint32_t i = 0; back && i < r; i++)
                    y[i] *= 1.0f / (float)r;
            }
            sp_kv_rotate(x, n, back);
            bad += memcmp(x, want, sizeof(float) * n) != 0;
        }
    CHECK(bad == 0, "rotation: %d of 64 head sizes and directions differ from the pairwise transform", bad);
}

static void test_quantized(sp_cache_type t)
{
    const char *name = sp_cache_type_name(t);
    const struct sp_kv_shape shape = {.n_layer = NL, .n_head_kv = HKV, .head_dim = D, .type_k = t, .type_v = t};
    const uint32_t row = t == SP_CACHE_Q8_0 ? D / 32 * 34 : D / 32 * 18;
    CHECK(sp_kv_block_bytes(&shape) == (uint64_t)BT * NL * HKV * row * 2, "%s: block bytes", name);
    struct sp_kv *kv = NULL;
    CHECK(sp_kv_new(&kv, &shape, 12) == SP_OK, "%s: init", name);
    struct sp_kv_stats ks;
    sp_kv_stats(kv, 0, &ks);
    CHECK(ks.bytes == (uint64_t)12 * sp_kv_block_bytes(&shape), "%s: stats count the quantized bytes", name);
    /* 40 positions over 3 blocks: every key lane of a tile and block reads back */
    struct sp_kv_seq a = {0}, b = {0};
    double worst = 0;
    CHECK(sp_kv_seq_reserve(kv, &a, 40) == SP_OK, "%s: reserve a", name);
    qwrite_seq(kv, &a, 1, 0, 40);
    CHECK(qseq_matches(kv, &a, 1, 0, 40, &worst) == 0, "%s: a reads back the reference quantizer's values", name);
    /* q8_0: half a step, plus the scale's rounding to f16 (127 * 2^-11
     * steps); q4_0: up to one step (its rounding) */
    const double step = t == SP_CACHE_Q8_0 ? 0.5 + 127.0 / 2048 : 1.001;
    CHECK(worst <= step, "%s: error %g quantization steps (bound %g)", name, worst, step);
    /* a fork copies the shared block by bytes before writing; a rollback
     * and regrowth keeps the positions before */
    CHECK(sp_kv_seq_fork(kv, &b, &a) == SP_OK && sp_kv_seq_reserve(kv, &b, 41) == SP_OK, "%s: fork, grow", name);
    qwrite_seq(kv, &b, 2, 40, 41);
    CHECK(qseq_matches(kv, &b, 1, 0, 40, &worst) == 0 && qseq_matches(kv, &b, 2, 40, 41, &worst) == 0,
          "%s: the fork reads the copied block and its own write", name);
    CHECK(sp_kv_seq_truncate(kv, &a, 20) == SP_OK && sp_kv_seq_reserve(kv, &a, 40) == SP_OK, "%s: roll back", name);
    qwrite_seq(kv, &a, 3, 20, 40);
    CHECK(qseq_matches(kv, &a, 1, 0, 20, &worst) == 0 && qseq_matches(kv, &a, 3, 20, 40, &worst) == 0 &&
              qseq_matches(kv, &b, 1, 0, 40, &worst) == 0,
          "%s: a rewritten after the rollback; b untouched", name);
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    sp_kv_free(kv);
    /* a ring layer stores the same way */
    const bool local[NL] = {false, true, false};
    struct sp_kv_shape rs = shape;
    rs.local = local, rs.ring_len = 20, rs.n_rings = 1;
    CHECK(sp_kv_new(&kv, &rs, 8) == SP_OK && sp_kv_seq_reserve(kv, &a, 41) == SP_OK, "%s: with a ring", name);
    qwrite_seq(kv, &a, 1, 0, 41);
    CHECK(qseq_matches(kv, &a, 1, 41 - 32, 41, &worst) == 0, "%s: ring and blocks read back", name);
    sp_kv_stats(kv, 1, &ks);
    CHECK(ks.bytes == 8 * sp_kv_block_bytes(&rs) + (uint64_t)32 * HKV * row * 2, "%s: ring bytes", name);
    sp_kv_seq_release(kv, &a);
    sp_kv_free(kv);
    /* a head size the blocks do not divide is refused */
    const struct sp_kv_shape odd = {.n_layer = 1, .n_head_kv = 1, .head_dim = 48, .type_k = SP_CACHE_F16, .type_v = t};
    CHECK(sp_kv_new(&kv, &odd, 4) == SP_ERR_UNSUPPORTED && !kv, "%s: head_dim 48 refused", name);
}

/* Layers reading another layer's keys and values (Gemma 3n / 4's
 * shared_kv_layers): they hold no rows (blocks and rings are sized without
 * them), their view is their source's, and a source of another kind, a
 * later one or one that itself reads another's is refused. */
static void test_shared_layers(void)
{
    const bool local[4] = {true, false, true, false};
    const uint32_t source[4] = {0, 1, 0, 1};
    const struct sp_kv_shape shape = {.n_layer = 4, .n_head_kv = HKV, .head_dim = D, .local = local,
                                      .source = source, .ring_len = 32, .n_rings = 1};
    const struct sp_kv_shape own = {.n_layer = 4, .n_head_kv = HKV, .head_dim = D, .local = local, .ring_len = 32,
                                    .n_rings = 1};
    CHECK(sp_kv_block_bytes(&shape) == (uint64_t)BT * 1 * HKV * D * 2 * 2, "one paged layer holds rows");
    CHECK(sp_kv_block_bytes(&own) == (uint64_t)BT * 2 * HKV * D * 2 * 2, "without sources: two");
    struct sp_kv *kv = NULL, *kv_own = NULL;
    struct sp_kv_seq a = {0}, b = {0};
    CHECK(sp_kv_new(&kv, &shape, 4) == SP_OK && sp_kv_new(&kv_own, &own, 4) == SP_OK, "init");
    struct sp_kv_stats st, st_own;
    sp_kv_stats(kv, 1, &st);
    sp_kv_stats(kv_own, 1, &st_own);
    CHECK(st.bytes * 2 == st_own.bytes, "half the bytes: one ring and one paged layer (%llu vs %llu)",
          (unsigned long long)st.bytes, (unsigned long long)st_own.bytes);
    CHECK(sp_kv_seq_reserve(kv, &a, 20) == SP_OK, "reserve");
    float k[HKV * D], v[HKV * D];
    for (int l = 0; l < 2; l++) /* the sources only */
        for (int p = 0; p < 20; p++) {
            for (int i = 0; i < HKV * D; i++) {
                k[i] = (float)(l * 1000 + p * 10 + i % 7);
                v[i] = -k[i];
            }
            sp_kv_store(kv, &a, (uint32_t)l, (uint32_t)p, k, v);
        }
    for (uint32_t l = 2; l < 4; l++) {
        const struct sp_kv_view w = sp_kv_view(kv, &a, l), ws = sp_kv_view(kv, &a, source[l]);
        CHECK(w.k == ws.k && w.v == ws.v && w.span == ws.span, "layer %u's view is layer %u's", l, source[l]);
        int bad = 0;
        for (int p = 0; p < 20; p++)
            for (int h = 0; h < HKV; h++)
                for (int d = 0; d < D; d++) {
                    float want = (float)((int)source[l] * 1000 + p * 10 + (h * D + d) % 7);
                    bad += f16_value(sp_kv_view_k(&w, (uint32_t)p, (uint32_t)h)[(size_t)d * SP_KV_TILE]) != want ||
                           f16_value(sp_kv_view_v(&w, (uint32_t)p, (uint32_t)h)[d]) != -want;
                }
        CHECK(bad == 0, "layer %u reads its source's keys and values (%d wrong)", l, bad);
    }
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    sp_kv_free(kv);
    sp_kv_free(kv_own);
    const uint32_t other_kind[4] = {0, 1, 1, 1}, later[4] = {0, 3, 2, 3}, chain[4] = {0, 1, 0, 2};
    const uint32_t *bad_sources[3] = {other_kind, later, chain};
    for (int i = 0; i < 3; i++) {
        struct sp_kv_shape sh = shape;
        sh.source = bad_sources[i];
        kv = NULL;
        CHECK(sp_kv_new(&kv, &sh, 4) == SP_ERR_ARG && !kv, "bad sources %d refused", i);
    }
}

/* Layers of their own geometry (Gemma 4: local layers with more, narrower
 * KV heads than the global ones): a block holds each layer's heads at its
 * width, every (layer, head, position, element) reads back what was
 * stored, also after copy-on-write copied a shared block, and in q8_0. */
static void test_layer_geometry(sp_cache_type t)
{
    const uint32_t heads[3] = {2, 1, 4}, dims[3] = {32, 64, 32};
    const struct sp_kv_shape shape = {.n_layer = 3, .n_head_kv = 4, .head_dim = 64, .heads_kv = heads,
                                      .head_dims = dims, .type_k = t, .type_v = t};
    uint64_t want = 0;
    for (int l = 0; l < 3; l++)
        want += (uint64_t)BT * heads[l] * 2 * sp_kv_row_bytes(t, dims[l]);
    CHECK(sp_kv_block_bytes(&shape) == want, "a block holds each layer at its width (%llu, expected %llu)",
          (unsigned long long)sp_kv_block_bytes(&shape), (unsigned long long)want);
    struct sp_kv *kv = NULL;
    struct sp_kv_seq a = {0}, b = {0};
    CHECK(sp_kv_new(&kv, &shape, 6) == SP_OK, "init");
    CHECK(sp_kv_seq_reserve(kv, &a, 20) == SP_OK, "reserve");
    float k[4 * 64], v[4 * 64];
    for (uint32_t l = 0; l < 3; l++)
        for (uint32_t p = 0; p < 20; p++) {
            for (uint32_t i = 0; i < heads[l] * dims[l]; i++) {
                k[i] = (float)((l * 7 + p * 3 + i) % 64) - 32.0f;
                v[i] = -k[i] * 0.5f;
            }
            sp_kv_store(kv, &a, l, p, k, v);
        }
    CHECK(sp_kv_seq_fork(kv, &b, &a) == SP_OK && sp_kv_seq_reserve(kv, &b, 21) == SP_OK &&
          b.blocks[1] != a.blocks[1], "b copies the shared partial block");
    int bad = 0, checked = 0;
    for (int s = 0; s < 2; s++)
        for (uint32_t l = 0; l < 3; l++) {
            const struct sp_kv_view w = sp_kv_view(kv, s ? &b : &a, l);
            bad += w.head_dim != dims[l];
            for (uint32_t p = 0; p < 20; p++)
                for (uint32_t h = 0; h < heads[l]; h++) {
                    float kr[64], vr[64];
                    for (uint32_t d = 0; d < dims[l]; d++) {
                        if (t == SP_CACHE_F16) {
                            kr[d] = f16_value(sp_kv_view_k(&w, p, h)[(size_t)d * SP_KV_TILE]);
                            vr[d] = f16_value(sp_kv_view_v(&w, p, h)[d]);
                        } else {
                            kr[d] = sp_kv_qkey(sp_kv_view_ktile(&w, p, h), t, (int)(p % SP_KV_TILE), (int)d);
                            vr[d] = sp_kv_qval(sp_kv_view_vrow(&w, p, h), t, (int)d);
                        }
                    }
                    if (t != SP_CACHE_F16) { /* stored rotated (kv.h) */
                        sp_kv_rotate(kr, dims[l], true);
                        sp_kv_rotate(vr, dims[l], true);
                    }
                    for (uint32_t d = 0; d < dims[l]; d++) {
                        const float want_k = (float)((l * 7 + p * 3 + h * dims[l] + d) % 64) - 32.0f;
                        /* q8_0: rotated rows (sums of 32 values up to 32) in steps of 1/127 of their largest;
                         * a row read from another place is off by up to 64 */
                        const float tol = t == SP_CACHE_F16 ? 0.0f : 3.0f;
                        bad += fabsf(kr[d] - want_k) > tol || fabsf(vr[d] + want_k * 0.5f) > tol;
                        checked++;
                    }
                }
        }
    CHECK(bad == 0, "%s: every layer's rows read back (%d of %d wrong)", t == SP_CACHE_F16 ? "f16" : "q8_0", bad,
          checked);
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    sp_kv_free(kv);
}

/* A cache whose values are its keys (v_in_k) with layers of their own
 * heads and widths and a layer reading another's: a block holds each
 * owning layer's key rows alone, the values a reader takes out of the key
 * tile (sp_kv_view_vrows) are the keys stored, copy-on-write copies them,
 * and a quantized type is refused (the engine then stores values). */
static void test_vk_geometry(void)
{
    const uint32_t heads[3] = {2, 1, 1}, dims[3] = {32, 64, 64}, source[3] = {0, 1, 1};
    const struct sp_kv_shape shape = {.n_layer = 3, .n_head_kv = 2, .head_dim = 64, .heads_kv = heads,
                                      .head_dims = dims, .source = source, .v_in_k = true};
    const uint64_t want = (uint64_t)BT * (2 * sp_kv_row_bytes(SP_CACHE_F16, 32) + sp_kv_row_bytes(SP_CACHE_F16, 64));
    CHECK(sp_kv_block_bytes(&shape) == want, "v_in_k: a block holds the owning layers' keys only (%llu, expected "
          "%llu)", (unsigned long long)sp_kv_block_bytes(&shape), (unsigned long long)want);
    struct sp_kv *kv = NULL;
    struct sp_kv_seq a = {0}, b = {0};
    CHECK(sp_kv_new(&kv, &shape, 6) == SP_OK, "v_in_k init");
    struct sp_kv_stats ks;
    sp_kv_stats(kv, 0, &ks);
    CHECK(ks.bytes == 6 * want, "v_in_k: the cache's bytes are its blocks' (%llu)", (unsigned long long)ks.bytes);
    CHECK(sp_kv_seq_reserve(kv, &a, 20) == SP_OK, "reserve");
    float k[2 * 64], junk[2 * 64];
    for (uint32_t l = 0; l < 2; l++) /* layer 2 reads layer 1's */
        for (uint32_t p = 0; p < 20; p++) {
            for (uint32_t i = 0; i < heads[l] * dims[l]; i++) {
                k[i] = (float)((l * 7 + p * 3 + i) % 64) - 32.0f;
                junk[i] = 1000.0f; /* not stored: the values are the keys */
            }
            sp_kv_store(kv, &a, l, p, k, junk);
        }
    CHECK(sp_kv_seq_fork(kv, &b, &a) == SP_OK && sp_kv_seq_reserve(kv, &b, 21) == SP_OK &&
          b.blocks[1] != a.blocks[1], "b copies the shared partial block");
    int bad = 0, checked = 0;
    uint16_t buf[SP_KV_TILE * 64];
    for (int s = 0; s < 2; s++)
        for (uint32_t l = 0; l < 3; l++) {
            const uint32_t src = source[l];
            const struct sp_kv_view w = sp_kv_view(kv, s ? &b : &a, l);
            bad += w.head_dim != dims[l] || !w.v_in_k;
            for (uint32_t p = 0; p < 20; p += 4)
                for (uint32_t h = 0; h < heads[src]; h++) {
                    const uint32_t n = sp_kv_view_run(&w, p, 4);
                    uint32_t row = 0;
                    const uint8_t *vr = sp_kv_view_vrows(&w, p, h, n, buf, &row);
                    bad += row != dims[l] * 2;
                    for (uint32_t r = 0; r < n; r++)
                        for (uint32_t d = 0; d < dims[l]; d++) {
                            const float want_k = (float)((src * 7 + (p + r) * 3 + h * dims[l] + d) % 64) - 32.0f;
                            const float kk = f16_value(sp_kv_view_k(&w, p + r, h)[(size_t)d * SP_KV_TILE]);
                            const float vv = f16_value(((const uint16_t *)(const void *)(vr + (size_t)r * row))[d]);
                            bad += kk != want_k || vv != want_k;
                            checked++;
                        }
                }
        }
    CHECK(bad == 0 && checked > 0, "v_in_k: every layer's keys and values read back (%d of %d wrong)", bad, checked);
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    sp_kv_free(kv);
    struct sp_kv_shape q = shape;
    q.type_k = q.type_v = SP_CACHE_Q8_0;
    CHECK(sp_kv_new(&kv, &q, 6) == SP_ERR_UNSUPPORTED && !kv, "v_in_k: a quantized cache is refused");
}

int main(void)
{
    test_rotate();
    struct sp_kv *kv = new_kv(12);
    struct sp_kv_stats ks;
    sp_kv_stats(kv, 0, &ks);
    CHECK(ks.block_tokens == BT && ks.blocks_total == 12 && sp_kv_blocks_for(BT + 1) == 2, "blocks of %d positions",
          BT);
    CHECK(ks.bytes == (uint64_t)12 * BT * NL * HKV * D * 2 * 2, "bytes: K and V of every layer, f16");
    struct sp_kv_seq a = {0}, b = {0}, c = {0};

    /* a: 40 positions, 3 blocks; every place written once reads back */
    CHECK(sp_kv_seq_reserve(kv, &a, 40) == SP_OK, "reserve a");
    CHECK(a.n_blocks == 3 && consecutive(&a), "a's blocks are consecutive");
    write_seq(kv, &a, 1, 0, 40);
    CHECK(seq_matches(kv, &a, 1, 0, 40) == 0, "a reads back: no two places overlap");
    /* a run of a head's keys and values is contiguous across consecutive
     * blocks; a view's run ends at a block's end */
    const struct sp_kv_view w1 = sp_kv_view(kv, &a, 1), w2 = sp_kv_view(kv, &a, 2);
    CHECK(sp_kv_view_k(&w1, 16, 1) == sp_kv_view_k(&w1, 0, 1) + BT * D, "keys: next block follows");
    CHECK(sp_kv_view_v(&w2, 32, 0) == sp_kv_view_v(&w2, 16, 0) + BT * D, "values: next block follows");
    CHECK(sp_kv_view_run(&w1, 3, 100) == BT - 3 && sp_kv_view_run(&w1, 3, 5) == 5, "runs end with the block");

    /* b forks a, then writes position 40: the shared third block is copied
     * for every layer and head, and a is untouched */
    CHECK(sp_kv_seq_fork(kv, &b, &a) == SP_OK, "fork");
    CHECK(sp_kv_seq_reserve(kv, &b, 41) == SP_OK, "reserve b");
    CHECK(b.blocks[2] != a.blocks[2] && b.blocks[0] == a.blocks[0], "copy on write of the last block only");
    CHECK(seq_matches(kv, &b, 1, 0, 40) == 0, "b reads a's positions after the copy");
    write_seq(kv, &b, 2, 32, 41);
    CHECK(seq_matches(kv, &a, 1, 0, 40) == 0, "a unchanged by b's writes");
    CHECK(seq_matches(kv, &b, 2, 32, 41) == 0, "b's own writes");

    /* after both are released, a new sequence's blocks are consecutive again */
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    CHECK(sp_kv_available(kv) == 12, "all blocks back");
    CHECK(sp_kv_seq_reserve(kv, &c, 5 * BT) == SP_OK, "reserve c");
    CHECK(c.n_blocks == 5 && consecutive(&c), "c's blocks are consecutive and ascending (%u %u %u %u %u)",
          c.blocks[0], c.blocks[1], c.blocks[2], c.blocks[3], c.blocks[4]);
    write_seq(kv, &c, 3, 0, 5 * BT);
    CHECK(seq_matches(kv, &c, 3, 0, 5 * BT) == 0, "c reads back");
    sp_kv_seq_release(kv, &c);
    sp_kv_free(kv);

    /* two sequences growing side by side, a block each in turn (batched
     * decode), do not interleave: each keeps a run of 64 consecutive blocks
     * (an extent), and only then moves on, to a run of its own again; a
     * cache too small for whole extents still hands out every block */
    kv = new_kv(256);
    for (uint32_t n = BT; n <= 96 * BT; n += BT) {
        CHECK(sp_kv_seq_reserve(kv, &a, n) == SP_OK, "reserve a to %u", n);
        CHECK(sp_kv_seq_reserve(kv, &b, n) == SP_OK, "reserve b to %u", n);
    }
    int runs_a = 1, runs_b = 1;
    for (uint32_t i = 1; i < a.n_blocks; i++) {
        runs_a += a.blocks[i] != a.blocks[i - 1] + 1;
        runs_b += b.blocks[i] != b.blocks[i - 1] + 1;
    }
    CHECK(runs_a == 2 && runs_b == 2 && a.blocks[63] == a.blocks[0] + 63 && b.blocks[63] == b.blocks[0] + 63,
          "side by side: runs of 64 blocks (a in %d runs, b in %d)", runs_a, runs_b);
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    sp_kv_free(kv);
    kv = new_kv(40);
    for (uint32_t n = BT; n <= 20 * BT; n += BT) {
        CHECK(sp_kv_seq_reserve(kv, &a, n) == SP_OK, "small cache: reserve a to %u", n);
        CHECK(sp_kv_seq_reserve(kv, &b, n) == SP_OK, "small cache: reserve b to %u", n);
    }
    CHECK(sp_kv_available(kv) == 0, "small cache: every block used");
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    sp_kv_free(kv);

    /* eight sequences side by side in a cache of their size (the engine
     * sizes it so; four whole extents at most): the ones without an extent
     * start in the middle of the longest free run, so each keeps two runs
     * at most (starting at the lowest free block, some got 33 runs, one a
     * block); every block is still handed out */
    enum { NS = 8, NB = 33 };
    struct sp_kv_seq side[NS];
    memset(side, 0, sizeof side);
    kv = new_kv(NS * NB);
    for (uint32_t n = BT; n <= NB * BT; n += BT)
        for (int i = 0; i < NS; i++)
            CHECK(sp_kv_seq_reserve(kv, &side[i], n) == SP_OK, "side by side: reserve %d to %u", i, n);
    CHECK(sp_kv_available(kv) == 0, "side by side: every block used");
    int worst = 0;
    for (int i = 0; i < NS; i++) {
        int runs = 1;
        for (uint32_t k = 1; k < side[i].n_blocks; k++)
            runs += side[i].blocks[k] != side[i].blocks[k - 1] + 1;
        worst = runs > worst ? runs : worst;
    }
    CHECK(worst <= 2, "side by side in a full cache: at most 2 runs a sequence (worst %d)", worst);
    for (int i = 0; i < NS; i++)
        sp_kv_seq_release(kv, &side[i]);
    sp_kv_free(kv);

    /* a full cache of idle prefixes: a new sequence does not evict the block
     * right after another's last one (that one would have to jump) while
     * older blocks elsewhere can go */
    sp_token toks[64 * BT];
    for (int i = 0; i < 64 * BT; i++)
        toks[i] = 1000 + i;
    kv = new_kv(64);
    CHECK(sp_kv_seq_reserve(kv, &a, 64 * BT) == SP_OK, "fill the cache");
    sp_kv_prefix_commit(kv, &a, toks); /* block i last used i-th: block 0 is the least recent */
    sp_kv_seq_release(kv, &a);
    CHECK(sp_kv_available(kv) == 64, "all blocks idle and cached");
    CHECK(sp_kv_seq_reserve(kv, &b, BT) == SP_OK && b.blocks[0] == 0, "b evicts the least recently used block");
    CHECK(sp_kv_seq_reserve(kv, &c, BT) == SP_OK && c.blocks[0] == 2, "c passes over block 1, after b's (%u)",
          c.blocks[0]);
    CHECK(sp_kv_seq_reserve(kv, &b, 2 * BT) == SP_OK && b.blocks[1] == 1, "b grows into block 1 (%u)", b.blocks[1]);
    sp_kv_seq_release(kv, &b);
    sp_kv_seq_release(kv, &c);
    sp_kv_free(kv);

    /* a sliding-window layer keeps the last ring_len positions (rounded up
     * to whole key tiles: 20 -> 32) in a ring of its own, beside the paged
     * layers; the blocks then hold only the paged layers */
    const bool local[NL] = {false, true, false};
    const struct sp_kv_shape ring_shape = {.n_layer = NL, .n_head_kv = HKV, .head_dim = D, .local = local,
                                           .ring_len = 20, .n_rings = 1};
    CHECK(sp_kv_block_bytes(&ring_shape) == (uint64_t)BT * (NL - 1) * HKV * D * 2 * 2, "ring layers take no blocks");
    CHECK(sp_kv_new(&kv, &ring_shape, 8) == SP_OK, "init with a ring layer");
    CHECK(sp_kv_seq_reserve(kv, &a, 41) == SP_OK, "reserve with a ring");
    write_seq(kv, &a, 1, 0, 41);
    CHECK(seq_matches(kv, &a, 1, 41 - 32, 41) == 0, "the ring and the blocks read back the last 32 positions");
    const struct sp_kv_view wr = sp_kv_view(kv, &a, 1);
    CHECK(sp_kv_view_run(&wr, 40, 100) == 24 && sp_kv_view_k(&wr, 40, 0) == sp_kv_view_k(&wr, 8, 0),
          "a ring's run ends at its end; position 40 is 8's slot");
    CHECK(sp_kv_seq_reserve(kv, &b, 1) == SP_ERR_FULL, "one ring: a second sequence waits");
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    sp_kv_free(kv);

    /* rolling back (rejected speculative drafts): blocks past the new end
     * go back to the pool, kept positions are untouched, the sequence grows
     * again as if it never held more; a fork rolled back leaves the shared
     * blocks to its sibling and copies before writing; blocks registered
     * with the prefix cache are never rolled back */
    kv = new_kv(12);
    CHECK(sp_kv_seq_reserve(kv, &a, 40) == SP_OK, "reserve a 40");
    write_seq(kv, &a, 1, 0, 40);
    CHECK(sp_kv_seq_truncate(kv, &a, 20) == SP_OK && sp_kv_seq_len(&a) == 20 && a.n_blocks == 2, "a rolled back to 20");
    CHECK(sp_kv_available(kv) == 10, "its third block is free again (%u available)", sp_kv_available(kv));
    CHECK(seq_matches(kv, &a, 1, 0, 20) == 0, "positions kept are untouched");
    CHECK(sp_kv_seq_reserve(kv, &a, 40) == SP_OK && a.n_blocks == 3 && consecutive(&a), "a grows again");
    write_seq(kv, &a, 2, 20, 40);
    CHECK(seq_matches(kv, &a, 1, 0, 20) == 0 && seq_matches(kv, &a, 2, 20, 40) == 0, "old and new positions");
    CHECK(sp_kv_seq_fork(kv, &b, &a) == SP_OK, "fork b from a");
    CHECK(sp_kv_seq_truncate(kv, &b, 18) == SP_OK && b.n_blocks == 2, "b rolled back to 18");
    CHECK(sp_kv_available(kv) == 9, "a still holds the third block");
    CHECK(sp_kv_seq_reserve(kv, &b, 30) == SP_OK && b.blocks[1] != a.blocks[1], "b copies the shared block");
    write_seq(kv, &b, 3, 18, 30);
    CHECK(seq_matches(kv, &a, 2, 20, 40) == 0 && seq_matches(kv, &b, 1, 0, 18) == 0, "a untouched, b's prefix kept");
    sp_kv_prefix_commit(kv, &a, toks);
    CHECK(a.n_hashed == 2, "a's two full blocks are cached");
    CHECK(sp_kv_seq_truncate(kv, &a, 30) == SP_ERR_INTERNAL && sp_kv_seq_len(&a) == 40, "no rollback into cached blocks");
    CHECK(sp_kv_seq_truncate(kv, &a, 32) == SP_OK && sp_kv_seq_len(&a) == 32 && a.n_blocks == 2, "down to them is fine");
    sp_kv_seq_release(kv, &a);
    sp_kv_seq_release(kv, &b);
    CHECK(sp_kv_available(kv) == 12, "every block back");
    sp_kv_free(kv);
    test_shared_layers();
    test_layer_geometry(SP_CACHE_F16);
    test_layer_geometry(SP_CACHE_Q8_0);
    test_vk_geometry();
    test_quantized(SP_CACHE_Q8_0);
    test_quantized(SP_CACHE_Q4_0);
    return sp_check_report("test_kv");
}
