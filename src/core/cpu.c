/* CPU feature detection: on x86-64 cpuid for what the core implements and
 * xgetbv for what the OS saves on context switch (AVX needs XMM|YMM state,
 * AVX-512 also the opmask and upper-ZMM state), a feature counting only
 * when both agree; on aarch64 Linux the kernel's HWCAP bits. */
#include "core/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
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
    unsigned int ebx7 = b, ecx7 = c;
    __cpuid_count(7, 1, a, b, c, d);
    f->avxvnni = (a >> 4) & 1;
    if (os_avx512) {
        f->avx512f = (ebx7 >> 16) & 1;
        f->avx512dq = (ebx7 >> 17) & 1;
        f->avx512bw = (ebx7 >> 30) & 1;
        f->avx512vl = (ebx7 >> 31) & 1;
        f->avx512vnni = (ecx7 >> 11) & 1;
        f->avx512bf16 = (a >> 5) & 1;
    }
}
#endif

#if defined(__aarch64__) && defined(__linux__)
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
static void cpu_detect_arm(struct sp_cpu_features *f)
{
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f->neon = (hw & HWCAP_ASIMD) != 0;
    f->dotprod = f->neon && (hw & HWCAP_ASIMDDP) != 0;
    f->i8mm = f->dotprod && (hw2 & HWCAP2_I8MM) != 0;
}
#endif

static void cpu_detect(void)
{
#if defined(__x86_64__)
    cpu_detect_x86(&cpu_features);
#elif defined(__aarch64__) && defined(__linux__)
    cpu_detect_arm(&cpu_features);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_features.n_cores = n > 0 ? (int)n : 1;
}

const struct sp_cpu_features *sp_cpu_features(void)
{
    pthread_once(&cpu_once, cpu_detect);
    return &cpu_features;
}

static const struct {
    const char *name;
    enum sp_isa parent;
} isa_rows[SP_ISA_COUNT] = {
    [SP_ISA_SCALAR] = {"scalar", SP_ISA_SCALAR},   [SP_ISA_AVX2] = {"avx2", SP_ISA_SCALAR},
    [SP_ISA_AVXVNNI] = {"avxvnni", SP_ISA_AVX2},   [SP_ISA_AVX512] = {"avx512", SP_ISA_AVX2},
    [SP_ISA_NEON] = {"neon", SP_ISA_SCALAR},       [SP_ISA_DOTPROD] = {"dotprod", SP_ISA_NEON},
    [SP_ISA_I8MM] = {"i8mm", SP_ISA_DOTPROD},
};

const char *sp_isa_name(enum sp_isa isa) { return (unsigned)isa < SP_ISA_COUNT ? isa_rows[isa].name : "?"; }

enum sp_isa sp_isa_parent(enum sp_isa isa) { return (unsigned)isa < SP_ISA_COUNT ? isa_rows[isa].parent : SP_ISA_SCALAR; }

bool sp_isa_parse(const char *name, enum sp_isa *out)
{
    for (int i = 0; name && i < SP_ISA_COUNT; i++)
        if (strcmp(name, isa_rows[i].name) == 0) {
            *out = (enum sp_isa)i;
            return true;
        }
    return false;
}

bool sp_isa_runs(enum sp_isa isa)
{
    const struct sp_cpu_features *f = sp_cpu_features();
    const bool avx2 = f->avx2 && f->fma && f->f16c;
    switch (isa) {
    case SP_ISA_SCALAR: return true;
#if defined(__x86_64__)
    case SP_ISA_AVX2: return avx2;
    case SP_ISA_AVXVNNI: return avx2 && f->avxvnni;
    case SP_ISA_AVX512: return avx2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni;
#elif defined(__aarch64__)
    case SP_ISA_NEON: return f->neon;
    case SP_ISA_DOTPROD: return f->dotprod;
    case SP_ISA_I8MM: return f->i8mm;
#endif
    default: (void)avx2; return false;
    }
}

/* Preference order: the first level this CPU runs is the default. */
static const enum sp_isa isa_best_first[] = {SP_ISA_AVX512, SP_ISA_AVXVNNI, SP_ISA_AVX2,
                                             SP_ISA_I8MM,   SP_ISA_DOTPROD, SP_ISA_NEON};
static enum sp_isa isa_active = SP_ISA_SCALAR;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
/* sp_isa_select's level (SP_ISA_COUNT: none), and whether isa_choose has
 * read it; both under isa_select_mu. */
static enum sp_isa isa_request = SP_ISA_COUNT;
static bool isa_decided;
static pthread_mutex_t isa_select_mu = PTHREAD_MUTEX_INITIALIZER;

static void isa_choose(void)
{
    enum sp_isa want;
    pthread_mutex_lock(&isa_select_mu);
    const enum sp_isa request = isa_request;
    isa_decided = true;
    pthread_mutex_unlock(&isa_select_mu);
    if (request != SP_ISA_COUNT) { /* sp_isa_select checked that it runs */
        isa_active = request;
        return;
    }
    if (sp_isa_parse(getenv("SP_ISA"), &want)) {
        while (!sp_isa_runs(want))
            want = sp_isa_parent(want);
        isa_active = want;
        return;
    }
    for (size_t i = 0; i < sizeof isa_best_first / sizeof isa_best_first[0]; i++)
        if (sp_isa_runs(isa_best_first[i])) {
            isa_active = isa_best_first[i];
            return;
        }
}

enum sp_isa sp_isa_active(void)
{
    pthread_once(&isa_once, isa_choose);
    return isa_active;
}

sp_status sp_isa_select(const char *name)
{
    enum sp_isa want;
    if (!name || strcmp(name, "auto") == 0) {
        sp_isa_active();
        return SP_OK;
    }
    if (!sp_isa_parse(name, &want)) {
        char names[96] = "auto";
        for (int i = 0; i < SP_ISA_COUNT; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), ", %s", isa_rows[i].name);
        return sp_error_set(SP_ERR_ARG, "isa '%s': not one of %s", name, names);
    }
    if (!sp_isa_runs(want))
        return sp_error_set(SP_ERR_UNSUPPORTED, "isa '%s': this CPU (or this build) does not run it", name);
    pthread_mutex_lock(&isa_select_mu);
    if (!isa_decided)
        isa_request = want;
    pthread_mutex_unlock(&isa_select_mu);
    if (sp_isa_active() != want)
        return sp_error_set(SP_ERR_ARG, "isa '%s': this process already runs the %s kernels", name,
                            sp_isa_name(sp_isa_active()));
    return SP_OK;
}
