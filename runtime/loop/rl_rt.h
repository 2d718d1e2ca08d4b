/* rl_rt.h — the runtime: one pinned thread that owns the clients, the scheduler and the
 * backend, driven by an io_uring event loop. ringlmd runs it as a daemon; libringlm's embedded
 * mode runs it on a thread inside the client process. */
#ifndef RL_RT_H
#define RL_RT_H
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>
#include "kernels/rl_cuda_dtype.h"
#include "runtime/sched/rl_sched.h"   /* RL_SCHED_DEFAULT_BUDGET, RL_BATCH_MAX_TOKENS */

#define RL_RT_MAX_ALLOW 16

/* --wake: how clients and the runtime wake each other. AUTO uses futex waits in io_uring
 * where the kernel has them (6.7+), eventfd otherwise; the tests force each. */
enum rl_rt_wake { RL_RT_WAKE_AUTO = 0, RL_RT_WAKE_FUTEX = 1, RL_RT_WAKE_EVENTFD = 2 };

struct rl_rt_params {
	const char *socket;            /* name or path (rl_sock_path) */
	const char *model;             /* path, "synthetic:SHAPE", or NULL for sim */
	const char *tokenizer;
	const char *backend;           /* "sim", "cpu", "cuda" */
	const char *cuda_graph_buckets; /* --cuda-graph-buckets "16,32,..." or NULL (default list) */
	enum rl_cuda_dtype cuda_dtype; /* --cuda-dtype (default bf16) */
	int      cuda_attn;            /* --cuda-attn: 0 ringlm (in-house, default), 1 flashinfer */
	int      cpu;                  /* pin the runtime thread here; -1 = don't pin */
	int      threads;              /* backend worker threads; 0 = auto */
	int      kv_f16;               /* --kv-type: the cpu backend's KV cache in IEEE half (default,
					* as llama.cpp's), or fp32 (--kv-type f32) */
	uint32_t max_batch_tokens;     /* --max-batch-tokens N: a fixed token budget */
	int      budget_auto;          /* the automatic budget (default; --max-batch-tokens auto) */
	uint64_t itl_target_ns;        /* --itl-target-us; 0: derived at start (rl_budget.h) */
	uint32_t max_seqs, kv_blocks, block_size;
	uint32_t ctx;                  /* --ctx: context length served; 0 = the model's */
	int      prefix_cache;
	int      deterministic;        /* --deterministic: every request's logits the same bits whatever
					* shares its steps (else only the requests that ask for it) */
	uint32_t spec_k;               /* --spec ngram|FILE --spec-k N: speculative decoding, drafts
					* of at most N tokens; 0 = off (default) */
	const char *spec_model;        /* --spec FILE: drafts from this model (else prompt lookup) */
	double   spec_cost;            /* --spec-cost C: a draft's cost relative to a one-row step,
					* fixed; 0 = measured (rl_spec.h) */
	uint32_t max_clients, max_inflight, max_prompt, max_new;
	uint32_t cons_max_states;      /* --cons-max-states: a constraint's automaton states at most
					* (a grammar's grow as outputs meet them); 0 = 100000 */
	int      cons_nice;            /* --cons-nice: the constraint compiler thread's nice value
					* (rl_rt_cons.h; default RL_RT_CONS_NICE) */
	uint32_t req_cap, evt_cap, arena_ids;
	uid_t    allow_uid[RL_RT_MAX_ALLOW]; int n_allow_uid;
	gid_t    allow_gid[RL_RT_MAX_ALLOW]; int n_allow_gid;
	uint64_t sim_step_ns, sim_token_ns;
	uint32_t sim_vocab;
	enum rl_rt_wake wake;          /* --wake */
	uint64_t idle_spin_ns;         /* busy-poll at least this long after the last work before
					* sleeping (the idle window's base, rl_idle.h) */
	uint64_t idle_adapt_ns;        /* --idle-adapt-ms: the idle window may grow to this to cover
					* the idle periods seen; 0 = stays idle_spin_ns */
	int      latency;              /* --latency: the profile for a dedicated core (rl_rt.c
					* latency_profile): pinned, never sleeps, memory locked */
	const char *kv_events;         /* --kv-events: publish the prefix cache's changes here (rl_kvev.h) */
	const char *kv_events_topic;   /* --kv-events-topic (default "kv@HOST@MODEL") */
	uint64_t drain_timeout_ns;     /* SIGTERM: in-flight work gets this long, then -ESHUTDOWN */
	uint64_t max_queue_ns;         /* --max-queue-ms: a request not admitted this long after it
					* arrived ends with -ETIME (overloaded: retry later); 0 = none */
	int      handle_signals;       /* daemon: SIGINT/SIGTERM through signalfd */
	int      verbose;
};

struct rl_rt;

void rl_rt_default_params(struct rl_rt_params *p);
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
	return p->budget_auto && p->max_batch_tokens < RL_BATCH_MAX_TOKENS ? RL_BATCH_MAX_TOKENS
									 : p->max_batch_tokens;
}

#endif
