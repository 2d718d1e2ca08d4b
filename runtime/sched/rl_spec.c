/* rl_spec.c — the adaptive draft length and the step-cost fit it reads (see rl_spec.h). */
#include <string.h>
#include "runtime/sched/rl_spec.h"

void rl_spec_init(struct rl_spec_state *st)
{
	/* prior: one of two accepted (α = 0.5), weighing as two rounds */
	*st = (struct rl_spec_state){ .acc = 1.0f, .tried = 2.0f, .wait = 0, .pause = 1 };
}

/* Expected tokens per step-cost of k drafts at acceptance rate a, each costing c */
static double gain(double a, uint32_t k, double c)
{
	double e = 1, ak = 1;               /* 1 + a + a^2 + ... + a^k */
	for (uint32_t i = 0; i < k; i++) {
		ak *= a;
		e += ak;
	}
	return e / (1 + c * k);
}

uint32_t rl_spec_len(struct rl_spec_state *st, uint32_t k_max, double c)
{
	if (k_max && gain(1.0, k_max, c) <= 1)
		return 0;                       /* not even drafts that are all right would pay */
	if (st->wait) {
		if (--st->wait == 0)
			return k_max ? 1 : 0;     /* the probe after a pause */
		return 0;
	}
	const double a = st->tried > 0 ? st->acc / st->tried : 0;
	uint32_t best = 0;
	double g_best = 1;                  /* plain decoding: one token for one step */
	for (uint32_t k = 1; k <= k_max; k++) {
		const double g = gain(a, k, c);
		if (g > g_best) {
			g_best = g;
			best = k;
		}
	}
	if (!best && k_max) {               /* does not pay: pause, longer each time */
		st->wait = st->pause;
		st->pause = st->pause < RL_SPEC_MAX_PAUSE / 2 ? (uint16_t)(st->pause * 2) : RL_SPEC_MAX_PAUSE;
	} else if (best)
		st->pause = 1;                  /* pays again: the next pause starts short */
	return best;
}

void rl_spec_update(struct rl_spec_state *st, uint32_t a, uint32_t n)
{
	if (!n)
		return;
	st->acc = st->acc * (float)RL_SPEC_DECAY + (float)a;
	st->tried = st->tried * (float)RL_SPEC_DECAY + (float)(a < n ? a + 1 : a);
}

void rl_spec_cost_observe(struct rl_spec_cost *f, uint32_t rows, uint64_t ns)
{
	const double l = RL_SPEC_COST_DECAY, r = rows, t = (double)ns;
	f->sw = f->sw * l + 1;
	f->sr = f->sr * l + r;
	f->srr = f->srr * l + r * r;
	f->st = f->st * l + t;
	f->srt = f->srt * l + r * t;
}

double rl_spec_cost_row(const struct rl_spec_cost *f, double draft_ns)
{
	/* the rows' variance must be real (a few steps of another row count), or b is noise */
	const double var = f->sw > 0 ? f->srr / f->sw - (f->sr / f->sw) * (f->sr / f->sw) : 0;
	const double D = f->sw * f->srr - f->sr * f->sr;
	if (f->sw < 8 || var < 0.05 || D <= 0)
		return RL_SPEC_ROW_COST + (f->sw > 0 && f->st > 0 ? draft_ns / (f->st / f->sw) : 0);
	double b = (f->sw * f->srt - f->sr * f->st) / D;
	b = b > 0 ? b : 0;
	double a = (f->st - b * f->sr) / f->sw;
	const double one = a + b > 0 ? a + b : f->st / f->sw;   /* a one-row step */
	return one > 0 ? (b + draft_ns) / one : RL_SPEC_ROW_COST;
}
