/* A small seeded pseudo-random generator for sampling.
 *
 * xoshiro256** (Blackman & Vigna), its 256-bit state filled from the 64-bit
 * seed by splitmix64.  Only integer arithmetic on fixed-width types, so the
 * same seed gives the same sequence on every platform, compiler and thread
 * count.  Not for cryptography.  The state is a plain value: copying it forks
 * the sequence, which sp_sampler_explain() uses to look ahead without
 * consuming draws. */
#ifndef SP_SAMPLER_RNG_H
#define SP_SAMPLER_RNG_H

#include <stdint.h>

struct sp_rng {
    uint64_t s[4];
};

/* Seed the state; any seed (0 included) gives a valid, non-zero state. */
void sp_rng_seed(struct sp_rng *r, uint64_t seed);
/* Next 64 uniformly distributed bits. */
uint64_t sp_rng_next(struct sp_rng *r);
/* Uniform double in [0, 1): the top 53 bits of sp_rng_next() times 2^-53,
 * so every value is a multiple of 2^-53 and 1.0 is never returned. */
double sp_rng_uniform(struct sp_rng *r);

#endif
