/* bench_chunking.h — the chunked-prefill ITL benchmark (bench_chunking.c). */
#ifndef RL_BENCH_CHUNKING_H
#define RL_BENCH_CHUNKING_H
#include <stdint.h>
#include <stdio.h>

struct rl_chunking_result {
	uint32_t budget, tokens;
	double itl_p50_us, itl_p99_us, itl_max_us;
};

int  rl_bench_chunking(struct rl_chunking_result res[2]);
/* why the last rl_bench_chunking failed, when its runtime said ("" otherwise) */
const char *rl_bench_chunking_error(void);
void rl_bench_chunking_print(FILE *f, const struct rl_chunking_result res[2]);
void rl_bench_chunking_json(FILE *f, const struct rl_chunking_result res[2]);
#endif
