/* rl_backend.h — the one interface every backend implements (sim, cpu, cuda).
 *
 * A backend owns the weights and the paged KV pool (n_kv_blocks blocks of block_size tokens)
 * and runs one step over an rl_batch. The call is split so the runtime thread can keep polling
 * rings while a step runs:
 *   launch(batch)  starts the step (may compute synchronously and be done on return);
 *   poll()         1 when the step is done, 0 while it runs, -errno on failure; never blocks
 *                  (with info.finish_works it stays 0 until finish() has been called);
 *   finish(out)    waits for the step, then writes out[i] for each batch seq i: the sampled
 *                  token id where seqs[i].sample, else -1 (and, for a seq verifying drafts,
 *                  its draft rows' tokens into seqs[i].draft_out: rl_batch.h). Returns 0 or
 *                  -errno.
 * The batch (and everything it points to) stays valid and unchanged from launch to finish.
 */
#ifndef RL_BACKEND_H
#define RL_BACKEND_H
#include <errno.h>
#include <stdint.h>
#include "kernels/rl_batch.h"
#include "ipc/rl_wire.h"           /* struct rl_lp: a token's log-probabilities, as clients receive them */

struct rl_backend;

/* What the backend serves; copied into the info segment for clients. */
struct rl_backend_info {
	char     name[16];             /* "sim", "cpu", "cuda" */
	char     model_name[64];
	char     chat_template[16];    /* chat template family of the model, "" when none */
	char     chat_system[192];     /* its default system turn, "" when none */
	uint32_t vocab_size;
	uint32_t max_ctx;              /* longest sequence (prompt + generated) */
	uint32_t bos_id, eos_id;       /* UINT32_MAX when the model has none */
	const void *vocab_blob;        /* vocabulary blob (either format of ipc/rl_wire.h), or NULL */
	uint32_t vocab_blob_size;
	/* 1: finish() computes a share of the step on the calling thread (cpu: few cores, no
	 * thread should only wait), so poll() stays 0 until finish() is called; the runtime calls
	 * it right after launch. 0: the step runs elsewhere (sim, GPU) and the runtime polls its
	 * rings until poll() says done. */
	int      finish_works;
	/* draft rows (rl_batch.h n_draft) one step may verify in all: UINT32_MAX no limit (cpu,
	 * sim), else what the backend sized its sampling buffers for (cuda: max_draft_rows) */
	uint32_t max_draft_rows;
	/* 1: honours rl_batch.deterministic (each row's logits the same bits whatever shares the
	 * step, however it is cut and threaded); 0: a deterministic request is refused */
	int      deterministic;
	/* 1: a step with prompt rows takes other kernels than a decode step, at a cost per step of
	 * their own (cpu: rl_cpu_qmatmul_prompt; the automatic budget's sixth feature, rl_budget.h) */
	int      prompt_cost;
};

#define RL_SIM_DEFAULT_CTX 8192        /* the sim backend's context when none is asked for */

struct rl_backend_params {
	uint32_t n_kv_blocks;          /* KV pool size in blocks */
	uint32_t block_size;           /* tokens per block */
	uint32_t max_batch_tokens;     /* most rows in one step (activation buffers sized by this) */
	uint32_t max_seqs;             /* most sequences in one step */
	uint32_t max_draft_rows;       /* cuda: draft rows a step may verify beyond one sampling row
					* per sequence (LM head and sampler buffers sized for them) */
	uint32_t max_ctx;              /* cpu, cuda: context length served (--ctx); 0 = the model's */
	int      threads;              /* cpu: worker threads; 0 = all CPUs but the runtime's */
	int      runtime_cpu;          /* cpu the runtime thread is pinned to, -1 if none */
	int      cpu_kv_f16;           /* cpu: keep the KV cache in IEEE half (llama.cpp's default:
					* half the memory and the attention reads); 0 = fp32 */
	uint32_t cpu_min_work;         /* cpu: matmul FLOPs per layer a worker must get before a
					* step uses it (0 = 4M); 1 = every step uses all workers */
	/* cuda backend */
	const char *cuda_graph_buckets; /* padded token counts to capture graphs for, "1,2,4,..."
					 * ascending; NULL = powers of two up to min(512,
					 * budget), then the budget itself (<= 8192);
					 * "" or "0" = no graphs (every step eager) */
	int         cuda_dtype;         /* weight storage: enum rl_cuda_dtype (bf16 default) */
	int         cuda_attn;          /* decode attention: 0 the in-house kernel, 1 FlashInfer's
					 * (when librlcuda.so was built with it; kernels/rl_cuda_fi.h) */
	const char *model_path;         /* cuda, when given no model and no synthetic shape: stream
					 * the weights from this file (rl_model_plan.h) */
	const char *tokenizer_path;     /* its tokenizer.bin, when the file has no vocabulary */
	/* sim backend */
	uint32_t sim_vocab;            /* default 32000 */
	uint32_t sim_max_ctx;          /* 0: RL_SIM_DEFAULT_CTX */
	uint64_t sim_step_ns;          /* fixed cost per step */
	uint64_t sim_token_ns;         /* cost per row */
};

/* A finished step's log-probabilities, part of its output beside the sampled ids: the
 * backend computes them in the step, for the seqs that asked; the runtime copies each into
 * the slab slot of its event (rl_wire.h). */
struct rl_step_lp {
	const struct rl_lp *tok;        /* [n_seqs] batch seq i's sampled token (with the
					 * rl_batch_seq.logprobs - 1 most likely), where it asked
					 * and sampled */
	const struct rl_lp *prompt;     /* the k-th prompt position batch seq i scored
					 * (rl_batch_seq plp_lo + k) at prompt[prompt_start[i] + k] */
	const uint32_t *prompt_start;   /* [n_seqs + 1] */
	uint32_t n_seqs;
};

struct rl_backend_ops {
	int  (*launch)(struct rl_backend *be, const struct rl_batch *b);
	int  (*poll)(struct rl_backend *be);
	int  (*finish)(struct rl_backend *be, int32_t *out);
	void (*destroy)(struct rl_backend *be);
	/* After finish, until the next launch: where the step's log-probabilities are. NULL for
	 * a backend without them (requests that ask are refused). */
	int  (*logprobs)(struct rl_backend *be, struct rl_step_lp *out);
};

struct rl_backend {
	const struct rl_backend_ops *ops;
	struct rl_backend_info info;
	void *priv;
};

static inline int  rl_backend_launch(struct rl_backend *be, const struct rl_batch *b) { return be->ops->launch(be, b); }
static inline int  rl_backend_poll(struct rl_backend *be) { return be->ops->poll(be); }
static inline int  rl_backend_finish(struct rl_backend *be, int32_t *out) { return be->ops->finish(be, out); }
static inline void rl_backend_destroy(struct rl_backend *be) { if (be) be->ops->destroy(be); }
static inline int  rl_backend_logprobs(struct rl_backend *be, struct rl_step_lp *out)
{
	return be->ops->logprobs ? be->ops->logprobs(be, out) : -ENOTSUP;
}

/* Constructors. Each returns 0 and sets *out, or -errno and writes a one-line reason to err. */
int rl_backend_sim_create(const struct rl_backend_params *p, struct rl_backend **out,
			  char *err, size_t errlen);

struct rl_model;
/* The cpu backend (runtime/backend/rl_backend_cpu.c) serves m, which must outlive it. p->threads workers
 * (0: every CPU this process may use except p->runtime_cpu, at least one). It first repacks
 * m's stored matrices in place where its kernels stream another layout better
 * (rl_cpu_wmat_pack): read them through rl_cpu_wmat_row and rl_cpu_qmatmul afterwards. */
int rl_backend_cpu_create(struct rl_model *m, const struct rl_backend_params *p,
			  struct rl_backend **out, char *err, size_t errlen);
/* Test hook: copies the logits[vocab_size] from which the last step sampled batch seq
 * seq_index into out. 0, or -ENOENT when that seq did not sample (or be is not cpu). The
 * buffer is the one sampling reads anyway, so serving pays nothing for the hook. */
int rl_backend_cpu_logits(struct rl_backend *be, uint32_t seq_index, float *out);

#endif
