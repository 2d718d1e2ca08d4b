/* rl_sample.c — sampling on the CPU (see rl_sample.h).
 *
 * Candidates are ranked by probability, ties broken by the lower id, so every cut (top-k,
 * top-p) and therefore every output is deterministic for a given (logits, params, seed,
 * position). Greedy, top-k = 1 and a tiny top-p all pick the same token as argmax.
 */
#include <math.h>
#include <stdlib.h>
#include "kernels/cpu_features.h"
#include "kernels/rl_sample.h"

static uint32_t argmax_scalar(const float *logits, uint32_t n)
{
	uint32_t best = 0;
	for (uint32_t i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

#if defined(__x86_64__)
#include "kernels/cpu_simd.h"
/* The same answer as argmax_scalar (the first index of the largest value; NaN never wins, a
 * NaN first element returns 0) in two vector passes, the maximum and then its first index:
 * the scalar loop's compare chain took ~9% of a 110M batch-8 decode step. */
RL_TGT_AVX2 static uint32_t argmax_avx2(const float *logits, uint32_t n)
{
	if (n < 32 || logits[0] != logits[0])
		return argmax_scalar(logits, n);
	__m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
	uint32_t i = 0;
	for (; i + 32 <= n; i += 32) {     /* max(x, m) keeps m where x is NaN */
		m0 = _mm256_max_ps(_mm256_loadu_ps(logits + i), m0);
		m1 = _mm256_max_ps(_mm256_loadu_ps(logits + i + 8), m1);
		m2 = _mm256_max_ps(_mm256_loadu_ps(logits + i + 16), m2);
		m3 = _mm256_max_ps(_mm256_loadu_ps(logits + i + 24), m3);
	}
	float lane[8], mx = -INFINITY;
	_mm256_storeu_ps(lane, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
	for (int k = 0; k < 8; k++)
		mx = lane[k] > mx ? lane[k] : mx;
	for (; i < n; i++)
		mx = logits[i] > mx ? logits[i] : mx;
	const __m256 v = _mm256_set1_ps(mx);
	for (i = 0; i + 8 <= n; i += 8) {
		int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + i), v, _CMP_EQ_OQ));
		if (hit)
			return i + (uint32_t)__builtin_ctz((unsigned)hit);
	}
	for (; i < n; i++)
		if (logits[i] == mx)
			return i;
	return 0;                      /* not reached: mx is one of the values */
}
#endif

uint32_t rl_sample_argmax(const float *logits, uint32_t n)
{
#if defined(__x86_64__)
	if (rl_cpu_isa() != RL_CPU_SCALAR)
		return argmax_avx2(logits, n);
#endif
	return argmax_scalar(logits, n);
}

/* 1 when a ranks before b: higher probability first, then lower id. */
static inline int before(const struct rl_sample_cand *a, const struct rl_sample_cand *b)
{
	return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static int cmp_rank(const void *x, const void *y)
{
	const struct rl_sample_cand *a = x, *b = y;
	return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Min-heap on rank (root = the worst kept candidate) for top-k selection. */
static void sift_down(struct rl_sample_cand *h, uint32_t n, uint32_t i)
{
	for (;;) {
		uint32_t w = i, l = 2 * i + 1, r = l + 1;
		if (l < n && before(&h[w], &h[l]))
			w = l;
		if (r < n && before(&h[w], &h[r]))
			w = r;
		if (w == i)
			return;
		struct rl_sample_cand t = h[i]; h[i] = h[w]; h[w] = t;
		i = w;
	}
}

uint32_t rl_sample(const float *logits, uint32_t vocab, const struct rl_sampling *sp,
		   uint32_t position, void *scratch)
{
	if (!(sp->temperature > 0.0f))
		return rl_sample_argmax(logits, vocab);
	struct rl_sample_cand *c = scratch;                 /* [vocab] */
	const uint32_t top = rl_sample_argmax(logits, vocab);
	float mx = logits[top], inv_t = 1.0f / sp->temperature;
	for (uint32_t i = 0; i < vocab; i++) {
		c[i].p = expf((logits[i] - mx) * inv_t);       /* unnormalised softmax(logits / T) */
		c[i].id = i;
	}
	uint32_t n = vocab;
	int ranked = 0;                                     /* c[0..n) sorted by rank */
	if (sp->top_k > 0 && sp->top_k < vocab) {
		uint32_t k = sp->top_k;
		for (uint32_t i = k / 2; i-- > 0;)
			sift_down(c, k, i);
		for (uint32_t i = k; i < vocab; i++)
			if (before(&c[i], &c[0])) {
				c[0] = c[i];
				sift_down(c, k, 0);
			}
		n = k;
		qsort(c, n, sizeof *c, cmp_rank);
		ranked = 1;
	}
	float total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += c[i].p;
	if (sp->top_p < 1.0f) {
		if (!ranked) {
			/* Only tokens with p >= (1 - top_p) / (n - 1) of the mass can be in the
			 * nucleus (llama2.c's cut), which keeps the sort short. The maximum always
			 * passes since its share is at least 1/n. */
			float cut = (1.0f - sp->top_p) / (float)(n - 1 ? n - 1 : 1) * total;
			uint32_t m = 0;
			for (uint32_t i = 0; i < n; i++)
				if (c[i].p >= cut)
					c[m++] = c[i];
			qsort(c, m, sizeof *c, cmp_rank);
			n = m;
		}
		float want = sp->top_p * total, acc = 0;
		uint32_t m = 0;
		while (m < n) {
			acc += c[m++].p;
			if (acc >= want)
				break;
		}
		n = m;
		total = acc;
	}
	float r = rl_sample_uniform(sp->seed, position) * total, acc = 0;
	for (uint32_t i = 0; i < n; i++) {
		acc += c[i].p;
		if (r < acc)
			return c[i].id;
	}
	/* rounding left r just past the end: the most likely token, which can always be drawn
	 * (a last candidate may have p = 0: a masked token) */
	return top;
}

uint32_t rl_sample_mask(float *logits, uint32_t vocab, const uint32_t *allow)
{
	uint32_t kept = 0;
	for (uint32_t w = 0; w < rl_sample_mask_words(vocab); w++) {
		const uint32_t bits = allow[w], base = 32 * w, n = vocab - base < 32 ? vocab - base : 32;
		const uint32_t live = n == 32 ? bits : bits & ((1u << n) - 1);
		kept += (uint32_t)__builtin_popcount(live);
		if (live == (n == 32 ? ~0u : (1u << n) - 1))
			continue;
		for (uint32_t k = 0; k < n; k++)
			if (!(live >> k & 1))
				logits[base + k] = -INFINITY;
	}
	return kept;
}

float rl_sample_logprobs(const float *logits, uint32_t vocab, uint32_t tok, uint32_t *n_top_io,
			 uint32_t *top_id, float *top_lp)
{
	uint32_t n_top = *n_top_io;
	float mx = logits[rl_sample_argmax(logits, vocab)];
	double sum = 0;
	for (uint32_t v = 0; v < vocab; v++)
		sum += exp((double)logits[v] - mx);
	const double lse = mx + log(sum);
	/* the n_top largest, kept sorted by insertion (n_top <= a few tens) */
	uint32_t k = 0;
	n_top = n_top < vocab ? n_top : vocab;
	for (uint32_t v = 0; v < vocab && n_top; v++) {
		const float l = logits[v];
		if (!(l > -INFINITY) || (k == n_top && !(l > logits[top_id[k - 1]])))
			continue;
		uint32_t at = k < n_top ? k++ : k - 1;
		while (at > 0 && l > logits[top_id[at - 1]]) {
			top_id[at] = top_id[at - 1];
			at--;
		}
		top_id[at] = v;
	}
	for (uint32_t i = 0; i < k; i++)
		top_lp[i] = (float)(logits[top_id[i]] - lse);
	*n_top_io = k;
	return (float)(logits[tok] - lse);
}
