/* test_budget.c — the automatic budget controller (runtime/sched/rl_budget.c) on synthetic step
 * times.
 *
 * Deterministic: step times come from a known cost model plus noise from a fixed-seed
 * generator, never from the clock. Checks that the non-negative fit converges and stays
 * non-negative where unconstrained least squares would not, that a calibrated prior survives
 * long decode-only phases (the failure seen on real compute: a prefill token fitted as free),
 * that the fit follows a change of cost model and ignores outliers, that the pick keeps the
 * predicted step plus the error quantile under the target and is the largest such, that an
 * overshoot shrinks the next pick at once, and that prefill always moves.
 * Tests: runtime/sched (rl_budget).
 */
#include <math.h>
#include <stdint.h>
#include "tests/rl_test.h"
#include "runtime/sched/rl_budget.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void)                 /* [0, 1) */
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

/* A random step shape in the units of rl_budget_features: d decode rows with contexts up to
 * 2k, and (most of the time) one prefill chunk after a prefix. */
static void random_step(double f[RL_BUDGET_NF])
{
	uint32_t d = (uint32_t)floor(urand() * 64), q = urand() < 0.3 ? 0 : 1 + (uint32_t)floor(urand() * 512);
	uint32_t p = (uint32_t)floor(urand() * 2048);
	rl_budget_step_features(d, d * (64 + urand() * 2048), p, q, f);
}

/* ns: Σ c·f, times (1 ± noise) */
static double cost(const double c[RL_BUDGET_NF], const double f[RL_BUDGET_NF], double noise)
{
	double y = 0;
	for (int i = 0; i < RL_BUDGET_NF; i++)
		y += c[i] * f[i];
	return y * (1 + noise * (2 * urand() - 1));
}

static int near(double got, double want, double rel)
{
	return fabs(got - want) <= rel * fabs(want);
}

/* GPU-like: 5 ms fixed, 3 µs a decode row, 20 µs a prefill token, 0.5 µs per 1k decode ctx,
 * 1 µs per 1k prefill pairs */
static const double GPU[RL_BUDGET_NF] = { 5e6, 3e3, 2e4, 500, 1000 };

static void test_fit_converges(void)
{
	struct rl_budget b;
	rl_budget_init(&b, 6000000, 8192);
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 3000; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(GPU, f, 0.02));
	}
	/* c0 and the prefill token carry most of the time and are pinned down to a few %; the
	 * smaller terms are small next to 2% noise over a ~500-step memory, so looser */
	const double rel[RL_BUDGET_NF] = { 0.03, 0.5, 0.05, 0.3, 0.2 };
	for (int i = 0; i < RL_BUDGET_NF; i++)
		CHECKF(near(b.theta[i], GPU[i], rel[i]), "theta[%d] = %.1f, want %.1f", i, b.theta[i], GPU[i]);
	for (int i = 0; i < 200; i++) {      /* the prediction over fresh steps is within a few % */
		random_step(f);
		double want = cost(GPU, f, 0), got = rl_budget_predict(&b, f);
		CHECKF(near(got, want, 0.03), "predicted %.0f, true %.0f", got, want);
	}
}

static void test_fit_is_non_negative(void)
{
	/* a step time that falls as decode rows grow (no real backend does; a noisy or confounded
	 * one can look like it): unconstrained least squares would fit c_dec < 0 and predict
	 * shorter steps for more rows. The fit keeps every coefficient >= 0 at every step, and
	 * the coefficients it fits are the ones it predicts with. */
	struct rl_budget b;
	rl_budget_init(&b, 6000000, 8192);
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 2000; i++) {
		random_step(f);
		double y = 5e6 + 2e4 * f[2] - 4e4 * f[1] + 2e6;     /* the rows' "negative cost" */
		rl_budget_update(&b, f, y > 1e6 ? y : 1e6);
		for (int k = 0; k < RL_BUDGET_NF; k++)
			CHECKF(b.theta[k] >= 0, "step %d: theta[%d] = %g", i, k, b.theta[k]);
		double g[RL_BUDGET_NF];
		memcpy(g, f, sizeof g);
		g[1] += 10;                         /* more rows never predict less time */
		CHECK(rl_budget_predict(&b, g) >= rl_budget_predict(&b, f));
	}
	CHECKF(b.theta[1] == 0, "c_dec %g", b.theta[1]);
	CHECKF(near(b.theta[2], 2e4, 0.1), "c_pf %.1f", b.theta[2]);
}

static void test_outliers_do_not_drag_the_fit(void)
{
	/* 5% of steps take 10x as long (the runtime thread preempted): the fit follows the rest */
	struct rl_budget b;
	rl_budget_init(&b, 10000000, 8192);
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 3000; i++) {
		random_step(f);
		double y = cost(GPU, f, 0.01);
		rl_budget_update(&b, f, urand() < 0.05 ? 10 * y : y);
	}
	CHECKF(near(b.theta[0], GPU[0], 0.1), "c0 %.0f", b.theta[0]);
	CHECKF(near(b.theta[2], GPU[2], 0.1), "c_pf %.1f", b.theta[2]);
}

static void test_adapts_to_change(void)
{
	/* the machine gets twice as slow per token (a second tenant, a lower clock) */
	struct rl_budget b;
	rl_budget_init(&b, 10000000, 8192);
	double c2[RL_BUDGET_NF] = { 5e6, 3e3, 4e4, 500, 1000 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 2000; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(GPU, f, 0.02));
	}
	for (int i = 0; i < 2000; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(c2, f, 0.02));
	}
	CHECKF(near(b.theta[2], 4e4, 0.1), "c_pf %.1f after the change", b.theta[2]);
}

/* The calibration's prior: the shapes rl_calib.c times, through rl_budget_prior. */
static void calibrate(struct rl_budget *b, const double c[RL_BUDGET_NF])
{
	static const uint32_t shapes[][4] = {   /* decodes, decode ctx each, chunk, prefix */
		{ 1, 1, 0, 0 }, { 8, 256, 0, 0 }, { 0, 0, 32, 0 }, { 1, 64, 100, 0 }, { 1, 64, 300, 0 },
		{ 1, 64, 500, 0 }, { 4, 1024, 400, 400 }, { 1, 4096, 0, 0 }, { 0, 0, 800, 0 },
	};
	for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
		double f[RL_BUDGET_NF];
		rl_budget_step_features(shapes[k][0], (double)shapes[k][0] * shapes[k][1], shapes[k][3], shapes[k][2], f);
		rl_budget_prior(b, f, cost(c, f, 0.01));
	}
}

static void test_prior_survives_decode_phases(void)
{
	/* what went wrong on a real model: decode-only steps dominate, so a prefill token's cost
	 * was never learnt (fitted at 0) and the first long prompt got a huge chunk. With the
	 * calibration's prior, 20 000 decode-only steps (40 memories of the online fit) leave the
	 * prefill terms where the calibration put them */
	struct rl_budget b;
	rl_budget_init(&b, 20000000, 8192);
	const double cpu[RL_BUDGET_NF] = { 6e6, 1e5, 6e5, 2e5, 1.5e6 };   /* the 110M model on one core */
	calibrate(&b, cpu);
	CHECKF(near(b.theta[2], cpu[2], 0.1), "c_pf %.0f after calibration", b.theta[2]);
	double g[RL_BUDGET_NF];
	rl_budget_step_features(1, 300, 0, 0, g);
	for (int i = 0; i < 20000; i++)
		rl_budget_update(&b, g, cost(cpu, g, 0.02));
	for (int k = 0; k < RL_BUDGET_NF; k++)
		CHECK(isfinite(b.theta[k]));
	CHECKF(near(b.theta[2], cpu[2], 0.2), "c_pf %.0f after the decode phase", b.theta[2]);
	b.seen_tokens = 8192;
	uint32_t got = rl_budget_choose(&b, 1, 300, 0);
	/* (20 ms / (1 + margin) - 6.1 ms - ...) / 0.6 ms: about 20 tokens, certainly not hundreds */
	CHECKF(got >= 10 && got <= 30, "budget %u beside one decode", got);
}

/* A controller that has learnt step = 5 ms + 20 µs a prefill token (noise-free). */
static void trained(struct rl_budget *b, uint64_t target_ns, uint32_t max_budget)
{
	rl_budget_init(b, target_ns, max_budget);
	const double c[RL_BUDGET_NF] = { 5e6, 0, 2e4, 0, 0 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 2000; i++) {
		random_step(f);
		rl_budget_update(b, f, cost(c, f, 0));
	}
	b->seen_tokens = max_budget;       /* as if big steps had run */
}

static void test_pick_meets_target_and_bounds(void)
{
	const uint64_t targets[] = { 5500000, 6000000, 8000000, 12000000, 30000000, 400000000 };
	for (size_t t = 0; t < sizeof targets / sizeof *targets; t++)
		for (uint32_t d = 1; d <= 257; d += 32) {
			struct rl_budget b;
			trained(&b, targets[t], 4096);
			uint32_t got = rl_budget_choose(&b, d, 300.0 * d, 0);
			CHECKF(got >= d + 1 && got <= 4096, "budget %u for %u decodes", got, d);
			double f[RL_BUDGET_NF], lim = targets[t] / (1 + b.margin);
			rl_budget_step_features(d, 300.0 * d, 0, got - d, f);
			double pred = rl_budget_predict(&b, f);
			/* predicted (with the margin) under T, unless only one prefill token was left */
			CHECKF(pred <= lim || got == d + 1, "T %llu: budget %u predicts %.0f", (unsigned long long)targets[t],
			       got, pred);
			/* and the largest such: one more token would break it (or the ceiling) */
			rl_budget_step_features(d, 300.0 * d, 0, got - d + 1, f);
			CHECKF(got + 1 > 4096 || rl_budget_predict(&b, f) > lim, "T %llu: budget %u is not the largest",
			       (unsigned long long)targets[t], got);
		}
	/* the exact answer for one case: (12 ms / 1.15 - 5 ms) / 20 µs = 271.7 -> 271 tokens */
	struct rl_budget b;
	trained(&b, 12000000, 4096);
	CHECKF(near(b.margin, 0.15, 1e-9), "margin %g before any prefill step was seen", b.margin);
	uint32_t got = rl_budget_choose(&b, 64, 0, 0);
	CHECKF(got == 64 + 271, "budget %u, want 335", got);
	/* no decoding sequence: the step keeps to T all the same (a request arriving meanwhile
	 * waits one step at most): (12 ms / 1.15 - 5 ms) / 20 µs -> 271 */
	CHECKF((got = rl_budget_choose(&b, 0, 0, 0)) == 271, "budget %u without decodes, want 271", got);
}

static void test_prefill_always_moves(void)
{
	/* an impossible target (below the fixed cost), a tiny one, and huge decode counts */
	const uint64_t targets[] = { 1, 1000, 4999999, 5000001 };
	for (size_t t = 0; t < sizeof targets / sizeof *targets; t++)
		for (uint32_t d = 1; d < 600; d += 50) {
			struct rl_budget b;
			trained(&b, targets[t], 512);
			uint32_t got = rl_budget_choose(&b, d, 0, 0);
			uint32_t want = d + 1 <= 512 ? d + 1 : 512;
			CHECKF(got >= want && got <= 512, "T %llu, %u decodes: budget %u", (unsigned long long)targets[t], d, got);
		}
	/* before the model is trusted, too */
	struct rl_budget b;
	rl_budget_init(&b, 1, 8192);
	CHECK(rl_budget_choose(&b, 200, 0, 0) >= 201);
}

static void test_grows_gradually(void)
{
	/* a model fitted only on small steps is not trusted far beyond them */
	struct rl_budget b;
	trained(&b, 400000000, 8192);
	b.seen_tokens = 100;
	uint32_t got = rl_budget_choose(&b, 1, 0, 0);
	CHECKF(got <= 200 && got >= 2, "budget %u after steps of 100 tokens", got);
}

/* rl_batch of d decode rows (ctx 300) and one chunk of q rows after p cached tokens. */
struct bstep {
	struct rl_batch b;
	struct rl_batch_seq seqs[65];
};
static void make_step(struct bstep *s, uint32_t d, uint32_t q, uint32_t p)
{
	memset(s, 0, sizeof *s);
	uint32_t n = 0, row = 0;
	if (q) {
		s->seqs[n++] = (struct rl_batch_seq){ .q_start = row, .q_len = q, .ctx_len = p + q };
		row += q;
		s->b.n_prefill = 1;
	}
	for (uint32_t i = 0; i < d; i++, row++)
		s->seqs[n++] = (struct rl_batch_seq){ .q_start = row, .q_len = 1, .ctx_len = 300, .sample = 1 };
	s->b.n_seqs = n;
	s->b.n_tokens = row;
	s->b.seqs = s->seqs;
}

static void test_margin_is_the_error_quantile(void)
{
	/* step times ±10% (uniform) around the model: the margin settles near the 95% quantile of
	 * the relative errors (~9.5%), and the pick keeps predicted x (1 + margin) under T. Steps
	 * of 11-15 ms against T = 20 ms: those under half of T do not count for the margin */
	struct rl_budget b;
	trained(&b, 20000000, 8192);
	const double c[RL_BUDGET_NF] = { 5e6, 0, 2e4, 0, 0 };
	struct bstep s;
	for (int i = 0; i < 500; i++) {
		uint32_t q = 300 + (uint32_t)(urand() * 200);
		make_step(&s, 4, q, 0);
		double f[RL_BUDGET_NF];
		rl_budget_features(&b, &s.b, f);
		rl_budget_observe(&b, &s.b, (uint64_t)cost(c, f, 0.10));
	}
	CHECKF(b.margin > 0.06 && b.margin < 0.12, "margin %.3f for ±10%% noise", b.margin);
	/* tiny steps with +100% errors (another process's time slice) leave it alone */
	struct rl_budget t = b;
	for (int i = 0; i < 200; i++) {
		make_step(&s, 4, 20, 0);
		double f[RL_BUDGET_NF];
		rl_budget_features(&t, &s.b, f);
		rl_budget_observe(&t, &s.b, (uint64_t)(2 * cost(c, f, 0)));
	}
	CHECKF(t.margin == b.margin, "margin %.3f after tiny steps, %.3f before", t.margin, b.margin);
	struct rl_budget quiet;
	trained(&quiet, 20000000, 8192);
	for (int i = 0; i < 100; i++) {
		make_step(&s, 4, 300, 0);
		double f[RL_BUDGET_NF];
		rl_budget_features(&b, &s.b, f);
		rl_budget_observe(&quiet, &s.b, (uint64_t)cost(c, f, 0));
	}
	CHECKF(near(quiet.margin, 0.05, 1e-9), "margin %.3f without noise (the 5%% floor)", quiet.margin);
	b.seen_tokens = quiet.seen_tokens = 8192;
	uint32_t n = rl_budget_choose(&b, 4, 1200, 0), q = rl_budget_choose(&quiet, 4, 1200, 0);
	CHECKF(n < q && n > 4, "noisy %u, quiet %u", n, q);
}

static void test_overshoot_shrinks_at_once(void)
{
	struct rl_budget b;
	trained(&b, 20000000, 8192);
	const double c[RL_BUDGET_NF] = { 5e6, 0, 2e4, 0, 0 };
	struct bstep s;
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 50; i++) {
		make_step(&s, 4, 200, 0);
		rl_budget_features(&b, &s.b, f);
		rl_budget_observe(&b, &s.b, (uint64_t)cost(c, f, 0));
	}
	b.seen_tokens = 8192;
	uint32_t before = rl_budget_choose(&b, 4, 1200, 0);
	make_step(&s, 4, before - 4, 0);                   /* that step takes 30 ms, not ~18 */
	rl_budget_observe(&b, &s.b, 30000000);
	uint32_t after = rl_budget_choose(&b, 4, 1200, 0);
	CHECKF(after < before * 0.8, "budget %u before the overshoot, %u after", before, after);
	for (int i = 0; i < 30; i++) {                     /* and it recovers when steps behave */
		make_step(&s, 4, 200, 0);
		rl_budget_features(&b, &s.b, f);
		rl_budget_observe(&b, &s.b, (uint64_t)cost(c, f, 0));
	}
	uint32_t later = rl_budget_choose(&b, 4, 1200, 0);
	CHECKF(later > after, "budget %u after recovery, %u after the overshoot", later, after);
}

/* The default target: eight short prompt steps, within [10, 40] ms; the ceiling without a step. */
static void test_default_target(void)
{
	CHECK(rl_budget_default_target(3.5e6) == 28000000);
	CHECK(rl_budget_default_target(50e3) == RL_BUDGET_TARGET_MIN_NS);
	CHECK(rl_budget_default_target(9e6) == RL_BUDGET_TARGET_MAX_NS);
	CHECK(rl_budget_default_target(0) == RL_BUDGET_TARGET_MAX_NS);
	CHECK(rl_budget_default_target(-1) == RL_BUDGET_TARGET_MAX_NS);
}

/* The running cap: the most decodes whose step fits the decode share of the target. */
static void test_max_running(void)
{
	struct rl_budget b;
	rl_budget_init(&b, 12100000, 4096);
	CHECK(rl_budget_max_running(&b) == 4096);   /* not yet trusted: no cap */
	/* step = 2 ms + 100 µs a sampled row: 0.75 x 12.1 ms = 9.075 ms -> 70 decodes */
	const double c[RL_BUDGET_NF] = { 2e6, 1e5, 2e4, 0, 0 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 2000; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(c, f, 0));
	}
	uint32_t n = rl_budget_max_running(&b);
	CHECKF(n == 70, "cap %u, want 70", n);
	b.target_ns = 1000;                          /* below one decode: still one runs */
	CHECK(rl_budget_max_running(&b) == 1);
}

/* A backend whose steps with prompt rows pay 10 ms more at once (the CPU's bf16 tiles over
 * Q4_1): the sixth feature learns it, and the pick takes a chunk only where the whole cost
 * fits the target, then a long one; decode-only steps do not pay it. */
static void test_prompt_steps_cost_at_once(void)
{
	const double c[RL_BUDGET_NF] = { 2e6, 1e5, 5e4, 0, 0, 10e6 };
	const uint64_t targets[] = { 12000000, 30000000 };
	const uint32_t want[] = { 2 + 1, 2 + 275 };
	for (int t = 0; t < 2; t++) {
		struct rl_budget b;
		rl_budget_init(&b, targets[t], 4096);
		b.prompt_cost = 1;
		double f[RL_BUDGET_NF];
		for (int i = 0; i < 3000; i++) {
			uint32_t d = (uint32_t)floor(urand() * 8), q = urand() < 0.3 ? 0 : (uint32_t)floor(urand() * 300);
			rl_budget_step_features(d + (q > 0), 0, 0, q, f);
			rl_budget_route(&b, q > 1, f);
			rl_budget_update(&b, f, cost(c, f, 0));
		}
		CHECKF(near(b.theta[5], 10e6, 0.01), "c_prompt %.0f ns, want 10 ms", b.theta[5]);
		b.seen_tokens = 4096;
		uint32_t got = rl_budget_choose(&b, 2, 0, 0);
		CHECKF(got == want[t], "T %llu ms: budget %u, want %u", (unsigned long long)targets[t] / 1000000, got, want[t]);
	}
}

int main(void)
{
	RUN(test_prompt_steps_cost_at_once);
	RUN(test_default_target);
	RUN(test_max_running);
	RUN(test_fit_converges);
	RUN(test_fit_is_non_negative);
	RUN(test_outliers_do_not_drag_the_fit);
	RUN(test_adapts_to_change);
	RUN(test_prior_survives_decode_phases);
	RUN(test_pick_meets_target_and_bounds);
	RUN(test_prefill_always_moves);
	RUN(test_grows_gradually);
	RUN(test_margin_is_the_error_quantile);
	RUN(test_overshoot_shrinks_at_once);
	TEST_MAIN_END();
}
