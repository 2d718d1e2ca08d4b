/* test_forward.c — the CPU forward: kernels against plain loops, the cpu backend against the
 * reference forward (kernels/rl_ref.c) on random models of several shapes, and the sampler.
 *
 * Tolerance: the backend sums in a different order (SIMD tiles, online softmax), so logits
 * differ from the reference by rounding only: max |diff| <= TOL * max(1, max |logit|), TOL 1e-4.
 * Set RL_SLOW=k to divide the amount of work by k (sanitizer builds).
 * Tests: kernels (cpu_ops, rl_ref, rl_sample), runtime/backend (cpu).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include "tests/rl_test.h"
#include "runtime/backend/rl_backend.h"
#include "runtime/model/rl_model_io.h"
#include "kernels/rl_ref.h"
#include "kernels/rl_sample.h"
#include "kernels/cpu_ops.h"
#include "kernels/rl_half.h"

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

/* SwiGLU's gate on every ISA against the loop in double, over gates from -100 to 100 (the
 * vector exp is clamped where e^-g would overflow) and a tail that is not a whole vector; the
 * same bits when the row is cut in two anywhere (the workers' ranges) */
static void silu_every_isa_matches_loops(void)
{
	enum { N = 37 };
	float g[N], u[N];
	double worst = 0;
	for (int gelu = 0; gelu < 2; gelu++)
	for (int isa = 0; isa <= (int)rl_cpu_isa_best(); isa++) {
		REQUIRE(rl_cpu_set_isa((enum rl_cpu_isa)isa) == 0);
		for (int t = 0; t < 500; t++) {
			double want[N];
			for (int i = 0; i < N; i++) {
				g[i] = (float)((i * 7919 + t * 104729) % 20001 - 10000) / 100.0f;
				u[i] = 1.0f + 0.01f * (float)i;
				const double x = g[i];
				/* GELU as x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 x (1 + tanh u)
				 * without 1 + tanh's cancellation where it is tiny */
				const double a = gelu ? 2 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x) : x;
				want[i] = x / (1.0 + exp(-a)) * u[i];
			}
			/* cut where a worker's range would be: each element the same bits either way */
			float g2[N];
			memcpy(g2, g, sizeof g);
			const int cut = 1 + t % (N - 1);
			(gelu ? rl_cpu_gelu_mul : rl_cpu_silu_mul)(g, u, N);
			(gelu ? rl_cpu_gelu_mul : rl_cpu_silu_mul)(g2, u, (uint32_t)cut);
			(gelu ? rl_cpu_gelu_mul : rl_cpu_silu_mul)(g2 + cut, u + cut, (uint32_t)(N - cut));
			CHECKF(!memcmp(g, g2, sizeof g), "isa %d %s: cut at %d computes otherwise", isa, gelu ? "gelu" : "silu", cut);
			for (int i = 0; i < N; i++) {
				CHECKF(isfinite(g[i]), "isa %d: silu(%g) not finite", isa, want[i]);
				double e = fabs(g[i] - want[i]) / (fabs(want[i]) + 1e-30);
				if (fabs(want[i]) > 1e-30 && e > worst)
					worst = e;
			}
		}
	}
	rl_cpu_set_isa(rl_cpu_isa_best());
	CHECKF(worst < 1e-5, "silu or gelu off by %g relative", worst);
}

/* RMSNorm on every ISA against the formula in double, over lengths with every tail (the
 * vector sum runs 32 and 8 at a time), in place and not; RoPE's angle table against cos and
 * sin of the position itself, in both pairings. */
static void norm_and_rope_match_the_formula(void)
{
	enum { N = 100 };
	float x[N], w[N], o[N];
	double worst = 0;
	for (int isa = 0; isa <= (int)rl_cpu_isa_best(); isa++) {
		REQUIRE(rl_cpu_set_isa((enum rl_cpu_isa)isa) == 0);
		for (uint32_t n = 1; n <= N; n++) {
			for (int inplace = 0; inplace < 2; inplace++) {
				double ss = 0;
				for (uint32_t i = 0; i < n; i++) {
					x[i] = (float)((int)((i * 7919 + n * 31) % 201) - 100) / 37.0f;
					w[i] = 0.5f + 0.01f * (float)i;
					ss += (double)x[i] * x[i];
				}
				double s = 1.0 / sqrt(ss / n + 1e-5);
				float want[N];
				for (uint32_t i = 0; i < n; i++)
					want[i] = (float)(x[i] * s * w[i]);
				float *out = inplace ? x : o;
				rl_cpu_rmsnorm(out, x, w, n, 1e-5f);
				for (uint32_t i = 0; i < n; i++) {
					double e = fabs(out[i] - want[i]) / (fabs(want[i]) + 1e-6);
					if (e > worst)
						worst = e;
				}
			}
		}
	}
	rl_cpu_set_isa(rl_cpu_isa_best());
	CHECKF(worst < 1e-5, "rmsnorm off by %g relative", worst);

	/* RoPE against the formula, and every ISA bit for bit against the scalar one (the vector
	 * path keeps its arithmetic); head dims whose pairs fill the vectors, or leave a tail;
	 * partial RoPE (the first ROT dims turn, the rest stay: Phi-4-mini's 96 of 128) */
	enum { MAXHD = 72, NH = 3 };
	static const uint32_t hds[] = { 64, 24, 72, 6, 64, 24 }, rots[] = { 64, 24, 72, 6, 48, 18 };
	for (size_t k = 0; k < sizeof hds / sizeof *hds; k++) {
		const uint32_t HD = hds[k], ROT = rots[k];
		float inv[MAXHD / 2], cs[MAXHD], v[NH * MAXHD], v0[NH * MAXHD], vs[NH * MAXHD];
		for (uint32_t i = 0; i < ROT / 2; i++)
			inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / ROT);
		for (int halves = 0; halves < 2; halves++) {
			const float pos = 37.0f / 2.0f;
			for (uint32_t i = 0; i < NH * HD; i++)
				v0[i] = (float)(i % 13) - 6.0f + 0.37f * (float)(i % 5);
			rl_cpu_rope_angles(cs, ROT, pos, inv, 1.0f);
			for (int isa = RL_CPU_SCALAR; isa <= (int)rl_cpu_isa_best(); isa++) {
				REQUIRE(rl_cpu_set_isa((enum rl_cpu_isa)isa) == 0);
				memcpy(v, v0, NH * HD * sizeof(float));
				rl_cpu_rope(v, NH, HD, ROT, cs, halves);
				if (isa == RL_CPU_SCALAR)
					memcpy(vs, v, NH * HD * sizeof(float));
				CHECKF(!memcmp(v, vs, NH * HD * sizeof(float)), "rope hd %u halves=%d: %s differs from scalar",
				       HD, halves, rl_cpu_isa_name((enum rl_cpu_isa)isa));
			}
			rl_cpu_set_isa(rl_cpu_isa_best());
			for (uint32_t h = 0; h < NH; h++) {
				for (uint32_t i = ROT; i < HD; i++)
					CHECKF(v[h * HD + i] == v0[h * HD + i], "rope hd %u rot %u: dim %u moved", HD, ROT, i);
				for (uint32_t i = 0; i < ROT / 2; i++) {
					uint32_t a = halves ? i : 2 * i, b = halves ? i + ROT / 2 : 2 * i + 1;
					double th = (double)pos * inv[i], x0 = v0[h * HD + a], x1 = v0[h * HD + b];
					CHECKF(fabs(v[h * HD + a] - (x0 * cos(th) - x1 * sin(th))) < 1e-4 &&
					       fabs(v[h * HD + b] - (x0 * sin(th) + x1 * cos(th))) < 1e-4,
					       "rope hd %u halves=%d head %u pair %u", HD, halves, h, i);
				}
			}
		}
	}
}

/* Attention against plain per-row loops in double, for every ISA and both pool types (fp32,
 * IEEE half: widened in registers or a block at a time): ragged q_len, a chunk that
 * starts mid-block, shuffled block tables, GQA groups, head sizes that fill a vector, a part
 * of one or several; the cache slots past the context hold NaN, which must never be read. */
static void attention_every_isa_matches_loops(void)
{
	static const uint32_t hds[] = { 8, 24, 40, 64, 80, 128, 256 }, qlens[] = { 1, 3, 17, 64 };
	static const uint32_t pos0s[] = { 0, 5, 37 }, bss[] = { 16, 7 }, groups[] = { 1, 3 }, windows[] = { 0, 9, 20 };
	const uint32_t n_blocks = 16;
	enum rl_cpu_isa saved = rl_cpu_isa();
	for (int isa = RL_CPU_SCALAR; isa <= (int)rl_cpu_isa_best(); isa++) {
		REQUIRE(rl_cpu_set_isa(isa) == 0);
		for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
		for (size_t b = 0; b < sizeof qlens / sizeof *qlens; b++)
		for (size_t c = 0; c < sizeof pos0s / sizeof *pos0s; c++)
		for (size_t e = 0; e < sizeof bss / sizeof *bss; e++)
		for (size_t f = 0; f < sizeof groups / sizeof *groups; f++)
		for (size_t w = 0; w < sizeof windows / sizeof *windows; w++)
		for (int half = 0; half < 2; half++) {              /* fp32 pool, then IEEE half */
			uint32_t hd = hds[a], q_len = qlens[b], pos0 = pos0s[c], bs = bss[e], g = groups[f], win = windows[w];
			if (win && (bs != 7 || g != 1) && hd != 8 && hd != 64)
				continue;          /* windows: every head dim's kernel, not every combination */
			uint32_t n_ctx = pos0 + q_len, nb = (n_ctx + bs - 1) / bs;
			if (nb > n_blocks)
				continue;
			size_t ldq = (size_t)g * hd + 5, ldo = (size_t)g * hd + 3;   /* wider than the heads */
			size_t stride = (size_t)bs * hd + 11;                        /* floats between blocks */
			float *K = malloc(n_blocks * stride * 4), *V = malloc(n_blocks * stride * 4);
			float *Q = malloc(q_len * ldq * 4), *O = malloc(q_len * ldo * 4), *R = malloc(q_len * ldo * 4);
			float *scratch = malloc(rl_cpu_attention_scratch(q_len * g, hd, bs) * 4);
			double *sc = malloc(n_ctx * sizeof(double));
			uint32_t table[16];
			for (uint32_t i = 0; i < n_blocks; i++)
				table[i] = i;
			for (uint32_t i = n_blocks - 1; i > 0; i--) {          /* shuffle */
				uint32_t j = rnd_u32() % (i + 1), t = table[i];
				table[i] = table[j]; table[j] = t;
			}
			for (size_t i = 0; i < n_blocks * stride; i++)
				K[i] = V[i] = NAN;
			for (uint32_t p = 0; p < n_ctx; p++)
				for (uint32_t d = 0; d < hd; d++) {
					size_t at = table[p / bs] * stride + (p % bs) * hd + d;
					K[at] = rnd_f();
					V[at] = rnd_f();
					if (half) {     /* values a half holds exactly: the loops below stay exact */
						K[at] = rl_f16_to_f32(rl_f32_to_f16(K[at]));
						V[at] = rl_f16_to_f32(rl_f32_to_f16(V[at]));
					}
				}
			uint16_t *HK = malloc(n_blocks * stride * 2), *HV = malloc(n_blocks * stride * 2);
			rl_cpu_f32_to_f16(HK, K, (uint32_t)(n_blocks * stride));
			rl_cpu_f32_to_f16(HV, V, (uint32_t)(n_blocks * stride));
			/* scaled so that the softmax ranges from flat to peaked (exp inputs to ~-50) */
			for (size_t i = 0; i < q_len * ldq; i++)
				Q[i] = rnd_f() * 4.0f;
			for (size_t i = 0; i < q_len * ldo; i++)
				O[i] = R[i] = 0;
			struct rl_cpu_kv_view kv = { .k = half ? NULL : K, .v = half ? NULL : V,
						     .hk = half ? HK : NULL, .hv = half ? HV : NULL,
						     .block_table = table, .block_size = bs, .block_stride = stride, .window = win };
			rl_cpu_attention(O, ldo, Q, ldq, q_len, g, pos0, hd, &kv, scratch);
			for (uint32_t i = 0; i < q_len; i++)
				for (uint32_t h = 0; h < g; h++) {
					const float *qi = Q + i * ldq + h * hd;
					double mx = -INFINITY, sum = 0;
					const uint32_t lo = win && pos0 + i + 1 > win ? pos0 + i + 1 - win : 0;
					for (uint32_t p = lo; p <= pos0 + i; p++) {
						const float *k = K + table[p / bs] * stride + (p % bs) * hd;
						double s = 0;
						for (uint32_t d = 0; d < hd; d++)
							s += (double)qi[d] * k[d];
						sc[p] = s / sqrt((double)hd);
						mx = fmax(mx, sc[p]);
					}
					for (uint32_t p = lo; p <= pos0 + i; p++)
						sum += sc[p] = exp(sc[p] - mx);
					for (uint32_t d = 0; d < hd; d++) {
						double o = 0;
						for (uint32_t p = lo; p <= pos0 + i; p++)
							o += sc[p] * V[table[p / bs] * stride + (p % bs) * hd + d];
						R[i * ldo + h * hd + d] = (float)(o / sum);
					}
				}
			CHECKF(rel_diff(O, R, q_len * ldo) < 1e-5f, "isa %s %s hd %u q_len %u pos0 %u bs %u group %u window %u: %g",
			       rl_cpu_isa_name(isa), half ? "f16" : "f32", hd, q_len, pos0, bs, g, win, rel_diff(O, R, q_len * ldo));
			free(K); free(V); free(HK); free(HV); free(Q); free(O); free(R); free(scratch); free(sc);
		}
	}
	rl_cpu_set_isa(saved);
}

/* rl_cpu_attention_heads (a decode row over several KV heads, a block at a time) against
 * rl_cpu_attention head by head, bit for bit, for every ISA and both pool types: the backend's
 * [block, KV head, bs, hd] layout, blocks back to back or not, a block table of runs and jumps
 * (the heads kernel prefetches only where the next block does not follow), GQA groups, head dims its vector kernels take and ones they pass back (6,
 * 256); slots past the context hold NaN. */
static void attention_heads_match_head_by_head(void)
{
	static const uint32_t hds[] = { 6, 8, 24, 64, 72, 128, 256 }, nks[] = { 1, 15, 16, 17, 100 };
	static const uint32_t bss[] = { 16, 7 }, groups[] = { 1, 3 }, nkvs[] = { 1, 3 };
	static const uint32_t table[] = { 5, 6, 7, 2, 9, 10, 0, 1, 12, 3, 4, 13, 8, 11, 15, 14 };
	const uint32_t n_blocks = 16;
	enum rl_cpu_isa saved = rl_cpu_isa();
	for (int isa = RL_CPU_SCALAR; isa <= (int)rl_cpu_isa_best(); isa++) {
		REQUIRE(rl_cpu_set_isa(isa) == 0);
		for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
		for (size_t b = 0; b < sizeof nks / sizeof *nks; b++)
		for (size_t e = 0; e < sizeof bss / sizeof *bss; e++)
		for (size_t f = 0; f < sizeof groups / sizeof *groups; f++)
		for (size_t h = 0; h < sizeof nkvs / sizeof *nkvs; h++)
		for (int pad = 0; pad < 2; pad++)               /* blocks back to back, or apart */
		for (uint32_t win = 0; win < 30; win += 11)     /* no window, 11, 22 */
		for (int half = 0; half < 2; half++) {
			uint32_t hd = hds[a], n_keys = nks[b], bs = bss[e], g = groups[f], nkv = nkvs[h];
			if ((n_keys + bs - 1) / bs > n_blocks)
				continue;
			size_t tile = (size_t)bs * hd, stride = nkv * tile + 16 * pad, n = n_blocks * stride;
			size_t rows = (size_t)nkv * g;
			float *K = malloc(n * 4), *V = malloc(n * 4), *Q = malloc(rows * hd * 4);
			float *O = malloc(rows * hd * 4), *R = malloc(rows * hd * 4);
			float *scratch = malloc(rl_cpu_attention_scratch((uint32_t)rows, hd, bs) * 4);
			uint16_t *HK = malloc(n * 2), *HV = malloc(n * 2);
			for (size_t i = 0; i < n; i++)
				K[i] = V[i] = NAN;
			for (uint32_t p = 0; p < n_keys; p++)
				for (uint32_t kh = 0; kh < nkv; kh++)
					for (uint32_t d = 0; d < hd; d++) {
						size_t at = table[p / bs] * stride + kh * tile + (p % bs) * hd + d;
						K[at] = rnd_f();
						V[at] = rnd_f();
					}
			rl_cpu_f32_to_f16(HK, K, (uint32_t)n);
			rl_cpu_f32_to_f16(HV, V, (uint32_t)n);
			for (size_t i = 0; i < rows * hd; i++)
				Q[i] = rnd_f() * 4.0f;
			struct rl_cpu_kv_view kv = { .k = half ? NULL : K, .v = half ? NULL : V,
						     .hk = half ? HK : NULL, .hv = half ? HV : NULL,
						     .block_table = table, .block_size = bs, .block_stride = stride, .window = win };
			rl_cpu_attention_heads(O, Q, nkv, g, n_keys, hd, &kv, scratch);
			for (uint32_t kh = 0; kh < nkv; kh++) {
				struct rl_cpu_kv_view v = kv;
				if (half) {
					v.hk += kh * tile;
					v.hv += kh * tile;
				} else {
					v.k += kh * tile;
					v.v += kh * tile;
				}
				rl_cpu_attention(R + kh * g * hd, g * hd, Q + kh * g * hd, g * hd, 1, g, n_keys - 1, hd, &v,
						 scratch);
			}
			CHECKF(memcmp(O, R, rows * hd * 4) == 0, "isa %s %s hd %u keys %u bs %u group %u kv heads %u window %u: differs",
			       rl_cpu_isa_name(isa), half ? "f16" : "f32", hd, n_keys, bs, g, nkv, win);
			free(K); free(V); free(HK); free(HV); free(Q); free(O); free(R); free(scratch);
		}
	}
	rl_cpu_set_isa(saved);
}

/* ------------------------------------------------------------------ sampler ------ */

/* rl_sample_argmax (vectorised where the CPU has AVX2) against the plain loop: the first index
 * of the largest value, NaN never winning (a NaN first element: 0), for lengths around the
 * vector widths, maxima and ties in the head, the body and the tail. */
static void argmax_matches_the_plain_loop(void)
{
	static float v[4100];
	static const uint32_t lens[] = { 1, 7, 8, 31, 32, 33, 63, 64, 65, 100, 1000, 4099 };
	for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
		for (int trial = 0; trial < 40; trial++) {
			uint32_t n = lens[li];
			for (uint32_t i = 0; i < n; i++)
				v[i] = (float)(int)(rnd_f() * 8);      /* few values: many ties */
			if (trial % 4 == 1)
				v[(uint32_t)(trial * 37) % n] = 100.0f; /* one winner anywhere */
			if (trial % 4 == 2)
				v[n - 1] = 100.0f;                     /* in the tail */
			if (trial % 5 == 3)
				v[(uint32_t)(trial * 13) % n] = NAN;
			if (trial % 8 == 5)
				v[0] = NAN;
			if (trial == 39)
				for (uint32_t i = 0; i < n; i++)
					v[i] = -INFINITY;
			uint32_t want = 0;
			for (uint32_t i = 1; i < n; i++)
				if (v[i] > v[want])
					want = i;
			uint32_t got = rl_sample_argmax(v, n);
			CHECKF(got == want, "n %u trial %d: %u, want %u", n, trial, got, want);
		}
}

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

/* A constraint's mask (structured output): only allowed tokens are ever drawn, greedy is the
 * best allowed one, the distribution is the softmax renormalised over the allowed tokens
 * (top-k wider than them changes nothing), and log-probabilities are of that distribution,
 * listing no impossible token. */
static void sampler_masks_restrict_the_distribution(void)
{
	enum { V = 1000, W = (V + 31) / 32 };
	static float logits[V], masked[V];
	static struct rl_sample_cand scratch[V];
	static uint32_t allow[W];
	for (int trial = 0; trial < 40; trial++) {
		const uint32_t density = 1 + (uint32_t)trial % 8;   /* about density/64 of tokens allowed */
		uint32_t n_allowed = 0, best = UINT32_MAX;
		for (int i = 0; i < V; i++)
			logits[i] = 3 * rnd_f();
		for (int w = 0; w < W; w++)
			allow[w] = 0;
		for (uint32_t i = 0; i < V; i++)
			if (rnd_u32() % 64 < density || i == (uint32_t)trial * 7) {
				allow[i / 32] |= 1u << (i % 32);
				n_allowed++;
				if (best == UINT32_MAX || logits[i] > logits[best])
					best = i;
			}
		allow[W - 1] |= 0xff000000u;                     /* bits past the vocabulary count for nothing */
		memcpy(masked, logits, sizeof logits);
		CHECK(rl_sample_mask(masked, V, allow) == n_allowed);
		int exact = 1;
		for (uint32_t i = 0; i < V; i++)
			exact &= (allow[i / 32] >> (i % 32) & 1) ? masked[i] == logits[i] : isinf(masked[i]) && masked[i] < 0;
		CHECK(exact);
		struct rl_sampling sps[] = {
			{ .temperature = 0, .top_p = 1 }, { .temperature = 1, .top_p = 1, .seed = 5 },
			{ .temperature = 0.7f, .top_k = 40, .top_p = 1, .seed = 6 },
			{ .temperature = 1.5f, .top_k = 900, .top_p = 1, .seed = 7 },
			{ .temperature = 1, .top_p = 0.9f, .seed = 8 },
		};
		int all_allowed = 1;
		for (size_t k = 0; k < sizeof sps / sizeof *sps; k++)
			for (uint32_t pos = 0; pos < 50; pos++) {
				uint32_t t = rl_sample(masked, V, &sps[k], pos, scratch);
				all_allowed &= t < V && (allow[t / 32] >> (t % 32) & 1);
				if (k == 0)
					CHECK(t == best);
			}
		CHECK(all_allowed);
		uint32_t top_id[20], n_top = 20;
		float top_lp[20];
		const float lp = rl_sample_logprobs(masked, V, best, &n_top, top_id, top_lp);
		double sum = 0;
		for (uint32_t i = 0; i < V; i++)
			if (allow[i / 32] >> (i % 32) & 1)
				sum += exp((double)logits[i] - logits[best]);
		CHECKF(fabs(lp + log(sum)) < 1e-5, "trial %d: %g want %g", trial, lp, -log(sum));
		CHECK(n_top == (n_allowed < 20 ? n_allowed : 20) && top_id[0] == best);
		for (uint32_t j = 0; j < n_top; j++)
			CHECK((allow[top_id[j] / 32] >> (top_id[j] % 32) & 1) && isfinite(top_lp[j]));
	}
	/* logits log(1..8), tokens 1, 3, 6 allowed: P = 2/13, 4/13, 7/13, with or without top-k 5 */
	float lg[8];
	struct rl_sample_cand sc[8];
	for (int i = 0; i < 8; i++)
		lg[i] = logf((float)(i + 1));
	const uint32_t a8 = 1u << 1 | 1u << 3 | 1u << 6;
	CHECK(rl_sample_mask(lg, 8, &a8) == 3);
	struct rl_sampling sp[2] = { { .temperature = 1, .top_p = 1, .seed = 3 },
				     { .temperature = 1, .top_p = 1, .top_k = 5, .seed = 4 } };
	const uint32_t n = 100000 / slow;
	for (int k = 0; k < 2; k++) {
		double cnt[8] = { 0 };
		for (uint32_t pos = 0; pos < n; pos++)
			cnt[rl_sample(lg, 8, &sp[k], pos, sc)]++;
		CHECKF(fabs(cnt[1] / n - 2 / 13.) < 0.01 && fabs(cnt[3] / n - 4 / 13.) < 0.01 &&
		       fabs(cnt[6] / n - 7 / 13.) < 0.01 && cnt[1] + cnt[3] + cnt[6] == n,
		       "top-k %u: %g %g %g", sp[k].top_k, cnt[1] / n, cnt[3] / n, cnt[6] / n);
	}
	/* one allowed token far below the rest: every parameter set draws it */
	for (int i = 0; i < 8; i++)
		lg[i] = i == 2 ? -80.0f : 10.0f;
	const uint32_t only2 = 1u << 2;
	rl_sample_mask(lg, 8, &only2);
	for (uint32_t pos = 0; pos < 200; pos++)
		CHECK(rl_sample(lg, 8, &sp[pos % 2], pos, sc) == 2);
}

/* Speculative decoding's verification (runtime/sched/rl_spec.h): a draft d (a point mass q)
 * is accepted when the token sampled for its position with that position's key equals it.
 * That is the standard rejection rule: accepted with probability min(1, p(d)/q(d)) = p(d),
 * and on rejection the token is distributed as max(0, p - q) normalised, p without d. */
static void verification_is_the_rejection_rule(void)
{
	float logits[4] = { logf(1), logf(2), logf(3), logf(4) };
	struct rl_sample_cand scratch[4];
	const struct rl_sampling sps[2] = { { .temperature = 1, .top_p = 1, .seed = 77 },
					    { .temperature = 0.5f, .top_p = 1, .seed = 78 } };
	const double ps[2][4] = { { .1, .2, .3, .4 }, { 1 / 30., 4 / 30., 9 / 30., 16 / 30. } };
	const uint32_t n = 200000 / slow;
	for (int c = 0; c < 2; c++)
		for (uint32_t d = 0; d < 4; d++) {
			double acc = 0, rej[4] = { 0 };
			for (uint32_t pos = 0; pos < n; pos++) {
				const uint32_t x = rl_sample(logits, 4, &sps[c], pos, scratch);
				if (x == d)
					acc++;
				else
					rej[x]++;
			}
			CHECKF(fabs(acc / n - ps[c][d]) < 0.01, "case %d draft %u: accepted %g, want %g", c, d, acc / n, ps[c][d]);
			for (uint32_t i = 0; i < 4; i++) {
				const double want = i == d ? 0 : ps[c][i] / (1 - ps[c][d]);
				CHECKF(fabs(rej[i] / (n - acc) - want) < 0.01, "case %d draft %u: rejected to %u %g, want %g",
				       c, d, i, rej[i] / (n - acc), want);
			}
		}
}

/* ------------------------------------------------------------------ backend ------ */

struct shape { const char *name; struct rl_model_config cfg; };
static const struct shape shapes[] = {
	{ "gqa8x2-tied-adjacent", { .dim = 64, .hidden_dim = 96, .n_layers = 2, .n_heads = 8, .n_kv_heads = 2,
	  .head_dim = 8, .vocab_size = 97, .max_ctx = 256, .rope_theta = 10000, .rope_scale = 1,
	  .norm_eps = 1e-5f, .rope_halves = 0, .tied_embeddings = 1, .bos_id = 1, .eos_id = 2 } },
	{ "odd-untied-halves-bias", { .dim = 48, .hidden_dim = 100, .n_layers = 2, .n_heads = 3, .n_kv_heads = 3,
	  .head_dim = 16, .vocab_size = 131, .max_ctx = 256, .rope_theta = 500000, .rope_scale = 2,
	  .norm_eps = 1e-6f, .rope_halves = 1, .tied_embeddings = 0, .has_qkv_bias = 1, .bos_id = 1, .eos_id = UINT32_MAX } },
	{ "mqa-hd24-bias-tied", { .dim = 80, .hidden_dim = 150, .n_layers = 3, .n_heads = 4, .n_kv_heads = 1,
	  .head_dim = 24, .vocab_size = 200, .max_ctx = 256, .rope_theta = 10000, .rope_scale = 1,
	  .norm_eps = 1e-5f, .rope_halves = 1, .tied_embeddings = 1, .has_qkv_bias = 1, .bos_id = 1, .eos_id = 2 } },
	{ "gqa4x2-hd32-untied", { .dim = 128, .hidden_dim = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
	  .head_dim = 32, .vocab_size = 300, .max_ctx = 256, .rope_theta = 10000, .rope_scale = 1,
	  .norm_eps = 1e-5f, .rope_halves = 0, .tied_embeddings = 0, .bos_id = 1, .eos_id = 2 } },
	/* factors set in make_model: Llama 3 rope scaling with a 64-token original context, so
	 * that some pairs keep their frequency, some are divided by 8 and some are blended */
	{ "gqa-llama3-rope", { .dim = 64, .hidden_dim = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
	  .head_dim = 16, .vocab_size = 150, .max_ctx = 256, .rope_theta = 10000, .rope_scale = 1,
	  .norm_eps = 1e-5f, .rope_halves = 1, .tied_embeddings = 0, .bos_id = 1, .eos_id = 2 } },
	/* partial RoPE (the first 24 of 32 dims turn, Phi-4-mini's share), both pairings */
	{ "partial-rope-halves", { .dim = 64, .hidden_dim = 96, .n_layers = 2, .n_heads = 2, .n_kv_heads = 2,
	  .head_dim = 32, .vocab_size = 90, .max_ctx = 256, .rope_theta = 10000, .rope_scale = 1, .rope_dims = 24,
	  .norm_eps = 1e-5f, .rope_halves = 1, .tied_embeddings = 0, .bos_id = 1, .eos_id = 2 } },
	{ "partial-rope-adjacent", { .dim = 64, .hidden_dim = 96, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
	  .head_dim = 16, .vocab_size = 90, .max_ctx = 256, .rope_theta = 10000, .rope_scale = 1, .rope_dims = 10,
	  .norm_eps = 1e-5f, .rope_halves = 0, .tied_embeddings = 1, .bos_id = 1, .eos_id = 2 } },
	/* Gemma 3's traits: post-norms, GELU, q/k norms, embeddings times sqrt(dim); layers 0 and
	 * 1 local (window 5, their own RoPE base, unscaled), layer 2 global (scaled by 2); a query
	 * scale of its own; head_dim 32 (the row kernels), then 16 (the tiled one) */
	{ "gemma3-window5-hd32", { .dim = 64, .hidden_dim = 96, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
	  .head_dim = 32, .vocab_size = 120, .max_ctx = 256, .rope_theta = 1000000, .rope_scale = 2,
	  .norm_eps = 1e-6f, .rope_halves = 1, .tied_embeddings = 1, .has_qk_norm = 1, .post_norms = 1, .ffn_gelu = 1,
	  .emb_scale = 8, .attn_scale = 0.15f, .sliding_window = 5, .swa_period = 3, .rope_theta_local = 10000,
	  .bos_id = 2, .eos_id = 1 } },
	{ "gemma3-window6-hd16", { .dim = 64, .hidden_dim = 64, .n_layers = 3, .n_heads = 4, .n_kv_heads = 1,
	  .head_dim = 16, .vocab_size = 100, .max_ctx = 256, .rope_theta = 1000000, .rope_scale = 1,
	  .norm_eps = 1e-6f, .rope_halves = 1, .tied_embeddings = 1, .has_qk_norm = 1, .post_norms = 1, .ffn_gelu = 1,
	  .emb_scale = 8, .sliding_window = 6, .swa_period = 3, .rope_theta_local = 10000, .bos_id = 2, .eos_id = 1 } },
};
#define N_SHAPES (sizeof shapes / sizeof *shapes)

static struct rl_model *make_model(const struct shape *sh, uint64_t seed)
{
	struct rl_model *m; char err[160];
	struct rl_model_config c = sh->cfg;
	if (strstr(sh->name, "llama3") && rl_rope_llama3_freqs(&c, 8, 1, 4, 64))
		return NULL;
	if (rl_model_alloc(&c, &m, err, sizeof err))
		return NULL;
	rl_model_fill_random(m, seed);
	snprintf(m->name, sizeof m->name, "%s", sh->name);
	return m;
}

/* Reference logits of every prefix of toks: out[p * vocab ...] after token p. */
static float *ref_all(const struct rl_model *m, const uint32_t *toks, uint32_t n)
{
	struct rl_ref_state st;
	float *out = malloc((size_t)n * m->cfg.vocab_size * sizeof(float));
	if (!out || rl_ref_state_init(&st, m, n)) {
		free(out);
		return NULL;
	}
	for (uint32_t p = 0; p < n; p++)
		rl_ref_forward(m, &st, toks[p], p, out + (size_t)p * m->cfg.vocab_size);
	rl_ref_state_free(&st);
	return out;
}

#define MAXB 64                        /* most KV blocks per test sequence */
#define BS 4                           /* test block size: small, so tables have many blocks */

/* A sequence driven through the backend by the tests, with its whole token list known in
 * advance (teacher forcing) unless `gen` is set (then sampled tokens are appended). */
struct tseq {
	uint32_t toks[256];
	uint32_t len;                  /* tokens known */
	uint32_t done;                 /* tokens whose KV is cached */
	uint32_t n_prompt;             /* rows before this are prefill, after are decode */
	uint32_t table[MAXB];
	struct rl_sampling sp;
	float *logits;                 /* [len, vocab]: logits the backend produced after token p */
	int gen;
};

/* One step: seqs with q[i] > 0 run q[i] rows (prefill seqs first). Every seq samples, so its
 * logits after its last row are recorded. Returns launch/finish status. */
static int step(struct rl_backend *be, struct tseq *ts, uint32_t n, const uint32_t *q, uint32_t vocab)
{
	static uint32_t tokens[512], pos[512], row_seq[512], map[64];
	static struct rl_batch_seq bs[64];
	uint32_t S = 0, T = 0, np = 0;
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < n; i++) {
			if (!q[i] || (ts[i].done < ts[i].n_prompt) != (pass == 0))
				continue;
			struct tseq *t = &ts[i];
			struct rl_batch_seq *s = &bs[S];
			np += pass == 0;
			*s = (struct rl_batch_seq){ .q_start = T, .q_len = q[i], .ctx_len = t->done + q[i],
				.n_blocks = (t->done + q[i] + BS - 1) / BS, .block_table = t->table,
				.sample = 1, .seq_id = i, .sp = t->sp };
			for (uint32_t r = 0; r < q[i]; r++, T++) {
				tokens[T] = t->toks[t->done + r];
				pos[T] = t->done + r;
				row_seq[T] = S;
			}
			map[S++] = i;
		}
	struct rl_batch b = { .n_tokens = T, .n_seqs = S, .n_prefill = np, .block_size = BS,
			      .tokens = tokens, .pos = pos, .row_seq = row_seq, .seqs = bs };
	int32_t out[64];
	int rc = rl_backend_launch(be, &b);
	if (rc)
		return rc;
	if ((rc = rl_backend_finish(be, out)))
		return rc;
	if (rl_backend_poll(be) != 1)
		return -EPROTO;
	for (uint32_t j = 0; j < S; j++) {
		struct tseq *t = &ts[map[j]];
		t->done += bs[j].q_len;
		if (rl_backend_cpu_logits(be, j, t->logits + (size_t)(t->done - 1) * vocab))
			return -EIO;
		if (out[j] < 0 || (uint32_t)out[j] >= vocab)
			return -ERANGE;
		if (t->gen && t->done == t->len && t->len < 256)
			t->toks[t->len++] = (uint32_t)out[j];
	}
	return 0;
}

/* The KV cache type make_backend asks for, and the tolerance against the reference with
 * it: a half cache rounds every key and value (2^-11 relative), which the fp32 reference does
 * not. */
static int kv_f16;
#define KV_TOL (kv_f16 ? 3e-3f : TOL)

static struct rl_backend *make_backend(struct rl_model *m, uint32_t n_blocks, int threads)
{
	struct rl_backend_params p = { .n_kv_blocks = n_blocks, .block_size = BS, .cpu_kv_f16 = kv_f16,
				       .max_batch_tokens = 64, .max_seqs = 16, .threads = threads,
				       .cpu_min_work = 1 /* small test models: still split every step */ };
	struct rl_backend *be; char err[200];
	if (rl_backend_cpu_create(m, &p, &be, err, sizeof err)) {
		fprintf(stderr, "  %s\n", err);
		return NULL;
	}
	return be;
}

/* Gives each of n tables n_blocks / n distinct blocks of a shuffled pool (or 0, 1, 2, ... when !shuffle). */
static void assign_blocks(struct tseq *ts, uint32_t n, uint32_t n_blocks, int shuffle)
{
	static uint32_t perm[4096];
	for (uint32_t i = 0; i < n_blocks; i++)
		perm[i] = i;
	for (uint32_t i = n_blocks; shuffle && i > 1; i--) {
		uint32_t j = rnd_u32() % i, t = perm[i - 1];
		perm[i - 1] = perm[j]; perm[j] = t;
	}
	uint32_t per = n_blocks / n < MAXB ? n_blocks / n : MAXB;
	for (uint32_t i = 0, k = 0; i < n; i++)
		for (uint32_t b = 0; b < per; b++)
			ts[i].table[b] = perm[k++];
}

static void init_seq(struct tseq *t, uint32_t len, uint32_t vocab, uint32_t seed)
{
	memset(t, 0, sizeof *t);
	t->len = t->n_prompt = len;
	for (uint32_t p = 0; p < len; p++)
		t->toks[p] = (rnd_u32() ^ seed) % vocab;
	t->sp = (struct rl_sampling){ .temperature = 0, .top_p = 1 };
	t->logits = calloc((size_t)256 * vocab, sizeof(float));
}

/* (a) chunk sizes 1, 7 and the whole prompt at once give bit-identical logits, all within
 * TOL of the reference at every chunk end. */
static void chunked_prefill_equals_unchunked_equals_reference(void)
{
	for (size_t si = 0; si < N_SHAPES; si++) {
		struct rl_model *m = make_model(&shapes[si], 100 + si);
		REQUIRE(m);
		uint32_t V = m->cfg.vocab_size, L = 48 / (slow > 4 ? 4 : slow);
		struct rl_backend *be = make_backend(m, MAXB, 2);
		REQUIRE(be);
		static const uint32_t chunks[] = { 48, 7, 1 };
		struct tseq ts[3];
		for (int c = 0; c < 3; c++) {
			rng_state = 777;   /* same tokens for every chunking */
			init_seq(&ts[c], L, V, 0);
			assign_blocks(&ts[c], 1, MAXB, 1);
			while (ts[c].done < L) {
				uint32_t q = L - ts[c].done < chunks[c] ? L - ts[c].done : chunks[c];
				REQUIRE(step(be, &ts[c], 1, &q, V) == 0);
			}
		}
		float *ref = ref_all(m, ts[0].toks, L);
		REQUIRE(ref);
		for (uint32_t p = 0; p < L; p++) {
			const float *want = ref + (size_t)p * V;
			CHECKF(rel_diff(ts[2].logits + (size_t)p * V, want, V) <= KV_TOL, "%s kv %s chunk 1 pos %u: %g",
			       shapes[si].name, kv_f16 ? "f16" : "f32", p, rel_diff(ts[2].logits + (size_t)p * V, want, V));
			if ((p + 1) % 7 == 0 || p == L - 1) {
				CHECK(!memcmp(ts[1].logits + (size_t)p * V, ts[2].logits + (size_t)p * V, V * 4));
			}
		}
		CHECK(!memcmp(ts[0].logits + (size_t)(L - 1) * V, ts[2].logits + (size_t)(L - 1) * V, V * 4));
		for (int c = 0; c < 3; c++)
			free(ts[c].logits);
		free(ref);
		rl_backend_destroy(be);
		rl_model_destroy(m);
	}
}

/* The same with the KV cache in IEEE half: chunkings still agree bit for bit, and the
 * logits stay within KV_TOL of the fp32 reference. */
static void half_kv_chunked_equals_unchunked_near_reference(void)
{
	kv_f16 = 1;
	chunked_prefill_equals_unchunked_equals_reference();
	kv_f16 = 0;
}

/* (b) + (c): many sequences of different lengths in mixed steps (a token budget, decodes
 * first, prefill chunks of varying size) through shuffled block tables give exactly the
 * logits each sequence gets alone through contiguous blocks, and match the reference. */
static void batched_paged_equals_alone_contiguous(void)
{
	enum { NS = 9 };
	for (size_t si = 0; si < N_SHAPES; si++) {
		struct rl_model *m = make_model(&shapes[si], 200 + si);
		REQUIRE(m);
		uint32_t V = m->cfg.vocab_size, n_blocks = NS * 20;
		int threads = si % 2 ? 3 : 1;      /* 3 workers on 2 cores: barriers must sleep well */
		struct rl_backend *be = make_backend(m, n_blocks, threads);
		REQUIRE(be);
		static struct tseq ts[NS], alone;
		uint32_t lens[NS];
		for (uint32_t i = 0; i < NS; i++) {
			lens[i] = 2 + rnd_u32() % (60 / (slow > 4 ? 4 : slow));
			init_seq(&ts[i], lens[i], V, 0);
			ts[i].n_prompt = 1 + rnd_u32() % lens[i];  /* the rest arrive as decode rows */
		}
		assign_blocks(ts, NS, n_blocks, 1);
		for (int busy = 1; busy;) {
			uint32_t q[NS] = { 0 }, budget = 16 + rnd_u32() % 40;
			busy = 0;
			for (uint32_t i = 0; i < NS; i++)     /* decodes first */
				if (ts[i].done >= ts[i].n_prompt && ts[i].done < ts[i].len && budget) {
					q[i] = 1;
					budget--;
				}
			for (uint32_t i = 0; i < NS; i++)
				if (ts[i].done < ts[i].n_prompt && budget && rnd_u32() % 4) {
					uint32_t want = 1 + rnd_u32() % (ts[i].n_prompt - ts[i].done);
					q[i] = want < budget ? want : budget;
					budget -= q[i];
				}
			for (uint32_t i = 0; i < NS; i++)
				busy |= ts[i].done < ts[i].len;
			if (busy)
				REQUIRE(step(be, ts, NS, q, V) == 0);
		}
		for (uint32_t i = 0; i < NS; i++) {
			float *ref = ref_all(m, ts[i].toks, lens[i]);
			REQUIRE(ref);
			/* alone, contiguous blocks 0.., whole prompt then decodes */
			alone = ts[i];
			alone.done = 0;
			alone.logits = calloc((size_t)256 * V, sizeof(float));
			for (uint32_t b = 0; b < MAXB; b++)
				alone.table[b] = b;
			while (alone.done < alone.len) {
				uint32_t q = alone.done < alone.n_prompt ? alone.n_prompt - alone.done : 1;
				REQUIRE(step(be, &alone, 1, &q, V) == 0);
			}
			for (uint32_t p = 0; p < lens[i]; p++) {
				float *got = ts[i].logits + (size_t)p * V;
				if (!got[0] && !got[1])
					continue;        /* not a chunk end in the batched run */
				CHECKF(rel_diff(got, ref + (size_t)p * V, V) <= TOL, "%s seq %u pos %u: %g",
				       shapes[si].name, i, p, rel_diff(got, ref + (size_t)p * V, V));
				if (p >= alone.n_prompt - 1)
					CHECKF(!memcmp(got, alone.logits + (size_t)p * V, V * 4),
					       "%s seq %u pos %u batched != alone", shapes[si].name, i, p);
			}
			free(alone.logits);
			free(ts[i].logits);
			free(ref);
		}
		rl_backend_destroy(be);
		rl_model_destroy(m);
	}
}

/* (d) greedy generation through the backend (in a batch) equals greedy on the reference;
 * (e) a seeded sampled generation is the same alone and in a batch. */
static void generation_matches_reference_and_ignores_batch_mates(void)
{
	for (size_t si = 0; si < N_SHAPES; si++) {
		struct rl_model *m = make_model(&shapes[si], 300 + si);
		REQUIRE(m);
		uint32_t V = m->cfg.vocab_size, N = 40 / (slow > 4 ? 4 : slow);
		struct rl_backend *be = make_backend(m, 4 * MAXB, 2);
		REQUIRE(be);
		static struct tseq ts[4], solo;
		for (int i = 0; i < 4; i++) {
			init_seq(&ts[i], 3 + 5 * i, V, 0);
			ts[i].gen = 1;
			if (i % 2)
				ts[i].sp = (struct rl_sampling){ .temperature = 0.9f, .top_p = 0.9f, .top_k = 40,
								 .seed = 1234 + i };
		}
		assign_blocks(ts, 4, 4 * MAXB, 1);
		for (;;) {
			uint32_t q[4], any = 0;
			for (int i = 0; i < 4; i++) {
				q[i] = ts[i].done < ts[i].n_prompt ? ts[i].n_prompt - ts[i].done
				     : ts[i].len < ts[i].n_prompt + N ? 1 : 0;
				any |= q[i];
			}
			if (!any)
				break;
			REQUIRE(step(be, ts, 4, q, V) == 0);
		}
		/* greedy sequences: the reference's argmax, token by token */
		for (int i = 0; i < 4; i += 2) {
			float *ref = ref_all(m, ts[i].toks, ts[i].len);
			REQUIRE(ref);
			for (uint32_t p = ts[i].n_prompt - 1; p + 1 < ts[i].len; p++)
				CHECKF(rl_sample_argmax(ref + (size_t)p * V, V) == ts[i].toks[p + 1],
				       "%s seq %d pos %u", shapes[si].name, i, p);
			free(ref);
		}
		/* sampled sequences: the same tokens alone */
		for (int i = 1; i < 4; i += 2) {
			solo = ts[i];
			solo.len = solo.n_prompt;
			solo.done = 0;
			solo.logits = calloc((size_t)256 * V, sizeof(float));
			while (solo.len < solo.n_prompt + N) {
				uint32_t q = solo.done < solo.n_prompt ? solo.n_prompt : 1;
				REQUIRE(step(be, &solo, 1, &q, V) == 0);
			}
			CHECK(!memcmp(solo.toks, ts[i].toks, ts[i].len * sizeof(uint32_t)));
			free(solo.logits);
		}
		for (int i = 0; i < 4; i++)
			free(ts[i].logits);
		rl_backend_destroy(be);
		rl_model_destroy(m);
	}
}

/* Malformed batches are refused at launch, before any memory is touched. */
static void bad_batches_are_refused(void)
{
	struct rl_model *m = make_model(&shapes[0], 1);
	REQUIRE(m);
	struct rl_backend *be = make_backend(m, 8, 1);
	REQUIRE(be);
	REQUIRE(!strcmp(be->info.name, "cpu") && be->info.vocab_size == 97 && be->info.eos_id == 2);
	uint32_t tok[2] = { 3, 4 }, pos[2] = { 0, 1 }, rs[2] = { 0, 0 }, table[2] = { 1, 8 };
	struct rl_batch_seq s = { .q_start = 0, .q_len = 2, .ctx_len = 2, .n_blocks = 1,
				  .block_table = table, .sample = 1, .sp = { .top_p = 1 } };
	struct rl_batch b = { .n_tokens = 2, .n_seqs = 1, .n_prefill = 1, .block_size = BS,
			      .tokens = tok, .pos = pos, .row_seq = rs, .seqs = &s };
	int32_t out[1];
	CHECK(rl_backend_launch(be, &b) == 0 && rl_backend_finish(be, out) == 0 && out[0] >= 0);
	tok[1] = 97;            CHECK(rl_backend_launch(be, &b) == -EINVAL); tok[1] = 4;
	pos[1] = 5;             CHECK(rl_backend_launch(be, &b) == -EINVAL); pos[1] = 1;
	s.ctx_len = 6; s.n_blocks = 2;   /* block 8 is outside the pool of 8 */
	pos[0] = 4; pos[1] = 5; CHECK(rl_backend_launch(be, &b) == -EINVAL);
	s.ctx_len = 2; s.n_blocks = 1; pos[0] = 0; pos[1] = 1;
	b.block_size = 8;       CHECK(rl_backend_launch(be, &b) == -EINVAL); b.block_size = BS;
	b.n_prefill = 0;        CHECK(rl_backend_launch(be, &b) == -EINVAL);   /* decode of 2 rows */
	b.n_prefill = 1;
	float lg[97];
	CHECK(rl_backend_cpu_logits(be, 1, lg) == -ENOENT);
	/* a constraint's mask: the sampled token is the best allowed one, the logits row is
	 * restricted to the allowed tokens; an empty mask or one on a row that does not sample is
	 * refused */
	CHECK(rl_backend_launch(be, &b) == 0 && rl_backend_finish(be, out) == 0);
	CHECK(rl_backend_cpu_logits(be, 0, lg) == 0);
	uint32_t allow[4] = { 0 }, best = UINT32_MAX;
	for (uint32_t i = 5; i < 97; i += 9) {
		allow[i / 32] |= 1u << (i % 32);
		best = best == UINT32_MAX || lg[i] > lg[best] ? i : best;
	}
	allow[3] |= 0xfffffffeu;       /* past token 96: not tokens */
	s.allow = allow;
	CHECK(rl_backend_launch(be, &b) == 0 && rl_backend_finish(be, out) == 0 && out[0] == (int32_t)best);
	float lm[97];
	CHECK(rl_backend_cpu_logits(be, 0, lm) == 0);
	int restricted = 1;
	for (uint32_t i = 0; i < 97; i++)
		restricted &= (allow[i / 32] >> (i % 32) & 1) ? lm[i] == lg[i] : isinf(lm[i]) && lm[i] < 0;
	CHECK(restricted);
	const uint32_t none[4] = { 0, 0, 0, 0xfffffffeu };
	s.allow = none;         CHECK(rl_backend_launch(be, &b) == -EINVAL);
	s.allow = allow; s.sample = 0; CHECK(rl_backend_launch(be, &b) == -EINVAL);
	s.allow = NULL; s.sample = 1;
	rl_backend_destroy(be);
	rl_model_destroy(m);
}

/* The real stories260K model: greedy from BOS through the backend (prompt, then decode
 * steps) equals greedy on the reference, and the logits agree within TOL at every step. */
static void real_model_greedy_matches_reference(void)
{
	const char *path = rl_t_model("stories260K.bin"), *tok = rl_t_model("tok512.bin");
	if (!path)
		SKIP("../shared/models/stories260K.bin not found");
	struct rl_model *m; char err[256];
	REQUIRE(rl_model_load(path, tok, &m, err, sizeof err) == 0);
	uint32_t V = m->cfg.vocab_size, N = 60 / (slow > 4 ? 4 : slow);
	struct rl_backend *be = make_backend(m, MAXB, 2);
	REQUIRE(be);
	static struct tseq t;
	init_seq(&t, 1, V, 0);
	t.toks[0] = m->cfg.bos_id < V ? m->cfg.bos_id : 1;
	t.gen = 1;
	assign_blocks(&t, 1, MAXB, 1);
	while (t.len < N) {
		uint32_t q = 1;
		REQUIRE(step(be, &t, 1, &q, V) == 0);
	}
	float *ref = ref_all(m, t.toks, t.len);
	REQUIRE(ref);
	for (uint32_t p = 0; p + 1 < t.len; p++) {
		CHECKF(rel_diff(t.logits + (size_t)p * V, ref + (size_t)p * V, V) <= TOL, "pos %u: %g",
		       p, rel_diff(t.logits + (size_t)p * V, ref + (size_t)p * V, V));
		CHECKF(rl_sample_argmax(ref + (size_t)p * V, V) == t.toks[p + 1], "pos %u", p);
	}
	free(ref);
	free(t.logits);
	rl_backend_destroy(be);
	rl_model_destroy(m);
}

/* The Llama 3 shape's factors reach the reference: without them its logits move. */
static void rope_factors_change_the_reference(void)
{
	const struct shape *sh = &shapes[0];
	while (!strstr(sh->name, "llama3"))
		sh++;
	struct rl_model *m = make_model(sh, 77);
	REQUIRE(m && m->cfg.n_rope_freqs == m->cfg.head_dim / 2);
	uint32_t toks[24];
	for (uint32_t i = 0; i < 24; i++)
		toks[i] = (i * 37 + 5) % m->cfg.vocab_size;
	float *a = ref_all(m, toks, 24);
	m->cfg.n_rope_freqs = 0;
	float *b = ref_all(m, toks, 24);
	REQUIRE(a && b);
	size_t V = m->cfg.vocab_size;
	/* position 0 has no rotation; later ones differ */
	CHECK(rel_diff(a, b, V) == 0);
	CHECKF(rel_diff(a + 20 * V, b + 20 * V, V) > 1e-3f, "%g", rel_diff(a + 20 * V, b + 20 * V, V));
	free(a); free(b);
	rl_model_destroy(m);
}

int main(void)
{
	const char *s = getenv("RL_SLOW");
	if (s && atoi(s) > 0)
		slow = atoi(s);
	RUN(matmul_every_isa_matches_loops);
	RUN(silu_every_isa_matches_loops);
	RUN(norm_and_rope_match_the_formula);
	RUN(attention_every_isa_matches_loops);
	RUN(attention_heads_match_head_by_head);
	RUN(argmax_matches_the_plain_loop);
	RUN(sampler_greedy_and_cuts_agree);
	RUN(sampler_is_keyed_by_seed_and_position);
	RUN(sampler_distribution_matches_softmax);
	RUN(sampler_masks_restrict_the_distribution);
	RUN(verification_is_the_rejection_rule);
	RUN(chunked_prefill_equals_unchunked_equals_reference);
	RUN(half_kv_chunked_equals_unchunked_near_reference);
	RUN(batched_paged_equals_alone_contiguous);
	RUN(generation_matches_reference_and_ignores_batch_mates);
	RUN(rope_factors_change_the_reference);
	RUN(bad_batches_are_refused);
	RUN(real_model_greedy_matches_reference);
	TEST_MAIN_END();
}
