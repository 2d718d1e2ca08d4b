/* bench_util.h — small helpers shared by the benchmarks: percentiles, pinning, output dir. */
#ifndef RL_BENCH_UTIL_H
#define RL_BENCH_UTIL_H
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

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

static inline void rl_bench_outdir(void)
{
	mkdir("bench", 0755);
	mkdir("bench/out", 0755);
}
#endif
