/* rl_idle.c — the runtime's idle window from the idle periods it has seen (rl_idle.h). */
#include "runtime/loop/rl_idle.h"

void rl_idle_init(struct rl_idle *s, uint64_t base_ns, uint64_t cap_ns)
{
	*s = (struct rl_idle){ .base_ns = base_ns, .cap_ns = cap_ns, .window_ns = base_ns };
}

uint64_t rl_idle_gap(struct rl_idle *s, uint64_t gap_ns)
{
	if (gap_ns <= s->base_ns || s->cap_ns <= s->base_ns)
		return s->window_ns;       /* within the base window, or nothing to adapt */
	s->gap[s->next] = gap_ns;
	s->next = (s->next + 1) % RL_IDLE_GAPS;
	if (s->n < RL_IDLE_GAPS)
		s->n++;
	uint64_t g[RL_IDLE_GAPS];      /* sorted copy, insertion sort of at most 16 */
	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t j = i;
		for (; j > 0 && g[j - 1] > s->gap[i]; j--)
			g[j] = g[j - 1];
		g[j] = s->gap[i];
	}
	uint64_t q = g[(s->n - 1) * 4 / 5];         /* the 80th percentile (the lower one) */
	if (s->n >= RL_IDLE_RECENT) {               /* or the longest of the last few, if less: */
		uint64_t r = 0;                     /* a change to closer requests is followed */
		for (uint32_t i = 1; i <= RL_IDLE_RECENT; i++) {   /* within a few of them */
			const uint64_t v = s->gap[(s->next + RL_IDLE_GAPS - i) % RL_IDLE_GAPS];
			r = v > r ? v : r;
		}
		q = r < q ? r : q;
	}
	const uint64_t w = q + q / 4;
	s->window_ns = w <= s->cap_ns ? w : s->base_ns;
	return s->window_ns;
}
