#define _GNU_SOURCE /* mremap */
#include "core/mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

/* Reads the whole file into anonymous pages (freed by munmap like a map). */
static void *sp_mapping_read(int fd, size_t size)
{
    uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return MAP_FAILED;
    for (size_t done = 0; done < size;) {
        ssize_t n = pread(fd, p + done, size - done, (off_t)done);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0)
                errno = EIO; /* the file shrank */
            munmap(p, size);
            return MAP_FAILED;
        }
        done += (size_t)n;
    }
    mprotect(p, size, PROT_READ);
    return p;
}

sp_status sp_mapping_init(struct sp_mapping *m, const char *path, unsigned flags)
{
    struct stat st;
    sp_status rc = SP_OK;
    m->data = NULL;
    m->size = 0;
    m->copied = flags & SP_MAP_READ;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sp_error_set(SP_ERR_IO, "%s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = sp_error_set(SP_ERR_IO, "%s: %s", path, strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sp_error_set(SP_ERR_IO, "%s: not a regular file", path);
        goto close_fd;
    }
    if (st.st_size > 0) {
        void *p = m->copied ? sp_mapping_read(fd, (size_t)st.st_size)
                            : mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            rc = sp_error_set(SP_ERR_IO, "%s: %s: %s", path, m->copied ? "read" : "mmap", strerror(errno));
            goto close_fd;
        }
        m->data = p;
        m->size = (size_t)st.st_size;
        if ((flags & SP_MAP_LOCK) && mlock(p, m->size) != 0) {
            rc = sp_error_set(SP_ERR_NOMEM, "%s: mlock of %zu bytes: %s (see ulimit -l)", path, m->size,
                              strerror(errno));
            sp_mapping_free(m);
        }
    }
close_fd:
    close(fd);
    return rc;
}

void sp_mapping_free(struct sp_mapping *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

void sp_mapping_drop(const struct sp_mapping *m, const void *p, size_t len)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)p, hi = lo + len;
    uintptr_t base = (uintptr_t)m->data, end = base + m->size;
    if (!m->data || m->copied || lo < base || hi > end || page == 0 || (page & (page - 1)) != 0)
        return;
    lo = (lo + page - 1) & ~(page - 1);
    hi &= ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice only */
}

static int sp_span_cmp(const void *a, const void *b)
{
    const struct sp_span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

sp_status sp_mapping_detach(struct sp_mapping *m, struct sp_span *skip, size_t n_skip, bool lock)
{
    if (!m->data || m->copied)
        return SP_OK;
    uint8_t *p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return sp_error_set(SP_ERR_NOMEM, "model: no memory to copy %zu bytes of the file", m->size);
    if (n_skip) /* skip may be NULL when nothing is skipped */
        qsort(skip, n_skip, sizeof *skip, sp_span_cmp);
    size_t at = 0;
    for (size_t i = 0; i <= n_skip; i++) { /* the gap before skip[i], then after the last */
        size_t end = i < n_skip ? skip[i].off : m->size;
        if (end > m->size)
            end = m->size;
        /* a MiB at a time, the file's pages dropped behind: the copy does
         * not hold both at once */
        for (size_t k = at; k < end;) {
            size_t n = end - k < ((size_t)1 << 20) ? end - k : (size_t)1 << 20;
            memcpy(p + k, m->data + k, n);
            if (lock)
                mlock(p + k, n); /* best effort: the file's pages were locked */
            else
                sp_mapping_drop(m, m->data + k, n);
            k += n;
        }
        if (i < n_skip && skip[i].off + skip[i].len > at)
            at = skip[i].off + skip[i].len;
    }
    mprotect(p, m->size, PROT_READ);
    if (mremap(p, m->size, m->size, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)m->data) == MAP_FAILED) {
        int e = errno;
        munmap(p, m->size);
        return sp_error_set(SP_ERR_NOMEM, "model: cannot replace the file mapping: %s", strerror(e));
    }
    m->copied = true;
    return SP_OK;
}

#define SP_HUGE_PAGE ((size_t)2 << 20)

static size_t sp_huge_round(size_t size) { return (size + SP_HUGE_PAGE - 1) / SP_HUGE_PAGE * SP_HUGE_PAGE; }

void *sp_huge_alloc(size_t size)
{
    if (size == 0 || size > SIZE_MAX - 2 * SP_HUGE_PAGE)
        return NULL;
    size_t len = sp_huge_round(size);
    /* map one huge page more, then trim head and tail to a 2 MiB boundary */
    uint8_t *raw = mmap(NULL, len + SP_HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uintptr_t start = ((uintptr_t)raw + SP_HUGE_PAGE - 1) & ~(uintptr_t)(SP_HUGE_PAGE - 1);
    uint8_t *p = (uint8_t *)start;
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (raw + len + SP_HUGE_PAGE > p + len)
        munmap(p + len, (size_t)(raw + len + SP_HUGE_PAGE - (p + len)));
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* advice only: without it the memory works the same */
#endif
    return p;
}

void sp_huge_free(void *p, size_t size)
{
    if (p)
        munmap(p, sp_huge_round(size));
}
