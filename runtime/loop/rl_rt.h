/* rl_rt.h — the runtime: one pinned thread that owns the clients, the scheduler and the
 * backend, driven by an io_uring event loop. ringlmd runs it as a daemon; libringlm's embedded
 * mode runs it on a thread inside the client process. */
#ifndef RL_RT_H
#define RL_RT_H
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define RL_RT_MAX_ALLOW 16

struct rl_rt_params {
	const char *socket;            /* name or path (rl_sock_path) */
	const char *model;             /* path, "synthetic:SHAPE", or NULL for sim */
	const char *tokenizer;
	const char *backend;           /* "sim", "cpu", "cuda" */
	const char *cuda_graph_buckets; /* --cuda-graph-buckets "16,32,..." or NULL (default list) */
	int      cuda_dtype;           /* --cuda-dtype: 0 bf16 (default), 1 fp16 */
	int      cpu;                  /* pin the runtime thread here; -1 = don't pin */
	int      threads;              /* backend worker threads; 0 = auto */
	uint32_t max_batch_tokens;     /* token budget (default 512) */
	int      budget_auto;          /* --max-batch-tokens auto */
	uint64_t itl_target_ns;        /* --itl-target-us */
	uint32_t max_seqs, kv_blocks, block_size;
	int      prefix_cache;
	uint32_t max_clients, max_inflight, max_prompt, max_new;
	uint32_t req_cap, evt_cap, arena_ids;
	uid_t    allow_uid[RL_RT_MAX_ALLOW]; int n_allow_uid;
	gid_t    allow_gid[RL_RT_MAX_ALLOW]; int n_allow_gid;
	uint64_t sim_step_ns, sim_token_ns;
	uint32_t sim_vocab;
	int      wake;                 /* 0 auto, 1 futex, 2 eventfd (forced fallback) */
	uint64_t idle_spin_ns;         /* busy-poll this long after the last work before sleeping */
	uint64_t drain_timeout_ns;     /* SIGTERM: in-flight work gets this long, then -ESHUTDOWN */
	int      handle_signals;       /* daemon: SIGINT/SIGTERM through signalfd */
	int      verbose;
};

struct rl_rt;

void rl_rt_default_params(struct rl_rt_params *p);
/* Parses ringlmd's options into p. Returns 0, 1 for --help (usage printed), or -EINVAL with a
 * one-line reason in err. */
int  rl_rt_parse_args(struct rl_rt_params *p, int argc, char **argv, char *err, size_t errlen);
int  rl_rt_create(const struct rl_rt_params *p, struct rl_rt **out, char *err, size_t errlen);
/* Runs the loop on the calling thread until a signal or rl_rt_stop; returns 0. */
int  rl_rt_run(struct rl_rt *rt);
/* Thread-safe, async-signal-safe: asks the loop to finish in-flight work and return. */
void rl_rt_stop(struct rl_rt *rt);
void rl_rt_destroy(struct rl_rt *rt);
const char *rl_rt_socket_path(const struct rl_rt *rt);
/* Largest step budget: the fixed --max-batch-tokens, or the auto controller's ceiling. */
static inline uint32_t rl_rt_max_budget(const struct rl_rt_params *p)
{
	return p->budget_auto && p->max_batch_tokens < 8192 ? 8192 : p->max_batch_tokens;
}

struct rl_backend;
struct rl_model;
/* Builds the backend the params ask for (sim; cpu over a loaded or synthetic model; cuda
 * through librlcuda.so), sizing its KV pool; *n_blocks gets the pool size. */
int rl_backend_open(const struct rl_rt_params *p, struct rl_backend **be, struct rl_model **model,
		    uint32_t *n_blocks, char *err, size_t errlen);
/* dlopen()s librlcuda.so (beside the running binary, else the library path); NULL and a
 * one-line reason in err when it is not there. */
void *rl_cuda_lib_open(char *err, size_t errlen);
void rl_rt_usage(FILE *f);
/* Runs a runtime (params, with signal handling on) in a forked child process and returns its
 * pid once it listens; SIGTERM stops it. -errno with the child's reason in err on failure. */
pid_t rl_rt_fork(const struct rl_rt_params *params, char *err, size_t errlen);

#endif
