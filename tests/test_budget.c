/* test_budget.c — the automatic budget controller (runtime/sched/rl_budget.c) on synthetic step times.
 *
 * Deterministic: step times come from a known cost model plus noise from a fixed-seed
 * generator, never from the clock. Checks that the RLS fit converges, that it follows a change
 * of cost model (forgetting), that the picked budget stays in its bounds and is predicted to
 * meet the target, and that prefill always gets at least one minimum chunk.
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

/* A random step shape: tokens, seqs, attention work (feature units of rl_budget_features). */
static void random_step(double f[RL_BUDGET_NF])
{
	double seqs = 1 + floor(urand() * 64), tokens = seqs + floor(urand() * 1024);
	f[0] = 1;
	f[1] = tokens;
	f[2] = seqs;
	f[3] = tokens * (64 + urand() * 2048) / 1024.0;
}

/* ns: c0 + c_tok·tokens + c_seq·seqs + c_att·att, times (1 ± noise) */
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

static void test_fit_converges(void)
{
	struct rl_budget b;
	rl_budget_init(&b, 6000000, 16, 8192);
	/* GPU-like: 5 ms fixed, 20 µs per token, 3 µs per sequence, 0.5 µs per 1024 q·ctx */
	const double c[RL_BUDGET_NF] = { 5e6, 2e4, 3e3, 500 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 3000; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(c, f, 0.02));
	}
	for (int i = 0; i < RL_BUDGET_NF; i++)
		/* c0 and c_tok carry most of the time and are pinned down to a few %; the per-seq and
		 * attention terms are small next to 2% noise over a ~200-step memory, so looser */
		CHECKF(near(b.theta[i], c[i], i < 2 ? 0.03 : 0.15), "theta[%d] = %.1f, want %.1f", i, b.theta[i], c[i]);
	/* the prediction over fresh steps is within a few % */
	for (int i = 0; i < 100; i++) {
		random_step(f);
		double want = cost(c, f, 0), got = rl_budget_predict(&b, f);
		CHECKF(near(got, want, 0.03), "predicted %.0f, true %.0f", got, want);
	}
}

static void test_fit_simple_model(void)
{
	/* the model the sim backend spins: step = 5000 µs + 20 µs·tokens, nothing else */
	struct rl_budget b;
	rl_budget_init(&b, 10000000, 16, 8192);
	const double c[RL_BUDGET_NF] = { 5e6, 2e4, 0, 0 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 2000; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(c, f, 0.01));
	}
	CHECKF(near(b.theta[0], 5e6, 0.03), "c0 %.0f", b.theta[0]);
	CHECKF(near(b.theta[1], 2e4, 0.03), "c_tok %.1f", b.theta[1]);
	CHECKF(fabs(b.theta[2]) < 0.05 * 2e4, "c_seq %.1f", b.theta[2]);
}

static void test_outliers_do_not_drag_the_fit(void)
{
	/* one step in 20 is stalled (the thread was preempted): 3-10x longer than the model */
	struct rl_budget b;
	rl_budget_init(&b, 10000000, 16, 8192);
	const double c[RL_BUDGET_NF] = { 5e6, 2e4, 0, 0 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 3000; i++) {
		random_step(f);
		double y = cost(c, f, 0.01);
		if (i % 20 == 7)
			y *= 3 + 7 * urand();
		rl_budget_update(&b, f, y);
	}
	CHECKF(near(b.theta[0], 5e6, 0.10), "c0 %.0f", b.theta[0]);
	CHECKF(near(b.theta[1], 2e4, 0.10), "c_tok %.1f", b.theta[1]);
}

static void test_adapts_to_change(void)
{
	struct rl_budget b;
	rl_budget_init(&b, 10000000, 16, 8192);
	const double c1[RL_BUDGET_NF] = { 5e6, 2e4, 0, 100 };
	const double c2[RL_BUDGET_NF] = { 8e6, 4e4, 0, 300 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 3000; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(c1, f, 0.02));
	}
	CHECK(near(b.theta[1], c1[1], 0.05));
	/* 2000 steps later (four memories of λ = 0.998) it reflects the new costs */
	for (int i = 0; i < 2000; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(c2, f, 0.01));
	}
	CHECKF(near(b.theta[0], c2[0], 0.05), "c0 %.0f", b.theta[0]);
	CHECKF(near(b.theta[1], c2[1], 0.05), "c_tok %.1f", b.theta[1]);
	CHECKF(near(b.theta[3], c2[3], 0.10), "c_att %.1f", b.theta[3]);
}

static void test_no_windup(void)
{
	/* thousands of identical decode-only steps excite one direction only; the covariance must
	 * stay bounded and the fit must still answer sensibly when prefill comes back */
	struct rl_budget b;
	rl_budget_init(&b, 10000000, 16, 8192);
	const double c[RL_BUDGET_NF] = { 5e6, 2e4, 0, 0 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 500; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(c, f, 0.01));
	}
	double g[RL_BUDGET_NF] = { 1, 32, 32, 32 * 300 / 1024.0 };
	for (int i = 0; i < 20000; i++)
		rl_budget_update(&b, g, cost(c, g, 0.01));
	double tr = 0;
	for (int i = 0; i < RL_BUDGET_NF; i++) {
		CHECK(isfinite(b.theta[i]));
		tr += b.P[i][i];
	}
	CHECKF(tr <= b.p_trace_max * 1.0001, "trace(P) %.3g > %.3g", tr, b.p_trace_max);
	for (int i = 0; i < 200; i++) {
		random_step(f);
		rl_budget_update(&b, f, cost(c, f, 0.01));
	}
	CHECKF(near(b.theta[1], 2e4, 0.05), "c_tok %.1f", b.theta[1]);
}

/* A controller that has learnt step = 5 ms + 20 µs·tokens (noise-free, so no margin). */
static void trained(struct rl_budget *b, uint64_t target_ns, uint32_t min_chunk, uint32_t max_budget)
{
	rl_budget_init(b, target_ns, min_chunk, max_budget);
	const double c[RL_BUDGET_NF] = { 5e6, 2e4, 0, 0 };
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
		for (uint32_t d = 0; d <= 256; d += 32) {
			struct rl_budget b;
			trained(&b, targets[t], 16, 4096);
			uint32_t got = rl_budget_choose(&b, d, 300.0 * d, 0);
			CHECKF(got >= d + 16 && got <= 4096, "budget %u for %u decodes", got, d);
			CHECK((got - d) % 16 == 0 || got == 4096);
			double f[RL_BUDGET_NF] = { 1, got, d + 1, 0 };
			double pred = rl_budget_predict(&b, f);
			/* predicted under T, unless only the minimum chunk was left */
			CHECKF(pred <= targets[t] || got == d + 16, "T %llu: budget %u predicts %.0f",
			       (unsigned long long)targets[t], got, pred);
			/* and the largest such: one more chunk would break T (or the ceiling) */
			double f2[RL_BUDGET_NF] = { 1, got + 16, d + 1, 0 };
			CHECKF(got + 16 > 4096 || rl_budget_predict(&b, f2) > targets[t],
			       "T %llu: budget %u is not the largest", (unsigned long long)targets[t], got);
		}
	/* the exact answer for one case: (12 ms − 5 ms) / 20 µs = 350 tokens → 64 decodes + 16·17 */
	struct rl_budget b;
	trained(&b, 12000000, 16, 4096);
	uint32_t got = rl_budget_choose(&b, 64, 0, 0);
	CHECKF(got == 64 + 272, "budget %u, want 336", got);
}

static void test_prefill_always_moves(void)
{
	/* an impossible target (below the fixed cost), a tiny one, and huge decode counts */
	const uint64_t targets[] = { 1, 1000, 4999999, 5000001 };
	for (size_t t = 0; t < sizeof targets / sizeof *targets; t++)
		for (uint32_t d = 0; d < 600; d += 50) {
			struct rl_budget b;
			trained(&b, targets[t], 16, 512);
			uint32_t got = rl_budget_choose(&b, d, 0, 0);
			uint32_t want = d + 16 <= 512 ? d + 16 : 512;
			CHECKF(got >= want && got <= 512, "T %llu, %u decodes: budget %u",
			       (unsigned long long)targets[t], d, got);
		}
	/* before the model is trusted, too */
	struct rl_budget b;
	rl_budget_init(&b, 1, 16, 8192);
	CHECK(rl_budget_choose(&b, 200, 0, 0) >= 216);
}

static void test_grows_gradually(void)
{
	/* a model fitted only on small steps is not trusted far beyond them */
	struct rl_budget b;
	trained(&b, 400000000, 16, 8192);
	b.seen_tokens = 100;
	uint32_t got = rl_budget_choose(&b, 0, 0, 0);
	CHECKF(got <= 200 && got >= 16, "budget %u after steps of 100 tokens", got);
}

static void test_noise_margin(void)
{
	/* with a noisy step time the pick keeps a margin below T */
	struct rl_budget quiet, noisy;
	trained(&quiet, 12000000, 16, 8192);
	rl_budget_init(&noisy, 12000000, 16, 8192);
	const double c[RL_BUDGET_NF] = { 5e6, 2e4, 0, 0 };
	double f[RL_BUDGET_NF];
	for (int i = 0; i < 2000; i++) {
		random_step(f);
		rl_budget_update(&noisy, f, cost(c, f, 0.10));
	}
	noisy.seen_tokens = 8192;
	uint32_t q = rl_budget_choose(&quiet, 0, 0, 0), n = rl_budget_choose(&noisy, 0, 0, 0);
	CHECKF(n < q && n >= 16, "noisy %u, quiet %u", n, q);
}

int main(void)
{
	RUN(test_fit_converges);
	RUN(test_fit_simple_model);
	RUN(test_outliers_do_not_drag_the_fit);
	RUN(test_adapts_to_change);
	RUN(test_no_windup);
	RUN(test_pick_meets_target_and_bounds);
	RUN(test_prefill_always_moves);
	RUN(test_grows_gradually);
	RUN(test_noise_margin);
	TEST_MAIN_END();
}
