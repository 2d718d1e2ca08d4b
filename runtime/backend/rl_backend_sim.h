/* rl_backend_sim.h — the sim backend's token function, shared with tests and clients that check it.
 *
 * The sim backend stores one 64-bit state per KV slot: state[p] = rl_sim_mix(state[p-1], tok[p])
 * with state[-1] = RL_SIM_STATE0. The token sampled after position p (i.e. at p+1) is
 * state[p] % vocab. So the output is a deterministic function of the prompt and the position,
 * and because each step reads state[p-1] through the block table, a wrong block table, a bad
 * prefix-cache hit or a lost KV block changes the tokens: the sim checks the paged KV for real.
 * A constrained row (rl_batch_seq.allow) takes the first allowed token at or after that one,
 * wrapping around (rl_sim_allowed), so a constraint's masks show in the tokens too.
 */
#ifndef RL_BACKEND_SIM_H
#define RL_BACKEND_SIM_H
#include <stdint.h>

#define RL_SIM_STATE0 0x9E3779B97F4A7C15ull

static inline uint64_t rl_sim_mix(uint64_t state, uint32_t tok)
{
	uint64_t z = state ^ ((uint64_t)tok + 1) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* t, or the first token after it (wrapping) that allow[] has; t itself when allow is NULL or
 * has none. */
static inline uint32_t rl_sim_allowed(uint32_t t, uint32_t vocab, const uint32_t *allow)
{
	for (uint32_t k = 0; allow && k < vocab; k++) {
		const uint32_t u = (t + k) % vocab;
		if (allow[u / 32] >> (u % 32) & 1)
			return u;
	}
	return t;
}

/* Next token after the given context (what the sim backend samples), computed from scratch. */
static inline uint32_t rl_sim_next(const uint32_t *toks, uint32_t n, uint32_t vocab)
{
	uint64_t s = RL_SIM_STATE0;
	for (uint32_t i = 0; i < n; i++)
		s = rl_sim_mix(s, toks[i]);
	return (uint32_t)(s % vocab);
}

#endif
