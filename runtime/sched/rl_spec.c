/* rl_spec.c — prompt-lookup drafts and the adaptive draft length (see rl_spec.h). */
#include <string.h>
#include "runtime/sched/rl_spec.h"

void rl_spec_init(struct rl_spec_state *st)
{
	/* prior: one of two accepted (α = 0.5), weighing as two rounds */
	*st = (struct rl_spec_state){ .acc = 1.0f, .tried = 2.0f, .wait = 0, .pause = 1 };
}

/* Expected tokens per step-cost of k drafts at acceptance rate a */
static double gain(double a, uint32_t k)
{
	double e = 1, ak = 1;               /* 1 + a + a^2 + ... + a^k */
	for (uint32_t i = 0; i < k; i++) {
		ak *= a;
		e += ak;
	}
	return e / (1 + RL_SPEC_ROW_COST * k);
}

uint32_t rl_spec_len(struct rl_spec_state *st, uint32_t k_max)
{
	if (st->wait) {
		if (--st->wait == 0)
			return k_max ? 1 : 0;     /* the probe after a pause */
		return 0;
	}
	const double a = st->tried > 0 ? st->acc / st->tried : 0;
	uint32_t best = 0;
	double g_best = 1;                  /* plain decoding: one token for one step */
	for (uint32_t k = 1; k <= k_max; k++) {
		const double g = gain(a, k);
		if (g > g_best) {
			g_best = g;
			best = k;
		}
	}
	if (!best && k_max) {               /* does not pay: pause, longer each time */
		st->wait = st->pause;
		st->pause = st->pause < RL_SPEC_MAX_PAUSE / 2 ? (uint16_t)(st->pause * 2) : RL_SPEC_MAX_PAUSE;
	}
	return best;
}

void rl_spec_update(struct rl_spec_state *st, uint32_t a, uint32_t n)
{
	if (!n)
		return;
	st->acc = st->acc * (float)RL_SPEC_DECAY + (float)a;
	st->tried = st->tried * (float)RL_SPEC_DECAY + (float)(a < n ? a + 1 : a);
	if (a)
		st->pause = 1;
}

uint32_t rl_spec_ngram(const uint32_t *tok, uint32_t len, uint32_t k, uint32_t *out)
{
	if (len < RL_SPEC_NGRAM_MIN + 1 || !k)
		return 0;
	const uint32_t last = tok[len - 1];
	uint32_t best_n = 0, best_e = 0;
	/* candidate occurrences end at e (exclusive), latest first; the suffix itself (e = len)
	 * is not one. m < e keeps the backward comparison inside the buffer. */
	for (uint32_t e = len - 1; e >= 1 && best_n < RL_SPEC_NGRAM_MAX; e--) {
		if (tok[e - 1] != last)
			continue;
		uint32_t m = 1;
		while (m < RL_SPEC_NGRAM_MAX && m < e && tok[e - 1 - m] == tok[len - 1 - m])
			m++;
		if (m > best_n) {
			best_n = m;
			best_e = e;
		}
	}
	if (best_n < RL_SPEC_NGRAM_MIN)
		return 0;
	const uint32_t n = len - best_e < k ? len - best_e : k;
	memcpy(out, tok + best_e, n * sizeof *out);
	return n;
}
