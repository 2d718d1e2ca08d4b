/* rl_sample.h — token sampling: greedy, temperature, top-k, top-p, with a counter-based RNG.
 *
 * The random draw for a token is a pure function of (seed, position of the token being
 * sampled), so a request's output never depends on its batch mates or on how many steps ran
 * before. The RNG is header-only and RL_HD so a CUDA sampling kernel can use the same math.
 */
#ifndef RL_SAMPLE_H
#define RL_SAMPLE_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/rl_batch.h"

#ifdef __CUDACC__
#define RL_HD __host__ __device__
#else
#define RL_HD
#endif

/* splitmix64 finaliser: a bijective 64-bit mix with full avalanche. */
static inline RL_HD uint64_t rl_sample_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform float in [0, 1) for (seed, position): two rounds of mixing so nearby seeds and
 * nearby positions give unrelated draws. 24 bits, exactly representable as a float. */
static inline RL_HD float rl_sample_uniform(uint64_t seed, uint32_t position)
{
	uint64_t z = rl_sample_mix64(seed + 0x9E3779B97F4A7C15ull);
	z = rl_sample_mix64(z ^ ((uint64_t)position * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull));
	return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* One candidate token while sampling. */
struct rl_sample_cand {
	float    p;                    /* probability (unnormalised while filtering) */
	uint32_t id;
};

/* Bytes of scratch rl_sample needs for a vocabulary of vocab tokens. */
static inline size_t rl_sample_scratch_size(uint32_t vocab)
{
	return (size_t)vocab * sizeof(struct rl_sample_cand);
}

/* argmax of logits[n]; the lowest id wins ties. */
uint32_t rl_sample_argmax(const float *logits, uint32_t n);

/* Samples the token at `position` from logits[vocab] (not modified) with sp. scratch holds
 * rl_sample_scratch_size(vocab) bytes, owned by the caller (nothing is allocated here).
 * temperature <= 0 is greedy; top_k == 0 or >= vocab is no cut; top_p >= 1 is no cut. */
uint32_t rl_sample(const float *logits, uint32_t vocab, const struct rl_sampling *sp,
		   uint32_t position, void *scratch);

/* Log-probabilities over logits[vocab] at temperature 1 (log-softmax, the sum in double):
 * returns token tok's, and writes the *n_top most likely tokens (decreasing, ties: lower id
 * first) to top_id / top_lp; *n_top becomes how many were written: fewer when fewer tokens
 * are possible (logits of -inf, e.g. masked, are never alternatives). One pass for the sum,
 * one selection pass per alternative kept in a sorted list of n_top: O(vocab * log n_top)-ish,
 * nothing allocated. */
float rl_sample_logprobs(const float *logits, uint32_t vocab, uint32_t tok, uint32_t *n_top,
			 uint32_t *top_id, float *top_lp);

/* Words of a token bitmask over vocab tokens (bit i % 32 of word i / 32 is token i). */
static inline RL_HD uint32_t rl_sample_mask_words(uint32_t vocab) { return (vocab + 31) / 32; }
/* 1 when the mask allows some token below vocab (a backend refuses a mask that allows none) */
static inline int rl_sample_mask_any(const uint32_t *allow, uint32_t vocab)
{
	const uint32_t nw = rl_sample_mask_words(vocab), tail = vocab % 32;
	for (uint32_t w = 0; w < nw; w++)
		if (w + 1 == nw && tail ? allow[w] & ((1u << tail) - 1) : allow[w])
			return 1;
	return 0;
}
/* A constraint's allowed tokens applied to logits[vocab]: every token whose bit in
 * allow[rl_sample_mask_words(vocab)] is clear gets -inf, so sampling, greedy or not, and
 * log-probabilities then see the constrained distribution. Words of all ones cost one test.
 * Returns how many tokens stay allowed (0: the caller must not sample this row). */
uint32_t rl_sample_mask(float *logits, uint32_t vocab, const uint32_t *allow);

#endif
