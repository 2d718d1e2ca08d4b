/* bench_serve.h — what `ringlm bench serve`'s files share: the runtime a run starts
 * (bench_serve.c), and the stall test (`--stall`, bench_serve_stall.c): a streaming client's
 * inter-token gaps while another client's requests arrive under fresh constraints, against the
 * same requests without. */
#ifndef RL_BENCH_SERVE_H
#define RL_BENCH_SERVE_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A runtime in a forked child with ringlmd's options rt_argv[0..rt_argc) and --socket sock,
 * plus --max-batch-tokens budget and --itl-target-us itl_us where given (NULL, 0: not). Its
 * pid once it listens, or -errno after a line on stderr. */
pid_t rl_bench_serve_runtime(char **rt_argv, int rt_argc, const char *sock, const char *budget, uint64_t itl_us);

struct rl_stall_opts {
	char **rt_argv; int rt_argc;   /* the runtime's options (each run starts its own) */
	const char *schema;            /* the JSON Schema text each request varies */
	size_t schema_len;
	uint32_t requests;             /* --stall-requests: the other client's requests a run */
	uint32_t prompt, output;       /* their prompt and output lengths */
	uint32_t stream_output;        /* the streaming client's request length */
	int rounds;                    /* --stall-rounds: runs of each kind, alternated */
	uint64_t seed;
	const char *out_dir, *name;
};

/* Runs the test, prints its table, writes NAME-stall.json and .csv under out_dir. 0, or 1
 * after a line on stderr. */
int rl_bench_serve_stall(const struct rl_stall_opts *o);
#endif
