/* spindle pull [hf.co/]ORG/REPO[:QUANT] [--offline]: fetches a GGUF model
 * from the Hugging Face hub into the model store (tools/store.h).
 *
 * The hub's public HTTP API at $HF_ENDPOINT (default https://huggingface.co):
 *   GET /api/models/ORG/REPO?blobs=true      the repository: its canonical
 *       id, its commit (sha) and its files (siblings[].rfilename, with
 *       size and lfs.sha256 for LFS files)
 *   GET /ORG/REPO/resolve/REVISION/FILE      one file (redirected to the
 *       CDN; Range: bytes=N- resumes), REVISION the listed commit
 * The file of the quantization (default Q4_K_M) is picked by name, every
 * part of a split GGUF with it; each is written to NAME.partial, resumed
 * with Range after a cut connection (again within this run, or by the
 * next pull), checked against the sha256 the hub lists and only then
 * renamed to NAME.  The manifest comes last: until it exists the model is
 * not stored.  A failure that no retry mends (a full disk, a wrong sha256)
 * leaves nothing behind.
 *
 * Exit status: 0 stored (stdout: the model's file), 2 bad input (the name,
 * an unknown repository, no GGUF of that quantization), 1 anything else
 * (the network, the disk, a wrong sha256). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "hub.h"
#include "sha256.h"
#include "store.h"
#include "tools.h"

#define SP_PULL_ENDPOINT "https://huggingface.co"
#define SP_PULL_LISTING_MAX ((size_t)64 << 20)
#define SP_PULL_ATTEMPTS 5
#define SP_PULL_MAX_FILES 1024

static const char sp_pull_usage[] =
    "usage: spindle pull [hf.co/]ORG/REPO[:QUANT] [--offline]\n"
    "  fetches the GGUF file of quantization QUANT (default " SP_STORE_DEFAULT_QUANT ") of a Hugging Face\n"
    "  repository into the model store, verified by sha256; prints its path.\n"
    "  --offline   never use the network: succeed only if the model is stored\n"
    "environment: HF_ENDPOINT (default " SP_PULL_ENDPOINT "), HF_TOKEN (private and gated\n"
    "  repositories), SPINDLE_MODELS (the store, default ~/.cache/spindle)\n"
    "then: spindle run -m ORG/REPO:QUANT ..., spindle list, spindle rm NAME\n";

/* What a step came to: the exit status, and FATAL: exit status 1 after a
 * failure no retry mends (the disk, the file's bytes), which removes
 * everything this model's folder holds. */
enum { SP_PULL_OK = 0, SP_PULL_FAIL = 1, SP_PULL_BAD = 2, SP_PULL_FATAL = 3 };

struct sp_pull {
    struct sp_store_name name;   /* canonical once the hub answered */
    char root[4096], dir[4096 + 512];
    char endpoint[1024], revision[64];
    struct sp_hub *hub;
    struct sp_store_file *files;
    size_t n_files;
    bool tty;
};

static double sp_pull_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sp_pull_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sp_pull_step(const char *fmt, ...)
{
    va_list ap;
    fputs("pull: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* The progress line of one file on a terminal: bytes, rate, time left. */
struct sp_pull_meter {
    const char *name;
    uint64_t size, from;
    double t0, last;
    bool drawn;
};

static void sp_pull_meter_draw(void *ctx, uint64_t have)
{
    struct sp_pull_meter *m = ctx;
    double now = sp_pull_now();
    if (have < m->from) {       /* the server sent the whole file again */
        m->from = have;
        m->t0 = now;
    }
    if (have < m->size && now - m->last < 0.25)
        return;
    m->last = now;
    char got[32], all[32], rate[32], left[32] = "";
    double bps = now > m->t0 ? (double)(have - m->from) / (now - m->t0) : 0;
    sp_tool_bytes(have, got, sizeof got);
    sp_tool_bytes(m->size, all, sizeof all);
    sp_tool_bytes((uint64_t)bps, rate, sizeof rate);
    if (bps > 0 && have < m->size) {
        double s = (double)(m->size - have) / bps;
        if (s >= 3600)
            snprintf(left, sizeof left, "  %dh%02dm left", (int)(s / 3600), (int)(s / 60) % 60);
        else if (s >= 60)
            snprintf(left, sizeof left, "  %dm%02ds left", (int)(s / 60), (int)s % 60);
        else
            snprintf(left, sizeof left, "  %ds left", (int)s + 1);
    }
    fprintf(stderr, "\r%s  %s / %s  %s/s%s\033[K", m->name, got, all, rate, left);
    m->drawn = true;
}

/* Feeds the first n bytes of fd to sha; 0 or errno. */
static int sp_pull_hash_prefix(int fd, uint64_t n, struct sp_sha256 *sha)
{
    static char buf[1 << 16];
    uint64_t off = 0;
    while (off < n) {
        size_t want = n - off < sizeof buf ? (size_t)(n - off) : sizeof buf;
        ssize_t r = pread(fd, buf, want, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? errno : EIO;
        sp_sha256_update(sha, buf, (size_t)r);
        off += (uint64_t)r;
    }
    return 0;
}

/* Checks an existing final file against its sha256: true when it is good. */
static bool sp_pull_file_good(const char *path, const struct sp_store_file *f)
{
    struct stat st;
    struct sp_sha256 sha = {0};
    char hex[65] = "";
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size)
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    if (sp_sha256_init(&sha) && sp_pull_hash_prefix(fd, f->size, &sha) == 0)
        sp_sha256_hex(&sha, hex);
    close(fd);
    sp_sha256_free(&sha);
    return hex[0] && !strcmp(hex, f->sha256);
}

/* Fetches the rest of f into the sink (its fd the partial file, its ctx
 * the progress meter), up to SP_PULL_ATTEMPTS tries; SP_PULL_OK when every
 * byte is here. */
static int sp_pull_transfer(struct sp_pull *p, const struct sp_store_file *f, const char *url,
                            struct sp_hub_sink *sink, const char *partial)
{
    struct sp_pull_meter *meter = sink->ctx;
    char err[512];
    for (int attempt = 1; sink->have < f->size; attempt++) {
        uint64_t before = sink->have;
        long status;
        meter->from = before;
        meter->t0 = meter->last = sp_pull_now();
        if (lseek(sink->fd, (off_t)before, SEEK_SET) < 0) {
            sp_tool_fail("pull: cannot write %s: %s", partial, strerror(errno));
            return SP_PULL_FAIL;
        }
        enum sp_hub_rc r = sp_hub_fetch(p->hub, url, sink, &status, err, sizeof err);
        if (meter->drawn) {
            fputc('\n', stderr);
            meter->drawn = false;
        }
        if (r == SP_HUB_OK && sink->have < f->size) {
            snprintf(err, sizeof err, "the server ended the file after %" PRIu64 " of %" PRIu64 " bytes", sink->have,
                     f->size);
            r = SP_HUB_NET;
        }
        if (r == SP_HUB_OK)
            break;
        if (r == SP_HUB_WRITE) {
            sp_tool_fail("pull: writing %s: %s", partial, err);
            return SP_PULL_FATAL;
        }
        if (r == SP_HUB_BAD) {
            sp_tool_fail("pull: %s: %s", f->name, err);
            return SP_PULL_FATAL;
        }
        if (r == SP_HUB_HTTP) {
            sp_tool_fail("pull: %s answered %s for %s%s", p->endpoint, err, f->hub_path,
                         status == 401 || status == 403
                             ? " (a gated or private repository: accept its terms on the hub and set HF_TOKEN)"
                             : "");
            return SP_PULL_FAIL;
        }
        if (attempt == SP_PULL_ATTEMPTS) {
            sp_tool_fail("pull: network error fetching %s after %d tries (%" PRIu64 " of %" PRIu64
                         " bytes here; spindle pull again resumes): %s",
                         f->name, attempt, sink->have, f->size, err);
            return SP_PULL_FAIL;
        }
        sp_pull_step("%s: connection lost at %" PRIu64 " of %" PRIu64 " bytes (%s); retrying", f->name, sink->have,
                     f->size, err);
        /* a connection that moved bytes is retried at once; one that did
         * not, after 1, 2, 4 ... seconds */
        if (sink->have == before)
            sleep(1u << (attempt - 1));
    }
    return SP_PULL_OK;
}

/* Downloads one file (resuming NAME.partial) and renames it into place
 * after its sha256 checks.  0, or an exit status after one line. */
static int sp_pull_fetch(struct sp_pull *p, const struct sp_store_file *f)
{
    char final[sizeof p->dir + 300], partial[sizeof final + 8], hex[65];
    struct sp_sha256 sha = {0};
    int fd = -1, rc = SP_PULL_FAIL, e;
    char *url = NULL, *hub_path = NULL;
    snprintf(final, sizeof final, "%s/%s", p->dir, f->name);
    snprintf(partial, sizeof partial, "%s.partial", final);
    if (sp_pull_file_good(final, f)) {
        sp_pull_step("%s: already here, sha256 ok", f->name);
        return 0;
    }
    unlink(final);
    fd = open(partial, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        sp_tool_fail("pull: cannot write %s: %s", partial, strerror(errno));
        goto done;
    }
    uint64_t have = (uint64_t)st.st_size;
    if (have > f->size) {
        if (ftruncate(fd, 0) != 0) {
            sp_tool_fail("pull: cannot write %s: %s", partial, strerror(errno));
            goto done;
        }
        have = 0;
    }
    if (!sp_sha256_init(&sha)) {
        sp_tool_fail("pull: out of memory");
        goto done;
    }
    if ((e = sp_pull_hash_prefix(fd, have, &sha)) != 0) {
        sp_tool_fail("pull: cannot read %s: %s", partial, strerror(e));
        goto done;
    }
    if (have > 0)
        sp_pull_step("%s: resuming at %" PRIu64 " of %" PRIu64 " bytes", f->name, have, f->size);
    hub_path = sp_hub_escape_path(p->hub, f->hub_path);
    size_t ul = (hub_path ? strlen(hub_path) : 0) + 2 * SP_STORE_ID_MAX + sizeof p->revision + 32;
    if (!hub_path || !(url = malloc(ul))) {
        sp_tool_fail("pull: out of memory");
        goto done;
    }
    snprintf(url, ul, "/%s/%s/resolve/%s/%s", p->name.org, p->name.repo, p->revision, hub_path);
    struct sp_pull_meter meter = {.name = f->name, .size = f->size};
    struct sp_hub_sink sink = {.fd = fd, .have = have, .size = f->size, .sha = &sha,
                               .progress = p->tty ? sp_pull_meter_draw : NULL, .ctx = &meter};
    if ((rc = sp_pull_transfer(p, f, url, &sink, partial)) != SP_PULL_OK)
        goto done;
    rc = SP_PULL_FAIL;
    sp_sha256_hex(&sha, hex);
    if (strcmp(hex, f->sha256)) {
        rc = SP_PULL_FATAL;
        sp_tool_fail("pull: %s: sha256 mismatch (the hub lists %s, the download is %s): refused, nothing stored",
                     f->name, f->sha256, hex);
        goto done;
    }
    e = fsync(fd) != 0 ? errno : 0;
    if (close(fd) != 0 && !e)
        e = errno;
    fd = -1;
    if (e) {
        rc = SP_PULL_FATAL;
        sp_tool_fail("pull: writing %s: %s", partial, strerror(e));
        goto done;
    }
    if (rename(partial, final) != 0) {
        rc = SP_PULL_FATAL;
        sp_tool_fail("pull: cannot rename %s: %s", partial, strerror(errno));
        goto done;
    }
    sp_pull_step("%s: %" PRIu64 " bytes, sha256 ok", f->name, f->size);
    rc = 0;
done:
    if (fd >= 0)
        close(fd);
    if (rc == SP_PULL_FATAL)
        unlink(partial);
    free(url);
    free(hub_path);
    sp_sha256_free(&sha);
    return rc;
}

/* A GGUF file the repository lists, as selection sees it. */
struct sp_pull_cand {
    const char *path;        /* rfilename */
    char stem[256];          /* file name less .gguf and a split suffix */
    size_t dir_len;          /* length of the folder part of path */
    unsigned part, of;       /* -00001-of-00003: 1, 3; 0, 0 for a single file */
    json_t *entry;           /* the sibling */
};

/* A path in the repository safe to fetch and to name a local file after:
 * non-empty components, no "." or "..", no control characters or '\\',
 * and a file name not starting with '.'. */
static bool sp_pull_path_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 1000 || s[0] == '/' || s[n - 1] == '/' || strstr(s, "//"))
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == '\\' ||
            ((i == 0 || s[i - 1] == '/') && s[i] == '.'))
            return false;
    const char *base = strrchr(s, '/');
    return strlen(base ? base + 1 : s) <= 200;
}

/* Fills c from a sibling's rfilename; false when it is no model GGUF (not
 * .gguf, a multimodal projector, or a path not safe to use). */
static bool sp_pull_cand_of(const char *path, json_t *entry, struct sp_pull_cand *c)
{
    size_t n = strlen(path);
    if (n < 6 || strcasecmp(path + n - 5, ".gguf") || !sp_pull_path_ok(path))
        return false;
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!strncasecmp(base, "mmproj", 6))
        return false;
    memset(c, 0, sizeof *c);
    c->path = path;
    c->entry = entry;
    c->dir_len = (size_t)(base - path);
    size_t sl = strlen(base) - 5;
    unsigned a, b;
    char tail[17];
    /* a split part: STEM-00001-of-00003 */
    if (sl > 15 && sscanf(base + sl - 15, "-%5u-of-%5u", &a, &b) == 2 && isdigit((unsigned char)base[sl - 14]) &&
        isdigit((unsigned char)base[sl - 5]) && snprintf(tail, sizeof tail, "-%05u-of-%05u", a, b) == 15 &&
        !strncmp(tail, base + sl - 15, 15) && a >= 1 && a <= b) {
        c->part = a;
        c->of = b;
        sl -= 15;
    }
    snprintf(c->stem, sizeof c->stem, "%.*s", (int)sl, base);
    return true;
}

/* How well quant q names a stem: 2 when the stem ends with it, 1 when it
 * stands inside it, 0 not at all; either way as a whole word: after the
 * start or a character other than a letter or digit, and before the end or
 * a character other than a letter, digit or '_' (Q4_K is not Q4_K_M). */
static int sp_pull_match(const char *stem, const char *q)
{
    size_t n = strlen(stem), qn = strlen(q);
    int best = 0;
    for (size_t i = 0; i + qn <= n; i++) {
        if (strncasecmp(stem + i, q, qn) || (i > 0 && isalnum((unsigned char)stem[i - 1])))
            continue;
        char after = stem[i + qn];
        if (!after)
            return 2;
        if (!isalnum((unsigned char)after) && after != '_')
            best = 1;
    }
    return best;
}

static bool sp_pull_same_group(const struct sp_pull_cand *a, const struct sp_pull_cand *b)
{
    return a->dir_len == b->dir_len && !strncmp(a->path, b->path, a->dir_len) && !strcmp(a->stem, b->stem);
}

/* "Q8_0, F16" of the quantizations the candidates' names end in. */
static void sp_pull_quants_line(const struct sp_pull_cand *c, size_t n, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const char *sep = NULL;
        for (const char *s = c[i].stem; *s; s++)
            if (*s == '-' || *s == '.')
                sep = s;
        char tag[64];
        snprintf(tag, sizeof tag, "%s", sep ? sep + 1 : c[i].stem);
        for (char *t = tag; *t; t++)
            *t = (char)toupper((unsigned char)*t);
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) {
            const char *s2 = NULL;
            for (const char *s = c[j].stem; *s; s++)
                if (*s == '-' || *s == '.')
                    s2 = s;
            seen = !strcasecmp(s2 ? s2 + 1 : c[j].stem, tag);
        }
        int k = seen ? 0 : snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", tag);
        if (k < 0 || (size_t)k >= cap - used)
            break;
        used += (size_t)k;
    }
}

/* The sha256 and size the hub lists for a sibling into f; false when it
 * lists none (not an LFS file). */
static bool sp_pull_lfs(json_t *entry, struct sp_store_file *f)
{
    json_t *lfs = json_object_get(entry, "lfs"), *sha = json_object_get(lfs, "sha256");
    json_t *size = json_object_get(lfs, "size");
    if (!json_is_integer(size))
        size = json_object_get(entry, "size");
    /* sizes are the server's word: at most 1 PiB a file, so sums of them
     * cannot overflow */
    if (!json_is_string(sha) || strlen(json_string_value(sha)) != 64 || !json_is_integer(size) ||
        json_integer_value(size) <= 0 || json_integer_value(size) > ((json_int_t)1 << 50))
        return false;
    const char *s = json_string_value(sha);
    for (int i = 0; i < 64; i++) {
        if (!isxdigit((unsigned char)s[i]))
            return false;
        f->sha256[i] = (char)tolower((unsigned char)s[i]);
    }
    f->sha256[64] = '\0';
    f->size = (uint64_t)json_integer_value(size);
    return true;
}

static int sp_pull_cand_cmp(const void *a, const void *b)
{
    const struct sp_pull_cand *x = a, *y = b;
    return x->part != y->part ? (x->part < y->part ? -1 : 1) : strcmp(x->path, y->path);
}

/* Picks the files of p->name.quant among the siblings into p->files. */
static int sp_pull_select(struct sp_pull *p, json_t *siblings)
{
    size_t n = 0, n_sib = json_array_size(siblings), picked = 0;
    struct sp_pull_cand *c = calloc(n_sib ? n_sib : 1, sizeof *c);
    char line[1024], repo[256];
    int rc = SP_PULL_BAD, best = 0;
    snprintf(repo, sizeof repo, "%s/%s", p->name.org, p->name.repo);
    if (!c) {
        sp_tool_fail("pull: out of memory");
        return SP_PULL_FAIL;
    }
    for (size_t i = 0; i < n_sib; i++) {
        json_t *e = json_array_get(siblings, i), *rf = json_object_get(e, "rfilename");
        if (json_is_string(rf) && sp_pull_cand_of(json_string_value(rf), e, &c[n]))
            n++;
    }
    for (size_t i = 0; i < n; i++) {
        int m = sp_pull_match(c[i].stem, p->name.quant);
        best = m > best ? m : best;
    }
    if (n == 0) {
        sp_tool_fail("pull: %s has no GGUF files", repo);
        goto done;
    }
    if (best == 0) {
        sp_pull_quants_line(c, n, line, sizeof line);
        sp_tool_fail("pull: %s has no GGUF file of %s; it has: %s", repo, p->name.quant, line);
        goto done;
    }
    /* the matches of the best kind; they must be one file or one split set */
    struct sp_pull_cand first;
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        if (sp_pull_match(c[i].stem, p->name.quant) != best)
            continue;
        if (found && !sp_pull_same_group(&first, &c[i])) {
            sp_tool_fail("pull: %s has several GGUF files of %s: %.*s%s.gguf and %.*s%s.gguf (give the full tag)",
                         repo, p->name.quant, (int)first.dir_len, first.path, first.stem, (int)c[i].dir_len,
                         c[i].path, c[i].stem);
            goto done;
        }
        if (!found)
            first = c[i];
        found = true;
    }
    for (size_t i = 0; i < n; i++)
        if (sp_pull_same_group(&first, &c[i]))
            c[picked++] = c[i];
    qsort(c, picked, sizeof *c, sp_pull_cand_cmp);
    rc = SP_PULL_FAIL;
    if (!c[0].of && picked > 1) {
        sp_tool_fail("pull: %s lists %s more than once", repo, c[0].path);
        goto done;
    }
    for (size_t i = 0; i < picked; i++)
        if (c[i].of != c[0].of || (c[0].of && (c[i].part != i + 1 || picked != c[0].of))) {
            sp_tool_fail("pull: %s lists an incomplete split set of %s%s.gguf (%zu files)", repo, c[0].stem,
                         c[0].of ? "-NNNNN-of-NNNNN" : "", picked);
            goto done;
        }
    if (picked > SP_PULL_MAX_FILES || !(p->files = calloc(picked, sizeof *p->files))) {
        sp_tool_fail("pull: %s: too many files", repo);
        goto done;
    }
    for (size_t i = 0; i < picked; i++) {
        struct sp_store_file *f = &p->files[i];
        const char *base = c[i].path + c[i].dir_len;
        if (!sp_pull_lfs(c[i].entry, f)) {
            sp_tool_fail("pull: the hub lists no sha256 and size (up to 1 PiB) for %s of %s: refused", c[i].path,
                         repo);
            goto done;
        }
        if (!(f->name = strdup(base)) || !(f->hub_path = strdup(c[i].path))) {
            sp_tool_fail("pull: out of memory");
            goto done;
        }
        p->n_files = i + 1;
    }
    rc = SP_PULL_OK;
done:
    free(c);
    return rc;
}

/* Asks the hub for the repository and picks the files: its canonical id
 * and commit go into p. */
static int sp_pull_listing(struct sp_pull *p)
{
    char path[2 * SP_STORE_ID_MAX + 64], err[512], repo[256];
    char *body = NULL;
    size_t len = 0;
    long status = 0;
    int rc = SP_PULL_FAIL;
    json_t *root = NULL;
    snprintf(repo, sizeof repo, "%s/%s", p->name.org, p->name.repo);
    snprintf(path, sizeof path, "/api/models/%s/%s?blobs=true", p->name.org, p->name.repo);
    enum sp_hub_rc r = sp_hub_get(p->hub, path, SP_PULL_LISTING_MAX, &body, &len, &status, err, sizeof err);
    if (r == SP_HUB_HTTP && (status == 401 || status == 404)) {
        /* the hub answers 401 to an anonymous request for a repository
         * that does not exist or is private, 404 to one with a token */
        const char *hint = getenv("HF_TOKEN") && *getenv("HF_TOKEN") ? "; or HF_TOKEN has no access to it"
                                                                      : "; if it is private, set HF_TOKEN";
        sp_tool_fail("pull: no repository %s on %s (HTTP %ld%s)", repo, p->endpoint, status, hint);
        return SP_PULL_BAD;
    }
    if (r == SP_HUB_HTTP && status == 403) {
        sp_tool_fail("pull: access to %s is restricted (HTTP 403): accept its terms on the hub and set HF_TOKEN",
                     repo);
        return SP_PULL_BAD;
    }
    if (r == SP_HUB_HTTP) {
        sp_tool_fail("pull: %s answered HTTP %ld for %s", p->endpoint, status, repo);
        return SP_PULL_FAIL;
    }
    if (r != SP_HUB_OK) {
        sp_tool_fail("pull: cannot reach %s: %s", p->endpoint, err);
        return SP_PULL_FAIL;
    }
    json_error_t je;
    root = json_loadb(body, len, 0, &je);
    json_t *id = json_object_get(root, "id"), *sha = json_object_get(root, "sha");
    json_t *siblings = json_object_get(root, "siblings");
    const char *ids = json_is_string(id) ? json_string_value(id) : "", *slash = strchr(ids, '/');
    struct sp_store_name canon = p->name;
    if (!json_is_array(siblings) || !slash || (size_t)(slash - ids) > SP_STORE_ID_MAX ||
        strlen(slash + 1) > SP_STORE_ID_MAX) {
        sp_tool_fail("pull: %s's answer for %s is not a model listing", p->endpoint, repo);
        goto done;
    }
    snprintf(canon.org, sizeof canon.org, "%.*s", (int)(slash - ids), ids);
    snprintf(canon.repo, sizeof canon.repo, "%s", slash + 1);
    if (!sp_store_id_ok(canon.org) || !sp_store_id_ok(canon.repo)) {
        sp_tool_fail("pull: %s names the repository '%s', which is not ORG/REPO", p->endpoint, ids);
        goto done;
    }
    p->name = canon;
    snprintf(p->revision, sizeof p->revision, "main");
    if (json_is_string(sha) && strlen(json_string_value(sha)) == 40 &&
        strspn(json_string_value(sha), "0123456789abcdef") == 40)
        snprintf(p->revision, sizeof p->revision, "%s", json_string_value(sha));
    rc = sp_pull_select(p, siblings);
done:
    json_decref(root);
    free(body);
    return rc;
}

/* Locks the model's folder against a second pull or rm; the descriptor, or
 * -1 after one line. */
static int sp_pull_lock(const char *dir, const char *name)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        sp_tool_fail("pull: cannot open %s: %s", dir, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        sp_tool_fail("pull: another spindle is pulling or removing %s", name);
        close(fd);
        return -1;
    }
    return fd;
}

/* mkdir -p of the model's folder under the root. */
static int sp_pull_mkdirs(char *path)
{
    for (char *s = path + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        int r = mkdir(path, 0755);
        *s = '/';
        if (r != 0 && errno != EEXIST)
            return errno;
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? errno : 0;
}

/* Bytes still to come, against the free space of the folder. */
static int sp_pull_space(struct sp_pull *p)
{
    uint64_t need = 0;
    struct statvfs vfs;
    for (size_t i = 0; i < p->n_files; i++) {
        char path[sizeof p->dir + 300];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", p->dir, p->files[i].name);
        if (stat(path, &st) == 0 && (uint64_t)st.st_size == p->files[i].size)
            continue;
        snprintf(path, sizeof path, "%s/%s.partial", p->dir, p->files[i].name);
        uint64_t have = stat(path, &st) == 0 && (uint64_t)st.st_size <= p->files[i].size ? (uint64_t)st.st_size : 0;
        need += p->files[i].size - have;
    }
    if (statvfs(p->dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        char a[32], b[32];
        sp_tool_bytes(need, a, sizeof a);
        sp_tool_bytes((uint64_t)vfs.f_bavail * vfs.f_frsize, b, sizeof b);
        sp_tool_fail("pull: not enough space in %s: the download needs %s, %s is free", p->dir, a, b);
        return SP_PULL_FATAL;
    }
    return SP_PULL_OK;
}

/* After a failure the next pull may mend: the partial files that hold
 * bytes stay for it to resume; empty ones, and folders left empty, go. */
static void sp_pull_tidy(struct sp_pull *p)
{
    char path[sizeof p->dir + 300];
    struct stat st;
    for (size_t i = 0; i < p->n_files; i++) {
        snprintf(path, sizeof path, "%s/%s.partial", p->dir, p->files[i].name);
        if (stat(path, &st) == 0 && st.st_size == 0)
            unlink(path);
    }
    snprintf(path, sizeof path, "%s", p->dir);
    /* QUANT, REPO, ORG and hf.co, while empty */
    for (int level = 0; level < 4 && rmdir(path) == 0; level++) {
        char *slash = strrchr(path, '/');
        if (!slash || (size_t)(slash - path) <= strlen(p->root))
            break;
        *slash = '\0';
    }
}

/* The network part: listing, folder, files, manifest. */
static int sp_pull_fetch_all(struct sp_pull *p)
{
    char err[512], name[256], total_s[32], manifest[sizeof p->dir + 32];
    int rc, lock = -1, e;
    if (!(p->hub = sp_hub_open(p->endpoint, getenv("HF_TOKEN"), err, sizeof err))) {
        sp_tool_fail("pull: %s", err);
        return SP_PULL_FAIL;
    }
    if ((rc = sp_pull_listing(p)) != SP_PULL_OK)
        return rc;
    sp_store_name_format(&p->name, name, sizeof name);
    if (!sp_store_model_dir(p->root, &p->name, p->dir, sizeof p->dir)) {
        sp_tool_fail("pull: the store's path %s is too long", p->root);
        return SP_PULL_FAIL;
    }
    if ((e = sp_pull_mkdirs(p->dir)) != 0) {
        sp_tool_fail("pull: cannot make %s: %s", p->dir, strerror(e));
        return SP_PULL_FAIL;
    }
    if ((lock = sp_pull_lock(p->dir, name)) < 0)
        return SP_PULL_FAIL;
    /* a model being pulled again is not stored until it is whole again */
    snprintf(manifest, sizeof manifest, "%s/manifest.json", p->dir);
    unlink(manifest);
    uint64_t total = 0;
    for (size_t i = 0; i < p->n_files; i++)
        total += p->files[i].size;
    sp_tool_bytes(total, total_s, sizeof total_s);
    sp_pull_step("hf.co/%s from %s (revision %.12s): %zu file%s, %s", name, p->endpoint, p->revision, p->n_files,
                 p->n_files == 1 ? "" : "s", total_s);
    rc = sp_pull_space(p);
    for (size_t i = 0; rc == SP_PULL_OK && i < p->n_files; i++)
        rc = sp_pull_fetch(p, &p->files[i]);
    if (rc == SP_PULL_OK &&
        (e = sp_store_manifest_write(p->dir, &p->name, p->endpoint, p->revision, p->files, p->n_files)) != 0) {
        sp_tool_fail("pull: writing %s: %s", manifest, strerror(e));
        rc = SP_PULL_FATAL;
    }
    if (rc == SP_PULL_OK && fsync(lock) != 0) {
        sp_tool_fail("pull: writing %s: %s", p->dir, strerror(errno));
        rc = SP_PULL_FATAL;
    }
    if (rc == SP_PULL_OK)
        sp_pull_step("stored %s in %s", name, p->dir);
    /* still locked: nothing else writes here while it goes */
    if (rc == SP_PULL_FATAL && (e = sp_store_remove_dir(p->root, p->dir)) != 0)
        fprintf(stderr, "spindle: pull: could not remove %s: %s\n", p->dir, strerror(e));
    if (rc == SP_PULL_FAIL)
        sp_pull_tidy(p);
    close(lock);
    return rc;
}

/* The stored copy of the model named, if whole: its first file, malloc'd. */
static char *sp_pull_stored(const struct sp_pull *p)
{
    struct sp_store_model *m = NULL;
    size_t n = 0;
    char *path = NULL;
    if (!sp_store_scan(p->root, &m, &n))
        return NULL;
    for (size_t i = 0; i < n && !path; i++)
        if (!strcasecmp(m[i].name.org, p->name.org) && !strcasecmp(m[i].name.repo, p->name.repo) &&
            !strcasecmp(m[i].name.quant, p->name.quant) && m[i].complete)
            path = strdup(m[i].path);
    sp_store_models_free(m, n);
    return path;
}

int sp_tool_pull(int argc, char **argv)
{
    const char *arg = NULL;
    bool offline = false;
    struct sp_pull p;
    memset(&p, 0, sizeof p);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(sp_pull_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--offline"))
            offline = true;
        else if (argv[i][0] == '-')
            return sp_tool_fail("pull: unknown option '%s' (see spindle pull --help)", argv[i]);
        else if (arg)
            return sp_tool_fail("pull: one model at a time ('%s' and '%s')", arg, argv[i]);
        else
            arg = argv[i];
    }
    if (!arg)
        return sp_tool_fail("pull: give a model, [hf.co/]ORG/REPO[:QUANT] (see spindle pull --help)");
    if (!sp_store_name_parse(arg, &p.name) || !p.name.org[0])
        return sp_tool_fail("pull: '%s' is not a model name: [hf.co/]ORG/REPO[:QUANT]", arg);
    if (!p.name.quant[0])
        snprintf(p.name.quant, sizeof p.name.quant, "%s", SP_STORE_DEFAULT_QUANT);
    if (!sp_store_root(p.root, sizeof p.root))
        return SP_PULL_BAD;
    char *stored = sp_pull_stored(&p), name[256];
    sp_store_name_format(&p.name, name, sizeof name);
    if (stored) {
        sp_pull_step("%s is stored already (no network used)", name);
        puts(stored);
        free(stored);
        return 0;
    }
    if (offline) {
        sp_tool_fail("pull: %s is not stored in %s, and --offline forbids the network", name, p.root);
        return SP_PULL_FAIL;
    }
    const char *ep = getenv("HF_ENDPOINT");
    int n = snprintf(p.endpoint, sizeof p.endpoint, "%s", ep && *ep ? ep : SP_PULL_ENDPOINT);
    while (n > 0 && p.endpoint[n - 1] == '/')
        p.endpoint[--n] = '\0';
    if (n <= 0 || (size_t)n >= sizeof p.endpoint || (strncmp(p.endpoint, "http://", 7) &&
                                                      strncmp(p.endpoint, "https://", 8)))
        return sp_tool_fail("pull: HF_ENDPOINT is not an http:// or https:// URL");
    p.tty = isatty(STDERR_FILENO);
    int rc = sp_pull_fetch_all(&p);
    if (rc == SP_PULL_OK)
        printf("%s/%s\n", p.dir, p.files[0].name);
    for (size_t i = 0; i < p.n_files; i++) {
        free(p.files[i].name);
        free(p.files[i].hub_path);
    }
    free(p.files);
    sp_hub_close(p.hub);
    return rc == SP_PULL_FATAL ? SP_PULL_FAIL : rc;
}
