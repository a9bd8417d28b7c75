/* Quant types: hand-computed blocks, quantize/dequantize error budgets, the
 * fast kernels of every ISA this CPU runs against the scalar oracle, gemm
 * tiles bit-identical to vec_dot, row sizes, f16/bf16 conversions, the
 * f16 stores of every ISA row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "check_isa.h"
#include "quant/quant_isa.h"
#include "quant/quant.h"

static uint32_t rng_state = 12345;
static float frand(void) /* uniform [-1, 1) */
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / (float)(1u << 23) - 1.0f;
}
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static const uint32_t all_types[] = {
    SP_TYPE_F32, SP_TYPE_F16, SP_TYPE_BF16, SP_TYPE_Q4_0, SP_TYPE_Q4_1, SP_TYPE_Q5_0,
    SP_TYPE_Q5_1, SP_TYPE_Q8_0, SP_TYPE_Q8_1, SP_TYPE_Q2_K, SP_TYPE_Q3_K, SP_TYPE_Q4_K,
    SP_TYPE_Q5_K, SP_TYPE_Q6_K, SP_TYPE_Q8_K, SP_TYPE_MXFP4};
#define NTYPES (sizeof all_types / sizeof all_types[0])

static void test_f16_bf16(void)
{
    CHECK(sp_f32_to_f16(1.0f) == 0x3c00, "1.0");
    CHECK(sp_f32_to_f16(-2.0f) == 0xc000, "-2.0");
    CHECK(sp_f32_to_f16(65504.0f) == 0x7bff, "max half");
    CHECK(sp_f32_to_f16(65519.0f) == 0x7bff, "just below the inf threshold");
    CHECK(sp_f32_to_f16(65520.0f) == 0x7c00, "rounds to inf");
    CHECK(sp_f32_to_f16(INFINITY) == 0x7c00 && sp_f32_to_f16(-INFINITY) == 0xfc00, "inf");
    uint16_t hn = sp_f32_to_f16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0, "nan -> %04x", hn);
    CHECK(sp_f32_to_f16(0x1p-24f) == 0x0001, "smallest subnormal");
    CHECK(sp_f32_to_f16(0x1p-25f) == 0x0000, "half of it ties to even 0");
    CHECK(sp_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5 ulp ties to even 2");
    CHECK(sp_f32_to_f16(0x1p-14f) == 0x0400, "smallest normal");
    CHECK(sp_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "tie to even (down)");
    CHECK(sp_f32_to_f16(1.0f + 0x3p-11f) == 0x3c02, "tie to even (up)");
    CHECK(sp_f32_to_f16(1.0f + 0x1.2p-11f) == 0x3c01, "above tie rounds up");
    CHECK(sp_f32_to_f16(-0.0f) == 0x8000, "-0");
    CHECK(sp_f16_to_f32(0x0001) == 0x1p-24f, "subnormal to f32");
    CHECK(sp_f16_to_f32(0x03ff) == 0x3ffp-24f, "largest subnormal");
    CHECK(isinf(sp_f16_to_f32(0xfc00)) && sp_f16_to_f32(0xfc00) < 0, "-inf");
    CHECK(isnan(sp_f16_to_f32(0x7e00)), "nan");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sp_f16_to_f32((uint16_t)h);
        uint16_t back = sp_f32_to_f16(f);
        if (isnan(f) ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) bad++;
    }
    CHECK(bad == 0, "f16 round trip: %d of 65536 differ", bad);
    CHECK(sp_f32_to_bf16(1.0f) == 0x3f80, "bf16 1.0");
    CHECK(sp_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16 tie to even (down)");
    CHECK(sp_f32_to_bf16(1.0f + 0x3p-8f) == 0x3f82, "bf16 tie to even (up)");
    CHECK(sp_f32_to_bf16(INFINITY) == 0x7f80, "bf16 inf");
    CHECK(isnan(sp_bf16_to_f32(sp_f32_to_bf16(NAN))), "bf16 nan stays nan");
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sp_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && sp_f32_to_bf16(f) != h) bad++;
    }
    CHECK(bad == 0, "bf16 round trip: %d differ", bad);
}

/* One row of sp_f16_store against the scalar cast, bit for bit: into a
 * value row (stride 1) and a key's column of its tile (stride 16, the
 * slots between untouched), lengths with and without a tail of fewer than
 * 16, values across f16's ties, subnormals, overflow and signed zero. */
static void f16_store_check(sp_f16_store_fn row, const char *what)
{
    enum { LEN = 100, STRIDE = 16 };
    static const float edge[] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 0x1p-25f, 0x1.8p-24f, 0x1p-14f, -0.0f,
                                 65519.0f, 65520.0f, -65520.0f, INFINITY, 1e-30f, 0x1.ffep-15f};
    const int n_edge = (int)(sizeof edge / sizeof edge[0]);
    float x[LEN];
    static uint16_t h16[LEN * STRIDE];
    uint32_t s = 7; /* its own generator: frand's sequence stays the other tests' */
    for (int i = 0; i < LEN; i++) {
        s = s * 1664525u + 1013904223u;
        const float r = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
        x[i] = i < n_edge ? edge[i] : 4 * r * (i % 3 ? 1.0f : 1e-4f);
    }
    static const int lens[] = {1, 15, 16, 34, 67, 100};
    for (int stride = 1; stride <= STRIDE; stride += STRIDE - 1)
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            const int len = lens[k];
            memset(h16, 0xa5, sizeof h16);
            row(h16, (size_t)stride, x, len);
            int bad = 0, touched = 0;
            for (int i = 0; i < len * stride; i++) {
                if (i % stride != 0) {
                    touched += h16[i] != 0xa5a5;
                    continue;
                }
                _Float16 want = (_Float16)x[i / stride];
                uint16_t wb;
                memcpy(&wb, &want, sizeof wb);
                bad += h16[i] != wb;
            }
            touched += len * stride < LEN * STRIDE && h16[len * stride] != 0xa5a5;
            CHECK(bad == 0 && touched == 0, "f16 store %s (stride %d, %d values): %d differ from the cast, "
                  "%d slots outside written", what, stride, len, bad, touched);
        }
}

/* sp_f16_store: the entry point (the active level's row) and every level's
 * own row this CPU runs. */
static void test_f16_store(void)
{
    f16_store_check(sp_f16_store, "sp_f16_store");
    for (int i = 0; i < SP_ISA_COUNT; i++) {
        const enum sp_isa isa = (enum sp_isa)i;
        const sp_f16_store_fn row = sp_f16_store_for_isa(sp_isa_name(isa));
        /* a level without a row of its own uses its parent's */
        const bool own = row && (isa == SP_ISA_SCALAR || row != sp_f16_store_for_isa(sp_isa_name(sp_isa_parent(isa))));
        if (own)
            f16_store_check(row, sp_isa_name(isa));
        if (own || !row)
            sp_check_isa_path("f16", isa, own);
    }
    CHECK(sp_f16_store_for_isa("scalar") == sp_f16_store_scalar, "the scalar level's row is the cast");
}

static void test_row_size(void)
{
    size_t sz = 0;
    CHECK(sp_type_row_size(SP_TYPE_Q4_1, 576, &sz) && sz == 18 * 20, "q4_1 576 -> %zu", sz);
    CHECK(sp_type_row_size(SP_TYPE_Q4_K, 512, &sz) && sz == 2 * 144, "q4_K 512 -> %zu", sz);
    CHECK(sp_type_row_size(SP_TYPE_Q6_K, 256, &sz) && sz == 210, "q6_K");
    CHECK(sp_type_row_size(SP_TYPE_F16, 3, &sz) && sz == 6, "f16 3");
    CHECK(sp_type_row_size(SP_TYPE_Q8_K, 256, &sz) && sz == 292, "q8_K");
    CHECK(sp_type_row_size(SP_TYPE_MXFP4, 2880, &sz) && sz == 90 * 17, "mxfp4 2880 -> %zu", sz);
    CHECK(sp_type_get(39) && strcmp(sp_type_get(39)->name, "MXFP4") == 0, "ggml type 39 is MXFP4");
    CHECK(!sp_type_row_size(SP_TYPE_Q4_K, 576, &sz), "576 is not a multiple of 256");
    CHECK(!sp_type_row_size(SP_TYPE_Q4_0, 33, &sz), "33 not a multiple of 32");
    CHECK(!sp_type_row_size(4, 32, &sz), "type 4 (removed Q4_2) unknown");
    CHECK(!sp_type_row_size(99, 32, &sz), "type 99 unknown");
    CHECK(!sp_type_row_size(SP_TYPE_F32, INT64_MAX, &sz), "size_t overflow rejected");
    CHECK(!sp_type_row_size(SP_TYPE_F32, -4, &sz), "negative n rejected");
    CHECK(sp_type_get(4) == NULL && sp_type_get(SP_TYPE_COUNT) == NULL, "unknown ids");
    static const bool weight[SP_TYPE_COUNT] = {
        [SP_TYPE_F32] = 1, [SP_TYPE_F16] = 1, [SP_TYPE_BF16] = 1, [SP_TYPE_Q4_0] = 1,
        [SP_TYPE_Q4_1] = 1, [SP_TYPE_Q5_0] = 1, [SP_TYPE_Q5_1] = 1, [SP_TYPE_Q8_0] = 1,
        [SP_TYPE_Q2_K] = 1, [SP_TYPE_Q3_K] = 1, [SP_TYPE_Q4_K] = 1, [SP_TYPE_Q5_K] = 1,
        [SP_TYPE_Q6_K] = 1, [SP_TYPE_MXFP4] = 1};
    for (size_t k = 0; k < NTYPES; k++) {
        const struct sp_type_traits *t = sp_type_get(all_types[k]);
        CHECK(t && t->is_weight == weight[all_types[k]], "is_weight of %u", all_types[k]);
    }
}

/* Hand-built blocks: values computed from the ggml layout descriptions. */
static void test_hand_blocks(void)
{
    float y[256];
#define DEQ(id, blk) sp_type_get_ref(SP_TYPE_##id)->to_float(&(blk), y, sp_type_get_ref(SP_TYPE_##id)->block_size)
    {
        struct sp_block_q4_0 b = {0};
        b.d = 0x3800; /* 0.5 */
        b.qs[0] = 0x3A;
        DEQ(Q4_0, b);
        CHECK(y[0] == 1.0f && y[16] == -2.5f && y[1] == -4.0f, "q4_0 %g %g %g", y[0], y[16], y[1]);
    }
    {
        struct sp_block_q4_1 b = {0};
        b.d = 0x3800;
        b.m = 0xbc00; /* -1 */
        b.qs[1] = 0xF0;
        DEQ(Q4_1, b);
        CHECK(y[1] == -1.0f && y[17] == 6.5f, "q4_1 %g %g", y[1], y[17]);
    }
    {
        struct sp_block_q5_0 b = {0};
        b.d = 0x3c00;
        b.qs[2] = 0x21;
        b.qh[0] = 1 << 2;
        DEQ(Q5_0, b);
        CHECK(y[2] == 1.0f && y[18] == -14.0f && y[0] == -16.0f, "q5_0 %g %g %g", y[2], y[18], y[0]);
    }
    {
        struct sp_block_q5_1 b = {0};
        b.d = 0x4000; /* 2 */
        b.m = 0x3800;
        b.qs[0] = 0xFF;
        b.qh[2] = 1; /* bit 16: element 16 */
        DEQ(Q5_1, b);
        CHECK(y[0] == 30.5f && y[16] == 62.5f, "q5_1 %g %g", y[0], y[16]);
    }
    {
        struct sp_block_q8_0 b = {0};
        b.d = 0x3400; /* 0.25 */
        b.qs[5] = -100;
        DEQ(Q8_0, b);
        CHECK(y[5] == -25.0f && y[0] == 0.0f, "q8_0 %g", y[5]);
    }
    {
        struct sp_block_q8_1 b = {0};
        b.d = 0x3400;
        b.qs[31] = 7;
        DEQ(Q8_1, b);
        CHECK(y[31] == 1.75f, "q8_1 %g", y[31]);
    }
    {
        struct sp_block_q2_K b = {0};
        b.d = 0x3c00;
        b.dmin = 0x3800;
        b.scales[0] = 0x32;  /* sc 2, min 3 */
        b.scales[5] = 0x1F;  /* sc 15, min 1 */
        b.qs[0] = 3;         /* element 0 */
        b.qs[16] = 2 << 4;   /* element 80 = 32*2 + 16 */
        DEQ(Q2_K, b);
        CHECK(y[0] == 4.5f && y[1] == -1.5f && y[80] == 29.5f, "q2_K %g %g %g", y[0], y[1], y[80]);
    }
    {
        struct sp_block_q3_K b = {0};
        b.d = 0x3c00;
        b.scales[0] = 2;       /* sub-block 0: low nibble 2 */
        b.scales[8] = 2;       /* ... high bits 2 -> 34 -> +2 */
        b.scales[1] = 13 << 4; /* sub-block 9: low nibble 13 */
        b.scales[9] = 1 << 4;  /* ... high bits 1 -> 29 -> -3 */
        b.qs[0] = 1;
        b.hmask[0] = 1;        /* element 0: q = 1 */
        b.qs[48] = 3;
        b.hmask[16] = 1 << 4;  /* element 144 = 128 + 16: q = 3 */
        DEQ(Q3_K, b);
        CHECK(y[0] == 2.0f && y[1] == -8.0f && y[144] == -9.0f && y[17] == 128.0f,
              "q3_K %g %g %g %g", y[0], y[1], y[144], y[17]);
    }
    {
        struct sp_block_q4_K b = {0};
        b.d = 0x3c00;
        b.dmin = 0x3c00;
        b.scales[0] = 3;     /* sc0 */
        b.scales[4] = 1;     /* min0 */
        b.scales[1] = 0x80;  /* sc5 high bits 2 */
        b.scales[5] = 0x40;  /* min5 high bits 1 */
        b.scales[9] = 0x18;  /* sc5 low 8, min5 low 1: sc5 = 40, min5 = 17 */
        b.qs[0] = 0x07;
        b.qs[64] = 0xA0;     /* element 160: high nibble of qs[64] */
        DEQ(Q4_K, b);
        CHECK(y[0] == 20.0f && y[160] == 383.0f && y[32] == 0.0f, "q4_K %g %g %g", y[0], y[160], y[32]);
        struct sp_block_q5_K c = {0};
        c.d = b.d;
        c.dmin = b.dmin;
        memcpy(c.scales, b.scales, 12);
        memcpy(c.qs, b.qs, 128);
        c.qh[0] = 1 << 5; /* fifth bit of element 160 */
        DEQ(Q5_K, c);
        CHECK(y[0] == 20.0f && y[160] == 1023.0f, "q5_K %g %g", y[0], y[160]);
    }
    {
        struct sp_block_q6_K b = {0};
        b.d = 0x3800;
        b.scales[0] = 2;
        b.scales[13] = -3;
        b.ql[0] = 0x05;
        b.qh[0] = 0x02;      /* element 0: 5 | 32 -> 5 */
        b.ql[87] = 0x30;     /* element 215 = 128 + 64 + 23: high nibble of ql[64+23] */
        DEQ(Q6_K, b);
        CHECK(y[0] == 5.0f && y[215] == 43.5f && y[1] == -32.0f, "q6_K %g %g %g", y[0], y[215], y[1]);
    }
    {
        struct sp_block_q8_K b = {0};
        b.d = 0.5f;
        b.qs[200] = -3;
        DEQ(Q8_K, b);
        CHECK(y[200] == -1.5f, "q8_K %g", y[200]);
    }
    {
        /* E2M1 codes 0-7: 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign.
         * e = 127 is scale 1, e = 130 scale 8, e = 0 and 1 are 2^-127 and
         * 2^-126 (ggml reads them as float subnormals), 254 is 2^127. */
        struct sp_block_mxfp4 b = {0};
        b.e = 127;
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
        DEQ(MXFP4, b);
        static const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
        int bad = 0;
        for (int j = 0; j < 16; j++) bad += y[j] != want[j] || y[16 + j] != want[15 - j];
        CHECK(bad == 0, "mxfp4 codes: %d of 32 wrong (y[5] %g, y[16] %g)", bad, y[5], y[16]);
        b.e = 130;
        DEQ(MXFP4, b);
        CHECK(y[7] == 48.0f && y[17] == -32.0f, "mxfp4 e 130: %g %g", y[7], y[17]);
        b.e = 0;
        DEQ(MXFP4, b);
        CHECK(y[2] == 0x1p-127f && y[7] == 6 * 0x1p-127f, "mxfp4 e 0: %g %g", y[2], y[7]);
        b.e = 1;
        DEQ(MXFP4, b);
        CHECK(y[1] == 0x1p-127f && y[4] == 0x1p-125f, "mxfp4 e 1: %g %g", y[1], y[4]);
        b.e = 254;
        DEQ(MXFP4, b);
        CHECK(y[2] == 0x1p127f && y[11] == -0x1.8p127f, "mxfp4 e 254: %g %g", y[2], y[11]);
        /* every exponent 0..254 and code against the format's definition
         * (OCP MX v1.0: E2M1 value times 2^(e - 127)), computed apart
         * from the table and the bit tricks; exact in float (the values of
         * e 253 and 254 past its range are infinities in both) */
        static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
        int wrong = 0;
        for (int e = 0; e < 255; e++) {
            b.e = (uint8_t)e;
            for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (j << 4));
            DEQ(MXFP4, b);
            for (int j = 0; j < 32; j++) {
                const int code = j % 16;
                const double want = (code & 8 ? -1 : 1) * ldexp(e2m1[code & 7], e - 127);
                wrong += y[j] != (float)want; /* past float: inf, as ggml */
            }
        }
        CHECK(wrong == 0, "mxfp4: %d of 255 x 32 values differ from the format's definition", wrong);
        /* the quantizer: exponent floor(log2(amax)) - 2, nearest codes */
        float x[32] = {0};
        x[0] = 6.0f;   /* amax 6: e = 2 + 125 = 127, code 7 */
        x[1] = 1.2f;   /* nearest 1.0 (code 2) */
        x[2] = -1.3f;  /* nearest -1.5 (code 11) */
        x[17] = 0.25f; /* a tie of 0 and 0.5: the first (code 0) */
        sp_type_get_ref(SP_TYPE_MXFP4)->from_float(x, &b, 32);
        CHECK(b.e == 127 && (b.qs[0] & 0xF) == 7 && (b.qs[1] & 0xF) == 2 && (b.qs[2] & 0xF) == 11 &&
              (b.qs[1] >> 4) == 0, "mxfp4 quantize: e %d, codes %d %d %d %d", b.e, b.qs[0] & 0xF, b.qs[1] & 0xF,
              b.qs[2] & 0xF, b.qs[1] >> 4);
    }
    {
        uint16_t h[2] = {0x3c00, 0xc100}, bf[2] = {0x3f80, 0xc020};
        float f[2] = {1.5f, -3.0f};
        sp_type_get_ref(SP_TYPE_F16)->to_float(h, y, 2);
        CHECK(y[0] == 1.0f && y[1] == -2.5f, "f16 %g %g", y[0], y[1]);
        sp_type_get_ref(SP_TYPE_BF16)->to_float(bf, y, 2);
        CHECK(y[0] == 1.0f && y[1] == -2.5f, "bf16 %g %g", y[0], y[1]);
        sp_type_get_ref(SP_TYPE_F32)->to_float(f, y, 2);
        CHECK(y[0] == 1.5f && y[1] == -3.0f, "f32");
    }
#undef DEQ
}

#define N 2048

/* Quantize -> dequantize relative RMS error, per type.  Budgets are about
 * 1.5x-2x what round-to-nearest at that bit width gives on uniform data
 * (step/sqrt(12) relative to the data's RMS), so a layout bug (wrong bits,
 * wrong scale) fails by a wide margin. */
static void test_roundtrip(void)
{
    static const struct { uint32_t t; double budget; } cases[] = {
        {SP_TYPE_F32, 0}, {SP_TYPE_F16, 5e-4}, {SP_TYPE_BF16, 4e-3}, {SP_TYPE_Q8_0, 0.01},
        {SP_TYPE_Q8_1, 0.01}, {SP_TYPE_Q8_K, 0.01}, {SP_TYPE_Q6_K, 0.04}, {SP_TYPE_Q5_0, 0.06},
        {SP_TYPE_Q5_1, 0.05}, {SP_TYPE_Q5_K, 0.06}, {SP_TYPE_Q4_0, 0.12}, {SP_TYPE_Q4_1, 0.10},
        {SP_TYPE_Q4_K, 0.12}, {SP_TYPE_Q3_K, 0.30}, {SP_TYPE_Q2_K, 0.60}, {SP_TYPE_MXFP4, 0.16}};
    static float x[N], y[N];
    static uint8_t q[N * 4 + 64];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct sp_type_traits *t = sp_type_get_ref(cases[k].t);
        double err = 0, ref = 0;
        for (int rep = 0; rep < 4; rep++) {
            for (int i = 0; i < N; i++) x[i] = frand() * (rep + 1) * 0.1f + (rep == 3 ? 0.05f : 0);
            t->from_float(x, q, N);
            t->to_float(q, y, N);
            for (int i = 0; i < N; i++) {
                err += (double)(x[i] - y[i]) * (x[i] - y[i]);
                ref += (double)x[i] * x[i];
            }
        }
        double rel = sqrt(err / ref);
        printf("  roundtrip %-5s rel rms err %.5f (budget %.4f)\n", t->name, rel, cases[k].budget);
        CHECK(rel <= cases[k].budget, "%s roundtrip err %g > %g", t->name, rel, cases[k].budget);
    }
    /* all-zero input must give zeros, not NaN (zero scales) */
    memset(x, 0, sizeof x);
    for (size_t k = 0; k < NTYPES; k++) {
        const struct sp_type_traits *t = sp_type_get_ref(all_types[k]);
        t->from_float(x, q, 256);
        t->to_float(q, y, 256);
        int bad = 0;
        for (int i = 0; i < 256; i++) bad += y[i] != 0;
        CHECK(bad == 0, "%s zeros: %d nonzero", t->name, bad);
    }
}

/* Fast kernels vs the oracle, per ISA level; false when this CPU or build
 * cannot run the level. */
static bool test_isa(const char *isa)
{
    static struct sp_type_traits tab[SP_TYPE_COUNT];
    if (!sp_quant_table_for_isa(isa, tab)) {
        CHECK(strcmp(isa, "scalar") != 0, "scalar must always be available");
        return false;
    }
    enum { NR = 5, NC = 19 }; /* NC: past the x86 gemm's 8-column threshold for 4-row tiles */
    static float x[NR][N], act[NC][N], wf[N], af[N];
    static uint8_t wq[NR][N * 4], aq[NC][N * 4], aq2[N * 4];
    static float s_gemm[NC * 8];
    for (size_t k = 0; k < NTYPES; k++) {
        uint32_t type = all_types[k];
        const struct sp_type_traits *ref = sp_type_get_ref(type), *fast = &tab[type];
        if (!ref->is_weight) continue;
        const struct sp_type_traits *aref = sp_type_get_ref(ref->vec_dot_type);
        const struct sp_type_traits *afast = &tab[ref->vec_dot_type];
        CHECK(fast->vec_dot_type == ref->vec_dot_type, "%s vec_dot_type", ref->name);
        /* tails: 63 blocks for 32-element types, N-3 for float types */
        const int64_t n = ref->block_size == 32 ? N - 32 : ref->block_size == 1 ? N - 3 : N;
        size_t wrow, arow;
        sp_type_row_size(type, n, &wrow);
        sp_type_row_size(ref->vec_dot_type, n, &arow);
        for (int r = 0; r < NR; r++) {
            for (int i = 0; i < N; i++) x[r][i] = frand() * (1 + r);
            ref->from_float(x[r], wq[r], n);
        }
        for (int c = 0; c < NC; c++) {
            for (int i = 0; i < N; i++) act[c][i] = frand() * 3 + (c == 2 ? 1.0f : 0.0f);
            if (c == 1) /* an all-zero block */
                memset(act[c] + 64, 0, 32 * sizeof act[c][0]);
            aref->from_float(act[c], aq[c], n);
            afast->from_float(act[c], aq2, n);
            CHECK(memcmp(aq[c], aq2, arow) == 0, "%s/%s: fast %s quantizer differs from ref",
                  isa, ref->name, aref->name);
        }
        double worst = 0, worst_deq = 0;
        float s_dot[NR][NC];
        for (int r = 0; r < NR; r++) {
            ref->to_float(wq[r], wf, n);
            for (int c = 0; c < NC; c++) {
                aref->to_float(aq[c], af, n);
                double exact = 0, mag = 0;
                for (int i = 0; i < n; i++) {
                    exact += (double)wf[i] * af[i];
                    mag += fabs((double)wf[i] * af[i]);
                }
                float sr, sf;
                ref->vec_dot(n, &sr, wq[r], aq[c]);
                fast->vec_dot(n, &sf, wq[r], aq[c]);
                s_dot[r][c] = sf;
                double e = fabs((double)sr - sf) / mag, ed = fabs((double)sr - exact) / mag;
                if (e > worst) worst = e;
                if (ed > worst_deq) worst_deq = ed;
            }
        }
        /* Integer block sums are exact in both; only the float scaling and
         * reduction order differ: <= ~(blocks + 8) roundings of 6e-8 each
         * relative to sum|terms| for N = 2048, i.e. < 5e-6.  Budget 1e-5. */
        CHECK(worst <= 1e-5, "%s %s fast vs ref rel err %g", isa, ref->name, worst);
        /* The oracle vs float math on dequantized values: same budget,
         * except _1 types whose activation sum s is stored as f16 (2^-11). */
        double bud = (type == SP_TYPE_Q4_1 || type == SP_TYPE_Q5_1) ? 1e-3 : 1e-5;
        CHECK(worst_deq <= bud, "%s ref vs dequantized rel err %g", ref->name, worst_deq);
        printf("  %-6s %-5s vec_dot rel err vs ref %.2e, ref vs dequant %.2e%s\n", isa, ref->name,
               worst, worst_deq, fast->gemm ? ", gemm" : "");
        if (!fast->gemm) continue;
        /* tile over all rows and columns, outputs strided: bit-identical */
        memset(s_gemm, 0, sizeof s_gemm);
        fast->gemm(n, s_gemm, 8, wq[0], sizeof wq[0], NR, aq[0], sizeof aq[0], NC);
        int diff = 0;
        for (int r = 0; r < NR; r++)
            for (int c = 0; c < NC; c++) diff += fbits(s_gemm[c * 8 + r]) != fbits(s_dot[r][c]);
        CHECK(diff == 0, "%s %s gemm: %d outputs differ from vec_dot", isa, ref->name, diff);
        /* few columns (the batched-decode order) */
        memset(s_gemm, 0, sizeof s_gemm);
        fast->gemm(n, s_gemm, 8, wq[0], sizeof wq[0], NR, aq[0], sizeof aq[0], 7);
        diff = 0;
        for (int r = 0; r < NR; r++)
            for (int c = 0; c < 7; c++) diff += fbits(s_gemm[c * 8 + r]) != fbits(s_dot[r][c]);
        CHECK(diff == 0, "%s %s 5x7 gemm: %d outputs differ from vec_dot", isa, ref->name, diff);
        /* smaller tiles (1x1, 2x3) must match too */
        float one;
        fast->gemm(n, &one, 1, wq[3], sizeof wq[0], 1, aq[5], sizeof aq[0], 1);
        CHECK(fbits(one) == fbits(s_dot[3][5]), "%s %s 1x1 gemm", isa, ref->name);
        memset(s_gemm, 0, sizeof s_gemm);
        fast->gemm(n, s_gemm, 2, wq[1], sizeof wq[0], 2, aq[4], sizeof aq[0], 3);
        diff = 0;
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 3; c++) diff += fbits(s_gemm[c * 2 + r]) != fbits(s_dot[1 + r][4 + c]);
        CHECK(diff == 0, "%s %s 2x3 gemm: %d differ", isa, ref->name, diff);
    }
    return true;
}

/* Row 0 of a test matrix at the extremes its type can hold (every quant
 * at its largest stored value, scales and mins at their largest), so the
 * kernels' integer sums meet their worst case against constant
 * activations (all +-127). */
static void saturate_row(uint32_t ft, uint8_t *row, int64_t n)
{
    const int64_t nb = n / sp_type_get_ref(ft)->block_size;
    for (int64_t b = 0; b < nb; b++) {
        switch (ft) {
        case SP_TYPE_Q4_1: memset(((struct sp_block_q4_1 *)row)[b].qs, 0xFF, 16); break;
        case SP_TYPE_Q5_0: {
            struct sp_block_q5_0 *x = &((struct sp_block_q5_0 *)row)[b];
            memset(x->qs, 0xFF, 16);
            memset(x->qh, 0xFF, 4);
            break;
        }
        case SP_TYPE_Q8_0: memset(((struct sp_block_q8_0 *)row)[b].qs, b % 2 ? 0x80 : 0x7F, 32); break;
        case SP_TYPE_Q4_K: {
            struct sp_block_q4_K *x = &((struct sp_block_q4_K *)row)[b];
            memset(x->qs, 0xFF, sizeof x->qs);
            memset(x->scales, 0xFF, sizeof x->scales);
            break;
        }
        case SP_TYPE_Q6_K: {
            struct sp_block_q6_K *x = &((struct sp_block_q6_K *)row)[b];
            memset(x->ql, b % 2 ? 0xFF : 0x00, sizeof x->ql);
            memset(x->qh, b % 2 ? 0xFF : 0x00, sizeof x->qh);
            memset(x->scales, b % 2 ? 0x7F : 0x80, sizeof x->scales);
            break;
        }
        case SP_TYPE_MXFP4: { /* codes +-12; every fourth block's exponent a subnormal scale (e 0, 1) */
            struct sp_block_mxfp4 *x = &((struct sp_block_mxfp4 *)row)[b];
            memset(x->qs, b % 2 ? 0xFF : 0x77, sizeof x->qs);
            if (b % 4 == 3)
                x->e = b % 8 == 3 ? 0 : 1;
            break;
        }
        default: break;
        }
    }
}

/* Packed 16-row types: pack, check the scalar oracle against float math on
 * the dequantized rows, then every ISA level this CPU runs that packs the
 * type must equal the oracle bit for bit for every column count (batch
 * invariance).  ran[level]: the level's packed tiles were exercised. */
static void test_packed(bool ran[SP_ISA_COUNT])
{
    static struct sp_type_traits tabs[SP_ISA_COUNT][SP_TYPE_COUNT];
    bool runs[SP_ISA_COUNT];
    for (int i = 0; i < SP_ISA_COUNT; i++) {
        runs[i] = sp_quant_table_for_isa(sp_isa_name((enum sp_isa)i), tabs[i]);
        ran[i] = i == SP_ISA_SCALAR; /* the oracle runs everywhere */
    }
    static const uint32_t file_types[] = {SP_TYPE_Q4_1, SP_TYPE_Q8_0, SP_TYPE_Q5_0, SP_TYPE_Q4_K, SP_TYPE_Q6_K,
                                          SP_TYPE_F16,  SP_TYPE_MXFP4};
    static const uint32_t packed_types[] = {SP_TYPE_Q4_1_P16, SP_TYPE_Q8_0_P16, SP_TYPE_Q5_0_P16, SP_TYPE_Q4_K_P16,
                                            SP_TYPE_Q6_K_P16, SP_TYPE_F16_P16,  SP_TYPE_MXFP4_P16};
    enum { NR = 80, NC = 19 }; /* five row groups: F16_P16's tile of four and a tail of one */
    static float x[N], af[NC][N], wf[N];
    static uint8_t wq[NR][N * 2], packed[NR * N * 2], aq[NC][N * 4], aq2[N * 4];
    static float s_ref[NC][NR], s_fast[NC][NR];
    for (size_t k = 0; k < sizeof file_types / sizeof file_types[0]; k++) {
        const uint32_t ft = file_types[k], pt = packed_types[k];
        const struct sp_type_traits *file = sp_type_get_ref(ft), *pref = sp_type_get_ref(pt);
        const bool kq = file->block_size == 256;
        const int PN = kq ? 7 * 256 : N - 32; /* odd block counts: 7 super-blocks, 63 blocks */
        const uint32_t at = kq ? SP_TYPE_Q8_K : ft == SP_TYPE_F16 ? SP_TYPE_F32 : SP_TYPE_Q8_P;
        const struct sp_type_traits *aref = sp_type_get_ref(at);
        CHECK(pref->vec_dot_type == at && pref->gemm && pref->pack, "%s packed traits", pref->name);
        size_t wrow, arow;
        sp_type_row_size(ft, PN, &wrow);
        sp_type_row_size(at, PN, &arow);
        CHECK(arow == (size_t)(kq ? 7 * 292 : at == SP_TYPE_F32 ? PN * 4 : 63 * 48), "activation row size %zu", arow);
        for (int r = 0; r < NR; r++) {
            for (int i = 0; i < N; i++) x[i] = frand() * (1 + r % 5);
            file->from_float(x, wq[r], PN);
        }
        saturate_row(ft, wq[0], PN);
        pref->pack(wq[0], sizeof wq[0], packed, PN, NR);
        for (int c = 0; c < NC; c++) {
            for (int i = 0; i < N; i++) x[i] = frand() * 3 + (c == 2 ? 1.0f : 0.0f);
            if (c == 0) /* two largest magnitudes of opposite sign: the first sets the Q8_K scale's sign */
                x[10] = -9.0f, x[13] = 9.0f, x[200] = 9.0f;
            if (c == 1 || c == 3) /* constant: every activation quant +-127 */
                for (int i = 0; i < N; i++) x[i] = c == 1 ? 0.5f : -2.0f;
            aref->from_float(x, aq[c], PN);
            for (int i = 0; i < SP_ISA_COUNT; i++) {
                if (!runs[i]) continue;
                tabs[i][at].from_float(x, aq2, PN);
                CHECK(memcmp(aq[c], aq2, arow) == 0, "%s: fast %s quantizer differs from ref",
                      sp_isa_name((enum sp_isa)i), aref->name);
            }
            aref->to_float(aq[c], af[c], PN);
        }
        /* packed oracle vs float math on the dequantized rows */
        pref->gemm(PN, s_ref[0], NR, packed, wrow, NR, aq[0], sizeof aq[0], NC);
        double worst = 0;
        for (int r = 0; r < NR; r++) {
            file->to_float(wq[r], wf, PN);
            for (int c = 0; c < NC; c++) {
                double exact = 0, mag = 0;
                for (int i = 0; i < PN; i++) {
                    exact += (double)wf[i] * af[c][i];
                    mag += fabs((double)wf[i] * af[c][i]);
                }
                double e = fabs(s_ref[c][r] - exact) / mag;
                worst = e > worst ? e : worst;
            }
        }
        /* <= ~2 roundings per block of 6e-8 relative: 1e-5; for Q4_1 the
         * activation sum s is rounded through f16 (2^-11): 1e-3 */
        double bud = ft == SP_TYPE_Q4_1 ? 1e-3 : 1e-5;
        CHECK(worst <= bud, "%s oracle vs dequantized rel err %g", pref->name, worst);
        printf("  %-8s packed oracle vs dequant %.2e\n", pref->name, worst);
        for (int i = 1; i < SP_ISA_COUNT; i++) {
            const char *isa = sp_isa_name((enum sp_isa)i);
            const struct sp_type_traits *tab = tabs[i];
            if (!runs[i] || tab[ft].packed != pt)
                continue;
            CHECK(tab[pt].gemm != pref->gemm, "%s packs %s but has no packed kernel", isa, file->name);
            if (kq && tab[ft].vec_dot != file->vec_dot) {
                /* K types keep the level's file-layout kernel's arithmetic: same bits as its vec_dot */
                int diff = 0;
                for (int r = 0; r < NR; r++)
                    for (int c = 0; c < NC; c++) {
                        float v;
                        tab[ft].vec_dot(PN, &v, wq[r], aq[c]);
                        diff += fbits(v) != fbits(s_ref[c][r]);
                    }
                CHECK(diff == 0, "%s %s oracle: %d outputs differ from the file kernel's vec_dot", isa, pref->name,
                      diff);
            }
            /* every column count gives the oracle's bits: all 19, 7 (tail), 1 ... */
            static const int widths[] = {NC, 7, 1, 8, 9, 2, 3, 4, 5, 6, 12, 13};
            int diff = 0;
            for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
                int nc = widths[wi], c0 = NC - nc;
                memset(s_fast, 0, sizeof s_fast);
                tab[pt].gemm(PN, s_fast[c0], NR, packed, wrow, NR, aq[c0], sizeof aq[0], nc);
                int d = 0;
                for (int c = c0; c < NC; c++)
                    for (int r = 0; r < NR; r++) d += fbits(s_fast[c][r]) != fbits(s_ref[c][r]);
                CHECK(d == 0, "%s %s gemm over %d columns: %d outputs differ from the oracle", isa, pref->name, nc,
                      d);
                diff += d;
            }
            /* the second group alone (row offset 16 rows of the file type) */
            memset(s_fast, 0, sizeof s_fast);
            tab[pt].gemm(PN, &s_fast[0][16], NR, packed + 16 * wrow, wrow, 16, aq[0], sizeof aq[0], 3);
            int d2 = 0;
            for (int c = 0; c < 3; c++)
                for (int r = 16; r < 32; r++) d2 += fbits(s_fast[c][r]) != fbits(s_ref[c][r]);
            CHECK(d2 == 0, "%s %s second group: %d differ", isa, pref->name, d2);
            printf("  %-8s %-8s gemm equals the oracle bit for bit: %s\n", isa, pref->name,
                   diff + d2 == 0 ? "yes" : "NO");
            ran[i] = true;
        }
    }
}

int main(void)
{
    sp_quant_init();
    printf("  active isa: %s (dots), packed tiles: %s\n", sp_quant_isa(),
           sp_quant_packed_isa() ? sp_quant_packed_isa() : "none");
    enum sp_isa active;
    CHECK(sp_isa_parse(sp_quant_isa(), &active) && sp_isa_runs(active), "isa %s", sp_quant_isa());
    test_f16_bf16();
    test_f16_store();
    test_row_size();
    test_hand_blocks();
    test_roundtrip();
    for (int i = 0; i < SP_ISA_COUNT; i++)
        sp_check_isa_path("quant", (enum sp_isa)i, test_isa(sp_isa_name((enum sp_isa)i)));
    bool ran[SP_ISA_COUNT];
    test_packed(ran);
    for (int i = 0; i < SP_ISA_COUNT; i++)
        sp_check_isa_path("packed", (enum sp_isa)i, ran[i]);
    return sp_check_report("test_quant");
}
