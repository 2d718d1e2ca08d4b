/* rl_ngram.c — prompt lookup, the draft source without a second model (see rl_ngram.h). */
#include "runtime/spec/rl_ngram.h"

uint32_t rl_ngram_draft(const uint32_t *tok, uint32_t len, uint32_t k, uint32_t *out)
{
	if (len < RL_NGRAM_MIN + 1 || !k)
		return 0;
	const uint32_t last = tok[len - 1];
	uint32_t best_n = 0, best_e = 0;
	/* candidate occurrences end at e (exclusive), latest first; the suffix itself (e = len)
	 * is not one. m < e keeps the backward comparison inside the buffer. */
	for (uint32_t e = len - 1; e >= 1 && best_n < RL_NGRAM_MAX; e--) {
		if (tok[e - 1] != last)
			continue;
		uint32_t m = 1;
		while (m < RL_NGRAM_MAX && m < e && tok[e - 1 - m] == tok[len - 1 - m])
			m++;
		if (m > best_n) {
			best_n = m;
			best_e = e;
		}
	}
	if (best_n < RL_NGRAM_MIN)
		return 0;
	/* what followed it, continued through the drafts themselves when the occurrence runs
	 * into the suffix (a repeating pattern of period len - best_e repeats on) */
	for (uint32_t i = 0; i < k; i++)
		out[i] = best_e + i < len ? tok[best_e + i] : out[best_e + i - len];
	return k;
}

void rl_ngram_propose(struct rl_draft_ask *asks, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		asks[i].n_out = rl_ngram_draft(asks[i].tokens, asks[i].len, asks[i].k, asks[i].out);
}
