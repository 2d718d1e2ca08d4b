/* test_forward.c — the CPU forward: kernels against plain loops, the cpu backend against the
 * reference forward (kernels/rl_ref.c) on random models of several shapes, and the sampler.
 *
 * Tolerance: the backend sums in a different order (SIMD tiles, online softmax), so logits
 * differ from the reference by rounding only: max |diff| <= TOL * max(1, max |logit|), TOL 1e-4.
 * Set RL_SLOW=k to divide the amount of work by k (sanitizer builds).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include "rl_test.h"
#include "rl_backend.h"
#include "rl_model.h"
#include "rl_ref.h"
#include "rl_sample.h"
#include "cpu_ops.h"

#define TOL 1e-4f

static int slow = 1;

static uint64_t rng_state = 12345;
static uint32_t rnd_u32(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return (uint32_t)((z ^ (z >> 31)) >> 32);
}
static float rnd_f(void) { return (float)(rnd_u32() >> 8) / 16777216.0f * 2.0f - 1.0f; }

/* max |a - b| relative to max(1, max |b|) */
static float rel_diff(const float *a, const float *b, size_t n)
{
	float d = 0, s = 1;
	for (size_t i = 0; i < n; i++) {
		d = fmaxf(d, fabsf(a[i] - b[i]));
		s = fmaxf(s, fabsf(b[i]));
	}
	return d / s;
}

/* ------------------------------------------------------------------ kernels ------ */

static void matmul_every_isa_matches_loops(void)
{
	static const uint32_t shapes[][3] = { /* rows, in, out */
		{ 1, 64, 64 }, { 3, 37, 11 }, { 5, 100, 33 }, { 70, 24, 9 }, { 9, 300, 130 }, { 1, 7, 3 },
	};
	enum rl_cpu_isa saved = rl_cpu_isa();
	for (int isa = RL_CPU_SCALAR; isa <= (int)rl_cpu_isa_best(); isa++) {
		REQUIRE(rl_cpu_set_isa(isa) == 0);
		for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
			uint32_t n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
			size_t ldx = in + 3, ldy = out + 2;   /* strides wider than the rows */
			float *X = malloc(n * ldx * 4), *W = malloc((size_t)out * in * 4), *b = malloc(out * 4);
			float *Y = malloc(n * ldy * 4), *R = malloc(n * ldy * 4);
			for (size_t i = 0; i < n * ldx; i++) X[i] = rnd_f();
			for (size_t i = 0; i < (size_t)out * in; i++) W[i] = rnd_f();
			for (size_t i = 0; i < out; i++) b[i] = rnd_f();
			for (size_t i = 0; i < n * ldy; i++) Y[i] = R[i] = rnd_f();
			for (int acc = 0; acc < 2; acc++) {
				/* two calls over a split of the columns, as two threads do */
				uint32_t mid = out / 2;
				rl_cpu_matmul(Y, ldy, X, ldx, W, acc ? NULL : b, n, in, 0, mid, acc);
				rl_cpu_matmul(Y, ldy, X, ldx, W, acc ? NULL : b, n, in, mid, out, acc);
				for (uint32_t r = 0; r < n; r++)
					for (uint32_t o = 0; o < out; o++) {
						double t = acc ? R[r * ldy + o] : b[o];
						for (uint32_t i = 0; i < in; i++)
							t += (double)X[r * ldx + i] * W[(size_t)o * in + i];
						R[r * ldy + o] = (float)t;
					}
				CHECKF(rel_diff(Y, R, n * ldy) < 1e-5f, "isa %s shape %u,%u,%u acc %d: %g",
				       rl_cpu_isa_name(isa), n, in, out, acc, rel_diff(Y, R, n * ldy));
			}
			free(X); free(W); free(b); free(Y); free(R);
		}
	}
	rl_cpu_set_isa(saved);
}

/* ------------------------------------------------------------------ sampler ------ */

static void sampler_greedy_and_cuts_agree(void)
{
	enum { V = 1000 };
	static float logits[V];
	static struct rl_sample_cand scratch[V];
	for (int trial = 0; trial < 50; trial++) {
		for (int i = 0; i < V; i++)
			logits[i] = 3 * rnd_f();
		if (trial % 5 == 0)   /* a tie at the top: the lower id must win everywhere */
			logits[700] = logits[200] = 4.0f;
		uint32_t g = rl_sample_argmax(logits, V);
		if (trial % 5 == 0)
			CHECK(g == 200);
		struct rl_sampling greedy = { .temperature = 0, .top_p = 1 };
		struct rl_sampling k1 = { .temperature = 1.3f, .top_k = 1, .top_p = 1, .seed = trial };
		struct rl_sampling p0 = { .temperature = 0.8f, .top_p = 1e-6f, .seed = trial };
		struct rl_sampling kp = { .temperature = 2.0f, .top_k = 1, .top_p = 0.5f, .seed = trial };
		for (uint32_t pos = 0; pos < 20; pos++) {
			CHECK(rl_sample(logits, V, &greedy, pos, scratch) == g);
			CHECK(rl_sample(logits, V, &k1, pos, scratch) == g);
			CHECK(rl_sample(logits, V, &p0, pos, scratch) == g);
			CHECK(rl_sample(logits, V, &kp, pos, scratch) == g);
		}
	}
}

static void sampler_is_keyed_by_seed_and_position(void)
{
	enum { V = 300 };
	static float logits[V];
	static struct rl_sample_cand scratch[V];
	for (int i = 0; i < V; i++)
		logits[i] = rnd_f();
	struct rl_sampling sp = { .temperature = 1.0f, .top_p = 0.95f, .top_k = 100, .seed = 42 };
	uint32_t first[64];
	int differ = 0;
	for (uint32_t pos = 0; pos < 64; pos++)
		first[pos] = rl_sample(logits, V, &sp, pos, scratch);
	/* interleaved with other seeds: nothing carries over between calls */
	for (uint32_t pos = 0; pos < 64; pos++) {
		struct rl_sampling other = sp;
		other.seed = 7 + pos;
		differ += rl_sample(logits, V, &other, pos, scratch) != first[pos];
		CHECK(rl_sample(logits, V, &sp, pos, scratch) == first[pos]);
	}
	CHECK(differ > 32);   /* a different seed is a different stream */
	/* the uniform draw is in [0, 1) and roughly uniform */
	double mean = 0;
	for (uint32_t i = 0; i < 100000; i++) {
		float u = rl_sample_uniform(99, i);
		CHECK(u >= 0.0f && u < 1.0f);
		mean += u;
	}
	mean /= 100000;
	CHECKF(fabs(mean - 0.5) < 0.01, "mean %g", mean);
}

static void sampler_distribution_matches_softmax(void)
{
	/* logits log(1..4) at temperature 1: P = k/10. top-k 3 drops id 0 (P = 2/9, 3/9, 4/9);
	 * top-p 0.65 keeps ids 3, 2 (0.4 + 0.3 = 0.7 >= 0.65): P = 3/7, 4/7. */
	float logits[4] = { logf(1), logf(2), logf(3), logf(4) };
	struct rl_sample_cand scratch[4];
	struct { struct rl_sampling sp; double want[4]; } cases[] = {
		{ { .temperature = 1, .top_p = 1 }, { .1, .2, .3, .4 } },
		{ { .temperature = 1, .top_p = 1, .top_k = 3 }, { 0, 2 / 9., 3 / 9., 4 / 9. } },
		{ { .temperature = 1, .top_p = 0.65f }, { 0, 0, 3 / 7., 4 / 7. } },
		{ { .temperature = 0.5f, .top_p = 1 }, { 1 / 30., 4 / 30., 9 / 30., 16 / 30. } },
	};
	uint32_t n = 200000 / slow;
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		double cnt[4] = { 0 };
		cases[c].sp.seed = 1000 + c;
		for (uint32_t pos = 0; pos < n; pos++)
			cnt[rl_sample(logits, 4, &cases[c].sp, pos, scratch)]++;
		for (int i = 0; i < 4; i++)
			CHECKF(fabs(cnt[i] / n - cases[c].want[i]) < 0.01, "case %zu id %d: %g want %g",
			       c, i, cnt[i] / n, cases[c].want[i]);
	}
}

int main(void)
{
	const char *s = getenv("RL_SLOW");
	if (s && atoi(s) > 0)
		slow = atoi(s);
	RUN(matmul_every_isa_matches_loops);
	RUN(sampler_greedy_and_cuts_agree);
	RUN(sampler_is_keyed_by_seed_and_position);
	RUN(sampler_distribution_matches_softmax);
	TEST_MAIN_END();
}
