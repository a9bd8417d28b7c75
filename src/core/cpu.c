/* CPU feature detection: cpuid for what the core implements, xgetbv for what
 * the OS saves on context switch (AVX needs XMM|YMM state, AVX-512 also the
 * opmask and upper-ZMM state).  A feature counts only when both agree. */
#include "core/cpu.h"

#include <pthread.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static struct sp_cpu_features cpu_features;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
static unsigned long long cpu_xgetbv0(void)
{
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void cpu_detect_x86(struct sp_cpu_features *f)
{
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    bool osxsave = (c >> 27) & 1;
    bool avx = (c >> 28) & 1;
    bool fma = (c >> 12) & 1;
    bool f16c = (c >> 29) & 1;
    if (!osxsave || !avx)
        return;
    unsigned long long xcr0 = cpu_xgetbv0();
    bool os_avx = (xcr0 & 0x6) == 0x6;       /* XMM and YMM state */
    bool os_avx512 = (xcr0 & 0xe6) == 0xe6;  /* + opmask, ZMM_Hi256, Hi16_ZMM */
    if (!os_avx)
        return;
    f->fma = fma;
    f->f16c = f16c;
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = (b >> 5) & 1;
    if (os_avx512) {
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
        __cpuid_count(7, 1, a, b, c, d);
        f->avx512bf16 = (a >> 5) & 1;
    }
}
#endif

static void cpu_detect(void)
{
#if defined(__x86_64__)
    cpu_detect_x86(&cpu_features);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_features.n_cores = n > 0 ? (int)n : 1;
}

const struct sp_cpu_features *sp_cpu_features(void)
{
    pthread_once(&cpu_once, cpu_detect);
    return &cpu_features;
}
