/* GGUF writer: what it writes parses back (keys, shapes, aligned offsets,
 * data); sizes are enforced; an unfinished file leaves nothing behind; the
 * file quantisers round trip within each type's error and refuse rows that
 * do not split into blocks. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/mmap.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "quant/quant.h"
#include "quant/quant_rows.h"

static char dir[] = "/tmp/sp-test-writer-XXXXXX";

static int files_in_dir(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_round_trip(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/a.gguf", dir);
    struct sp_gguf_writer *w;
    float a[96], b[64];
    for (int i = 0; i < 96; i++)
        a[i] = (float)i * 0.5f;
    for (int i = 0; i < 64; i++)
        b[i] = -(float)i;
    const char *strs[2] = {"x", "yz"};
    int64_t ne_a[2] = {32, 3}, ne_b[1] = {64};
    CHECK(sp_gguf_writer_init(&w, 64) == SP_OK, "init");
    CHECK(sp_gguf_writer_set_str(w, "general.architecture", "llama") == SP_OK, "str");
    CHECK(sp_gguf_writer_set_u32(w, "k.u32", 7) == SP_OK, "u32");
    CHECK(sp_gguf_writer_set_u32(w, "k.u32", 9) == SP_OK, "replace");
    CHECK(sp_gguf_writer_set_strs(w, "k.strs", strs, 2) == SP_OK, "strs");
    CHECK(sp_gguf_writer_set_u32(w, "general.alignment", 64) == SP_OK, "alignment key");
    CHECK(sp_gguf_writer_add_tensor(w, "a", 2, ne_a, SP_TYPE_F32) == SP_OK, "add a");
    CHECK(sp_gguf_writer_add_tensor(w, "b", 1, ne_b, SP_TYPE_F32) == SP_OK, "add b");
    CHECK(sp_gguf_writer_add_tensor(w, "c", 1, ne_b, SP_TYPE_Q4_K) != SP_OK, "64 is no Q4_K row");
    CHECK(sp_gguf_writer_open(w, path) == SP_OK, "open");
    CHECK(files_in_dir() == 1 && access(path, F_OK) != 0, "only the temporary file while writing");
    CHECK(sp_gguf_writer_write(w, a, 100) == SP_OK && sp_gguf_writer_write(w, (char *)a + 100, sizeof a - 100) == SP_OK,
          "a in two pieces");
    CHECK(sp_gguf_writer_finish(w) != SP_OK, "b missing");
    CHECK(sp_gguf_writer_write(w, b, sizeof b) == SP_OK, "b");
    CHECK(sp_gguf_writer_write(w, b, 4) != SP_OK, "more than the tensors hold");
    CHECK(sp_gguf_writer_finish(w) == SP_OK, "finish");
    sp_gguf_writer_free(w);
    CHECK(files_in_dir() == 1 && access(path, F_OK) == 0, "renamed into place");

    struct sp_mapping map;
    struct sp_gguf g;
    CHECK(sp_mapping_init(&map, path, 0) == SP_OK, "map");
    CHECK(sp_gguf_init(&g, map.data, map.size) == SP_OK, "parses back");
    uint32_t v = 0;
    CHECK(sp_gguf_get_u32(&g, "k.u32", true, &v) == SP_OK && v == 9, "replaced value %u", v);
    CHECK(g.n_kv == 4, "keys %llu", (unsigned long long)g.n_kv);
    CHECK(g.alignment == 64 && g.data_offset % 64 == 0, "alignment");
    const struct sp_gguf_tensor *ta = sp_gguf_tensor_find(&g, "a"), *tb = sp_gguf_tensor_find(&g, "b");
    CHECK(ta && tb && ta->ne[0] == 32 && ta->ne[1] == 3 && tb->offset % 64 == 0, "shapes and offsets");
    CHECK(ta && !memcmp(ta->data, a, sizeof a) && tb && !memcmp(tb->data, b, sizeof b), "data");
    CHECK(map.size == g.data_offset + 640, "the last tensor is padded too (%zu)", map.size);
    sp_gguf_free(&g);
    sp_mapping_free(&map);
    unlink(path);
}

static void test_abandoned(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/b.gguf", dir);
    struct sp_gguf_writer *w;
    int64_t ne[1] = {32};
    float x[32] = {0};
    CHECK(sp_gguf_writer_init(&w, 0) == SP_OK, "init");
    CHECK(sp_gguf_writer_add_tensor(w, "t", 1, ne, SP_TYPE_F32) == SP_OK, "add");
    CHECK(sp_gguf_writer_open(w, path) == SP_OK, "open");
    CHECK(sp_gguf_writer_write(w, x, 64) == SP_OK, "half");
    sp_gguf_writer_free(w);
    CHECK(files_in_dir() == 0, "no file left");
    CHECK(sp_gguf_writer_init(&w, 48) != SP_OK, "alignment 48 refused");
    char bad[160];
    snprintf(bad, sizeof bad, "%s/none/c.gguf", dir);
    CHECK(sp_gguf_writer_init(&w, 32) == SP_OK && sp_gguf_writer_open(w, bad) == SP_ERR_IO, "unwritable");
    sp_gguf_writer_free(w);
}

/* Every written type decodes back close to the input (the llama.cpp
 * byte-identity is tests/py/test_quantize.py's job). */
static void test_quantisers(void)
{
    enum { N = 512 };
    static const struct {
        uint32_t type;
        float max_rms; /* relative to the input's rms */
    } types[] = {
        {SP_TYPE_F32, 0}, {SP_TYPE_F16, 1e-3f}, {SP_TYPE_BF16, 8e-3f}, {SP_TYPE_Q8_0, 0.01f},
        {SP_TYPE_Q6_K, 0.03f}, {SP_TYPE_Q5_0, 0.08f}, {SP_TYPE_Q5_1, 0.06f}, {SP_TYPE_Q5_K, 0.06f},
        {SP_TYPE_Q4_0, 0.16f}, {SP_TYPE_Q4_1, 0.12f}, {SP_TYPE_Q4_K, 0.12f}, {SP_TYPE_Q3_K, 0.25f},
        {SP_TYPE_Q2_K, 0.45f},
    };
    float x[N], y[N], im[N];
    uint8_t buf[N * 4];
    uint32_t s = 7;
    double ss = 0;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / (float)(1u << 23) - 1.0f) * (i % 64 == 0 ? 8.0f : 1.0f);
        im[i] = 1.0f + (float)(i % 7);
        ss += (double)x[i] * x[i];
    }
    double rms = sqrt(ss / N);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        for (int with_im = 0; with_im < 2; with_im++) {
            const float *w = with_im ? im : NULL;
            CHECK(sp_quant_rows(types[k].type, x, buf, 1, N, w) == SP_OK, "%s", sp_type_get(types[k].type)->name);
            sp_type_get_ref(types[k].type)->to_float(buf, y, N);
            double e = 0;
            for (int i = 0; i < N; i++)
                e += (double)(y[i] - x[i]) * (y[i] - x[i]);
            e = sqrt(e / N) / rms;
            CHECK(e <= types[k].max_rms, "%s%s: relative rms error %g", sp_type_get(types[k].type)->name,
                  with_im ? " (imatrix)" : "", e);
        }
    }
    CHECK(sp_quant_rows(SP_TYPE_Q4_K, x, buf, 1, 96, NULL) == SP_ERR_ARG, "96 is no Q4_K row");
    CHECK(sp_quant_rows(SP_TYPE_Q8_K, x, buf, 1, 256, NULL) == SP_ERR_ARG, "Q8_K is not a file type");
    CHECK(!sp_quant_can_write(SP_TYPE_Q8_1) && sp_quant_can_write(SP_TYPE_Q3_K), "can_write");
}

int main(void)
{
    sp_quant_init();
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_abandoned();
    test_quantisers();
    rmdir(dir);
    return sp_check_report("test_gguf_writer");
}
