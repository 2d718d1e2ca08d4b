/* rl_idle.h — how long the runtime stays awake without work before it sleeps (its idle window).
 *
 * A sleeping runtime costs the next request one wake-up of an idle cpu: tens of µs on bare
 * metal, 100-250 µs on a VM whose halted vCPU the host must schedule again (bench latency's
 * futex floor), which is more than a small model's whole one-token forward. Staying awake
 * costs a core, yielding it to any task the kernel runs there. So the window follows the
 * traffic: the idle periods that outlasted the base window (--idle-spin-us) are kept, the
 * last RL_IDLE_GAPS of them, and the window grows to cover most of them (the 80th percentile
 * plus a quarter; or the last RL_IDLE_RECENT of them, when that is less, so a change to closer
 * requests is followed at once) when that is at most the cap (--idle-adapt-ms). Requests that come closer
 * than the cap find the runtime awake; when they stop, or come further apart than the cap,
 * the window falls back to the base (staying awake would then buy no wake-up).
 * A sleep's own wake-up is part of the period it ends: slightly long, never short.
 */
#ifndef RL_IDLE_H
#define RL_IDLE_H

#include <stdint.h>

#define RL_IDLE_GAPS 16                /* idle periods remembered: enough for a percentile, and a
					* change of pattern is followed within a few requests */
#define RL_IDLE_RECENT 3               /* the latest periods, enough to call a change of pattern */
#define RL_IDLE_ADAPT_DEFAULT_NS 100000000ull  /* 100 ms: the cap's default */

struct rl_idle {
	uint64_t base_ns, cap_ns;      /* the window never goes below base, nor adapts past cap */
	uint64_t window_ns;            /* the current window */
	uint64_t gap[RL_IDLE_GAPS];    /* idle periods longer than base_ns, a ring */
	uint32_t n, next;
};

/* cap_ns 0: the window stays base_ns. */
void rl_idle_init(struct rl_idle *s, uint64_t base_ns, uint64_t cap_ns);
/* An idle period of gap_ns has ended with work; returns the new window. */
uint64_t rl_idle_gap(struct rl_idle *s, uint64_t gap_ns);

#endif
