/* Stop sequences over streamed text (src/engine/stop.c). */
#include <string.h>

#include "check.h"
#include "engine/stop.h"

/* Feed the NULL-terminated list of pieces, then flush unless stopped.
 * Writes the emitted text to `got` and returns whether it stopped.  Also
 * checks that the emitted stream is always a prefix of what was fed and that
 * nothing more than SP_STOP_MAX_LEN - 1 bytes is ever held. */
static bool run(const char *const *stops, size_t n_stops, const char *const *pieces, char *got)
{
    struct sp_stop st;
    char fed[4096], buf[1024];
    size_t n_fed = 0, n_got = 0;
    struct sp_stop_result r = {0, false};

    CHECK(sp_stop_init(&st, stops, n_stops) == SP_OK, "init");
    for (size_t i = 0; pieces[i]; i++) {
        size_t len = strlen(pieces[i]);
        memcpy(fed + n_fed, pieces[i], len);
        n_fed += len;
        CHECK(sp_stop_feed(&st, pieces[i], len, buf, &r) == SP_OK, "feed");
        memcpy(got + n_got, buf, r.n_emit);
        n_got += r.n_emit;
        CHECK(n_got <= n_fed && memcmp(got, fed, n_got) == 0, "emitted text is a prefix of fed");
        CHECK(st.n_held < SP_STOP_MAX_LEN, "held %zu", st.n_held);
        if (!r.stopped)
            CHECK(n_got + st.n_held == n_fed, "every byte is emitted or held");
    }
    if (!r.stopped) {
        size_t n = sp_stop_flush(&st, buf);
        memcpy(got + n_got, buf, n);
        n_got += n;
        CHECK(n_got == n_fed, "flush releases everything (%zu of %zu)", n_got, n_fed);
    }
    got[n_got] = '\0';
    return r.stopped;
}

#define PIECES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect(const char *const *stops, size_t n_stops, const char *const *pieces,
                   const char *want, bool want_stop, const char *what)
{
    char got[4096];
    bool stopped = run(stops, n_stops, pieces, got);
    CHECK(stopped == want_stop, "%s: stopped %d, want %d", what, stopped, want_stop);
    CHECK(strcmp(got, want) == 0, "%s: got '%s', want '%s'", what, got, want);
}

static void test_basic(void)
{
    const char *s1[] = {"STOP"};
    expect(s1, 1, PIECES("hello ", "world"), "hello world", false, "no match");
    expect(s1, 1, PIECES("hello STOP there"), "hello ", true, "inside one piece");
    expect(s1, 1, PIECES("hello ST", "OP there"), "hello ", true, "split across two");
    expect(s1, 1, PIECES("hel", "lo S", "T", "O", "P!"), "hello ", true, "split over four");
    expect(s1, 1, PIECES("STOP"), "", true, "stop at the very start");
    expect(s1, 1, PIECES("S", "TOP", "more"), "", true, "split stop at the start");
    expect(s1, 1, PIECES("hello ST"), "hello ST", false, "partial at the end is flushed");
    expect(s1, 1, PIECES("ST", "ART"), "START", false, "false start released");
    expect(s1, 1, PIECES("SSSTO", "STOP"), "SSSTO", true, "repeated prefix");
    expect(NULL, 0, PIECES("anything STOP"), "anything STOP", false, "no stop strings");
}

static void test_held_back(void)
{
    struct sp_stop st;
    struct sp_stop_result r;
    const char *s[] = {"</s>"};
    char buf[512];

    CHECK(sp_stop_init(&st, s, 1) == SP_OK, "init");
    CHECK(sp_stop_feed(&st, "abc<", 4, buf, &r) == SP_OK && r.n_emit == 3 && !r.stopped,
          "'<' is held back: emit %zu", r.n_emit);
    CHECK(memcmp(buf, "abc", 3) == 0, "emits abc");
    CHECK(sp_stop_feed(&st, "/", 1, buf, &r) == SP_OK && r.n_emit == 0, "'</' held: %zu",
          r.n_emit);
    CHECK(sp_stop_feed(&st, "x", 1, buf, &r) == SP_OK && r.n_emit == 3 &&
              memcmp(buf, "</x", 3) == 0,
          "mismatch releases the held text: %zu", r.n_emit);
    CHECK(sp_stop_feed(&st, "</s", 3, NULL, &r) == SP_OK && r.n_emit == 0, "count-only mode");
    CHECK(sp_stop_feed(&st, ">tail", 5, buf, &r) == SP_OK && r.n_emit == 0 && r.stopped,
          "completes across pieces");
    CHECK(sp_stop_feed(&st, "more", 4, buf, &r) == SP_OK && r.n_emit == 0 && r.stopped,
          "nothing after a stop");
    CHECK(sp_stop_flush(&st, buf) == 0, "flush after stop emits nothing");
}

static void test_overlaps(void)
{
    const char *ab_abc[] = {"abc", "ab"};
    expect(ab_abc, 2, PIECES("xxabc"), "xx", true, "ab completes before abc");
    expect(ab_abc, 2, PIECES("xxa", "bd"), "xx", true, "ab vs abc split");
    const char *abc[] = {"abc"};
    expect(abc, 1, PIECES("xxab", "d"), "xxabd", false, "ab was only a prefix");
    expect(abc, 1, PIECES("a", "a", "b", "c"), "a", true, "aabc: second a starts the stop");
    expect(abc, 1, PIECES("ab", "ab", "abc"), "abab", true, "restarting prefix");
    const char *aab[] = {"aab"};
    expect(aab, 1, PIECES("aa", "aab"), "aa", true, "self-overlapping aaaab");
    const char *bcd_b[] = {"bcd", "c"};
    expect(bcd_b, 2, PIECES("abcd"), "ab", true, "shorter stop completes first");
    const char *same_end[] = {"c", "abc"};
    expect(same_end, 2, PIECES("xabc"), "x", true, "same end: the longer wins");
    const char *multi[] = {"\n\n", "User:", "###"};
    expect(multi, 3, PIECES("Hi.", "\n", "Us", "er", ":"), "Hi.\n", true, "multiple stops");
    expect(multi, 3, PIECES("Hi.\n", "##", "#"), "Hi.\n", true, "third stop");
    expect(multi, 3, PIECES("a\nb", "#c"), "a\nb#c", false, "no stop completes");
}

static void test_utf8(void)
{
    const char *s[] = {"\xe2\x80\x94" "END"};   /* "—END" */
    expect(s, 1, PIECES("x\xe2\x80", "\x94", "EN", "D"), "x", true, "multibyte stop split");
    expect(s, 1, PIECES("\xe2\x80\x94", "EX"), "\xe2\x80\x94" "EX", false, "multibyte released");
}

static void test_limits(void)
{
    struct sp_stop st;
    const char *many[SP_STOP_MAX_STRINGS + 1];
    for (int i = 0; i <= SP_STOP_MAX_STRINGS; i++)
        many[i] = "x";
    CHECK(sp_stop_init(&st, many, SP_STOP_MAX_STRINGS) == SP_OK, "16 strings accepted");
    CHECK(sp_stop_init(&st, many, SP_STOP_MAX_STRINGS + 1) == SP_ERR_ARG, "17 rejected");
    const char *empty[] = {""};
    CHECK(sp_stop_init(&st, empty, 1) == SP_ERR_ARG, "empty rejected");
    static char longest[SP_STOP_MAX_LEN + 2];
    memset(longest, 'z', SP_STOP_MAX_LEN);
    const char *lp[] = {longest};
    CHECK(sp_stop_init(&st, lp, 1) == SP_OK, "256 bytes accepted");
    longest[SP_STOP_MAX_LEN] = 'z';
    CHECK(sp_stop_init(&st, lp, 1) == SP_ERR_ARG, "257 bytes rejected");
    longest[SP_STOP_MAX_LEN] = '\0';

    /* a 256-byte stop fed one byte at a time holds 255 and then stops */
    char got[4096], pieces_buf[SP_STOP_MAX_LEN + 1][2];
    const char *pieces[SP_STOP_MAX_LEN + 3];
    pieces[0] = "q";
    for (int i = 0; i < SP_STOP_MAX_LEN; i++) {
        pieces_buf[i][0] = 'z';
        pieces_buf[i][1] = '\0';
        pieces[i + 1] = pieces_buf[i];
    }
    pieces[SP_STOP_MAX_LEN + 1] = NULL;
    CHECK(run(lp, 1, pieces, got) && strcmp(got, "q") == 0, "long stop byte by byte: '%s'",
          got);
    /* 300 z's fed at once: the stop ends at byte 256 */
    char zs[301];
    memset(zs, 'z', 300);
    zs[300] = '\0';
    const char *p2[] = {zs, NULL};
    CHECK(run(lp, 1, p2, got) && got[0] == '\0', "long stop in one piece");

    struct sp_stop_result r;
    CHECK(sp_stop_init(&st, lp, 1) == SP_OK, "init");
    CHECK(sp_stop_feed(&st, NULL, 3, NULL, &r) == SP_ERR_ARG, "NULL piece rejected");
    CHECK(sp_stop_feed(&st, NULL, 0, NULL, &r) == SP_OK && r.n_emit == 0, "empty piece ok");
}

int main(void)
{
    test_basic();
    test_held_back();
    test_overlaps();
    test_utf8();
    test_limits();
    return sp_check_report("stop");
}
