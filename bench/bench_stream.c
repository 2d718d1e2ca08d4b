/* bench_stream.c — the read bandwidth a plain streaming loop reaches (rl_bench_stream_gbs): the
 * ceiling `bench kernels` (one thread) and `bench model` (its decode's threads) set their weight
 * streams beside. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "bench/bench_util.h"
#include "ipc/rl_clock.h"
#include "kernels/cpu_simd.h"

struct part {
	const uint8_t *p;
	size_t n;
	uint64_t sink;
};

/* xor of every 64-byte line, two loads an iteration: the loads, not a dependency chain, set
 * the pace */
RL_TGT_AVX2 static uint64_t read_avx2(const uint8_t *p, size_t n)
{
	__m256i a = _mm256_setzero_si256(), b = a;
	for (size_t i = 0; i + 64 <= n; i += 64) {
		a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
		b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
	}
	a = _mm256_xor_si256(a, b);
	return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

static void *read_part(void *arg)
{
	struct part *s = arg;
	if (rl_cpu_isa() != RL_CPU_SCALAR) {
		s->sink = read_avx2(s->p, s->n);
	} else {
		const uint64_t *q = (const uint64_t *)s->p;
		for (size_t i = 0; i < s->n / 8; i++)
			s->sink ^= q[i];
	}
	return NULL;
}

double rl_bench_stream_gbs(size_t bytes, int threads)
{
	if (threads < 1 || threads > 256)
		return 0;
	const size_t share = bytes / (size_t)threads / 64 * 64;
	uint8_t *p = share ? aligned_alloc(64, share * (size_t)threads) : NULL;
	if (!p)
		return 0;
	memset(p, 1, share * (size_t)threads);
	double best = 0;
	uint64_t sink = 0;
	for (int rep = 0; rep < 3; rep++) {
		struct part parts[256];
		pthread_t th[256];
		const uint64_t t0 = rl_now_ns();
		for (int t = 0; t < threads; t++) {
			parts[t] = (struct part){ p + share * (size_t)t, share, 0 };
			if (t && pthread_create(&th[t], NULL, read_part, &parts[t]))
				th[t] = 0, read_part(&parts[t]);
		}
		read_part(&parts[0]);
		for (int t = 1; t < threads; t++)
			if (th[t])
				pthread_join(th[t], NULL);
		const double g = (double)share * threads / ((rl_now_ns() - t0) * 1e-9) / 1e9;
		for (int t = 0; t < threads; t++)
			sink ^= parts[t].sink;
		best = g > best ? g : best;
	}
	free(p);
	return sink == 42 ? best + 1e-9 : best;   /* keeps the reads */
}
