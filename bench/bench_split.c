/* bench_split.c — `ringlm bench split`: how the prefill kernels scale from one thread to two,
 * on one matrix per stored type in cache, apart from the rest of a forward step.
 *
 * The cpu backend splits each matmul's output rows between its workers; every worker quantizes
 * all the activation rows itself and runs the many-row kernel over its share, then meets the
 * others at a barrier. Per type this times, for a prompt chunk of P rows (default 128):
 *   1 thread     the whole matrix on one thread;
 *   half         one thread on half the rows alone (its share of the time: above 0.5 is the
 *                per-call work a split does not divide, the activations' quantization);
 *   2 split      two threads splitting the output rows of one matrix, shared activations and
 *                output, a spin barrier after every call (as the forward's);
 *   2 private    two threads, each on half the rows of its own copy of everything: what the
 *                machine gives two threads that share nothing.
 * Each configuration is run in turn, best of 3 rounds. Against `ringlm bench model`'s prefill
 * at 1 and 2 threads, this says whether a poor 2-thread figure is the kernels', the split's or
 * the machine's. Writes bench/out/split.json. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/bench_util.h"
#include "clients/cli/cli.h"
#include "ipc/rl_clock.h"
#include "kernels/cpu_ops.h"
#include "kernels/rl_model.h"
#include "runtime/model/rl_model_io.h"

#define SPLIT_CALLS 8                  /* calls a timing, each a barrier */

struct split_job {
	const struct rl_wmat *W;
	const float *X;
	float *Y;
	void *scratch;
	uint32_t lo, hi, prompt;
	int n;                         /* threads meeting at the barrier */
	_Atomic uint32_t *arrived;
	double secs;
};

static double split_now(void) { return (double)rl_now_ns() * 1e-9; }

static struct split_job split_job(const struct rl_wmat *W, const float *X, float *Y, void *scratch, uint32_t lo,
				  uint32_t hi, uint32_t prompt)
{
	return (struct split_job){ .W = W, .X = X, .Y = Y, .scratch = scratch, .lo = lo, .hi = hi, .prompt = prompt };
}

static void *split_run(void *arg)
{
	struct split_job *j = arg;
	const double t0 = split_now();
	for (uint32_t k = 0; k < SPLIT_CALLS; k++) {
		rl_cpu_qmatmul(j->Y, j->W->rows, j->X, j->W->cols, j->W, NULL, j->prompt, j->lo, j->hi, 0, j->scratch);
		/* call k's barrier opens when all n have arrived (k + 1) times; spinning, then
		 * yielding (on a machine short of cores the other thread needs this one's) */
		atomic_fetch_add(j->arrived, 1);
		for (uint32_t spins = 0; atomic_load(j->arrived) < (k + 1) * (uint32_t)j->n; spins++) {
			if (spins < 1000)
				rl_cpu_relax();
			else
				sched_yield();
		}
	}
	j->secs = split_now() - t0;
	return NULL;
}

/* seconds for SPLIT_CALLS calls of one or two jobs run side by side (the slower of the two) */
static double split_time(struct split_job *a, struct split_job *b)
{
	_Atomic uint32_t arrived = 0;
	a->arrived = &arrived;
	a->n = b ? 2 : 1;
	if (!b) {
		split_run(a);
		return a->secs;
	}
	b->arrived = &arrived;
	b->n = 2;
	pthread_t th;
	if (pthread_create(&th, NULL, split_run, b))
		return -1;
	split_run(a);
	pthread_join(th, NULL);
	return a->secs > b->secs ? a->secs : b->secs;
}

/* a random matrix of type dt, packed as the loader packs it; NULL when out of memory */
static uint8_t *split_matrix(int dt, uint32_t rows, uint32_t cols, uint64_t seed, struct rl_wmat *W)
{
	const struct rl_dt_info *di = rl_dt_info(dt);
	const size_t rb = (size_t)cols / di->blk_elems * di->blk_bytes;
	uint8_t *w = malloc(rows * rb);
	if (!w)
		return NULL;
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t b = 0; b < cols / di->blk_elems; b++)
			rl_dt_random_block(dt, w + r * rb + (size_t)b * di->blk_bytes, &seed, 0.5f);
	rl_wmat_init(W, w, dt, rows, cols);
	rl_cpu_wmat_pack(W);
	return w;
}

static void split_usage(void)
{
	fprintf(stderr, "usage: ringlm bench split [--isa avx512|avx2|scalar] [--rows N] [--cols N] [--prompt N] [--json]\n");
}

int rl_cmd_bench_split(int argc, char **argv)
{
	uint32_t rows = 2048, cols = 2048, prompt = 128;
	int json = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) { json = 1; continue; }
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) { split_usage(); return 0; }
		if (!v) { fprintf(stderr, "ringlm bench split: %s needs a value\n", a); return 2; }
		i++;
		if (!strcmp(a, "--rows")) rows = (uint32_t)atoi(v);
		else if (!strcmp(a, "--cols")) cols = (uint32_t)atoi(v);
		else if (!strcmp(a, "--prompt")) prompt = (uint32_t)atoi(v);
		else if (!strcmp(a, "--isa")) {
			if (rl_bench_set_isa("split", v))
				return 2;
		} else { fprintf(stderr, "ringlm bench split: unknown option %s\n", a); split_usage(); return 2; }
	}
	if (rows < 64 || rows > 16384 || rows % 32 || cols < 256 || cols > 16384 || cols % 256 || prompt < 9 ||
	    prompt > 512) {
		fprintf(stderr, "ringlm bench split: --rows must be a multiple of 32 in 64..16384, --cols a multiple "
			"of 256 in 256..16384 and --prompt 9..512 (a prefill chunk), got %u x %u, %u\n", rows, cols, prompt);
		return 2;
	}
	static const int types[] = { RL_DT_Q8_0, RL_DT_Q4_0, RL_DT_Q5_0, RL_DT_Q2_K, RL_DT_Q3_K, RL_DT_Q4_K,
				     RL_DT_Q5_K, RL_DT_Q6_K, RL_DT_IQ4_NL, RL_DT_IQ4_XS };
	enum { NT = sizeof types / sizeof *types };
	const size_t scr = rl_cpu_qmatmul_scratch(cols, prompt);
	float *X[2], *Y[2];
	void *S[2];
	int rc = 0;
	for (int i = 0; i < 2; i++) {
		X[i] = malloc((size_t)prompt * cols * sizeof(float));
		Y[i] = malloc((size_t)prompt * rows * sizeof(float));
		S[i] = malloc(scr);
		if (!X[i] || !Y[i] || !S[i])
			rc = 1;
		for (size_t k = 0; X[i] && k < (size_t)prompt * cols; k++)
			X[i][k] = (float)((k * 7919) % 2001) / 1000.0f - 1.0f;
	}
	double g1[NT], half[NT], g2[NT], gp[NT];
	const char *kern[NT];
	for (int t = 0; t < NT && !rc; t++) {
		struct rl_wmat W[2];
		uint8_t *w0 = split_matrix(types[t], rows, cols, 7, &W[0]), *w1 = split_matrix(types[t], rows, cols, 7, &W[1]);
		if (!w0 || !w1) {
			free(w0); free(w1);
			rc = 1;
			break;
		}
		kern[t] = rl_cpu_qmatmul_kernel(&W[0], prompt, W[0].packed_rows > 0);
		const double macs = (double)rows * cols * prompt * SPLIT_CALLS;
		double b1 = 1e30, bh = 1e30, b2 = 1e30, bp = 1e30;
		struct split_job warm = split_job(&W[0], X[0], Y[0], S[0], 0, rows, prompt);
		split_time(&warm, NULL);
		for (int round = 0; round < 3; round++) {
			struct split_job one = split_job(&W[0], X[0], Y[0], S[0], 0, rows, prompt);
			struct split_job h = split_job(&W[0], X[0], Y[0], S[0], 0, rows / 2, prompt);
			struct split_job s0 = split_job(&W[0], X[0], Y[0], S[0], 0, rows / 2, prompt);
			struct split_job s1 = split_job(&W[0], X[0], Y[0], S[1], rows / 2, rows, prompt);
			struct split_job p0 = split_job(&W[0], X[0], Y[0], S[0], 0, rows / 2, prompt);
			struct split_job p1 = split_job(&W[1], X[1], Y[1], S[1], rows / 2, rows, prompt);
			double a = split_time(&one, NULL), b = split_time(&h, NULL);
			double c = split_time(&s0, &s1), d = split_time(&p0, &p1);
			if (c < 0 || d < 0) {
				rc = 1;
				break;
			}
			b1 = a < b1 ? a : b1;
			bh = b < bh ? b : bh;
			b2 = c < b2 ? c : b2;
			bp = d < bp ? d : bp;
		}
		g1[t] = macs / b1 / 1e9;
		half[t] = bh / b1;
		g2[t] = macs / b2 / 1e9;
		gp[t] = macs / bp / 1e9;
		free(w0);
		free(w1);
	}
	if (rc) {
		fprintf(stderr, "ringlm bench split: out of memory or no second thread\n");
		goto out;
	}
	char line[4096];
	int n = snprintf(line, sizeof line, "{\"bench\":\"split\",\"isa\":\"%s\",\"rows\":%u,\"cols\":%u,\"prompt\":%u,\"types\":[",
			 rl_cpu_isa_name(rl_cpu_isa()), rows, cols, prompt);
	for (int t = 0; t < NT && n < (int)sizeof line; t++)
		n += snprintf(line + n, sizeof line - n,
			      "%s{\"type\":\"%s\",\"kernel\":\"%s\",\"gmacs_1\":%.1f,\"half_share\":%.3f,\"gmacs_2_split\":%.1f,"
			      "\"gmacs_2_private\":%.1f}", t ? "," : "", rl_dt_info(types[t])->name, kern[t], g1[t], half[t],
			      g2[t], gp[t]);
	if (n < (int)sizeof line)
		snprintf(line + n, sizeof line - n, "]}");
	if (json) {
		printf("%s\n", line);
	} else {
		printf("prefill kernels, %u activation rows over %u x %u in cache, %s, GMAC/s (best of 3)\n", prompt, rows,
		       cols, rl_cpu_isa_name(rl_cpu_isa()));
		printf("%-7s %-14s %10s %6s %10s %7s %10s %7s\n", "type", "kernel", "1 thread", "half", "2 split", "x", "2 private",
		       "x");
		for (int t = 0; t < NT; t++)
			printf("%-7s %-14s %10.1f %6.3f %10.1f %7.2f %10.1f %7.2f\n", rl_dt_info(types[t])->name, kern[t], g1[t],
			       half[t], g2[t], g2[t] / g1[t], gp[t], gp[t] / g1[t]);
	}
	rl_bench_outdir();
	FILE *f = fopen("bench/out/split.json", "w");
	if (f) {
		fprintf(f, "%s\n", line);
		fclose(f);
	} else if (!json) {
		fprintf(stderr, "ringlm bench split: cannot write bench/out/split.json (run from the repo root)\n");
	}
out:
	for (int i = 0; i < 2; i++) {
		free(X[i]);
		free(Y[i]);
		free(S[i]);
	}
	return rc;
}
