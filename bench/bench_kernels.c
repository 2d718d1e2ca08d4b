/* bench_kernels.c — `ringlm bench kernels`: the CPU decode kernels on one matrix in cache, the
 * core's memory stream, and what they make of the batch-8 over batch-1 decode ratio.
 *
 * Decode at batch 1 streams every weight once per token (bound by memory); at batch 8 the
 * same bytes feed 8 rows (bound by arithmetic). So on one core, tokens/s at batch 8 over
 * batch 1 is about R8 * T1: R8 the kernel's multiply-adds a second over 8 rows with the matrix
 * in cache, T1 the seconds a weight costs at batch 1 at best, the larger of 1 / R1 (the 1-row
 * kernel in cache) and bytes-per-weight / the memory stream. The table prints those for each
 * stored type, so a machine's ratio can be judged against its own balance: a faster memory
 * raises the batch-1 rate alone. (A whole model reads its weights from DRAM at both batch
 * sizes, below these rates, so its own ratio lands near, not at, the estimate.) Then the
 * instruction-mix ceilings: register-only loops of the instructions the int8 and fp32 kernels
 * are built from, which no kernel of that form can pass.
 * --isa picks a lesser kernel set (avx2 on an AVX-512 machine); --cols/--rows the matrix
 * (default 768 x 768, 0.6-2.4 MB: in L2/L3). Writes bench/out/kernels.json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "bench/bench_util.h"
#include "clients/cli/cli.h"
#include "ipc/rl_clock.h"
#include "kernels/cpu_ops.h"
#include "kernels/cpu_simd.h"
#include "kernels/rl_half.h"
#include "kernels/rl_model.h"
#include "runtime/model/rl_model_io.h"


static double secs(void) { return (double)rl_now_ns() * 1e-9; }


/* ------------------------------------------------------- instruction mixes ------ */

/* Eight independent accumulators (throughput, not latency, bounds each loop); in the integer
 * loops the weights pass an empty asm each iteration and the activations are loaded from
 * memory, so the compiler can neither hoist nor fold the products. */
#define MIX_BARRIER(v) __asm__ volatile("" : "+x"(v[0]), "+x"(v[1]), "+x"(v[2]), "+x"(v[3]), \
					"+x"(v[4]), "+x"(v[5]), "+x"(v[6]), "+x"(v[7]) :: "memory")
#define MIX_ITERS 4000000L

/* fp32 FMA, 8 lanes: the 16-bit kernels once widened */
RL_TGT_AVX2 static double mix_fma256(void)
{
	__m256 a[8], w[8];
	for (int k = 0; k < 8; k++) {
		a[k] = _mm256_set1_ps(0.0f);
		w[k] = _mm256_set1_ps(1e-9f * (float)k);
	}
	double t0 = secs();
	for (long i = 0; i < MIX_ITERS; i++) {
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++)
			a[k] = _mm256_fmadd_ps(w[k], w[(k + 1) & 7], a[k]);   /* a chain: not hoisted */
	}
	double t = secs() - t0;
	MIX_BARRIER(a);
	return 8.0 * 8 * MIX_ITERS / t / 1e9;
}

/* signed int8 by signed int8 without VNNI (Q8_0): |w| by x signed with w's sign, vpmaddubsw,
 * vpmaddwd by ones, add; 32 multiply-adds, the activations broadcast from memory */
static int32_t mix_x[64] __attribute__((aligned(64)));
RL_TGT_AVX2 static double mix_i8_signed(void)
{
	__m256i s[8], w[8];
	const __m256i ones = _mm256_set1_epi16(1);
	for (int k = 0; k < 8; k++) {
		s[k] = _mm256_setzero_si256();
		w[k] = _mm256_set1_epi8((char)(k - 3));
	}
	double t0 = secs();
	for (long i = 0; i < MIX_ITERS / 8; i++) {
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++) {
				__m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(mix_x[8 * r + k]), w[k]);
				s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w[k]), xs), ones));
			}
		MIX_BARRIER(s);
		MIX_BARRIER(w);
	}
	double t = secs() - t0;
	MIX_BARRIER(s);
	return 64.0 * 32 * (MIX_ITERS / 8) / t / 1e9;
}

/* The activations as the 8-row AVX2 kernels read them (struct q8kr, q8r in kernels/cpu_qmm.h):
 * 16 dwords a step, the 32 bytes at dword r a rotation of 8 rows, one plain load each */
static int32_t mix_xr[8][16] __attribute__((aligned(64)));
#define MIX_ROT(k, r) _mm256_loadu_si256((const __m256i *)(mix_xr[k] + (r)))

/* signed int8 by signed int8 as int16 (Q8_0 without VNNI, q8_0_t8_group): each weight vector
 * (loaded, as the kernel's) split into its even and odd bytes sign-extended to words by three
 * shifts, shared by the 8 rows; then per rotation 2 loaded int16 pairs, 2 vpmaddwd, 2 adds
 * into its sum, the rotations inside; 32 multiply-adds */
static __m256i mix_w[8];
RL_TGT_AVX2 static double mix_i16_pairs(void)
{
	__m256i s[8];
	for (int k = 0; k < 8; k++) {
		s[k] = _mm256_setzero_si256();
		mix_w[k] = _mm256_set1_epi8((char)(k - 3));
	}
	double t0 = secs();
	for (long i = 0; i < MIX_ITERS / 8; i++) {
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++) {
			const __m256i w = _mm256_load_si256(&mix_w[k]);
			const __m256i e = _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8), o = _mm256_srai_epi16(w, 8);
#pragma GCC unroll 8
			for (int r = 0; r < 8; r++) {
				s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(e, MIX_ROT(k, r)));
				s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(o, MIX_ROT((k + 1) & 7, r)));
				__asm__("" : "+x"(s[r]));      /* the chains as written, as the kernel's */
			}
		}
		MIX_BARRIER(s);
	}
	double t = secs() - t0;
	MIX_BARRIER(s);
	return 64.0 * 32 * (MIX_ITERS / 8) / t / 1e9;
}

/* unsigned 4-bit by signed int8 (Q4_K, q4k_t8k_half): each weight vector loaded once for the
 * 8 rotations inside, vpmaddubsw against each loaded rotation into its 16-bit sum over a
 * sub-block (pinned as written, as the kernel's), then one vpmaddwd by the scale per 8 */
RL_TGT_AVX2 static double mix_i8_unsigned(void)
{
	__m256i s[8];
	const __m256i sc = _mm256_set1_epi16(3);
	for (int k = 0; k < 8; k++) {
		s[k] = _mm256_setzero_si256();
		mix_w[k] = _mm256_set1_epi8((char)(k + 1));
	}
	double t0 = secs();
	for (long i = 0; i < MIX_ITERS / 8; i++) {
		__m256i p[8];
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			p[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++) {
			const __m256i w = _mm256_load_si256(&mix_w[k]);
#pragma GCC unroll 8
			for (int r = 0; r < 8; r++) {
				p[r] = _mm256_add_epi16(p[r], _mm256_maddubs_epi16(w, MIX_ROT(k, r)));
				__asm__("" : "+x"(p[r]));
			}
		}
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(p[r], sc));
		MIX_BARRIER(s);
	}
	double t = secs() - t0;
	MIX_BARRIER(s);
	return 64.0 * 32 * (MIX_ITERS / 8) / t / 1e9;
}

/* AVX512-VNNI vpdpbusd, 64 multiply-adds an instruction */
#define MIX_BARRIER_Z(v) __asm__ volatile("" : "+v"(v[0]), "+v"(v[1]), "+v"(v[2]), "+v"(v[3]), \
					  "+v"(v[4]), "+v"(v[5]), "+v"(v[6]), "+v"(v[7]))
RL_TGT_AVX512_VNNI static double mix_vnni(void)
{
	__m512i s[8], w[8];
	for (int k = 0; k < 8; k++) {
		s[k] = _mm512_setzero_si512();
		w[k] = _mm512_set1_epi8((char)(k + 1));
	}
	double t0 = secs();
	for (long i = 0; i < MIX_ITERS; i++) {
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++)
			s[k] = _mm512_dpbusd_epi32(s[k], w[k], w[(k + 3) & 7]);   /* fused: a chain */
	}
	double t = secs() - t0;
	MIX_BARRIER_Z(s);
	return 8.0 * 64 * MIX_ITERS / t / 1e9;
}

/* ---------------------------------------------------------------- kernels ------- */

/* the matrix's multiply-adds a second over nr activation rows, best of 5 runs of ~30 ms (the
 * first run, which warms the caches, counts how many calls fill that: a sanitizer build's
 * slower calls make fewer, not a longer benchmark) */
static double kernel_gmacs(const struct rl_wmat *W, uint32_t nr, const float *X, float *Y, void *scratch)
{
	const double macs = (double)W->rows * W->cols * nr;
	long iters = 0;
	double best = 0, t0 = secs();
	while (secs() - t0 < 0.03 || !iters) {
		rl_cpu_qmatmul(Y, W->rows, X, W->cols, W, NULL, nr, 0, W->rows, 0, scratch);
		iters++;
	}
	for (int rep = 0; rep < 5; rep++) {
		t0 = secs();
		for (long it = 0; it < iters; it++)
			rl_cpu_qmatmul(Y, W->rows, X, W->cols, W, NULL, nr, 0, W->rows, 0, scratch);
		double g = macs * iters / (secs() - t0) / 1e9;
		best = g > best ? g : best;
	}
	return best;
}

static void usage(void)
{
	fprintf(stderr, "usage: ringlm bench kernels [--isa avx512|avx2|scalar] [--rows N] [--cols N] [--json]\n");
}

int rl_cmd_bench_kernels(int argc, char **argv)
{
	uint32_t rows = 768, cols = 768;
	int json = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) { json = 1; continue; }
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
		if (!v) { fprintf(stderr, "ringlm bench kernels: %s needs a value\n", a); return 2; }
		i++;
		if (!strcmp(a, "--rows")) rows = (uint32_t)atoi(v);
		else if (!strcmp(a, "--cols")) cols = (uint32_t)atoi(v);
		else if (!strcmp(a, "--isa")) {
			if (rl_bench_set_isa("kernels", v))
				return 2;
		} else { fprintf(stderr, "ringlm bench kernels: unknown option %s\n", a); usage(); return 2; }
	}
	if (rows < 16 || rows > 16384 || cols < 256 || cols > 16384 || cols % 256) {
		fprintf(stderr, "ringlm bench kernels: --rows must be 16..16384 and --cols a multiple of 256 in "
			"256..16384 (the K-quant super-block), got %u x %u\n", rows, cols);
		return 2;
	}
	const int types[] = { RL_DT_F32, RL_DT_F16, RL_DT_BF16, RL_DT_Q8_0, RL_DT_Q4_K, RL_DT_Q6_K,
			      RL_DT_Q4_0, RL_DT_Q4_1, RL_DT_Q5_0, RL_DT_Q5_1, RL_DT_IQ4_NL, RL_DT_Q2_K, RL_DT_Q3_K,
			      RL_DT_Q5_K, RL_DT_IQ4_XS };
	const int nt = sizeof types / sizeof *types;
	float *X = malloc((size_t)8 * cols * sizeof(float)), *Y = malloc((size_t)8 * rows * sizeof(float));
	void *scratch = malloc(rl_cpu_qmatmul_scratch(cols, 8));
	if (!X || !Y || !scratch) {
		fprintf(stderr, "ringlm bench kernels: out of memory\n");
		free(X); free(Y); free(scratch);
		return 1;
	}
	uint64_t st = 7;
	for (size_t i = 0; i < (size_t)8 * cols; i++)
		X[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
	const double bw = rl_bench_stream_gbs((size_t)256 << 20, 1);   /* one thread, past the L2 */
	/* per type: GMAC/s at 1 and 8 rows in cache, bytes a weight, ns a weight at batch 1 at best */
	double r1[16], r8[16], bpw[16], t1[16];
	const char *k1[16], *k8[16];          /* the kernels that served them (cpu_qmm.c's table) */
	int rc = 0;
	for (int t = 0; t < nt; t++) {
		const struct rl_dt_info *di = rl_dt_info(types[t]);
		const size_t rb = (size_t)cols / di->blk_elems * di->blk_bytes;
		uint8_t *w = malloc(rows * rb);
		if (!w) {
			fprintf(stderr, "ringlm bench kernels: out of memory\n");
			rc = 1;
			goto out;
		}
		for (uint32_t r = 0; r < rows; r++) {
			uint8_t *row = w + r * rb;
			for (uint32_t i = 0; i < cols && di->blk_elems == 1; i++) {
				float v = (float)(((r * 131 + i) * 7919) % 2001) / 4000.0f - 0.25f;
				if (types[t] == RL_DT_F32) {
					memcpy(row + 4 * i, &v, 4);
				} else {
					uint16_t h = types[t] == RL_DT_F16 ? rl_f32_to_f16(v) : rl_f32_to_bf16(v);
					memcpy(row + 2 * i, &h, 2);
				}
			}
			for (uint32_t b = 0; di->blk_elems > 1 && b < cols / di->blk_elems; b++)
				rl_dt_random_block(types[t], row + (size_t)b * di->blk_bytes, &st, 0.5f);
		}
		struct rl_wmat W;
		rl_wmat_init(&W, w, types[t], rows, cols);
		rl_cpu_wmat_pack(&W);          /* as the loader does (F16/BF16 panels, K-quant groups) */
		bpw[t] = (double)di->blk_bytes / di->blk_elems;
		k1[t] = rl_cpu_qmatmul_kernel(&W, 1, W.packed_rows > 0);
		k8[t] = rl_cpu_qmatmul_kernel(&W, 8, W.packed_rows > 0);
		r1[t] = kernel_gmacs(&W, 1, X, Y, scratch);
		r8[t] = kernel_gmacs(&W, 8, X, Y, scratch);
		t1[t] = 1 / r1[t] > bpw[t] / bw ? 1 / r1[t] : bpw[t] / bw;
		free(w);
	}
	for (int i = 0; i < 64; i++)
		mix_x[i] = (int32_t)(0x01010101u * (uint32_t)(i % 61 + 3));
	for (int k = 0; k < 8; k++)
		for (int r = 0; r < 16; r++)
			mix_xr[k][r] = mix_x[8 * (r % 8) + k];
	const int vec = rl_cpu_isa() != RL_CPU_SCALAR;
	const int vnni = rl_cpu_isa() == RL_CPU_AVX512 && (rl_cpu_features() & RL_CPUF_VNNI);
	const double m_fma = vec ? mix_fma256() : 0, m_i8s = vec ? mix_i8_signed() : 0;
	const double m_i8u = vec ? mix_i8_unsigned() : 0, m_vnni = vnni ? mix_vnni() : 0;
	const double m_i16 = vec ? mix_i16_pairs() : 0;

	char line[8192];
	int n = snprintf(line, sizeof line, "{\"bench\":\"kernels\",\"isa\":\"%s\",\"rows\":%u,\"cols\":%u,"
			 "\"stream_gb_s\":%.2f,\"types\":{", rl_cpu_isa_name(rl_cpu_isa()), rows, cols, bw);
	for (int t = 0; t < nt; t++)
		n += snprintf(line + n, sizeof line - n, "%s\"%s\":{\"bytes_per_weight\":%.4f,\"gmac_s_1\":%.1f,"
			      "\"gmac_s_8\":%.1f,\"b1_gmac_s\":%.1f,\"b8_over_b1_estimate\":%.2f,\"kernel_1\":\"%s\","
			      "\"kernel_8\":\"%s\"}", t ? "," : "", rl_dt_info(types[t])->name, bpw[t], r1[t], r8[t],
			      1 / t1[t], r8[t] * t1[t], k1[t], k8[t]);
	snprintf(line + n, sizeof line - n, "},\"ceilings_gmac_s\":{\"fp32_fma_8\":%.1f,\"int8_signed\":%.1f,"
		 "\"int8_as_int16_pairs\":%.1f,\"int8_unsigned\":%.1f,\"vpdpbusd_16\":%.1f}}", m_fma, m_i8s, m_i16,
		 m_i8u, m_vnni);
	if (json) {
		printf("%s\n", line);
	} else {
		printf("decode kernels, %u x %u in cache, %s, 1 thread; memory stream %.1f GB/s\n", rows, cols,
		       rl_cpu_isa_name(rl_cpu_isa()), bw);
		printf("%-6s %8s %14s %14s %16s %16s  %s\n", "type", "bytes/w", "1 row GMAC/s", "8 rows GMAC/s",
		       "b1 bound GMAC/s", "b8/b1 estimate", "kernels (1 row, 8 rows)");
		for (int t = 0; t < nt; t++)
			printf("%-6s %8.4f %14.1f %14.1f %16.1f %16.2f  %s, %s\n", rl_dt_info(types[t])->name, bpw[t], r1[t],
			       r8[t], 1 / t1[t], r8[t] * t1[t], k1[t], k8[t]);
		if (vec)
			printf("instruction-mix ceilings, GMAC/s: fp32 FMA (8 lanes) %.1f, int8 signed (sign+maddubs+madd) %.1f, "
			       "int8 as int16 pairs (madd+add, k outside, rotated) %.1f, 4-bit unsigned (maddubs+add16, rotated) %.1f%s", m_fma,
			       m_i8s, m_i16, m_i8u, vnni ? "" : "\n");
		if (vnni)
			printf(", vpdpbusd (zmm) %.1f\n", m_vnni);
	}
	rl_bench_outdir();
	FILE *f = fopen("bench/out/kernels.json", "w");
	if (f) {
		fprintf(f, "%s\n", line);
		fclose(f);
	} else if (!json) {
		fprintf(stderr, "ringlm bench kernels: cannot write bench/out/kernels.json (run from the repo root)\n");
	}
out:
	free(X); free(Y); free(scratch);
	return rc;
}
