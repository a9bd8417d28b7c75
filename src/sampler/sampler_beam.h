/* Beam search selection: from the next-token log-probabilities of B live
 * beams, pick the B best continuations by cumulative log-probability.
 * Pure: the engine owns the beams' KV sequences and forks them as told. */
#ifndef SP_SAMPLER_BEAM_H
#define SP_SAMPLER_BEAM_H

#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

#define SP_BEAM_MAX 16

struct sp_beam_pick {
    int parent;          /* index of the beam extended */
    sp_token token;
    double score;        /* parent's cumulative logprob + logprob(token) */
};

/* logits: [n_beams][n_vocab] rows; scores: [n_beams] cumulative logprobs.
 * picks must hold n_beams * width entries (all candidates are ranked there).
 * Writes the best `width` (parent, token, score) triples to picks, best
 * first (ties: lower parent, then lower token id), and returns how many.
 * scratch: at least n_beams * width entries. */
int sp_beam_select(const float *logits, size_t n_vocab, const double *scores, int n_beams, int width,
                   struct sp_beam_pick *picks, struct sp_beam_pick *scratch);

/* Length-normalised score used to rank finished hypotheses. */
double sp_beam_normalised(double logprob, uint32_t length, float length_penalty);

#endif
