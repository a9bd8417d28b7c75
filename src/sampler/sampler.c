/* The sampler chain; the contract and the order of stages are in sampler.h. */
#include "sampler/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"

#define EXPLAIN_TOP (SP_EXPLAIN_ROWS / 2) /* rows per source in the explain table */
#define TOP_P_BINS 256                  /* histogram bins for large top-p */
#define HEAP_MAX 1024                   /* largest k selected with a heap */

struct sp_heap_entry {
    struct sp_candidate c;
    size_t idx;   /* where c was found */
};

struct sp_sampler {
    struct sp_sampler_params p;   /* p.logit_bias points at `bias` below */
    struct sp_logit_bias *bias;   /* owned copy */
    uint32_t n_vocab;
    struct sp_candidate *cand;    /* [n_vocab] scratch */
    int32_t *count;               /* [n_vocab] penalty counts, all zero between calls */
    struct sp_heap_entry *heap;   /* [HEAP_MAX] scratch for small top-k selections */
    struct sp_rng rng;
    const uint64_t *mask;         /* allowed tokens, or NULL */

    /* State of one run of the chain (scratch, valid during a call). */
    size_t n;        /* surviving candidates: cand[0..n) */
    size_t sorted;   /* cand[0..sorted) are the best `sorted` of cand[0..n), in order */
    double z;        /* sum of cand[0..n).p once probabilities exist */
};

/* Recording for explain: struct sp_sampler_explain, NULL on the hot path. */
typedef struct sp_sampler_explain explain_rec;

/* ---- parameters ---------------------------------------------------------- */

void sp_sampler_params_default(struct sp_sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->typical_p = 1.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->seed = 0;
    p->logit_bias = NULL;
    p->n_logit_bias = 0;
    p->n_logprobs = 0;
}

static sp_status params_check(const struct sp_sampler_params *p, uint32_t n_vocab)
{
    if (n_vocab == 0)
        return sp_error_set(SP_ERR_ARG, "sampler: vocabulary is empty");
    if (isnan(p->temperature))
        return sp_error_set(SP_ERR_ARG, "sampler: temperature is NaN");
    if (isnan(p->top_p))
        return sp_error_set(SP_ERR_ARG, "sampler: top_p is NaN");
    if (isnan(p->min_p))
        return sp_error_set(SP_ERR_ARG, "sampler: min_p is NaN");
    if (isnan(p->typical_p))
        return sp_error_set(SP_ERR_ARG, "sampler: typical_p is NaN");
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return sp_error_set(SP_ERR_ARG, "sampler: repeat_penalty %g must be finite and > 0",
                            (double)p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return sp_error_set(SP_ERR_ARG, "sampler: repeat_last_n %d must be >= -1",
                            (int)p->repeat_last_n);
    if (!isfinite(p->presence_penalty))
        return sp_error_set(SP_ERR_ARG, "sampler: presence_penalty is not finite");
    if (!isfinite(p->frequency_penalty))
        return sp_error_set(SP_ERR_ARG, "sampler: frequency_penalty is not finite");
    if (p->n_logprobs < 0 || p->n_logprobs > SP_SAMPLER_MAX_LOGPROBS)
        return sp_error_set(SP_ERR_ARG, "sampler: n_logprobs %d must be in 0..%d",
                            (int)p->n_logprobs, SP_SAMPLER_MAX_LOGPROBS);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return sp_error_set(SP_ERR_ARG, "sampler: logit_bias is NULL but n_logit_bias is %zu",
                            p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const struct sp_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || (uint32_t)b->id >= n_vocab)
            return sp_error_set(SP_ERR_ARG, "sampler: logit_bias token %d is outside 0..%u",
                                (int)b->id, n_vocab - 1);
        if (isnan(b->bias) || b->bias == INFINITY)
            return sp_error_set(SP_ERR_ARG, "sampler: logit_bias for token %d is %g",
                                (int)b->id, (double)b->bias);
    }
    return SP_OK;
}

sp_status sp_sampler_init(struct sp_sampler **out, const struct sp_sampler_params *p,
                          uint32_t n_vocab)
{
    sp_status st;
    struct sp_sampler *s = NULL;
    uint64_t bytes;

    *out = NULL;
    if (!p)
        return sp_error_set(SP_ERR_ARG, "sampler: no parameters");
    st = params_check(p, n_vocab);
    if (st != SP_OK)
        return st;

    s = calloc(1, sizeof *s);
    if (!s)
        return sp_error_set(SP_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    if (!sp_mul_u64(n_vocab, sizeof *s->cand, &bytes) || bytes > SIZE_MAX) {
        st = sp_error_set(SP_ERR_NOMEM, "sampler: %u candidates overflow", n_vocab);
        goto free_sampler;
    }
    s->cand = malloc((size_t)bytes);
    s->count = calloc(n_vocab, sizeof *s->count);
    s->heap = malloc(HEAP_MAX * sizeof *s->heap);
    if (p->n_logit_bias > 0) {
        s->bias = malloc(p->n_logit_bias * sizeof *s->bias);
        if (s->bias)
            memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof *s->bias);
    }
    if (!s->cand || !s->count || !s->heap || (p->n_logit_bias > 0 && !s->bias)) {
        st = sp_error_set(SP_ERR_NOMEM, "sampler: out of memory for %u candidates", n_vocab);
        goto free_sampler;
    }
    s->p.logit_bias = s->bias;
    sp_rng_seed(&s->rng, p->seed);
    *out = s;
    return SP_OK;

free_sampler:
    sp_sampler_free(s);
    return st;
}

void sp_sampler_free(struct sp_sampler *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->count);
    free(s->heap);
    free(s->bias);
    free(s);
}

void sp_sampler_set_seed(struct sp_sampler *s, uint64_t seed)
{
    sp_rng_seed(&s->rng, seed);
}

void sp_sampler_set_mask(struct sp_sampler *s, const uint64_t *allowed)
{
    s->mask = allowed;
}

/* ---- ordering -------------------------------------------------------------- */

/* The candidate order: higher logit first, then lower id.  Total, because ids
 * are distinct and logits are never NaN here. */
static inline int better(const struct sp_candidate *a, const struct sp_candidate *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_better(const void *x, const void *y)
{
    const struct sp_candidate *a = x, *b = y;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Typical-p order: smaller |−log p − H| (in aux) first, then the usual order. */
static int cmp_typical(const void *x, const void *y)
{
    const struct sp_candidate *a = x, *b = y;
    if (a->aux != b->aux)
        return a->aux < b->aux ? -1 : 1;
    return cmp_better(x, y);
}

/* Probability order for sp_sampler_candidates (logit order is the same
 * except where p ties). */
static int cmp_prob(const void *x, const void *y)
{
    const struct sp_candidate *a = x, *b = y;
    if (a->p != b->p)
        return a->p > b->p ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id ? 1 : 0;
}

static inline void swap_cand(struct sp_candidate *a, struct sp_candidate *b)
{
    struct sp_candidate t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange a[0..n) so that a[0..k) hold the k best (in any order).
 * Quickselect with a median-of-three pivot; if it recurses too deep (an
 * adversarial pattern) it falls back to sorting the remaining range. */
static void select_best(struct sp_candidate *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    int budget = 64;

    while (hi - lo > 16) {
        if (k <= lo || k >= hi)
            return;
        if (budget-- == 0) {
            qsort(a + lo, hi - lo, sizeof *a, cmp_better);
            return;
        }
        size_t mid = lo + (hi - lo) / 2;
        /* order a[lo], a[mid], a[hi-1]; the median lands in a[mid] */
        if (better(&a[mid], &a[lo]))
            swap_cand(&a[mid], &a[lo]);
        if (better(&a[hi - 1], &a[lo]))
            swap_cand(&a[hi - 1], &a[lo]);
        if (better(&a[hi - 1], &a[mid]))
            swap_cand(&a[hi - 1], &a[mid]);
        swap_cand(&a[mid], &a[hi - 1]);
        struct sp_candidate pivot = a[hi - 1];
        size_t store = lo;
        for (size_t i = lo; i < hi - 1; i++)
            if (better(&a[i], &pivot))
                swap_cand(&a[i], &a[store++]);
        swap_cand(&a[store], &a[hi - 1]);
        /* a[lo..store) better than the pivot at a[store], a(store..hi) worse */
        if (k == store || k == store + 1)
            return;
        if (k < store)
            hi = store;
        else
            lo = store + 1;
    }
    /* a small range: insertion sort settles every split point inside it */
    for (size_t i = lo + 1; i < hi; i++) {
        struct sp_candidate t = a[i];
        size_t j = i;
        while (j > lo && better(&t, &a[j - 1])) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = t;
    }
}

/* Heap of the k best seen so far, worst at the root (heap[0]). */
static void heap_sift(struct sp_heap_entry *h, size_t k, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && better(&h[w].c, &h[l].c))
            w = l;
        if (r < k && better(&h[w].c, &h[r].c))
            w = r;
        if (w == i)
            return;
        struct sp_heap_entry t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static int cmp_heap_idx(const void *x, const void *y)
{
    const struct sp_heap_entry *a = x, *b = y;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* select_best for small k (<= HEAP_MAX): one pass with a k-entry heap, so
 * almost every candidate costs a single comparison and no write; then the
 * chosen ones are swapped into a[0..k). */
static void heap_select(struct sp_candidate *a, size_t n, size_t k, struct sp_heap_entry *h)
{
    for (size_t i = 0; i < k; i++) {
        h[i].c = a[i];
        h[i].idx = i;
    }
    for (size_t i = k / 2; i-- > 0;)
        heap_sift(h, k, i);
    for (size_t i = k; i < n; i++) {
        if (a[i].logit < h[0].c.logit || !better(&a[i], &h[0].c))
            continue;
        h[0].c = a[i];
        h[0].idx = i;
        heap_sift(h, k, 0);
    }
    /* pair each unchosen front slot with a chosen entry beyond the front */
    qsort(h, k, sizeof *h, cmp_heap_idx);
    size_t front = 0, j = 0;
    while (j < k && h[j].idx < k)
        j++;   /* h[j..k) are the chosen entries at idx >= k */
    for (size_t i = 0; i < k && j < k; i++) {
        if (front < k && h[front].idx == i) {
            front++;
            continue;
        }
        swap_cand(&a[i], &a[h[j].idx]);
        j++;
    }
}

/* Make cand[0..m) the best m of cand[0..n), sorted.  Extends the sorted
 * prefix, so repeated calls with growing m cost only the new part. */
static void ensure_sorted(struct sp_sampler *s, size_t m)
{
    if (m > s->n)
        m = s->n;
    if (m <= s->sorted)
        return;
    struct sp_candidate *rest = s->cand + s->sorted;
    size_t k = m - s->sorted;
    if (k <= HEAP_MAX && k * 16 <= s->n - s->sorted)
        heap_select(rest, s->n - s->sorted, k, s->heap);
    else
        select_best(rest, s->n - s->sorted, k);
    qsort(rest, k, sizeof *rest, cmp_better);
    s->sorted = m;
}

/* ---- stages ---------------------------------------------------------------- */

static inline float clamp_logit(float x)
{
    if (isnan(x))
        return -INFINITY;
    if (x > FLT_MAX)
        return FLT_MAX;
    return x;
}

/* Index of the best candidate in cand[0..n); n > 0. */
static size_t best_index(const struct sp_sampler *s)
{
    if (s->sorted > 0)
        return 0;
    size_t bi = 0;
    for (size_t i = 1; i < s->n; i++)
        if (better(&s->cand[i], &s->cand[bi]))
            bi = i;
    return bi;
}

static void load(struct sp_sampler *s, const float *logits)
{
    for (uint32_t i = 0; i < s->n_vocab; i++) {
        s->cand[i].id = (sp_token)i;
        s->cand[i].logit = clamp_logit(logits[i]);
    }
    s->n = s->n_vocab;
    s->sorted = 0;
    s->z = 0.0;
}

/* Requires cand[i].id == i (before any reordering). */
static void apply_bias(struct sp_sampler *s)
{
    for (size_t i = 0; i < s->p.n_logit_bias; i++) {
        struct sp_candidate *c = &s->cand[s->bias[i].id];
        c->logit = clamp_logit(c->logit + s->bias[i].bias);
    }
}

static bool penalties_active(const struct sp_sampler_params *p, size_t n_hist)
{
    return p->repeat_last_n != 0 && n_hist != 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

/* Requires cand[i].id == i.  count[] is all zero on entry and on exit. */
static void apply_penalties(struct sp_sampler *s, const sp_token *hist, size_t n_hist)
{
    const struct sp_sampler_params *p = &s->p;
    if (!penalties_active(p, n_hist))
        return;
    size_t window = p->repeat_last_n < 0 ? n_hist : (size_t)p->repeat_last_n;
    if (window > n_hist)
        window = n_hist;
    const sp_token *w = hist + (n_hist - window);

    for (size_t i = 0; i < window; i++)
        if (w[i] >= 0 && (uint32_t)w[i] < s->n_vocab)
            s->count[w[i]]++;
    /* Each distinct token is penalised once, at its first occurrence in the
     * window, which also resets its count. */
    for (size_t i = 0; i < window; i++) {
        if (w[i] < 0 || (uint32_t)w[i] >= s->n_vocab || s->count[w[i]] == 0)
            continue;
        struct sp_candidate *c = &s->cand[w[i]];
        int32_t cnt = s->count[w[i]];
        float l = c->logit;
        if (p->repeat_penalty != 1.0f)
            l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= (float)cnt * p->frequency_penalty + p->presence_penalty;
        c->logit = clamp_logit(l);
        s->count[w[i]] = 0;
    }
}

static inline bool allowed(const uint64_t *m, sp_token id)
{
    return (m[(uint32_t)id >> 6] >> ((uint32_t)id & 63)) & 1;
}

/* Keeps only the allowed candidates, in order.  With cand[i].id == i (no
 * prefix sorted yet) it walks the mask's words, else every candidate. */
static void apply_mask(struct sp_sampler *s)
{
    size_t k = 0;
    if (s->sorted == 0 && s->n == s->n_vocab) {
        uint32_t n_words = (s->n_vocab + 63) / 64;
        for (uint32_t w = 0; w < n_words; w++)
            for (uint64_t bits = s->mask[w]; bits; bits &= bits - 1) {
                uint32_t id = w * 64 + (uint32_t)__builtin_ctzll(bits);
                if (id < s->n_vocab)
                    s->cand[k++] = s->cand[id];
            }
    } else {
        for (size_t i = 0; i < s->n; i++)
            if (allowed(s->mask, s->cand[i].id))
                s->cand[k++] = s->cand[i];
    }
    s->n = k;
    s->sorted = 0;
}

/* log of the softmax normaliser of cand[0..n) at temperature 1. */
static double log_partition(const struct sp_sampler *s)
{
    float mx = s->cand[best_index(s)].logit;
    double sum = 0.0;
    for (size_t i = 0; i < s->n; i++)
        sum += expf(s->cand[i].logit - mx);
    return (double)mx + log(sum);
}

static void fill_logprob_top(struct sp_sampler *s, double logz, struct sp_token_logprobs *lp)
{
    ensure_sorted(s, (size_t)s->p.n_logprobs);
    lp->n_top = 0;
    for (int i = 0; i < s->p.n_logprobs && (size_t)i < s->n; i++) {
        if (s->cand[i].logit == -INFINITY)
            break;
        lp->top[i].id = s->cand[i].id;
        lp->top[i].logprob = (float)((double)s->cand[i].logit - logz);
        lp->n_top = i + 1;
    }
}

static void top_k(struct sp_sampler *s)
{
    if (s->p.top_k <= 0 || (size_t)s->p.top_k >= s->n)
        return;
    ensure_sorted(s, (size_t)s->p.top_k);
    s->n = (size_t)s->p.top_k;
}

/* Temperature and softmax: cand.p = exp((logit - max) / T), unnormalised
 * (the best candidate gets exactly 1); s->z is their sum. */
static void softmax_temp(struct sp_sampler *s)
{
    float mx = s->cand[best_index(s)].logit;
    float inv_t = 1.0f / s->p.temperature;
    double z = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        float e = expf((s->cand[i].logit - mx) * inv_t);
        s->cand[i].p = e;
        z += e;
    }
    s->z = z;
}

static void top_p(struct sp_sampler *s)
{
    if (s->p.top_p >= 1.0f)
        return;
    double target = (double)s->p.top_p * s->z, cum = 0.0;
    size_t m = s->n < 64 ? s->n : 64, i = 0;
    if (s->sorted < s->n && s->n > 4096) {
        /* Large unsorted set: a histogram of -log(p / p_max) in bins of 1/8
         * nat bounds how many of the best are needed, so one selection
         * replaces repeated growth.  Bins are monotone in the logit, so
         * whole bins are exactly a best-m set. */
        double mass[TOP_P_BINS] = {0};
        size_t cnt[TOP_P_BINS] = {0};
        float mx = s->cand[best_index(s)].logit, scale = 8.0f / s->p.temperature;
        for (size_t j = 0; j < s->n; j++) {
            float x = (mx - s->cand[j].logit) * scale;
            size_t b = x < (float)(TOP_P_BINS - 1) ? (size_t)x : TOP_P_BINS - 1;
            mass[b] += s->cand[j].p;
            cnt[b]++;
        }
        double c = 0.0;
        m = 0;
        for (size_t b = 0; b < TOP_P_BINS; b++) {
            c += mass[b];
            m += cnt[b];
            if (c >= target)
                break;
        }
    }
    for (;;) {
        ensure_sorted(s, m);
        for (; i < m; i++) {
            cum += s->cand[i].p;
            if (cum >= target) {
                s->n = i + 1;
                s->z = cum;
                return;
            }
        }
        if (m == s->n)
            return;   /* rounding: the whole set was needed */
        m = s->n / 4 < m ? s->n : m * 4;
    }
}

/* Survivors are exactly the best m by logit (p grows with the logit), so a
 * count plus a partial selection keeps the sorted-prefix invariant. */
static void min_p(struct sp_sampler *s)
{
    if (s->p.min_p <= 0.0f)
        return;
    float thr = s->p.min_p * s->cand[best_index(s)].p;
    size_t m = 0;
    double z = 0.0;
    for (size_t i = 0; i < s->n; i++)
        if (s->cand[i].p >= thr) {
            m++;
            z += s->cand[i].p;
        }
    if (m == 0)
        m = 1;   /* only when min_p > 1: keep the best token */
    ensure_sorted(s, m);
    if (m == 1)
        z = s->cand[0].p;
    s->n = m;
    s->z = z;
}

static void typical_p(struct sp_sampler *s)
{
    if (s->p.typical_p >= 1.0f || s->n <= 1)
        return;
    double ent = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        double q = s->cand[i].p / s->z;
        if (q > 0.0)
            ent -= q * log(q);
    }
    for (size_t i = 0; i < s->n; i++) {
        double q = s->cand[i].p / s->z;
        s->cand[i].aux = q > 0.0 ? (float)fabs(-log(q) - ent) : INFINITY;
    }
    qsort(s->cand, s->n, sizeof *s->cand, cmp_typical);
    double target = (double)s->p.typical_p * s->z, cum = 0.0;
    size_t keep = s->n;
    for (size_t i = 0; i < s->n; i++) {
        cum += s->cand[i].p;
        if (cum >= target) {
            keep = i + 1;
            break;
        }
    }
    s->n = keep;
    s->z = cum;
    qsort(s->cand, s->n, sizeof *s->cand, cmp_better);
    s->sorted = s->n;
}

/* The survivors' total, exactly as the draw will accumulate it.  The p are
 * left unnormalised (the draw scales its uniform by z instead), which saves a
 * pass over the vocabulary when no filter is on; sp_sampler_candidates()
 * divides for its callers. */
static void renormalise(struct sp_sampler *s)
{
    double z = 0.0;
    for (size_t i = 0; i < s->n; i++)
        z += s->cand[i].p;
    s->z = z;
}

/* ---- explain recording ----------------------------------------------------- */

static void explain_add_rows(explain_rec *ex, struct sp_sampler *s)
{
    ensure_sorted(s, EXPLAIN_TOP);
    for (size_t i = 0; i < s->sorted && i < EXPLAIN_TOP && ex->n_rows < SP_EXPLAIN_ROWS; i++) {
        size_t r = 0;
        while (r < ex->n_rows && ex->row[r] != s->cand[i].id)
            r++;
        if (r == ex->n_rows)
            ex->row[ex->n_rows++] = s->cand[i].id;
    }
}

/* Snapshot the survivors' probabilities for the tracked rows.  Before the
 * softmax stage (use_p false) they are the softmax of the logits at T = 1
 * over the survivors. */
static void explain_stage(explain_rec *ex, struct sp_sampler *s, const char *name, float param,
                          bool use_p)
{
    if (!ex || ex->n_stages == SP_EXPLAIN_STAGES)
        return;
    struct sp_explain_stage *st = &ex->stage[ex->n_stages++];
    snprintf(st->name, sizeof st->name, "%s", name);
    st->param = param;
    st->kept = (uint32_t)s->n;
    float mx = s->cand[best_index(s)].logit;
    double z = 0.0;
    for (size_t i = 0; i < s->n; i++)
        z += use_p ? s->cand[i].p : expf(s->cand[i].logit - mx);
    for (size_t r = 0; r < ex->n_rows; r++) {
        st->p[r] = -1.0f;
        for (size_t i = 0; i < s->n; i++) {
            if (s->cand[i].id != ex->row[r])
                continue;
            double w = use_p ? s->cand[i].p : expf(s->cand[i].logit - mx);
            st->p[r] = (float)(w / z);
            break;
        }
    }
}

/* ---- the chain ------------------------------------------------------------- */

/* Runs stages 1-9 (or the greedy pick) leaving the survivors in cand[0..n)
 * with p summing to s->z.  lp's top[] is filled here, its logprob by the caller. */
static sp_status run_chain(struct sp_sampler *s, const float *logits, const sp_token *hist,
                           size_t n_hist, struct sp_token_logprobs *lp, double *logz,
                           explain_rec *ex)
{
    if (!logits)
        return sp_error_set(SP_ERR_ARG, "sampler: no logits");
    if (n_hist > 0 && !hist)
        return sp_error_set(SP_ERR_ARG, "sampler: history is NULL but has %zu tokens", n_hist);
    if (ex) {
        load(s, logits);
        explain_add_rows(ex, s);
    }
    /* explain_add_rows may have sorted a prefix; bias and penalties index
     * candidates by id, so start over from the raw logits. */
    load(s, logits);
    apply_bias(s);
    apply_penalties(s, hist, n_hist);
    if (s->mask) {
        if (ex) {
            explain_add_rows(ex, s);
            explain_stage(ex, s, "penalties", NAN, false);
        }
        apply_mask(s);
        if (s->n == 0)
            return sp_error_set(SP_ERR_ARG, "sampler: the grammar allows no token");
    }

    size_t bi = best_index(s);
    if (s->cand[bi].logit == -INFINITY)
        return sp_error_set(SP_ERR_ARG, s->mask ? "sampler: every token the grammar allows is banned"
                                                : "sampler: every token is banned or has a NaN logit");
    /* the best candidate first: a sorted prefix of one, so later stages find
     * the maximum without scanning again */
    swap_cand(&s->cand[0], &s->cand[bi]);
    s->sorted = 1;
    if (ex) {
        explain_add_rows(ex, s);
        explain_stage(ex, s, s->mask ? "grammar" : "penalties", NAN, false);
    }
    if (lp) {
        *logz = log_partition(s);
        fill_logprob_top(s, *logz, lp);
    }

    if (s->p.temperature <= 0.0f) {
        bi = best_index(s);
        swap_cand(&s->cand[0], &s->cand[bi]);
        s->n = 1;
        s->sorted = 1;
        s->cand[0].p = 1.0f;
        s->z = 1.0;
        explain_stage(ex, s, "greedy", NAN, true);
        return SP_OK;
    }
    if (s->p.top_k > 0) {
        top_k(s);
        explain_stage(ex, s, "top-k", (float)s->p.top_k, false);
    }
    softmax_temp(s);
    explain_stage(ex, s, "temperature", s->p.temperature, true);
    if (s->p.top_p < 1.0f) {
        top_p(s);
        explain_stage(ex, s, "top-p", s->p.top_p, true);
    }
    if (s->p.min_p > 0.0f) {
        min_p(s);
        explain_stage(ex, s, "min-p", s->p.min_p, true);
    }
    if (s->p.typical_p < 1.0f) {
        typical_p(s);
        explain_stage(ex, s, "typical-p", s->p.typical_p, true);
    }
    renormalise(s);
    return SP_OK;
}

/* One draw over cand[0..n) (p summing to s->z) in their current order,
 * which is deterministic for given inputs. */
static size_t draw(const struct sp_sampler *s, struct sp_rng *rng)
{
    if (s->n == 1)
        return 0;
    double u = sp_rng_uniform(rng) * s->z, cum = 0.0;
    size_t last = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->cand[i].p <= 0.0f)
            continue;
        cum += s->cand[i].p;
        last = i;
        if (u < cum)
            return i;
    }
    return last;   /* u landed past the rounded total */
}

sp_token sp_sampler_sample(struct sp_sampler *s, const float *logits, const sp_token *history,
                           size_t n_history, struct sp_token_logprobs *lp)
{
    double logz = 0.0;
    if (logits && s->p.temperature <= 0.0f && !lp && s->p.n_logit_bias == 0 && !penalties_active(&s->p, n_history)) {
        /* plain greedy: the chain's answer (the first maximum of the clamped
         * logits) without filling the candidate array */
        uint32_t bi = 0;
        float best = -INFINITY;
        if (s->mask) {
            uint32_t n_words = (s->n_vocab + 63) / 64;
            bi = UINT32_MAX;
            for (uint32_t w = 0; w < n_words; w++)
                for (uint64_t bits = s->mask[w]; bits; bits &= bits - 1) {
                    uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
                    float l = i < s->n_vocab ? clamp_logit(logits[i]) : -INFINITY;
                    if (l > best || bi == UINT32_MAX) {
                        best = l;
                        bi = i;
                    }
                }
        } else {
            best = clamp_logit(logits[0]);
            for (uint32_t i = 1; i < s->n_vocab; i++) {
                float l = clamp_logit(logits[i]);
                if (l > best) {
                    best = l;
                    bi = i;
                }
            }
        }
        if (best == -INFINITY) {
            sp_error_set(SP_ERR_ARG, "sampler: every token is banned or has a NaN logit");
            return -1;
        }
        return (sp_token)bi;
    }
    if (run_chain(s, logits, history, n_history, lp, &logz, NULL) != SP_OK)
        return -1;
    const struct sp_candidate *c = &s->cand[draw(s, &s->rng)];
    if (lp)
        lp->logprob = (float)((double)c->logit - logz);
    return c->id;
}

sp_status sp_sampler_dist(struct sp_sampler *s, const float *logits, const sp_token *history, size_t n_history,
                          struct sp_token_logprobs *lp, const struct sp_candidate **out, size_t *n_out,
                          double *logz)
{
    *out = NULL;
    *n_out = 0;
    *logz = 0.0;
    sp_status st = run_chain(s, logits, history, n_history, lp, logz, NULL);
    if (st != SP_OK)
        return st;
    for (size_t i = 0; i < s->n; i++)
        s->cand[i].p = (float)(s->cand[i].p / s->z);
    s->z = 1.0;
    *out = s->cand;
    *n_out = s->n;
    return SP_OK;
}

sp_status sp_sampler_candidates(struct sp_sampler *s, const float *logits, const sp_token *history,
                                size_t n_history, const struct sp_candidate **out, size_t *n_out)
{
    double logz;
    sp_status st = sp_sampler_dist(s, logits, history, n_history, NULL, out, n_out, &logz);
    if (st == SP_OK)
        qsort(s->cand, s->n, sizeof *s->cand, cmp_prob);
    return st;
}

sp_status sp_sampler_explain_data(struct sp_sampler *s, const float *logits,
                                  const sp_token *history, size_t n_history,
                                  struct sp_sampler_explain *ex)
{
    memset(ex, 0, sizeof *ex);
    sp_status st = run_chain(s, logits, history, n_history, NULL, NULL, ex);
    if (st != SP_OK)
        return st;
    struct sp_rng look = s->rng;   /* a copy: the sampler's sequence is untouched */
    ex->chosen = s->cand[draw(s, &look)].id;
    ex->n_vocab = s->n_vocab;

    /* raw column: softmax of the unmodified logits */
    float raw_max = -INFINITY;
    for (uint32_t i = 0; i < s->n_vocab; i++) {
        float l = clamp_logit(logits[i]);
        if (l > raw_max)
            raw_max = l;
    }
    double raw_z = 0.0;
    for (uint32_t i = 0; i < s->n_vocab; i++)
        raw_z += expf(clamp_logit(logits[i]) - raw_max);
    for (uint32_t r = 0; r < ex->n_rows; r++)
        ex->raw[r] = (float)(expf(clamp_logit(logits[ex->row[r]]) - raw_max) / raw_z);
    return SP_OK;
}

void sp_sampler_explain_print(const struct sp_sampler_explain *ex, FILE *out,
                              sp_sampler_token_text_fn token_text, void *ctx)
{
    char head[32];
    fprintf(out, "%8s  %-16s %9s", "token", "text", "raw");
    for (uint32_t k = 0; k < ex->n_stages; k++) {
        if (isnan(ex->stage[k].param))
            snprintf(head, sizeof head, "%s", ex->stage[k].name);
        else
            snprintf(head, sizeof head, "%s %g", ex->stage[k].name, (double)ex->stage[k].param);
        fprintf(out, " %15s", head);
    }
    fprintf(out, "\n");
    for (uint32_t r = 0; r < ex->n_rows; r++) {
        const char *text = token_text ? token_text(ctx, ex->row[r]) : NULL;
        char shown[17];
        size_t j = 0;
        for (; text && text[j] && j < sizeof shown - 1; j++)
            shown[j] = (text[j] >= 0x20 && text[j] < 0x7f) ? text[j] : '.';
        shown[j] = '\0';
        fprintf(out, "%8d%c %-16s %9.4f", (int)ex->row[r], ex->row[r] == ex->chosen ? '*' : ' ',
                shown, (double)ex->raw[r]);
        for (uint32_t k = 0; k < ex->n_stages; k++) {
            if (ex->stage[k].p[r] < 0.0f)
                fprintf(out, " %15s", "-");
            else
                fprintf(out, " %15.4f", (double)ex->stage[k].p[r]);
        }
        fprintf(out, "\n");
    }
    fprintf(out, "%8s  %-16s %9u", "kept", "", ex->n_vocab);
    for (uint32_t k = 0; k < ex->n_stages; k++)
        fprintf(out, " %15u", ex->stage[k].kept);
    bool greedy = ex->n_stages && !strcmp(ex->stage[ex->n_stages - 1].name, "greedy");
    fprintf(out, "\nnext token: %d%s\n", (int)ex->chosen, greedy ? " (greedy)" : "");
    for (uint32_t k = 1; k < ex->n_stages; k++)
        if (!strcmp(ex->stage[k].name, "grammar"))
            fprintf(out, "grammar: removed %u of %u candidates\n", ex->stage[k - 1].kept - ex->stage[k].kept,
                    ex->stage[k - 1].kept);
}

sp_status sp_sampler_explain(struct sp_sampler *s, const float *logits, const sp_token *history,
                             size_t n_history, FILE *out, sp_sampler_token_text_fn token_text,
                             void *ctx)
{
    struct sp_sampler_explain ex;
    sp_status st = sp_sampler_explain_data(s, logits, history, n_history, &ex);
    if (st == SP_OK)
        sp_sampler_explain_print(&ex, out, token_text, ctx);
    return st;
}
