#include "store.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools.h"

#define SP_STORE_HOST "hf.co"
#define SP_STORE_MANIFEST "manifest.json"
/* a manifest is a few hundred bytes; anything past this is not one */
#define SP_STORE_MANIFEST_MAX (1 << 20)

static bool sp_store_word(int c)
{
    return isalnum(c) || c == '_';
}

bool sp_store_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SP_STORE_ID_MAX || !sp_store_word((unsigned char)s[0]) ||
        !sp_store_word((unsigned char)s[n - 1]) || strstr(s, "--") || strstr(s, ".."))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!sp_store_word((unsigned char)s[i]) && s[i] != '-' && s[i] != '.')
            return false;
    return true;
}

static bool sp_store_quant_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SP_STORE_QUANT_MAX || !isalnum((unsigned char)s[0]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!sp_store_word((unsigned char)s[i]) && s[i] != '-')
            return false;
    return true;
}

/* Copies s[0..n) into dst[cap]; false when it does not fit. */
static bool sp_store_copy(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap)
        return false;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return true;
}

bool sp_store_name_parse(const char *s, struct sp_store_name *out)
{
    static const char *const hosts[] = {SP_STORE_HOST "/", "huggingface.co/"};
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++)
        if (!strncasecmp(s, hosts[i], strlen(hosts[i]))) {
            s += strlen(hosts[i]);
            break;
        }
    const char *colon = strchr(s, ':'), *end = colon ? colon : s + strlen(s);
    const char *slash = memchr(s, '/', (size_t)(end - s));
    if (colon && (!sp_store_copy(out->quant, sizeof out->quant, colon + 1, strlen(colon + 1)) ||
                  !sp_store_quant_ok(out->quant)))
        return false;
    for (char *q = out->quant; *q; q++)
        *q = (char)toupper((unsigned char)*q);
    if (slash && !sp_store_copy(out->org, sizeof out->org, s, (size_t)(slash - s)))
        return false;
    const char *repo = slash ? slash + 1 : s;
    if (!sp_store_copy(out->repo, sizeof out->repo, repo, (size_t)(end - repo)))
        return false;
    return (!slash || sp_store_id_ok(out->org)) && sp_store_id_ok(out->repo);
}

void sp_store_name_format(const struct sp_store_name *n, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s%s%s", n->org, n->org[0] ? "/" : "", n->repo, n->quant[0] ? ":" : "", n->quant);
}

bool sp_store_root(char *buf, size_t cap)
{
    const char *env = getenv("SPINDLE_MODELS"), *home = getenv("HOME");
    int n;
    if (env && *env)
        n = snprintf(buf, cap, "%s", env);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/spindle", home);
    else {
        sp_tool_fail("the model store needs $SPINDLE_MODELS or $HOME");
        return false;
    }
    if (n < 0 || (size_t)n >= cap) {
        sp_tool_fail("the model store's path ($SPINDLE_MODELS or $HOME) is too long");
        return false;
    }
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    return true;
}

bool sp_store_model_dir(const char *root, const struct sp_store_name *n, char *buf, size_t cap)
{
    int k = snprintf(buf, cap, "%s/" SP_STORE_HOST "/%s/%s/%s", root, n->org, n->repo, n->quant);
    return k > 0 && (size_t)k < cap;
}

static char *sp_store_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* A file name a manifest may give: one path component, no dot first. */
static bool sp_store_file_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == '/' || s[i] == '\\' || s[i] == 0x7f)
            return false;
    return true;
}

static bool sp_store_hex64(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!isxdigit((unsigned char)s[n]) || isupper((unsigned char)s[n]))
            return false;
    return n == 64;
}

/* Fills m from dir/manifest.json; NULL on success, else why it is no model. */
static const char *sp_store_read_manifest(const char *dir, const struct sp_store_name *name, struct sp_store_model *m)
{
    char *path = sp_store_join(dir, SP_STORE_MANIFEST), want[256];
    const char *why = NULL;
    json_t *root = NULL, *files;
    struct stat st;
    if (!path)
        return "out of memory";
    if (stat(path, &st) != 0 || st.st_size > SP_STORE_MANIFEST_MAX) {
        why = "unreadable or too long";
        goto done;
    }
    root = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
    files = json_object_get(root, "files");
    snprintf(want, sizeof want, "%s/%s", name->org, name->repo);
    if (!json_is_object(root) || !json_is_string(json_object_get(root, "repo")) ||
        strcmp(json_string_value(json_object_get(root, "repo")), want) ||
        !json_is_string(json_object_get(root, "quant")) ||
        strcmp(json_string_value(json_object_get(root, "quant")), name->quant)) {
        why = "not a manifest of this folder's model";
        goto done;
    }
    if (!json_is_array(files) || json_array_size(files) == 0 || json_array_size(files) > 4096) {
        why = "no files listed";
        goto done;
    }
    m->name = *name;
    m->complete = true;
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i), *fn = json_object_get(f, "name"), *sz = json_object_get(f, "size");
        if (!json_is_string(fn) || !sp_store_file_name_ok(json_string_value(fn)) || !json_is_integer(sz) ||
            json_integer_value(sz) < 0 || !json_is_string(json_object_get(f, "sha256")) ||
            !sp_store_hex64(json_string_value(json_object_get(f, "sha256")))) {
            why = "a file entry without a good name, size and sha256";
            goto done;
        }
        char *fp = sp_store_join(dir, json_string_value(fn));
        if (!fp) {
            why = "out of memory";
            goto done;
        }
        uint64_t size = (uint64_t)json_integer_value(sz);
        struct stat fs;
        if (stat(fp, &fs) != 0 || !S_ISREG(fs.st_mode) || (uint64_t)fs.st_size != size)
            m->complete = false;
        m->bytes += size;
        if (i == 0)
            m->path = fp;
        else
            free(fp);
    }
    m->n_files = json_array_size(files);
    m->dir = strdup(dir);
    if (!m->dir)
        why = "out of memory";
done:
    if (why) {
        free(m->path);
        memset(m, 0, sizeof *m);
    }
    json_decref(root);
    free(path);
    return why;
}

static int sp_store_cmp(const void *a, const void *b)
{
    const struct sp_store_model *x = a, *y = b;
    int c = strcasecmp(x->name.org, y->name.org);
    if (!c)
        c = strcasecmp(x->name.repo, y->name.repo);
    return c ? c : strcasecmp(x->name.quant, y->name.quant);
}

/* The entries of dir that pass ok(), as a NULL-terminated malloc'd array of
 * malloc'd names; an empty array when dir does not exist. */
static char **sp_store_list_dir(const char *dir, bool (*ok)(const char *))
{
    size_t n = 0, cap = 8;
    char **names = calloc(cap + 1, sizeof *names);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (names && d && (e = readdir(d))) {
        if (!ok(e->d_name))
            continue;
        if (n == cap) {
            char **nn = realloc(names, (cap * 2 + 1) * sizeof *names);
            if (!nn)
                goto fail;
            names = nn;
            cap *= 2;
        }
        if (!(names[n] = strdup(e->d_name)))
            goto fail;
        names[++n] = NULL;
    }
    if (d)
        closedir(d);
    return names;
fail:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (d)
        closedir(d);
    return NULL;
}

static void sp_store_names_free(char **names)
{
    for (size_t i = 0; names && names[i]; i++)
        free(names[i]);
    free(names);
}

/* Stored quantizations are upper case (pull writes them so). */
static bool sp_store_quant_dir_ok(const char *s)
{
    for (const char *p = s; *p; p++)
        if (islower((unsigned char)*p))
            return false;
    return sp_store_quant_ok(s);
}

/* Adds the model in dir (if it has a manifest) to *out. */
static bool sp_store_add(const char *dir, const struct sp_store_name *name, struct sp_store_model **out, size_t *n,
                         size_t *cap)
{
    char *mf = sp_store_join(dir, SP_STORE_MANIFEST);
    bool present = mf && access(mf, F_OK) == 0;
    free(mf);
    if (!mf)
        return false;
    if (!present)
        return true;
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        struct sp_store_model *nm = realloc(*out, nc * sizeof *nm);
        if (!nm)
            return false;
        *out = nm;
        *cap = nc;
    }
    struct sp_store_model *m = &(*out)[*n];
    memset(m, 0, sizeof *m);
    const char *why = sp_store_read_manifest(dir, name, m);
    if (why)
        fprintf(stderr, "spindle: ignoring %s/" SP_STORE_MANIFEST ": %s\n", dir, why);
    else
        (*n)++;
    return true;
}

bool sp_store_scan(const char *root, struct sp_store_model **out, size_t *n)
{
    size_t cap = 0;
    char *host = sp_store_join(root, SP_STORE_HOST);
    char **orgs = host ? sp_store_list_dir(host, sp_store_id_ok) : NULL;
    bool ok = orgs != NULL;
    *out = NULL;
    *n = 0;
    for (size_t i = 0; ok && orgs[i]; i++) {
        char *od = sp_store_join(host, orgs[i]);
        char **repos = od ? sp_store_list_dir(od, sp_store_id_ok) : NULL;
        ok = repos != NULL;
        for (size_t j = 0; ok && repos[j]; j++) {
            char *rd = sp_store_join(od, repos[j]);
            char **quants = rd ? sp_store_list_dir(rd, sp_store_quant_dir_ok) : NULL;
            ok = quants != NULL;
            for (size_t k = 0; ok && quants[k]; k++) {
                struct sp_store_name name;
                char *qd = sp_store_join(rd, quants[k]);
                memset(&name, 0, sizeof name);
                snprintf(name.org, sizeof name.org, "%s", orgs[i]);
                snprintf(name.repo, sizeof name.repo, "%s", repos[j]);
                snprintf(name.quant, sizeof name.quant, "%s", quants[k]);
                ok = qd && sp_store_add(qd, &name, out, n, &cap);
                free(qd);
            }
            sp_store_names_free(quants);
            free(rd);
        }
        sp_store_names_free(repos);
        free(od);
    }
    sp_store_names_free(orgs);
    free(host);
    if (!ok) {
        sp_store_models_free(*out, *n);
        *out = NULL;
        *n = 0;
        return false;
    }
    if (*n)
        qsort(*out, *n, sizeof **out, sp_store_cmp);
    return true;
}

void sp_store_models_free(struct sp_store_model *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(m[i].dir);
        free(m[i].path);
    }
    free(m);
}

static bool sp_store_matches(const struct sp_store_model *m, const struct sp_store_name *q)
{
    return (!q->org[0] || !strcasecmp(q->org, m->name.org)) && !strcasecmp(q->repo, m->name.repo) &&
           (!q->quant[0] || !strcasecmp(q->quant, m->name.quant));
}

/* "A, B, C" of the models picked (all when pick is NULL) into buf, at most
 * 8 names. */
static void sp_store_names_line(const struct sp_store_model *m, size_t n, const struct sp_store_name *pick, char *buf,
                                size_t cap)
{
    size_t used = 0, shown = 0, total = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (pick && !sp_store_matches(&m[i], pick))
            continue;
        if (++total > 8)
            continue;
        char name[256];
        sp_store_name_format(&m[i].name, name, sizeof name);
        int k = snprintf(buf + used, cap - used, "%s%s", shown++ ? ", " : "", name);
        if (k < 0 || (size_t)k >= cap - used)
            break;
        used += (size_t)k;
    }
    if (total > 8 && used < cap)
        snprintf(buf + used, cap - used, ", and %zu more", total - 8);
}

const struct sp_store_model *sp_store_find(const struct sp_store_model *m, size_t n, const struct sp_store_name *q,
                                           const char *what, const char *arg)
{
    const struct sp_store_model *hit = NULL;
    size_t hits = 0;
    char line[1024];
    for (size_t i = 0; i < n; i++)
        if (sp_store_matches(&m[i], q)) {
            hit = &m[i];
            hits++;
        }
    if (hits == 1)
        return hit;
    if (hits > 1) {
        sp_store_names_line(m, n, q, line, sizeof line);
        sp_tool_fail("%s %s: ambiguous, %zu stored models match: %s (give ORG/REPO:QUANT)", what, arg, hits, line);
    } else if (n) {
        sp_store_names_line(m, n, NULL, line, sizeof line);
        sp_tool_fail("%s %s: no such file, and no stored model of that name (stored: %s)", what, arg, line);
    } else {
        sp_tool_fail("%s %s: no such file, and no models are stored (spindle pull ORG/REPO:QUANT fetches one)", what,
                     arg);
    }
    return NULL;
}

/* Writes all of buf to fd; 0 or errno. */
static int sp_store_write_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

int sp_store_manifest_write(const char *dir, const struct sp_store_name *n, const char *source, const char *revision,
                            const struct sp_store_file *files, size_t n_files)
{
    char repo[256], name[256], when[32];
    time_t now = time(NULL);
    struct tm tm;
    int err = ENOMEM, fd = -1;
    char *text = NULL, *tmp = sp_store_join(dir, SP_STORE_MANIFEST ".tmp"), *final = sp_store_join(dir,
                                                                                                     SP_STORE_MANIFEST);
    json_t *arr = json_array(), *o = NULL;
    snprintf(repo, sizeof repo, "%s/%s", n->org, n->repo);
    sp_store_name_format(n, name, sizeof name);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    for (size_t i = 0; arr && i < n_files; i++)
        if (json_array_append_new(arr, json_pack("{s:s,s:s,s:I,s:s}", "name", files[i].name, "hub_path",
                                                 files[i].hub_path, "size", (json_int_t)files[i].size, "sha256",
                                                 files[i].sha256)) != 0)
            goto done;
    o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:O,s:s}", "name", name, "repo", repo, "quant", n->quant, "source", source,
                  "revision", revision, "files", arr, "pulled", when);
    if (!o || !tmp || !final || !(text = json_dumps(o, JSON_INDENT(2))))
        goto done;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = errno;
        goto done;
    }
    err = sp_store_write_all(fd, text, strlen(text));
    if (!err)
        err = sp_store_write_all(fd, "\n", 1);
    if (!err && fsync(fd) != 0)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    fd = -1;
    if (!err && rename(tmp, final) != 0)
        err = errno;
    if (err)
        unlink(tmp);
done:
    free(text);
    json_decref(o);
    json_decref(arr);
    free(tmp);
    free(final);
    return err;
}

/* Strings sp_store_model_path handed out, freed at exit. */
static char *sp_store_kept[8];
static size_t sp_store_n_kept;

static void sp_store_release(void)
{
    for (size_t i = 0; i < sp_store_n_kept; i++)
        free(sp_store_kept[i]);
    sp_store_n_kept = 0;
}

static bool sp_store_looks_like_path(const char *s)
{
    size_t n = strlen(s);
    return s[0] == '/' || s[0] == '.' || s[0] == '~' || (n >= 5 && !strcasecmp(s + n - 5, ".gguf"));
}

const char *sp_store_model_path(const char *flag, const char *arg)
{
    struct sp_store_name q;
    struct sp_store_model *models = NULL;
    size_t n = 0;
    char root[4096];
    const char *out = NULL;
    if (!arg || access(arg, F_OK) == 0 || sp_store_looks_like_path(arg) || !sp_store_name_parse(arg, &q))
        return arg;
    if (!sp_store_root(root, sizeof root))
        return NULL;
    if (!sp_store_scan(root, &models, &n)) {
        sp_tool_fail("%s %s: cannot read the model store %s: out of memory", flag, arg, root);
        return NULL;
    }
    const struct sp_store_model *m = sp_store_find(models, n, &q, flag, arg);
    if (m && !m->complete)
        sp_tool_fail("%s %s: files of %s/%s:%s are missing from %s (spindle pull it again)", flag, arg, m->name.org,
                     m->name.repo, m->name.quant, m->dir);
    else if (m && sp_store_n_kept == sizeof sp_store_kept / sizeof sp_store_kept[0])
        sp_tool_fail("%s %s: too many model names in one command", flag, arg);
    else if (m && (sp_store_kept[sp_store_n_kept] = strdup(m->path))) {
        if (sp_store_n_kept++ == 0)
            atexit(sp_store_release);
        out = sp_store_kept[sp_store_n_kept - 1];
    } else if (m)
        sp_tool_fail("%s %s: out of memory", flag, arg);
    sp_store_models_free(models, n);
    return out;
}

int sp_store_remove_dir(const char *root, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int err = 0;
    if (!d)
        return errno == ENOENT ? 0 : errno;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *p = sp_store_join(dir, e->d_name);
        if (!p || (unlink(p) != 0 && !err))
            err = p ? errno : ENOMEM;
        free(p);
    }
    closedir(d);
    if (err || rmdir(dir) != 0)
        return err ? err : errno;
    /* the REPO, ORG and hf.co folders above, while empty */
    char *up = strdup(dir);
    size_t root_len = strlen(root);
    for (int level = 0; up && level < 3; level++) {
        char *slash = strrchr(up, '/');
        if (!slash || (size_t)(slash - up) <= root_len)
            break;
        *slash = '\0';
        if (rmdir(up) != 0)
            break;
    }
    free(up);
    return 0;
}
