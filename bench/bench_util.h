/* bench_util.h — small helpers shared by the benchmarks: percentiles, pinning, --isa, output dir. */
#ifndef RL_BENCH_UTIL_H
#define RL_BENCH_UTIL_H
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "kernels/cpu_ops.h"

/* The read bandwidth of a plain streaming loop (bench_stream.c): `threads` threads (the caller
 * is one) each read their share of a `bytes` buffer front to back, best of 3, GB/s; 0 when the
 * buffer cannot be had. */
double rl_bench_stream_gbs(size_t bytes, int threads);

static int rl_bench_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Sorts v in place; returns the q-quantile (0..1), nearest rank. */
static inline uint64_t rl_bench_pct(uint64_t *v, size_t n, double q, int sorted)
{
	if (!n)
		return 0;
	if (!sorted)
		qsort(v, n, sizeof *v, rl_bench_cmp_u64);
	size_t i = (size_t)(q * (double)n);
	return v[i < n ? i : n - 1];
}

static inline int rl_bench_pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return sched_setaffinity(0, sizeof s, &s);
}

/* `--isa NAME` of a CPU benchmark: selects a lesser ISA than the CPU's best (the AVX2
 * kernels measured on an AVX-512 machine). 0, or 2 after one line on stderr naming the choices. */
static inline int rl_bench_set_isa(const char *cmd, const char *v)
{
	int isa = -1;
	for (int k = RL_CPU_SCALAR; k <= RL_CPU_AVX512; k++)
		if (!strcmp(v, rl_cpu_isa_name((enum rl_cpu_isa)k)))
			isa = k;
	if (isa < 0 || rl_cpu_set_isa((enum rl_cpu_isa)isa)) {
		fprintf(stderr, "ringlm bench %s: --isa %s: not one of avx512, avx2, scalar that this CPU runs (best: %s)\n",
			cmd, v, rl_cpu_isa_name(rl_cpu_isa_best()));
		return 2;
	}
	return 0;
}

static inline void rl_bench_outdir(void)
{
	mkdir("bench", 0755);
	mkdir("bench/out", 0755);
}
#endif
