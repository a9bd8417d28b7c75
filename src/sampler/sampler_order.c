/* The candidate order and the partial sorts the stages share
 * (sampler_stage.h). */
#include <stdlib.h>

#include "sampler/sampler_stage.h"

int sp_sampler_cmp_better(const void *x, const void *y)
{
    const struct sp_candidate *a = x, *b = y;
    return sp_sampler_better(a, b) ? -1 : sp_sampler_better(b, a) ? 1 : 0;
}

/* Typical-p order: smaller |−log p − H| (in aux) first, then the usual order. */
int sp_sampler_cmp_typical(const void *x, const void *y)
{
    const struct sp_candidate *a = x, *b = y;
    if (a->aux != b->aux)
        return a->aux < b->aux ? -1 : 1;
    return sp_sampler_cmp_better(x, y);
}

/* Probability order for sp_sampler_candidates (logit order is the same
 * except where p ties). */
int sp_sampler_cmp_prob(const void *x, const void *y)
{
    const struct sp_candidate *a = x, *b = y;
    if (a->p != b->p)
        return a->p > b->p ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id ? 1 : 0;
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
            qsort(a + lo, hi - lo, sizeof *a, sp_sampler_cmp_better);
            return;
        }
        size_t mid = lo + (hi - lo) / 2;
        /* order a[lo], a[mid], a[hi-1]; the median lands in a[mid] */
        if (sp_sampler_better(&a[mid], &a[lo]))
            sp_sampler_swap(&a[mid], &a[lo]);
        if (sp_sampler_better(&a[hi - 1], &a[lo]))
            sp_sampler_swap(&a[hi - 1], &a[lo]);
        if (sp_sampler_better(&a[hi - 1], &a[mid]))
            sp_sampler_swap(&a[hi - 1], &a[mid]);
        sp_sampler_swap(&a[mid], &a[hi - 1]);
        struct sp_candidate pivot = a[hi - 1];
        size_t store = lo;
        for (size_t i = lo; i < hi - 1; i++)
            if (sp_sampler_better(&a[i], &pivot))
                sp_sampler_swap(&a[i], &a[store++]);
        sp_sampler_swap(&a[store], &a[hi - 1]);
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
        while (j > lo && sp_sampler_better(&t, &a[j - 1])) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = t;
    }
}

/* Heap of the k best seen so far, worst at the root (heap[0]). */
static void heap_sift(struct sp_sampler_heap_entry *h, size_t k, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && sp_sampler_better(&h[w].c, &h[l].c))
            w = l;
        if (r < k && sp_sampler_better(&h[w].c, &h[r].c))
            w = r;
        if (w == i)
            return;
        struct sp_sampler_heap_entry t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static int cmp_heap_idx(const void *x, const void *y)
{
    const struct sp_sampler_heap_entry *a = x, *b = y;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* select_best for small k (<= SP_SAMPLER_HEAP_MAX): one pass with a
 * k-entry heap, so almost every candidate costs a single comparison and no
 * write; then the chosen ones are swapped into a[0..k). */
static void heap_select(struct sp_candidate *a, size_t n, size_t k, struct sp_sampler_heap_entry *h)
{
    for (size_t i = 0; i < k; i++) {
        h[i].c = a[i];
        h[i].idx = i;
    }
    for (size_t i = k / 2; i-- > 0;)
        heap_sift(h, k, i);
    for (size_t i = k; i < n; i++) {
        if (a[i].logit < h[0].c.logit || !sp_sampler_better(&a[i], &h[0].c))
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
        sp_sampler_swap(&a[i], &a[h[j].idx]);
        j++;
    }
}

void sp_cands_sort_prefix(struct sp_cands *c, size_t m)
{
    if (m > c->n)
        m = c->n;
    if (m <= c->sorted)
        return;
    struct sp_candidate *rest = c->cand + c->sorted;
    size_t k = m - c->sorted;
    if (k <= SP_SAMPLER_HEAP_MAX && k * 16 <= c->n - c->sorted)
        heap_select(rest, c->n - c->sorted, k, c->heap);
    else
        select_best(rest, c->n - c->sorted, k);
    qsort(rest, k, sizeof *rest, sp_sampler_cmp_better);
    c->sorted = m;
    c->identity = false;
}
