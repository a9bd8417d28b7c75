#include "core/mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

sp_status sp_mapping_init(struct sp_mapping *m, const char *path)
{
    struct stat st;
    sp_status rc = SP_OK;
    m->data = NULL;
    m->size = 0;
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
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            rc = sp_error_set(SP_ERR_IO, "%s: mmap: %s", path, strerror(errno));
            goto close_fd;
        }
        m->data = p;
        m->size = (size_t)st.st_size;
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
