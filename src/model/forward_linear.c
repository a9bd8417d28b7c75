/* The linear layers of the forward pass: Mamba-2's causal convolution and
 * chunked selective scan (SSD), on the state grid of src/state/state.h, and
 * LFM2's gated short convolution (a convolution's history only).
 *
 * A head's state follows h_p = a_p h_(p-1) + dt_p x_p B_p^T (a_p =
 * e^(dt_p A), x_p the head's values, B_p its group's input vector) and
 * y_p = h_p C_p + D x_p.  Within the chunk of grid point g (g <= p < g +
 * C), with L_p = dt_g A + ... + dt_p A,
 *
 *     y_p = e^(L_p) h_g C_p + sum_(s = g .. p) e^(L_p - L_s) dt_s (B_s . C_p) x_s + D x_p
 *     h_(g+C) = e^(L_(g+C-1)) h_g + sum_(s = g .. g+C-1) e^(L_(g+C-1) - L_s) dt_s x_s B_s^T
 *
 * so a position's output is computed from the grid state h_g and the
 * inputs (x, B, C, dt, L) of the positions g .. p, the same way whether
 * they arrive in one batch or one per step.  The sequence's slot holds one
 * grid state (state.h: the one at its floor's grid point); a run whose
 * positions lie past it computes the grid states between from it and the
 * chunks' inputs, where its positions first need them, and stores the one
 * the slot keeps.  A position's inputs are read from the batch (positions
 * of this step) or from the sequence's ring (earlier steps); after the
 * layer the ring takes the batch's last rows.
 *
 * Layout of a position's input row (lin_in, and the state's ring): the
 * convolution's outputs x [inner], B [groups][state], C [groups][state],
 * then dt [heads] (softplus applied) and L [heads].  A grid state is
 * [heads][state][head width] (each head's transposed, scan.h). */
#include "model/forward_linear.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "kernels/exp.h"
#include "kernels/kernels.h"
#include "kernels/scan.h"

#define C_ SP_STATE_CHUNK
/* Widest value head of the delta rule (a stack buffer per head). */
#define SP_DN_MAX_WIDTH 1024

struct sp_fwd_run {
    const struct sp_memory_seq *seq;
    int t0, n;       /* batch rows t0 .. t0 + n - 1 */
    int32_t p0;      /* the position of row t0 */
    struct sp_state_view v; /* the layer being computed */
};

/* Mamba-2's sizes, derived once. */
struct sp_ssm_dims {
    int di, ds, nh, hd, ng, dc, conv, in_floats, lin;
};

static struct sp_ssm_dims sp_ssm_dims(const struct sp_hparams *hp)
{
    struct sp_ssm_dims d = {
        .di = (int)hp->ssm_inner, .ds = (int)hp->ssm_state, .nh = (int)hp->ssm_heads, .hd = (int)hp->ssm_head_dim,
        .ng = (int)hp->ssm_groups, .dc = (int)hp->ssm_conv,
    };
    d.conv = d.di + 2 * d.ng * d.ds;
    d.in_floats = d.conv + 2 * d.nh;
    d.lin = d.di + d.conv + d.nh;
    return d;
}

/* Qwen3.5's gated delta rule's sizes (forward_delta below). */
struct sp_dn_dims {
    int nk, nv, dk, dv, dc, kd, vd, conv, lin, in, ring;
};

static struct sp_dn_dims sp_dn_dims(const struct sp_hparams *hp)
{
    struct sp_dn_dims d = {.nk = (int)hp->ssm_groups, .nv = (int)hp->ssm_heads, .dk = (int)hp->ssm_state,
                           .dv = (int)hp->ssm_head_dim, .dc = (int)hp->ssm_conv};
    d.kd = d.nk * d.dk;
    d.vd = d.nv * d.dv;
    d.conv = 2 * d.kd + d.vd;
    d.lin = d.conv + d.vd + 2 * d.nv;     /* qkv, z, beta, alpha */
    d.in = 2 * d.kd + 2 * d.vd + 3 * d.nv; /* q, k, v, beta, g, L, u */
    d.ring = d.kd + d.nv + d.vd;           /* k, L, u: what later positions read */
    return d;
}

void sp_forward_state_layer(const struct sp_model *m, uint32_t il, struct sp_state_layer *out)
{
    memset(out, 0, sizeof *out);
    if (m->layers[il].mixer == SP_MIXER_DELTA) {
        struct sp_dn_dims d = sp_dn_dims(&m->hp);
        out->conv_ch = (uint32_t)d.conv;
        out->conv_hist = (uint32_t)d.dc - 1;
        out->in_floats = (uint32_t)d.ring;
        out->grid_floats = (uint32_t)d.nv * (uint32_t)d.dk * (uint32_t)d.dv;
        return;
    }
    if (m->layers[il].mixer == SP_MIXER_CONV) {
        out->conv_ch = m->hp.n_embd;
        out->conv_hist = m->hp.conv_taps - 1;
        return;
    }
    if (m->layers[il].mixer != SP_MIXER_SSM)
        return;
    struct sp_ssm_dims d = sp_ssm_dims(&m->hp);
    out->conv_ch = (uint32_t)d.conv;
    out->conv_hist = (uint32_t)d.dc - 1;
    out->in_floats = (uint32_t)d.in_floats;
    out->grid_floats = (uint32_t)d.nh * (uint32_t)d.ds * (uint32_t)d.hd;
}

void sp_fwd_linear_sizes(const struct sp_model *m, struct sp_fwd_linear_sizes *o)
{
    memset(o, 0, sizeof *o);
    if (!m->hp.n_linear)
        return;
    if (m->arch->linear == SP_MIXER_DELTA) {
        struct sp_dn_dims d = sp_dn_dims(&m->hp);
        o->lin = (size_t)d.lin;
        o->in = (size_t)d.in;
        o->cb = (size_t)d.nk * 2 * C_;
        o->y = (size_t)d.vd;
        o->h = (size_t)d.dk * d.dv;
        return;
    }
    if (m->arch->linear == SP_MIXER_CONV) { /* B, C, x; B * x; the gated output */
        o->lin = 3 * (size_t)m->hp.n_embd;
        o->in = o->y = m->hp.n_embd;
        return;
    }
    struct sp_ssm_dims d = sp_ssm_dims(&m->hp);
    o->lin = (size_t)d.lin;
    o->in = (size_t)d.in_floats;
    o->cb = (size_t)d.ng * C_;
    o->y = (size_t)d.di;
    o->h = (size_t)d.ds * d.hd;
}

size_t sp_fwd_run_bytes(void) { return sizeof(struct sp_fwd_run); }

sp_status sp_fwd_runs(struct sp_forward_scratch *s, const struct sp_forward_batch *b)
{
    int n = 0;
    for (int t = 0; t < b->n_tok; t++) {
        if (t == 0 || b->seqs[t] != b->seqs[t - 1]) {
            for (int r = 0; r < n; r++)
                if (s->runs[r].seq == b->seqs[t])
                    return sp_error_set(SP_ERR_INTERNAL, "forward: a sequence's tokens are not together in the batch");
            s->runs[n++] = (struct sp_fwd_run){.seq = b->seqs[t], .t0 = t, .n = 0, .p0 = b->pos[t]};
        } else if (b->pos[t] != b->pos[t - 1] + 1) {
            return sp_error_set(SP_ERR_INTERNAL, "forward: positions %d then %d of one sequence", b->pos[t - 1],
                                b->pos[t]);
        }
        s->runs[n - 1].n++;
        s->tok_run[t] = n - 1;
    }
    s->n_runs = n;
    return SP_OK;
}

/* A (run, head)'s walk along the grid: the head's state at grid point at
 * (NULL: the zero state at 0), in the slot or in one of the pool chunk's
 * two buffers.  sp_fwd_grid_next gives where the state at at + C goes: the
 * buffer not holding the current one; sp_fwd_grid_done then moves it into
 * the slot when it is the one the sequence keeps (the chunked form's
 * output does not overlap its input, scan.h). */
struct sp_fwd_grid {
    const float *h;
    uint32_t at;
    float *slot, *buf[2];
    uint32_t keep;
    int next;
};

static struct sp_fwd_grid sp_fwd_grid_start(const struct sp_fwd_run *r, size_t head, float *buf, size_t hs)
{
    uint32_t held = *r->v.held, keep = sp_state_grid(sp_state_floor_after((uint32_t)r->p0, (uint32_t)r->n));
    struct sp_fwd_grid g = {.at = held, .slot = r->v.grid + head, .buf = {buf, buf + hs}, .keep = keep};
    g.h = held ? g.slot : NULL;
    return g;
}

/* After a run's layer, before its rings take the run's rows: the slot's
 * floor and the grid point it holds; when that moves to g, the
 * convolution's raw inputs of the hist positions before g (hrows[k] is
 * position g - hist + k's, from the batch or the ring) into conv_held. */
static void sp_fwd_floor(const struct sp_fwd_run *r, const float *const *hrows, int hist, size_t ch)
{
    const uint32_t f = sp_state_floor_after((uint32_t)r->p0, (uint32_t)r->n), g = sp_state_grid(f);
    if (g != *r->v.held)
        for (int k = 0; k < hist; k++)
            memcpy(r->v.conv_held + (size_t)k * ch, hrows[k], ch * sizeof(float));
    *r->v.floor = f;
    *r->v.held = g;
}

/* The position whose convolution history sp_fwd_floor takes: g - hist
 * + k, g the grid point the run's layer holds after it. */
static int32_t sp_fwd_hist_pos(const struct sp_fwd_run *r, int hist, int k)
{
    return (int32_t)sp_state_grid(sp_state_floor_after((uint32_t)r->p0, (uint32_t)r->n)) - hist + k;
}

static float *sp_fwd_grid_next(struct sp_fwd_grid *g)
{
    float *dst = g->buf[g->next];
    g->next ^= 1;
    return dst;
}

static void sp_fwd_grid_done(struct sp_fwd_grid *g, float *dst, size_t hs)
{
    g->at += C_;
    g->h = dst;
    if (g->at == g->keep) {
        memcpy(g->slot, dst, hs * sizeof *dst);
        g->h = g->slot;
    }
}

/* One layer's job over the batch. */
struct sp_ssm_job {
    const struct sp_model *m;
    const struct sp_layer *L;
    struct sp_forward_scratch *s;
    const struct sp_forward_batch *b;
    struct sp_ssm_dims d;
};

/* The input row of position q of run r: this batch's, or the ring's. */
static float *sp_ssm_row(const struct sp_ssm_job *j, const struct sp_fwd_run *r, int32_t q)
{
    if (q >= r->p0)
        return j->s->lin_in + (size_t)(r->t0 + (q - r->p0)) * j->s->lin_in_floats;
    return r->v.in + (size_t)((uint32_t)q % r->v.in_ring) * j->s->lin_in_floats;
}

/* The raw convolution inputs (x, B, C before it) of position q of run r. */
static const float *sp_ssm_conv_row(const struct sp_ssm_job *j, const struct sp_fwd_run *r, int32_t q)
{
    if (q < 0)
        return NULL;
    if (q >= r->p0)
        return j->s->lin + (size_t)(r->t0 + (q - r->p0)) * j->s->lin_stride + j->d.di;
    return r->v.conv + (size_t)((uint32_t)q % r->v.conv_ring) * j->d.conv;
}

/* Phase 1, a token: the convolution (x, B, C) and dt into its input row. */
static void sp_ssm_conv_token(const struct sp_ssm_job *j, int t)
{
    const struct sp_fwd_run *r = &j->s->runs[j->s->tok_run[t]];
    const struct sp_ssm_dims *d = &j->d;
    const int32_t p = j->b->pos[t];
    const float *rows[SP_CONV_MAX_TAPS];
    float *in = j->s->lin_in + (size_t)t * j->s->lin_in_floats;
    for (int k = 0; k < d->dc; k++)
        rows[k] = sp_ssm_conv_row(j, r, p - (d->dc - 1) + k);
    sp_conv_causal(in, rows, j->L->ssm_conv.data, j->L->ssm_conv_b.data, d->conv, d->dc, true);
    const float *dt = j->s->lin + (size_t)t * j->s->lin_stride + d->di + d->conv, *bias = j->L->ssm_dt_b.data;
    for (int h = 0; h < d->nh; h++) { /* softplus, as ggml */
        float v = dt[h] + bias[h];
        in[d->conv + h] = v > 20.0f ? v : logf(1.0f + expf(v));
    }
}

/* Phase 2, a token: B_s . C_p for the positions s of its chunk so far,
 * per group. */
static void sp_ssm_cb_token(const struct sp_ssm_job *j, int t)
{
    const struct sp_fwd_run *r = &j->s->runs[j->s->tok_run[t]];
    const struct sp_ssm_dims *d = &j->d;
    const int32_t p = j->b->pos[t], g0 = (int32_t)sp_state_grid((uint32_t)p);
    const float *c = j->s->lin_in + (size_t)t * j->s->lin_in_floats + d->di + d->ng * d->ds;
    float *cb = j->s->lin_cb + (size_t)t * d->ng * C_;
    for (int32_t q = g0; q <= p; q++) {
        const float *B = sp_ssm_row(j, r, q) + d->di;
        for (int g = 0; g < d->ng; g++)
            cb[g * C_ + (q - g0)] = sp_dot16(B + g * d->ds, c + g * d->ds, d->ds);
    }
}

/* The state at the grid point after g->at, from the state there and the
 * chunk's inputs (all written: the chunk lies before a position of the
 * run, or before the floor). */
static void sp_ssm_advance(const struct sp_ssm_job *j, const struct sp_fwd_run *r, int h, struct sp_fwd_grid *g)
{
    const struct sp_ssm_dims *d = &j->d;
    const int grp = h / (d->nh / d->ng), i_dt = d->conv + h, i_l = d->conv + d->nh + h;
    const float *xs[C_], *Bs[C_];
    float w[C_];
    const int32_t g0 = (int32_t)g->at;
    const float lam = sp_ssm_row(j, r, g0 + (int32_t)C_ - 1)[i_l];
    for (int q = 0; q < (int)C_; q++) {
        const float *rq = sp_ssm_row(j, r, g0 + q);
        xs[q] = rq + (size_t)h * d->hd;
        Bs[q] = rq + d->di + (size_t)grp * d->ds;
        w[q] = sp_exp1(lam - rq[i_l]) * rq[i_dt];
    }
    float *dst = sp_fwd_grid_next(g);
    sp_ssd_state(dst, g->h, sp_exp1(lam), (int)C_, w, Bs, xs, d->ds, d->hd);
    sp_fwd_grid_done(g, dst, (size_t)d->ds * d->hd);
}

/* Phase 3, a (run, head): the head's L and outputs, in position order, and
 * the grid states they and the slot need.  buf: two head states. */
static void sp_ssm_head(const struct sp_ssm_job *j, const struct sp_fwd_run *r, int h, float *buf)
{
    const struct sp_ssm_dims *d = &j->d;
    const float A = ((const float *)j->L->ssm_a.data)[h], D = ((const float *)j->L->ssm_d.data)[h];
    const int grp = h / (d->nh / d->ng), i_dt = d->conv + h, i_l = d->conv + d->nh + h;
    const size_t head = (size_t)h * d->ds * d->hd;
    struct sp_fwd_grid g = sp_fwd_grid_start(r, head, buf, (size_t)d->ds * d->hd);
    const float *xs[C_];
    float w[C_];
    for (int k = 0; k < r->n; k++) {
        const int t = r->t0 + k;
        const int32_t p = r->p0 + k, g0 = (int32_t)sp_state_grid((uint32_t)p);
        float *row = sp_ssm_row(j, r, p);
        const float lam = (p == g0 ? 0.0f : sp_ssm_row(j, r, p - 1)[i_l]) + row[i_dt] * A;
        row[i_l] = lam;
        while ((int32_t)g.at < g0)
            sp_ssm_advance(j, r, h, &g);
        const int n = p - g0 + 1;
        const float *cb = j->s->lin_cb + (size_t)t * d->ng * C_ + (size_t)grp * C_;
        for (int q = 0; q < n; q++) {
            const float *rq = q == n - 1 ? row : sp_ssm_row(j, r, g0 + q);
            xs[q] = rq + (size_t)h * d->hd;
            w[q] = sp_exp1(lam - rq[i_l]) * rq[i_dt] * cb[q];
        }
        float *y = j->s->lin_y + (size_t)t * d->di + (size_t)h * d->hd;
        sp_ssd_out(y, g.h, row + d->di + (size_t)(d->ng + grp) * d->ds, sp_exp1(lam), n, w, xs, d->ds, d->hd);
        for (int i = 0; i < d->hd; i++)
            y[i] += xs[n - 1][i] * D;
    }
    while (g.at < g.keep)
        sp_ssm_advance(j, r, h, &g);
}

/* Phase 5, a token: y * silu(z), then the RMSNorm of each group. */
static void sp_ssm_gate_token(const struct sp_ssm_job *j, int t)
{
    const struct sp_ssm_dims *d = &j->d;
    float *y = j->s->lin_y + (size_t)t * d->di;
    const float *z = j->s->lin + (size_t)t * j->s->lin_stride, *norm = j->L->ssm_norm.data;
    const int gw = d->di / d->ng;
    sp_swiglu(z, y, y, d->di);
    for (int g = 0; g < d->ng; g++)
        sp_rmsnorm(y + (size_t)g * gw, norm + (size_t)g * gw, y + (size_t)g * gw, gw, j->m->hp.eps);
}

enum sp_ssm_phase { SP_SSM_CONV, SP_SSM_CB, SP_SSM_SCAN, SP_SSM_GATE };

struct sp_ssm_run {
    const struct sp_ssm_job *j;
    enum sp_ssm_phase phase;
};

static void sp_ssm_run_fn(void *arg, int ith, int nth)
{
    const struct sp_ssm_run *a = arg;
    const struct sp_ssm_job *j = a->j;
    long lo, hi;
    if (a->phase == SP_SSM_SCAN) { /* items: (run, head) */
        float *buf = j->s->lin_h + (size_t)ith * 2 * j->s->lin_h_floats;
        sp_pool_split((long)j->s->n_runs * j->d.nh, 1, ith, nth, &lo, &hi);
        for (long i = lo; i < hi; i++)
            sp_ssm_head(j, &j->s->runs[i / j->d.nh], (int)(i % j->d.nh), buf);
        return;
    }
    sp_pool_split(j->b->n_tok, 1, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        if (a->phase == SP_SSM_CONV)
            sp_ssm_conv_token(j, (int)t);
        else if (a->phase == SP_SSM_CB)
            sp_ssm_cb_token(j, (int)t);
        else
            sp_ssm_gate_token(j, (int)t);
    }
}

/* Phase 4: each run's last rows into its rings (after every head read the
 * rows there), and the grid point its slot now holds. */
static void sp_ssm_keep(const struct sp_ssm_job *j)
{
    const struct sp_ssm_dims *d = &j->d;
    for (int i = 0; i < j->s->n_runs; i++) {
        const struct sp_fwd_run *r = &j->s->runs[i];
        const int32_t end = r->p0 + r->n;
        const float *hrows[SP_CONV_MAX_TAPS];
        for (int k = 0; k < d->dc - 1; k++)
            hrows[k] = sp_ssm_conv_row(j, r, sp_fwd_hist_pos(r, d->dc - 1, k));
        sp_fwd_floor(r, hrows, d->dc - 1, (size_t)d->conv);
        for (int32_t q = end - (int32_t)r->v.in_ring > r->p0 ? end - (int32_t)r->v.in_ring : r->p0; q < end; q++)
            memcpy(r->v.in + (size_t)((uint32_t)q % r->v.in_ring) * j->s->lin_in_floats, sp_ssm_row(j, r, q),
                   j->s->lin_in_floats * sizeof(float));
        for (int32_t q = end - (int32_t)r->v.conv_ring > r->p0 ? end - (int32_t)r->v.conv_ring : r->p0; q < end; q++)
            memcpy(r->v.conv + (size_t)((uint32_t)q % r->v.conv_ring) * d->conv, sp_ssm_conv_row(j, r, q),
                   (size_t)d->conv * sizeof(float));
    }
}

void sp_fwd_ssm(const struct sp_model *m, const struct sp_memory *mem, struct sp_forward_scratch *s,
                struct sp_pool *pool, const struct sp_forward_batch *b, uint32_t il)
{
    struct sp_ssm_job j = {.m = m, .L = &m->layers[il], .s = s, .b = b, .d = sp_ssm_dims(&m->hp)};
    for (int i = 0; i < s->n_runs; i++)
        s->runs[i].v = sp_memory_state_view(mem, s->runs[i].seq, il);
    static const enum sp_ssm_phase phases[] = {SP_SSM_CONV, SP_SSM_CB, SP_SSM_SCAN};
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        struct sp_ssm_run a = {&j, phases[i]};
        sp_pool_run(pool, sp_ssm_run_fn, &a);
    }
    sp_ssm_keep(&j);
    struct sp_ssm_run a = {&j, SP_SSM_GATE};
    sp_pool_run(pool, sp_ssm_run_fn, &a);
}

/* ---- LFM2's gated short convolution ----
 * in_proj gives B, C and x per position; the convolution runs over B * x
 * (taps over the positions before, no bias), and C times its output is the
 * mixer's output.  The state is the convolution's history: the ring keeps
 * B * x of the recent positions. */

struct sp_sc_job {
    const struct sp_layer *L;
    struct sp_forward_scratch *s;
    const struct sp_forward_batch *b;
    int E, taps, phase; /* phase 0: B * x into lin_in; 1: the convolution, gated, into lin_y */
};

/* B * x of position q of run r: this batch's, or the ring's. */
static const float *sp_sc_row(const struct sp_sc_job *j, const struct sp_fwd_run *r, int32_t q)
{
    if (q < 0)
        return NULL;
    if (q >= r->p0)
        return j->s->lin_in + (size_t)(r->t0 + (q - r->p0)) * j->E;
    return r->v.conv + (size_t)((uint32_t)q % r->v.conv_ring) * j->E;
}

static void sp_sc_token(const struct sp_sc_job *j, int t)
{
    const float *bcx = j->s->lin + (size_t)t * j->s->lin_stride;
    if (j->phase == 0) {
        float *bx = j->s->lin_in + (size_t)t * j->E;
        for (int i = 0; i < j->E; i++)
            bx[i] = bcx[i] * bcx[2 * j->E + i];
        return;
    }
    const struct sp_fwd_run *r = &j->s->runs[j->s->tok_run[t]];
    const int32_t p = j->b->pos[t];
    const float *rows[SP_CONV_MAX_TAPS];
    float *y = j->s->lin_y + (size_t)t * j->E;
    for (int k = 0; k < j->taps; k++)
        rows[k] = sp_sc_row(j, r, p - (j->taps - 1) + k);
    sp_conv_causal(y, rows, j->L->sc_conv.data, NULL, j->E, j->taps, false);
    for (int i = 0; i < j->E; i++)
        y[i] *= bcx[j->E + i];
}

static void sp_sc_run_fn(void *arg, int ith, int nth)
{
    const struct sp_sc_job *j = arg;
    long lo, hi;
    sp_pool_split(j->b->n_tok, 1, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++)
        sp_sc_token(j, (int)t);
}

void sp_fwd_shortconv(const struct sp_model *m, const struct sp_memory *mem, struct sp_forward_scratch *s,
                      struct sp_pool *pool, const struct sp_forward_batch *b, uint32_t il)
{
    struct sp_sc_job j = {.L = &m->layers[il], .s = s, .b = b, .E = (int)m->hp.n_embd, .taps = (int)m->hp.conv_taps};
    for (int i = 0; i < s->n_runs; i++)
        s->runs[i].v = sp_memory_state_view(mem, s->runs[i].seq, il);
    for (j.phase = 0; j.phase < 2; j.phase++)
        sp_pool_run(pool, sp_sc_run_fn, &j);
    for (int i = 0; i < s->n_runs; i++) { /* the runs' last B * x rows into their rings, the floor */
        const struct sp_fwd_run *r = &s->runs[i];
        const float *hrows[SP_CONV_MAX_TAPS];
        for (int k = 0; k < j.taps - 1; k++)
            hrows[k] = sp_sc_row(&j, r, sp_fwd_hist_pos(r, j.taps - 1, k));
        sp_fwd_floor(r, hrows, j.taps - 1, (size_t)j.E);
        const int32_t end = r->p0 + r->n, ring = (int32_t)r->v.conv_ring;
        for (int32_t q = end - ring > r->p0 ? end - ring : r->p0; q < end; q++)
            memcpy(r->v.conv + (size_t)((uint32_t)q % r->v.conv_ring) * j.E, sp_sc_row(&j, r, q),
                   (size_t)j.E * sizeof(float));
    }
}

/* ---- Qwen3.5's gated delta rule ----
 * A value head's state S (key width x value width) follows, per position,
 * S = e^(g_p) S; u_p = beta_p (v_p - S^T k_p); S += k_p u_p^T; o_p = S^T q_p
 * / sqrt(value width), with q and k L2-normalized and value head h reading
 * key head h % key heads (ggml's gated_delta_net; Qwen3-Next's grouped
 * heads: key head h / (value heads / key heads)).  Within the chunk of
 * grid point g, with L_p = g_g + ... + g_p,
 *
 *     u_p = beta_p (v_p - e^(L_p) S_g^T k_p - sum_(r = g .. p-1) e^(L_p - L_r) (k_r . k_p) u_r)
 *     o_p = e^(L_p) S_g^T q_p + sum_(r = g .. p) e^(L_p - L_r) (k_r . q_p) u_r
 *     S_(g+C) = e^(L_(g+C-1)) S_g + sum_r e^(L_(g+C-1) - L_r) k_r u_r^T
 *
 * the selective scan's formulas with u for x and k for B (and for C in
 * u's sum), so they run on the same kernels.  u_p, once computed, is an
 * input of the positions after it: it is kept in the position's row.
 * Row layout: q [key heads][key width], k (the same), v [value heads]
 * [value width], beta, g, L [value heads], u [value heads][value width].
 * The ring keeps of each position only what later positions read: k, then
 * L and u (as in the row, together). */

struct sp_dn_job {
    const struct sp_model *m;
    const struct sp_layer *L;
    struct sp_forward_scratch *s;
    const struct sp_forward_batch *b;
    struct sp_dn_dims d;
    bool grouped; /* the family's dn_grouped */
    int phase; /* 0: convolution, norms, beta, g; 1: k.k and k.q; 2: the heads; 3: gated norm */
};

/* Position q's row of this batch (q >= the run's first position). */
static float *sp_dn_row(const struct sp_dn_job *j, const struct sp_fwd_run *r, int32_t q)
{
    return j->s->lin_in + (size_t)(r->t0 + (q - r->p0)) * j->s->lin_in_floats;
}

/* Position q's k [key heads][key width]: this batch's, or the ring's. */
static const float *sp_dn_k(const struct sp_dn_job *j, const struct sp_fwd_run *r, int32_t q)
{
    if (q >= r->p0)
        return sp_dn_row(j, r, q) + j->d.kd;
    return r->v.in + (size_t)((uint32_t)q % r->v.in_ring) * j->d.ring;
}

/* Position q's L [value heads] and u [value heads][value width], together. */
static const float *sp_dn_lu(const struct sp_dn_job *j, const struct sp_fwd_run *r, int32_t q)
{
    if (q >= r->p0)
        return sp_dn_row(j, r, q) + j->d.conv + 2 * j->d.nv;
    return r->v.in + (size_t)((uint32_t)q % r->v.in_ring) * j->d.ring + j->d.kd;
}

static const float *sp_dn_conv_row(const struct sp_dn_job *j, const struct sp_fwd_run *r, int32_t q)
{
    if (q < 0)
        return NULL;
    if (q >= r->p0)
        return j->s->lin + (size_t)(r->t0 + (q - r->p0)) * j->s->lin_stride;
    return r->v.conv + (size_t)((uint32_t)q % r->v.conv_ring) * j->d.conv;
}

/* Phase 0, a token: conv + SiLU over q, k, v; q and k L2-normalized per
 * head (as llama.cpp: an RMSNorm with eps / width, times 1 / sqrt(width));
 * beta = sigmoid; g = softplus(alpha + dt bias) * A. */
static void sp_dn_prep(const struct sp_dn_job *j, int t)
{
    const struct sp_dn_dims *d = &j->d;
    const struct sp_fwd_run *r = &j->s->runs[j->s->tok_run[t]];
    const int32_t p = j->b->pos[t];
    const float *rows[SP_CONV_MAX_TAPS], *lin = j->s->lin + (size_t)t * j->s->lin_stride;
    float *in = j->s->lin_in + (size_t)t * j->s->lin_in_floats;
    for (int k = 0; k < d->dc; k++)
        rows[k] = sp_dn_conv_row(j, r, p - (d->dc - 1) + k);
    sp_conv_causal(in, rows, j->L->ssm_conv.data, NULL, d->conv, d->dc, true);
    const float eps = j->m->hp.eps / (float)d->dk, scale = 1.0f / sqrtf((float)d->dk);
    for (int h = 0; h < 2 * d->nk; h++) {
        float *x = in + (size_t)h * d->dk;
        sp_rmsnorm(x, NULL, x, d->dk, eps);
        for (int i = 0; i < d->dk; i++)
            x[i] *= scale;
    }
    /* the projection's betas and alphas in groups of r heads, each group's
     * betas then its alphas: n = value heads (ssm_beta, ssm_alpha), or
     * value heads per key head (ssm_ba) */
    const int n = j->grouped ? d->nv / d->nk : d->nv;
    const float *ba = lin + d->conv + d->vd;
    const float *bias = j->L->ssm_dt_b.data, *A = j->L->ssm_a.data;
    float *ob = in + d->conv, *og = ob + d->nv;
    for (int h = 0; h < d->nv; h++) {
        const float *beta = ba + (size_t)(h / n) * 2 * n + h % n;
        ob[h] = 1.0f / (1.0f + expf(-beta[0]));
        float v = beta[n] + bias[h];
        og[h] = (v > 20.0f ? v : logf(1.0f + expf(v))) * A[h];
    }
}

/* Phase 1, a token: for each key head, k_r . k_p (r < p) and k_r . q_p
 * (r <= p) over the positions r of its chunk so far. */
static void sp_dn_dots(const struct sp_dn_job *j, int t)
{
    const struct sp_dn_dims *d = &j->d;
    const struct sp_fwd_run *r = &j->s->runs[j->s->tok_run[t]];
    const int32_t p = j->b->pos[t], g0 = (int32_t)sp_state_grid((uint32_t)p);
    const float *in = j->s->lin_in + (size_t)t * j->s->lin_in_floats;
    float *cb = j->s->lin_cb + (size_t)t * d->nk * 2 * C_;
    for (int32_t q = g0; q <= p; q++) {
        const float *kr = sp_dn_k(j, r, q);
        for (int kh = 0; kh < d->nk; kh++) {
            const float *krh = kr + (size_t)kh * d->dk;
            cb[(2 * kh + 1) * C_ + (q - g0)] = sp_dot16(krh, in + (size_t)kh * d->dk, d->dk);
            if (q < p)
                cb[2 * kh * C_ + (q - g0)] = sp_dot16(krh, in + d->kd + (size_t)kh * d->dk, d->dk);
        }
    }
}

/* The state at the grid point after g->at (as sp_ssm_advance). */
static void sp_dn_advance(const struct sp_dn_job *j, const struct sp_fwd_run *r, int h, int kh, struct sp_fwd_grid *g)
{
    const struct sp_dn_dims *d = &j->d;
    const size_t u_off = (size_t)d->nv + (size_t)h * d->dv;
    const float *xs[C_], *ks[C_];
    float w[C_];
    const int32_t g0 = (int32_t)g->at;
    const float lam = sp_dn_lu(j, r, g0 + (int32_t)C_ - 1)[h];
    for (int q = 0; q < (int)C_; q++) {
        const float *lu = sp_dn_lu(j, r, g0 + q);
        xs[q] = lu + u_off;
        ks[q] = sp_dn_k(j, r, g0 + q) + (size_t)kh * d->dk;
        w[q] = sp_exp1(lam - lu[h]);
    }
    float *dst = sp_fwd_grid_next(g);
    sp_ssd_state(dst, g->h, sp_exp1(lam), (int)C_, w, ks, xs, d->dk, d->dv);
    sp_fwd_grid_done(g, dst, (size_t)d->dk * d->dv);
}

/* Phase 2, a (run, value head): u and the outputs, in position order, and
 * the grid states they and the slot need.  buf: two head states. */
static void sp_dn_head(const struct sp_dn_job *j, const struct sp_fwd_run *r, int h, float *buf)
{
    const struct sp_dn_dims *d = &j->d;
    const int kh = j->grouped ? h / (d->nv / d->nk) : h % d->nk, i_b = d->conv + h, i_g = i_b + d->nv, i_l = i_g + d->nv;
    const size_t u_off = (size_t)d->nv + (size_t)h * d->dv, head = (size_t)h * d->dk * d->dv; /* in sp_dn_lu */
    const float scale = 1.0f / sqrtf((float)d->dv);
    struct sp_fwd_grid g = sp_fwd_grid_start(r, head, buf, (size_t)d->dk * d->dv);
    const float *xs[C_], *ks[C_];
    float w[C_], kv[SP_DN_MAX_WIDTH];
    for (int n = 0; n < r->n; n++) {
        const int t = r->t0 + n;
        const int32_t p = r->p0 + n, g0 = (int32_t)sp_state_grid((uint32_t)p);
        float *row = sp_dn_row(j, r, p);
        const float lam = (p == g0 ? 0.0f : sp_dn_lu(j, r, p - 1)[h]) + row[i_g];
        row[i_l] = lam;
        while ((int32_t)g.at < g0)
            sp_dn_advance(j, r, h, kh, &g);
        const int k = p - g0; /* positions of the chunk before p */
        const float *cb = j->s->lin_cb + (size_t)t * d->nk * 2 * C_ + (size_t)2 * kh * C_;
        for (int q = 0; q <= k; q++) {
            const float *lu = sp_dn_lu(j, r, g0 + q);
            xs[q] = lu + u_off;
            ks[q] = sp_dn_k(j, r, g0 + q) + (size_t)kh * d->dk;
            w[q] = q < k ? sp_exp1(lam - lu[h]) * cb[q] : 0.0f;
        }
        const float decay = sp_exp1(lam);
        /* u_p = beta (v - S^T k_p) */
        sp_ssd_out(kv, g.h, ks[k], decay, k, w, xs, d->dk, d->dv);
        const float *v = row + 2 * (size_t)d->kd + (size_t)h * d->dv;
        float *u = row + d->conv + 2 * (size_t)d->nv + u_off;
        for (int i = 0; i < d->dv; i++)
            u[i] = (v[i] - kv[i]) * row[i_b];
        /* o_p = S^T q_p / sqrt(width) */
        for (int q = 0; q <= k; q++)
            w[q] = sp_exp1(lam - (q == k ? lam : sp_dn_lu(j, r, g0 + q)[h])) * cb[C_ + q];
        float *y = j->s->lin_y + (size_t)t * d->vd + (size_t)h * d->dv;
        sp_ssd_out(y, g.h, row + (size_t)kh * d->dk, decay, k + 1, w, xs, d->dk, d->dv);
        for (int i = 0; i < d->dv; i++)
            y[i] *= scale;
    }
    while (g.at < g.keep)
        sp_dn_advance(j, r, h, kh, &g);
}

/* Phase 3, a token: each value head RMS-normed, times SiLU(z). */
static void sp_dn_gate(const struct sp_dn_job *j, int t)
{
    const struct sp_dn_dims *d = &j->d;
    float *y = j->s->lin_y + (size_t)t * d->vd;
    const float *z = j->s->lin + (size_t)t * j->s->lin_stride + d->conv;
    for (int h = 0; h < d->nv; h++)
        sp_rmsnorm(y + (size_t)h * d->dv, j->L->ssm_norm.data, y + (size_t)h * d->dv, d->dv, j->m->hp.eps);
    sp_swiglu(z, y, y, d->vd);
}

static void sp_dn_run_fn(void *arg, int ith, int nth)
{
    const struct sp_dn_job *j = arg;
    long lo, hi;
    if (j->phase == 2) {
        float *buf = j->s->lin_h + (size_t)ith * 2 * j->s->lin_h_floats;
        sp_pool_split((long)j->s->n_runs * j->d.nv, 1, ith, nth, &lo, &hi);
        for (long i = lo; i < hi; i++)
            sp_dn_head(j, &j->s->runs[i / j->d.nv], (int)(i % j->d.nv), buf);
        return;
    }
    sp_pool_split(j->b->n_tok, 1, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        if (j->phase == 0)
            sp_dn_prep(j, (int)t);
        else if (j->phase == 1)
            sp_dn_dots(j, (int)t);
        else
            sp_dn_gate(j, (int)t);
    }
}

void sp_fwd_delta(const struct sp_model *m, const struct sp_memory *mem, struct sp_forward_scratch *s,
                  struct sp_pool *pool, const struct sp_forward_batch *b, uint32_t il)
{
    struct sp_dn_job j = {.m = m, .L = &m->layers[il], .s = s, .b = b, .d = sp_dn_dims(&m->hp),
                         .grouped = m->arch->dn_grouped};
    for (int i = 0; i < s->n_runs; i++)
        s->runs[i].v = sp_memory_state_view(mem, s->runs[i].seq, il);
    for (j.phase = 0; j.phase < 3; j.phase++)
        sp_pool_run(pool, sp_dn_run_fn, &j);
    for (int i = 0; i < s->n_runs; i++) { /* the runs' last rows into their rings, the grid point held */
        const struct sp_fwd_run *r = &s->runs[i];
        const int32_t end = r->p0 + r->n;
        const float *hrows[SP_CONV_MAX_TAPS];
        for (int k = 0; k < j.d.dc - 1; k++)
            hrows[k] = sp_dn_conv_row(&j, r, sp_fwd_hist_pos(r, j.d.dc - 1, k));
        sp_fwd_floor(r, hrows, j.d.dc - 1, (size_t)j.d.conv);
        for (int32_t q = end - (int32_t)r->v.in_ring > r->p0 ? end - (int32_t)r->v.in_ring : r->p0; q < end; q++)
        {
            float *ring = r->v.in + (size_t)((uint32_t)q % r->v.in_ring) * j.d.ring;
            memcpy(ring, sp_dn_k(&j, r, q), (size_t)j.d.kd * sizeof(float));
            memcpy(ring + j.d.kd, sp_dn_lu(&j, r, q), ((size_t)j.d.nv + j.d.vd) * sizeof(float));
        }
        for (int32_t q = end - (int32_t)r->v.conv_ring > r->p0 ? end - (int32_t)r->v.conv_ring : r->p0; q < end; q++)
            memcpy(r->v.conv + (size_t)((uint32_t)q % r->v.conv_ring) * j.d.conv, sp_dn_conv_row(&j, r, q),
                   (size_t)j.d.conv * sizeof(float));
    }
    j.phase = 3;
    sp_pool_run(pool, sp_dn_run_fn, &j);
}
