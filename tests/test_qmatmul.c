/* test_qmatmul.c — the cpu matmul over stored weights (kernels/cpu_qmm*.c) against a
 * float64 product over the same weights decoded to fp32 (the table's decoders, which
 * test_quant checks bit for bit against gguf-py), for every weight type, every ISA this CPU
 * runs, 1..8 activation rows (the dot paths) and 9+ rows (the GEMM and decoded-tile paths),
 * odd column ranges, bias and accumulate, and the types rl_cpu_wmat_pack packs (Q8_0, the
 * K-quants, Q4_0..Q5_1, F16, BF16) again packed.
 *
 * Error measure: |y - ref| / sum_i |w_i x_i| (the error relative to the size of the terms,
 * which is what rounding scales with). Tolerances, written down per path:
 *   fp32 arithmetic on exact or decoded weights (F32, F16, BF16, every type on the scalar
 *   ISA, the tile path, the other block types' decoded rows): 1e-5;
 *   8-bit activations (Q8_0, Q4_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1 dots on AVX2 and AVX-512):
 *   4e-3 (the activations' rounding, half a step of amax/127 per element; measured at most
 *   1.6e-3 on a Zen 4 VM over every ISA, 2.1e-3 for Q5_0 on a Xeon VM; 1e-2 let a Q4_K
 *   kernel with two mins swapped pass at 9e-3);
 *   bf16 activations and weights (9+ rows over BF16 and block types, 2..8 rows over BF16,
 *   where the CPU has AVX512-BF16): the same 4e-3 (8 significant bits each; measured ~1e-3);
 *   packed Q8_0/Q4_K/Q6_K/Q4_0/Q4_1/Q5_0/Q5_1 on any vector ISA: the same 4e-3 (9+ rows take the
 *   8-bit kernels too).
 * Also the dispatch table's choices for the cases kernels/README.md names.
 * Tests: kernels (cpu_qmm*, cpu_ops), runtime/model (model_dtype's table and decoders).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include "tests/rl_test.h"
#include "kernels/cpu_ops.h"
#include "kernels/cpu_qmm.h"
#include "kernels/rl_half.h"
#include "runtime/model/rl_model_io.h"

static uint64_t rng = 0x1234567;
static float rnd(void)
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return (float)((rng >> 11) * 0x1p-53) * 2 - 1;
}

/* A [rows, cols] matrix of type dt with random contents, and its fp32 decoding. */
static void *make_w(int dt, uint32_t rows, uint32_t cols, float *dec, struct rl_wmat *W)
{
	const struct rl_dt_info *di = rl_dt_info(dt);
	size_t row_bytes = (size_t)cols / di->blk_elems * di->blk_bytes;
	uint8_t *w = malloc(rows * row_bytes);
	uint64_t st = 99 + dt;
	for (uint32_t r = 0; r < rows; r++) {
		uint8_t *row = w + r * row_bytes;
		for (uint32_t i = 0; i < cols; i++) {
			float v = rnd() * 0.5f;
			if (dt == RL_DT_F32)
				memcpy(row + 4 * i, &v, 4);
			else if (dt == RL_DT_F16 || dt == RL_DT_BF16) {
				uint16_t h = dt == RL_DT_F16 ? rl_f32_to_f16(v) : rl_f32_to_bf16(v);
				memcpy(row + 2 * i, &h, 2);
			}
		}
		if (di->blk_elems > 1)
			for (uint32_t b = 0; b < cols / di->blk_elems; b++)
				rl_dt_random_block(dt, row + (size_t)b * di->blk_bytes, &st, 0.5f);
	}
	rl_wmat_init(W, w, dt, rows, cols);
	for (uint32_t r = 0; r < rows; r++)
		rl_cpu_wmat_row(W, r, dec + (size_t)r * cols);
	return w;
}

/* the paths that round the activations (to 8 bits per 32 or 256, or to bf16) */
static int reduced_path(const struct rl_wmat *W, int dt, enum rl_cpu_isa isa, uint32_t rows)
{
	const int q8 = dt == RL_DT_Q8_0 || dt == RL_DT_Q4_K || dt == RL_DT_Q6_K || dt == RL_DT_Q4_0 || dt == RL_DT_Q4_1 ||
		       dt == RL_DT_Q5_0 || dt == RL_DT_Q5_1 || dt == RL_DT_IQ4_NL || dt == RL_DT_IQ4_XS;
	/* Q2_K, Q3_K, Q5_K: 8 bits per 256 at every row count */
	const int kx = dt == RL_DT_Q2_K || dt == RL_DT_Q3_K || dt == RL_DT_Q5_K;
	return (isa != RL_CPU_SCALAR && rows <= 8 && q8) || (isa != RL_CPU_SCALAR && kx) ||
	       (isa != RL_CPU_SCALAR && W->packed_rows && dt != RL_DT_F16 && dt != RL_DT_BF16) ||  /* packed block types: 8-bit from 9 rows too */
	       rl_cpu_qmatmul_bf16_acts(W, rows);
}

/* 0: a step whose sequences all skip sampling (a prompt's middle chunk alone) asks the LM
 * head for no rows: nothing may be read or written */
static const uint32_t row_counts[] = { 0, 1, 2, 3, 5, 8, 9, 20 };
#define NR (sizeof row_counts / sizeof *row_counts)

/* Every ISA and row count of counts[n_counts] over W, columns [o0, o1) of Y's W->rows, with
 * and without bias and accumulate; the worst errors of the fp32 and the reduced-activation
 * paths into worst[]. */
static void check_isas(const struct rl_wmat *W, const float *dec, const float *X, float *Y, const float *bias,
			void *scratch, uint32_t o0, uint32_t o1, double worst[2], const uint32_t *counts,
			size_t n_counts)
{
	const uint32_t in = W->cols, ld = W->rows;
	const int dt = W->dtype;
	enum rl_cpu_isa best = rl_cpu_isa_best();
	for (int isa = 0; isa <= (int)best; isa++) {
		REQUIRE(rl_cpu_set_isa((enum rl_cpu_isa)isa) == 0);
		for (size_t rc = 0; rc < n_counts; rc++) {
			uint32_t R = counts[rc];
			for (int acc = 0; acc < 2; acc++) {
				for (size_t i = 0; i < (size_t)(R ? R : 1) * ld; i++)
					Y[i] = 0.25f;
				rl_cpu_qmatmul(Y, ld, X, in, W, acc ? NULL : bias, R, o0, o1, acc, scratch);
				for (uint32_t o = 0; !R && o < ld; o++)
					CHECKF(Y[o] == 0.25f, "%s wrote with no rows", rl_dt_info(dt)->name);
				for (uint32_t r = 0; r < R; r++)
					for (uint32_t o = 0; o < ld; o++) {
						double y = Y[(size_t)r * ld + o];
						if (o < o0 || o >= o1) {
							CHECKF(y == 0.25, "%s wrote outside its columns", rl_dt_info(dt)->name);
							continue;
						}
						double ref = acc ? 0.25 : bias[o], mag = 0;
						for (uint32_t i = 0; i < in; i++) {
							double t = (double)dec[(size_t)o * in + i] * X[(size_t)r * in + i];
							ref += t;
							mag += fabs(t);
						}
						double e = fabs(y - ref) / (mag > 0 ? mag : 1);
						int k = reduced_path(W, dt, (enum rl_cpu_isa)isa, R);
						if (e > worst[k])
							worst[k] = e;
					}
			}
		}
	}
}

/* check_isas under every feature set this CPU can be narrowed to: AVX-512 without VNNI or
 * BF16, and without those and F16C (a mask that removes nothing here is skipped), so every
 * kernel path runs on one machine. */
static void check_paths(const struct rl_wmat *W, const float *dec, const float *X, float *Y, const float *bias,
			void *scratch, uint32_t o0, uint32_t o1, double worst[2], const uint32_t *counts,
			size_t n_counts)
{
	static const uint32_t masks[] = { RL_CPUF_ALL, RL_CPUF_ALL & ~RL_CPUF_VNNI, RL_CPUF_ALL & ~RL_CPUF_BF16,
					  RL_CPUF_ALL & ~(RL_CPUF_VNNI | RL_CPUF_BF16 | RL_CPUF_F16C) };
	for (size_t m = 0; m < sizeof masks / sizeof *masks; m++) {
		if (m && !(rl_cpu_features_detected() & ~masks[m]))
			continue;
		rl_cpu_set_features(masks[m]);
		check_isas(W, dec, X, Y, bias, scratch, o0, o1, worst, counts, n_counts);
	}
	rl_cpu_set_features(RL_CPUF_ALL);
	rl_cpu_set_isa(rl_cpu_isa_best());
}

/* in: 2048 also takes the matmuls' long-row slicing; 288 (nine blocks of 32, no whole
 * super-block: the 256-weight types sit it out) an odd block count; 300 (the float types
 * alone) a tail shorter than a vector.  37 rows: the types that
 * rl_cpu_wmat_pack packs (where this CPU has the kernels for them) are run again packed: the
 * K-quants as two groups of 16 and 5 rows as they were, F16 and BF16 as blocks of 16, 16 and
 * 5 (h16_panels_every_range has more). */
static void qmatmul_case(uint32_t in)
{
	const uint32_t out = 37;
	float *dec = malloc((size_t)out * in * sizeof(float)), *dec2 = malloc((size_t)out * in * sizeof(float));
	float *X = malloc((size_t)20 * in * sizeof(float)), *Y = malloc((size_t)20 * 48 * sizeof(float));
	float bias[48];
	void *scratch = malloc(rl_cpu_qmatmul_scratch(in, 20));
	REQUIRE(dec && dec2 && X && Y && scratch);
	for (size_t i = 0; i < (size_t)20 * in; i++)
		X[i] = rnd() * (i % 7 == 0 ? 3 : 1);     /* some larger values, as real activations */
	for (int i = 0; i < 48; i++)
		bias[i] = rnd();
	for (int dt = 0; dt < RL_DT_COUNT; dt++) {
		if (in % rl_dt_info(dt)->blk_elems)
			continue;
		struct rl_wmat W;
		void *w = make_w(dt, out, in, dec, &W);
		double worst[2] = { 0, 0 };                   /* fp32 paths, reduced-activation paths */
		/* columns [3, 34): a range that starts and ends off the 4-row groups and leaves the
		 * 16-row groups a partial last one (packed: starts inside the first group, ends in the
		 * rows after it); [2, 34) one row more */
		check_paths(&W, dec, X, Y, bias, scratch, 3, 34, worst, row_counts, NR);
		check_paths(&W, dec, X, Y, bias, scratch, 2, 34, worst, row_counts, NR);
		int packed = rl_cpu_wmat_pack(&W);
		CHECKF(packed >= 0, "%s: packing failed (%d)", rl_dt_info(dt)->name, packed);
		if (packed == 1) {
			const uint32_t want = dt == RL_DT_F16 || dt == RL_DT_BF16 ? 37 : 32;   /* panels: all */
			CHECKF(W.packed_rows == want, "%s: %u rows packed of 37", rl_dt_info(dt)->name, W.packed_rows);
			for (uint32_t r = 0; r < out; r++)
				rl_cpu_wmat_row(&W, r, dec2 + (size_t)r * in);
			CHECKF(!memcmp(dec, dec2, (size_t)out * in * sizeof(float)), "%s: packed rows decode otherwise",
			       rl_dt_info(dt)->name);
			check_paths(&W, dec, X, Y, bias, scratch, 3, 34, worst, row_counts, NR);
			check_paths(&W, dec, X, Y, bias, scratch, 17, 29, worst, row_counts, NR);   /* inside one group */
			/* the second half of one group, the first half of the next; one row of a first half and
			 * one of a second (AVX2's whole-group Q4_K) */
			check_paths(&W, dec, X, Y, bias, scratch, 10, 21, worst, row_counts, NR);
			check_paths(&W, dec, X, Y, bias, scratch, 7, 25, worst, row_counts, NR);
			check_paths(&W, dec, X, Y, bias, scratch, 0, 37, worst, row_counts, NR);
		}
		CHECKF(worst[0] <= 1e-5, "%s: fp32 paths off by %.3g of the terms", rl_dt_info(dt)->name, worst[0]);
		CHECKF(worst[1] <= 4e-3, "%s: 8-bit/bf16 activation paths off by %.3g of the terms", rl_dt_info(dt)->name,
		       worst[1]);
		printf("  %-6s in %4u%s: worst error / sum|terms|: fp32 paths %.2g, 8-bit/bf16 activation paths %.2g\n",
		       rl_dt_info(dt)->name, in, packed == 1 ? " (and packed)" : "", worst[0], worst[1]);
		free(w);
	}
	free(dec); free(dec2); free(X); free(Y); free(scratch);
}

static void qmatmul_every_type_isa_and_row_count(void)
{
	qmatmul_case(512);
	if (!getenv("RL_SLOW"))            /* a sanitizer build: the odd widths find its faults */
		qmatmul_case(2048);
	qmatmul_case(288);
	qmatmul_case(300);
}

/* The 16-bit panels (rl_cpu_wmat_pack over F16 and BF16): 101 rows pack as one block of 48,
 * three of 16 and one of 5. Ranges that start and end inside blocks and off the
 * vector grid, that lie inside one block, that cross into the last one; row counts that
 * leave the 8-row (AVX-512) and 4-row (AVX2) groups a remainder, and 65 and 70 rows (two
 * chunks of the many-row path, the second of one row). Held to the fp32 tolerance, but where the activations are bf16 (BF16
 * from two rows with AVX512-BF16, rl_cpu_qmatmul_bf16_acts): there the bf16 one. */
static void h16_panels_every_range(void)
{
	static const uint32_t counts[] = { 1, 2, 3, 4, 5, 7, 8, 9, 13, 65, 70 };
	static const uint32_t ranges[][2] = { { 0, 101 }, { 5, 99 }, { 48, 64 }, { 40, 60 }, { 90, 101 }, { 97, 100 } };
	const uint32_t out = 101, ins[] = { 300, 512 };
	for (size_t c = 0; c < 4; c++) {
		const uint32_t in = ins[c % 2];
		const int dt = c < 2 ? RL_DT_F16 : RL_DT_BF16;
		float *dec = malloc((size_t)out * in * sizeof(float)), *dec2 = malloc((size_t)out * in * sizeof(float));
		float *X = malloc((size_t)70 * in * sizeof(float)), *Y = malloc((size_t)70 * out * sizeof(float));
		float bias[101];
		void *scratch = malloc(rl_cpu_qmatmul_scratch(in, 70));
		REQUIRE(dec && dec2 && X && Y && scratch);
		for (size_t i = 0; i < (size_t)70 * in; i++)
			X[i] = rnd() * (i % 7 == 0 ? 3 : 1);
		for (uint32_t i = 0; i < out; i++)
			bias[i] = rnd();
		struct rl_wmat W;
		void *w = make_w(dt, out, in, dec, &W);
		int packed = rl_cpu_wmat_pack(&W);
		if (packed != 1) {
			printf("  skipped: this CPU packs no 16-bit panels (no AVX2/F16C)\n");
			free(w); free(dec); free(dec2); free(X); free(Y); free(scratch);
			return;
		}
		CHECKF(W.packed_rows == 101, "%u rows packed of 101", W.packed_rows);
		for (uint32_t r = 0; r < out; r++)
			rl_cpu_wmat_row(&W, r, dec2 + (size_t)r * in);
		CHECK(!memcmp(dec, dec2, (size_t)out * in * sizeof(float)));
		CHECK(rl_cpu_wmat_grain(&W) == 48);
		double worst[2] = { 0, 0 };
		for (size_t g = 0; g < sizeof ranges / sizeof *ranges; g++)
			check_paths(&W, dec, X, Y, bias, scratch, ranges[g][0], ranges[g][1], worst, counts,
				    sizeof counts / sizeof *counts);
		const char *tn = rl_dt_info(dt)->name;
		CHECKF(worst[0] <= 1e-5 && worst[1] <= 4e-3, "%s panels, in %u: off by %.3g / %.3g of the terms", tn, in,
		       worst[0], worst[1]);
		CHECKF(dt == RL_DT_BF16 || worst[1] == 0, "F16 panels rounded activations (%.3g)", worst[1]);
		printf("  %-4s panels, in %u: worst error / sum|terms|: fp32 %.2g, bf16 activations %.2g\n", tn, in,
		       worst[0], worst[1]);
		free(w); free(dec); free(dec2); free(X); free(Y); free(scratch);
	}
}

/* The 4/5-bit kernels (q45_*, and the Q8_0 ones over IQ4_NL and IQ4_XS) compute a row alike
 * alone or in a decode step of 2..8 rows (IQ4_NL, IQ4_XS, Q4_0 and Q5_0 also in a prefill
 * chunk over packed groups), and alike on AVX2 and AVX512-VNNI: the same 8-bit activations,
 * exact integer block sums, the same float operations in the same block order. Bit for bit,
 * packed and unpacked rows (Q4_1/Q5_1's prefill and unpacked Q4_0..IQ4_XS's take the decoded
 * tiles instead). Q2_K, Q3_K and Q5_K alike at every row count, as a family of their own on
 * each: kx_* on AVX2 (the file's rows), kq_t16 on VNNI, packed (on VNNI only) as unpacked. */
static void q45_rows_compute_alike(void)
{
	static const int types[] = { RL_DT_Q4_0, RL_DT_Q4_1, RL_DT_Q5_0, RL_DT_Q5_1, RL_DT_IQ4_NL,
				     RL_DT_Q2_K, RL_DT_Q3_K, RL_DT_Q5_K, RL_DT_IQ4_XS };
	const uint32_t in = 512, out = 37, nx = 20;   /* 512: two super-blocks, sixteen blocks of 32 */
	if (!(rl_cpu_features_detected() & RL_CPUF_AVX2)) {
		printf("  skipped: no AVX2\n");
		return;
	}
	float *dec = malloc((size_t)out * in * sizeof(float)), *X = malloc((size_t)nx * in * sizeof(float));
	float *Y8 = malloc((size_t)nx * out * sizeof(float)), *Y = malloc((size_t)nx * out * sizeof(float));
	void *scratch = malloc(rl_cpu_qmatmul_scratch(in, nx));
	REQUIRE(dec && X && Y8 && Y && scratch);
	for (size_t i = 0; i < (size_t)nx * in; i++)
		X[i] = rnd() * (i % 7 == 0 ? 3 : 1);
	const int vnni = (rl_cpu_features_detected() & RL_CPUF_AVX512) && (rl_cpu_features_detected() & RL_CPUF_VNNI);
	for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
		struct rl_wmat W;
		void *w = make_w(types[t], out, in, dec, &W);
		/* Q2_K, Q3_K, Q5_K: packed only where kq_t16 reads them (VNNI) */
		const int kx = types[t] == RL_DT_Q2_K || types[t] == RL_DT_Q3_K || types[t] == RL_DT_Q5_K;
		for (int pk = 0; pk < (kx && !vnni ? 1 : 2); pk++) {
			if (pk) {
				REQUIRE(rl_cpu_set_isa(rl_cpu_isa_best()) == 0);
				REQUIRE(rl_cpu_wmat_pack(&W) == 1);
			}
			for (int isa = kx && pk ? RL_CPU_AVX512 : RL_CPU_AVX2; isa <= (vnni ? RL_CPU_AVX512 : RL_CPU_AVX2); isa++) {
				REQUIRE(rl_cpu_set_isa((enum rl_cpu_isa)isa) == 0);
				/* the reference: each row alone on AVX2, unpacked; Q2_K's, Q3_K's, Q5_K's on VNNI
				 * is kq_t16, alike in any batch but its own family: each row alone there, unpacked */
				if (!pk && (isa == RL_CPU_AVX2 || kx))
					for (uint32_t r = 0; r < nx; r++)
						rl_cpu_qmatmul(Y8 + (size_t)r * out, out, X + (size_t)r * in, in, &W, NULL, 1, 0, out, 0,
							       scratch);
				static const uint32_t counts[] = { 1, 3, 8, 20 };
				for (size_t c = 0; c < 4; c++) {
					const int many8 = types[t] == RL_DT_IQ4_NL || types[t] == RL_DT_IQ4_XS || types[t] == RL_DT_Q4_0 ||
							  types[t] == RL_DT_Q5_0;
					/* Q2_K's, Q3_K's, Q5_K's prefill on VNNI: kq_t16 8 rows at a time */
					const uint32_t n = counts[c], o1 = n <= 8 || kx ? out : many8 ? W.packed_rows : 0;
					if (!o1)
						continue;
					for (uint32_t r0 = 0; r0 + n <= nx; r0 += n) {
						rl_cpu_qmatmul(Y, out, X + (size_t)r0 * in, in, &W, NULL, n, 0, o1, 0, scratch);
						for (uint32_t r = 0; r < n; r++)
							CHECKF(!memcmp(Y + (size_t)r * out, Y8 + (size_t)(r0 + r) * out, o1 * sizeof(float)),
							       "%s %s %s: row %u of %u computes otherwise", rl_dt_info(types[t])->name,
							       pk ? "packed" : "unpacked", rl_cpu_isa_name((enum rl_cpu_isa)isa), r0 + r, n);
					}
				}
				/* a decode-only step of 20 rows (rl_cpu_qmatmul_decode): Q4_1 and Q5_1's packed
				 * groups too, on their 8-bit kernels, as alone */
				if (pk && (types[t] == RL_DT_Q4_1 || types[t] == RL_DT_Q5_1)) {
					rl_cpu_qmatmul_decode(Y, out, X, in, &W, NULL, nx, 0, W.packed_rows, 0, scratch);
					for (uint32_t r = 0; r < nx; r++)
						CHECKF(!memcmp(Y + (size_t)r * out, Y8 + (size_t)r * out, W.packed_rows * sizeof(float)),
						       "%s packed %s: decode step row %u of %u computes otherwise",
						       rl_dt_info(types[t])->name, rl_cpu_isa_name((enum rl_cpu_isa)isa), r, nx);
				}
			}
		}
		free(w);
	}
	rl_cpu_set_isa(rl_cpu_isa_best());
	free(dec); free(X); free(Y8); free(Y); free(scratch);
}


/* The deterministic mode's product (rl_cpu_qmatmul_det): for every stored type, both layouts
 * and every ISA column this CPU can be narrowed to, row r's outputs are the same bits alone,
 * among 2..150 rows (past 8 the many-row kernels or chunks of 8), and with the outputs cut at
 * the thread split's grain, as the CPU backend's workers cut them. */
static void rows_compute_alike_det_in(uint32_t in);
static void rows_compute_alike_when_deterministic(void)
{
	rows_compute_alike_det_in(512);
	if (getenv("RL_SLOW"))           /* a sanitizer build: the one size */
		return;
	rows_compute_alike_det_in(172);   /* a ragged end, for the float types (stories260K's w2) */
	rows_compute_alike_det_in(64);
}

static void rows_compute_alike_det_in(uint32_t in)
{
	const uint32_t out = 53, nx = getenv("RL_SLOW") ? 33 : 150;  /* 53: three packed groups of 16, 5 rows */
	static const uint32_t counts[] = { 2, 3, 8, 9, 20, 33, 75, 150 };
	static const uint32_t masks[] = { RL_CPUF_ALL, RL_CPUF_ALL & ~RL_CPUF_VNNI, RL_CPUF_ALL & ~RL_CPUF_BF16,
					  RL_CPUF_ALL & ~(RL_CPUF_VNNI | RL_CPUF_BF16 | RL_CPUF_F16C) };
	float *dec = malloc((size_t)out * in * sizeof(float)), *X = malloc((size_t)nx * in * sizeof(float));
	float *Y1 = malloc((size_t)nx * out * sizeof(float)), *Y = malloc((size_t)nx * out * sizeof(float));
	void *scratch = malloc(rl_cpu_qmatmul_scratch(in, nx));
	float bias[53];
	REQUIRE(dec && X && Y1 && Y && scratch);
	for (size_t i = 0; i < (size_t)nx * in; i++)
		X[i] = rnd() * (i % 7 == 0 ? 3 : 1);
	for (uint32_t i = 0; i < out; i++)
		bias[i] = rnd();
	int cases = 0;
	for (int dt = 0; dt < RL_DT_COUNT; dt++) {
		if (in % rl_dt_info(dt)->blk_elems)
			continue;
		struct rl_wmat W;
		void *w = make_w(dt, out, in, dec, &W);
		for (int pk = 0; pk < 2; pk++) {
			if (pk && rl_cpu_wmat_pack(&W) <= 0)
				break;
			for (size_t m = 0; m < sizeof masks / sizeof *masks; m++) {
				if (m && (!(rl_cpu_features_detected() & ~masks[m]) || getenv("RL_SLOW")))
					continue;   /* a sanitizer build: the CPU's own features only */
				rl_cpu_set_features(masks[m]);
				for (int isa = 0; isa <= (int)rl_cpu_isa_best(); isa++) {
					REQUIRE(rl_cpu_set_isa((enum rl_cpu_isa)isa) == 0);
					for (uint32_t r = 0; r < nx; r++)      /* each row alone */
						rl_cpu_qmatmul_det(Y1 + (size_t)r * out, out, X + (size_t)r * in, in, &W, bias, 1, 0,
								   out, 0, scratch);
					const uint32_t g = rl_cpu_wmat_grain(&W);
					for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
						const uint32_t n = counts[c];
						if (n > nx)
							break;
						for (uint32_t r0 = 0; r0 + n <= nx; r0 += n) {
							/* outputs in two parts cut at a grain boundary, as two workers */
							const uint32_t cut = (r0 / n % 3) * g < out ? (r0 / n % 3) * g : 0;
							rl_cpu_qmatmul_det(Y, out, X + (size_t)r0 * in, in, &W, bias, n, 0, cut, 0, scratch);
							rl_cpu_qmatmul_det(Y, out, X + (size_t)r0 * in, in, &W, bias, n, cut, out, 0, scratch);
							for (uint32_t r = 0; r < n; r++)
								CHECKF(!memcmp(Y + (size_t)r * out, Y1 + (size_t)(r0 + r) * out, out * sizeof(float)),
								       "%s %s %s features %#x: row %u of %u (outputs cut at %u) computes otherwise (%s)",
								       rl_dt_info(dt)->name, pk ? "packed" : "unpacked",
								       rl_cpu_isa_name((enum rl_cpu_isa)isa), masks[m], r0 + r, n, cut,
								       rl_cpu_qmatmul_kernel_det(&W, n, pk));
						}
					}
					cases++;
				}
			}
		}
		free(w);
	}
	CHECK(cases > 4);
	rl_cpu_set_features(RL_CPUF_ALL);
	rl_cpu_set_isa(rl_cpu_isa_best());
	free(dec); free(X); free(Y1); free(Y); free(scratch);
}

/* A prompt step over Q4_1/Q5_1 takes the decoded tiles at every row count
 * (rl_cpu_qmatmul_prompt), and a row computes the same bits in a chunk of any size: a prompt's
 * logits do not follow how the budget cut it. */
static void prompt_rows_take_the_tiles_at_any_count(void)
{
	const uint32_t in = 256, out = 53, nx = 20;
	static const uint32_t counts[] = { 1, 2, 3, 8, 9, 20 };
	float *dec = malloc((size_t)out * in * sizeof(float)), *X = malloc((size_t)nx * in * sizeof(float));
	float *Y1 = malloc((size_t)nx * out * sizeof(float)), *Y = malloc((size_t)nx * out * sizeof(float));
	void *scratch = malloc(rl_cpu_qmatmul_scratch(in, nx));
	REQUIRE(dec && X && Y1 && Y && scratch);
	for (size_t i = 0; i < (size_t)nx * in; i++)
		X[i] = rnd();
	const int dts[] = { RL_DT_Q4_1, RL_DT_Q5_1 };
	for (int t = 0; t < 2; t++) {
		struct rl_wmat W;
		void *w = make_w(dts[t], out, in, dec, &W);
		for (int pk = 0; pk < 2; pk++) {
			if (pk && rl_cpu_wmat_pack(&W) <= 0)
				break;
			const char *many = rl_cpu_qmatmul_kernel(&W, nx, pk);
			for (uint32_t r = 0; r < nx; r++)
				rl_cpu_qmatmul_prompt(Y1 + (size_t)r * out, out, X + (size_t)r * in, in, &W, NULL, 1, 0, out, 0, scratch);
			for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
				const uint32_t n = counts[c];
				CHECKF(!strcmp(rl_cpu_qmatmul_kernel_prompt(&W, n, pk), many), "%s %s at %u rows: %s, not %s",
				       rl_dt_info(dts[t])->name, pk ? "packed" : "unpacked", n, rl_cpu_qmatmul_kernel_prompt(&W, n, pk), many);
				for (uint32_t r0 = 0; r0 + n <= nx; r0 += n) {
					rl_cpu_qmatmul_prompt(Y, out, X + (size_t)r0 * in, in, &W, NULL, n, 0, out, 0, scratch);
					for (uint32_t r = 0; r < n; r++)
						CHECKF(!memcmp(Y + (size_t)r * out, Y1 + (size_t)(r0 + r) * out, out * sizeof(float)),
						       "%s %s: row %u of %u computes otherwise", rl_dt_info(dts[t])->name,
						       pk ? "packed" : "unpacked", r0 + r, n);
				}
			}
		}
		free(w);
	}
	free(dec); free(X); free(Y1); free(Y); free(scratch);
}

/* Rows of a stored matrix decode as the table's decoder does (the embedding lookup). */
static void wmat_rows_decode_as_the_table(void)
{
	const uint32_t cols = 256;
	for (int dt = 0; dt < RL_DT_COUNT; dt++) {
		float dec[3 * 256], row[256];
		struct rl_wmat W;
		void *w = make_w(dt, 3, cols, dec, &W);
		const struct rl_dt_info *di = rl_dt_info(dt);
		rl_cpu_wmat_row(&W, 2, row);
		if (di->blk_elems > 1) {
			float ref[256];
			REQUIRE(rl_dt_decode(dt, ref, (const uint8_t *)w + 2 * W.row_bytes, cols / di->blk_elems) == 0);
			CHECKF(!memcmp(row, ref, sizeof ref), "%s", di->name);
		}
		CHECK(!memcmp(row, dec + 2 * cols, sizeof row));
		free(w);
	}
}

/* The tile path's bf16 decode (rl_qmm_tile_bf16, AVX512-BF16) makes the bits of
 * rl_cpu_wmat_row then rl_qmm_to_bf16, for every block type, unpacked and packed, over
 * aligned 16-row groups, ranges that start or end inside one, and the rows past the groups:
 * blocks of random bytes with random finite f16 scales (negative, subnormal, d != m). */
static void tiles_decode_as_rows(void)
{
	if (!(rl_cpu_features() & RL_CPUF_BF16) || rl_cpu_isa() != RL_CPU_AVX512) {
		SKIP("no AVX512-BF16");
		return;
	}
	const uint32_t rows = 37, cols = 256;
	static const uint32_t ranges[][2] = { { 0, 16 }, { 16, 32 }, { 0, 37 }, { 3, 20 }, { 15, 33 }, { 32, 37 }, { 5, 6 } };
	uint64_t st = 7;
	for (int dt = 0; dt < RL_DT_COUNT; dt++) {
		const struct rl_dt_info *di = rl_dt_info(dt);
		if (di->blk_elems == 1)
			continue;
		for (int pass = 0; pass < 20; pass++) {
			size_t row_bytes = (size_t)cols / di->blk_elems * di->blk_bytes;
			uint8_t *w = malloc(rows * row_bytes);
			for (size_t i = 0; i < rows * row_bytes; i++) {
				st ^= st << 13; st ^= st >> 7; st ^= st << 17;
				w[i] = (uint8_t)(st >> 40);
			}
			for (uint32_t b = 0; b < rows * cols / di->blk_elems; b++)
				for (int k = 0; k < di->n_f16; k++) {
					uint8_t *h = w + (size_t)b * di->blk_bytes + di->f16_off[k];
					if ((h[1] & 0x7c) == 0x7c)
						h[1] &= ~0x40;         /* finite */
				}
			struct rl_wmat W;
			rl_wmat_init(&W, w, dt, rows, cols);
			for (int packed = 0; packed < 2; packed++) {
				if (packed && rl_cpu_wmat_pack(&W) <= 0)
					break;
				float *ref = malloc((size_t)rows * cols * 4), row[256];
				uint16_t *want = malloc((size_t)rows * cols * 2), *got = malloc((size_t)rows * cols * 2);
				for (uint32_t r = 0; r < rows; r++) {
					rl_cpu_wmat_row(&W, r, ref + (size_t)r * cols);
					rl_qmm_to_bf16(want + (size_t)r * cols, ref + (size_t)r * cols, cols);
				}
				for (size_t k = 0; k < sizeof ranges / sizeof *ranges; k++) {
					const uint32_t o = ranges[k][0], n = ranges[k][1] - o;
					memset(got, 0xff, (size_t)n * cols * 2);
					rl_qmm_tile_bf16(&W, o, n, got, row);
					CHECKF(!memcmp(got, want + (size_t)o * cols, (size_t)n * cols * 2), "%s packed %d rows %u..%u",
					       di->name, packed, o, o + n);
				}
				free(ref); free(want); free(got);
			}
			free(w);
		}
	}
}

/* The table of cpu_qmm.c names a kernel for every case, and the ones kernels/README.md
 * quotes, on each ISA and feature set this CPU can narrow to. */
static void the_table_routes_each_case(void)
{
	static const int types[] = { RL_DT_F32, RL_DT_F16, RL_DT_BF16, RL_DT_Q8_0, RL_DT_Q4_K, RL_DT_Q6_K, RL_DT_IQ4_NL,
				     RL_DT_Q4_1, RL_DT_Q5_0, RL_DT_Q5_K, RL_DT_IQ4_XS, RL_DT_Q3_K };
	enum { NT = sizeof types / sizeof *types };
	static uint8_t data[32 * 256 * 4];
	const uint32_t best = rl_cpu_features_detected();
	struct rl_wmat W[NT];
	for (int t = 0; t < NT; t++)
		rl_wmat_init(&W[t], data, types[t], 32, 256);
#define ROUTE(i, n, pk, want) CHECKF(!strcmp(rl_cpu_qmatmul_kernel(&W[i], n, pk), want), "%s %u rows %s: %s, not %s", \
				      rl_dt_info(types[i])->name, n, pk ? "packed" : "unpacked", \
				      rl_cpu_qmatmul_kernel(&W[i], n, pk), want)
	REQUIRE(rl_cpu_set_isa(RL_CPU_SCALAR) == 0);
	ROUTE(0, 3, 0, "f32");
	ROUTE(4, 3, 0, "rows_scalar");
	ROUTE(4, 20, 1, "tiles_f32");
	if (best & RL_CPUF_AVX2) {
		REQUIRE(rl_cpu_set_isa(RL_CPU_AVX2) == 0);
		ROUTE(5, 3, 0, "kq_tiles");
		ROUTE(5, 3, 1, "q6k_t8p");
		ROUTE(3, 1, 0, "q8_0_row1");
		ROUTE(3, 3, 0, "q8_0_t8");
		ROUTE(3, 20, 1, "q8_0_many_t8");
		ROUTE(2, 20, 0, "tiles_f32");
		ROUTE(6, 3, 0, "q8_0_t8");     /* IQ4_NL: the Q8_0 kernels, its nibbles looked up */
		ROUTE(9, 3, 0, "kx_rows");      /* Q5_K: the super-block kernels */
		ROUTE(9, 20, 0, "kx_rows");
		ROUTE(10, 1, 1, "q8_0_t8");     /* IQ4_XS: each 32 an IQ4_NL block with its own scale */
		ROUTE(10, 20, 1, "q8_0_many_t8");
		ROUTE(1, 1, 1, "h16");
		ROUTE(7, 1, 0, "q45_t8");
		ROUTE(8, 3, 1, "q45_t8");
		ROUTE(7, 20, 1, "tiles_f32");   /* Q4_1 prefill: decoded tiles (accuracy, cpu_qmm.c) */
		ROUTE(8, 20, 0, "tiles_f32");
		ROUTE(8, 20, 1, "q45_many_t8");  /* Q5_0 prefill over packed groups: 8 rows at a time */
	}
	if ((best & RL_CPUF_AVX512) && (best & RL_CPUF_VNNI)) {
		rl_cpu_set_features(RL_CPUF_ALL & ~RL_CPUF_BF16);
		REQUIRE(rl_cpu_set_isa(RL_CPU_AVX512) == 0);
		ROUTE(3, 1, 1, "q8_0_t8");     /* one row over packed Q8_0 keeps the AVX2 kernel */
		ROUTE(3, 3, 1, "q8_0_t16");
		ROUTE(4, 1, 0, "kq_t16");
		ROUTE(5, 20, 1, "kq_many_t16");
		ROUTE(7, 1, 1, "q45_t16");
		ROUTE(8, 8, 0, "q45_t16");
		ROUTE(8, 20, 1, "q45_many_t16");
		ROUTE(6, 20, 1, "q8_0_many_t16");
		ROUTE(6, 1, 1, "q8_0_t16");    /* IQ4_NL: one row on VNNI too */
		ROUTE(10, 1, 1, "q8_0_t16");
		ROUTE(10, 20, 1, "q8_0_many_t16");
		ROUTE(9, 1, 0, "kq_t16");       /* Q5_K decode: Q4_K's kernel with the fifth bits */
		ROUTE(9, 20, 0, "kq_many_t16");  /* Q5_K prefill: its decode kernel 8 rows at a time */
		ROUTE(9, 3, 1, "kq_t16");        /* packed on VNNI (pack_vnni) */
		ROUTE(9, 20, 1, "kq_many_t16");
		ROUTE(11, 20, 1, "kq_many_t16");
		ROUTE(11, 1, 0, "kq_t16");
		ROUTE(11, 20, 0, "kq_many_t16"); /* Q3_K prefill: its decode kernel 8 rows at a time */
		rl_cpu_set_features(RL_CPUF_ALL & ~RL_CPUF_VNNI & ~RL_CPUF_BF16);
		REQUIRE(rl_cpu_set_isa(RL_CPU_AVX512) == 0);
		ROUTE(4, 1, 0, "kq_row512");
		ROUTE(4, 3, 0, "q4k_t8");
		ROUTE(7, 3, 1, "q45_t8");
		ROUTE(9, 3, 0, "kx_rows512");
		ROUTE(9, 20, 0, "kx_rows512");
	}
	if ((best & RL_CPUF_AVX512) && (best & RL_CPUF_BF16)) {
		rl_cpu_set_features(RL_CPUF_ALL);
		REQUIRE(rl_cpu_set_isa(RL_CPU_AVX512) == 0);
		ROUTE(2, 3, 1, "h16_dpbf");
		ROUTE(2, 1, 1, "h16");
		ROUTE(3, 20, 0, "tiles_bf16");
		ROUTE(7, 20, 1, "tiles_bf16");
		ROUTE(8, 20, 1, "q45_many_t16");
		ROUTE(2, 20, 0, "bf16_direct");
		CHECK(rl_cpu_qmatmul_bf16_acts(&W[3], 20));
		CHECK(!rl_cpu_qmatmul_bf16_acts(&W[1], 20));
	}
#undef ROUTE
	/* every case names a kernel, on every column this CPU can take */
	for (uint32_t mask = 0; mask <= RL_CPUF_ALL; mask++) {
		rl_cpu_set_features(mask);
		for (int isa = 0; isa <= (int)rl_cpu_isa_best(); isa++) {
			REQUIRE(rl_cpu_set_isa((enum rl_cpu_isa)isa) == 0);
			for (int t = 0; t < NT; t++)
				for (uint32_t n = 1; n <= 9; n += 4)
					for (int pk = 0; pk < 2; pk++)
						CHECK(rl_cpu_qmatmul_kernel(&W[t], n, pk) != NULL);
		}
	}
	rl_cpu_set_features(RL_CPUF_ALL);
	REQUIRE(rl_cpu_set_isa(rl_cpu_isa_best()) == 0);
}

int main(void)
{
	RUN(qmatmul_every_type_isa_and_row_count);
	RUN(h16_panels_every_range);
	RUN(q45_rows_compute_alike);
	RUN(rows_compute_alike_when_deterministic);
	RUN(prompt_rows_take_the_tiles_at_any_count);
	RUN(wmat_rows_decode_as_the_table);
	RUN(tiles_decode_as_rows);
	RUN(the_table_routes_each_case);
	TEST_MAIN_END();
}
