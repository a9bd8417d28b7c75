/* The speculative-decoding room's own state (spec.c, draft.c). */
#ifndef SP_SPEC_INTERNAL_H
#define SP_SPEC_INTERNAL_H

#include "sampler/rng.h"
#include "spec/spec.h"

/* Largest draft distribution kept whole; a wider q is drawn as its most
 * likely token (a point mass), which is exact too. */
#define SP_SPEC_Q_MAX 256

struct sp_spec {
    struct sp_spec_config c;
    struct sp_spec_target t;
    uint32_t n_vocab;
    /* model drafts: the draft model with its own KV cache and scratch, or
     * the target's first `layers` layers in the target's */
    const struct sp_model *dm;
    struct sp_memory *dmem, *own_mem; /* own_mem: the draft model's (NULL otherwise) */
    struct sp_forward_scratch *dfs, own_fs;
    uint32_t layers;                /* 0: all of dm's */
    sp_token *b_tokens;             /* [n_batch] the draft forward's batch */
    int32_t *b_pos, *b_out;
    const struct sp_memory_seq **b_seqs;
    int *b_job;                     /* [n_rows] job of each output row */
    float *logits;                  /* [n_rows][n_vocab] */
    float *scratch;                 /* [n_vocab], zero between uses */
    uint32_t *k, *next;             /* [n_rows] per job: drafts wanted, next position to feed */
    /* cost model: the last SP_SPEC_RING seconds of target forwards of T
     * tokens, all with logits (t_ring[T][]; n_seen[T]: how many measured),
     * and of one draft forward (EMA) */
    double *t_ring;
    uint32_t *n_seen;
    uint64_t *stamp, clock;         /* [T]: the forward count when T was last measured */
    double t_draft;
    bool draft_seen;
    uint64_t drafted, accepted;
};

struct sp_spec_seq {
    struct sp_sampler *sampler;     /* the draft chain (model sources), NULL otherwise */
    bool dense;                     /* drafts are drawn from q (temperature > 0) */
    struct sp_rng rng;              /* draws of the acceptance rule and of drafts */
    double acc_hit, acc_try;        /* decayed accepted drafts and verified draft positions */
    uint32_t idle, probe;           /* steps without drafts; steps until a probing draft */
    struct sp_memory_seq dseq;      /* the draft model's sequence */
    uint32_t q_n[SP_SPEC_K_MAX];    /* support of draft j's q (0: a point guess) */
    sp_token *q_id;                 /* [SP_SPEC_K_MAX][SP_SPEC_Q_MAX] */
    float *q_p;
};

/* draft.c: model drafts of jobs[i].ss for sp->k[i] positions each. */
void sp_spec_model_draft(struct sp_spec *sp, struct sp_spec_job *jobs, int n_jobs);

#endif
