/* rl_cuda_api.h — what librlcuda.so exports (found with dlsym, so plain C types only): the
 * backend constructor that runtime/loop/rl_rt_backend.c loads and test hooks; and what only
 * librlcuda_dev.so adds (the same library for tests and benchmarks): the kernel test entry
 * points for tests/gpu and the `ringlm bench gpu` entry point. */
#ifndef RL_CUDA_API_H
#define RL_CUDA_API_H
#include <stddef.h>
#include <stdint.h>
#include "runtime/backend/rl_backend.h"
#include "runtime/cuda/host/cuda_host.h"

struct rl_model;

/* What FlashInfer's plan decided for a step (the test entry point reports it). */
struct rl_cuda_fi_info {
	int64_t padded_batch;          /* work items the kernel launches (graph mode: fixed per count) */
	int split_kv;                  /* 1: the split-KV kernel plus its merge; 0: one pass per row */
	int prefill;                   /* 1: the prefill kernel ran (the step had a prefill chunk) */
	int cta_tile_q;                /* prefill: packed query rows (rows x group) per work item */
};

/* The cuda backend over m (fp32, converted to p->cuda_dtype on upload); with m NULL, over
 * random weights of synthetic_shape made on the device, or else over the model file
 * p->model_path (+ p->tokenizer_path), whose weights are streamed to the device through
 * pinned staging buffers without an fp32 copy in host memory. p->cuda_dtype (bf16 or fp16)
 * is the storage of weights, activations and KV cache alike. -ENODEV with "no CUDA device
 * found (...)" when there is none; -EINVAL for an unknown p->cuda_dtype. */
int rl_backend_cuda_create(const struct rl_model *m, const char *synthetic_shape,
			   const struct rl_backend_params *p, struct rl_backend **out,
			   char *err, size_t errlen);
typedef int (*rl_cuda_create_fn)(const struct rl_model *, const char *,
				 const struct rl_backend_params *, struct rl_backend **, char *, size_t);
/* Test hook: logits[vocab] the last step sampled batch seq seq_index from. 0, -ENOENT, -EIO. */
int rl_backend_cuda_logits(struct rl_backend *be, uint32_t seq_index, float *out);
/* Test hook: 0 runs every step eagerly (same padded rows as the graph would), 1 replays graphs. */
int rl_backend_cuda_set_graphs(struct rl_backend *be, int on);
/* 0 when a CUDA device is usable; else -ENODEV and the reason in why. */
int rl_cuda_device_check(char *why, size_t n);
/* The FlashInfer version built into this librlcuda.so (kernels/rl_cuda_fi.h). Defined only
 * in a build with FlashInfer, so a library without it lacks the symbol (dlsym NULL, and
 * bench/gpu_session.sh's check refuses it). */
const char *rl_cuda_flashinfer_version(void);

/* Steps the backend ran, by path. Under --cuda-attn flashinfer a decode-only step is an fi
 * step and a step with a prefill chunk an fi prefill step: each replayed from its bucket's
 * FlashInfer graph (*_graph_steps) or enqueued eagerly (*_eager_steps: no bucket held it,
 * graphs were off, or its plan differed from the one captured). Every other step (the
 * in-house attention) is a graph replay (graph_steps) or eager (eager_steps). */
struct rl_cuda_stats {
	uint64_t steps, graph_steps, eager_steps, fi_graph_steps, fi_eager_steps;
	uint64_t fi_prefill_graph_steps, fi_prefill_eager_steps;
	uint32_t last_kernels;         /* kernels the last step's graph launched (cuBLAS's included,
					* counted from the captured graph); 0 when it ran eagerly */
	/* of steps, those with rl_batch.deterministic (the batch-invariant kernels, the in-house
	 * attention; counted in graph_steps or eager_steps too), and the graphs captured for them */
	uint64_t det_steps, det_graphs;
};
/* Test and bench hook: copies the counters. 0, or -EINVAL for another backend. */
int rl_backend_cuda_stats(struct rl_backend *be, struct rl_cuda_stats *out);
/* Why the backend's last failed launch or finish failed: the CUDA call or FlashInfer step and
 * its message, one line ("" when none failed). */
const char *rl_backend_cuda_last_error(struct rl_backend *be);

/* Kernel test entry points (librlcuda_dev.so only): host arrays in and out (outputs are uploaded first, so a test can
 * poison them), the metadata packed from (g, b, rows) with rl_cuda_host_pack. The 2-byte
 * arrays (uint16_t) hold dt (bf16 or fp16), the launchers' dtype argument. Each returns 0 or
 * -errno (-EIO on a CUDA error). Shapes as in kernels/rl_cuda_ops.h. */
struct rl_cuda_testapi {
	int (*embed)(float *x, const uint16_t *emb, uint32_t vocab, const struct rl_cuda_geom *g,
		     const struct rl_batch *b, uint32_t rows, uint32_t dim, enum rl_cuda_dtype dt);
	int (*add_rmsnorm)(uint16_t *out, float *x, const float *delta, const float *w,
			   const int32_t *row_map, uint32_t rows, uint32_t x_rows, uint32_t dim,
			   float eps, int write_x, enum rl_cuda_dtype dt);
	int (*rope_kv)(uint16_t *q_out, uint16_t *kc, uint16_t *vc, size_t cache_elems,
		       const uint16_t *qkv, const float *bias, const float *inv_freq,
		       const struct rl_cuda_geom *g, const struct rl_batch *b, uint32_t rows,
		       uint32_t nh, uint32_t hd, float rope_scale, int halves, enum rl_cuda_dtype dt);
	int (*swiglu)(uint16_t *h, const uint16_t *gu, uint32_t rows, uint32_t hid, enum rl_cuda_dtype dt);
	/* rl_cuda_attention, or rl_cuda_attention_det when b->deterministic (as the backend) */
	int (*attention)(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
			 size_t cache_elems, const struct rl_cuda_geom *g, const struct rl_batch *b,
			 uint32_t rows, uint32_t nh, uint32_t hd, uint32_t *n_parts,
			 enum rl_cuda_dtype dt);
	int (*sample)(int32_t *ids, const float *logits, const struct rl_cuda_geom *g,
		      const struct rl_batch *b, uint32_t rows, uint32_t vocab);
	/* FlashInfer's attention (kernels/rl_cuda_fi.h) on b, the kernel the backend would pick:
	 * decode for a decode-only b, causal prefill for a b with a prefill chunk; planned in graph
	 * mode as the backend plans. graph = 0 runs it eagerly; graph = 1 does what the backend
	 * does: captures the run under the backend's synthetic plan for `rows`, plans again from
	 * b's real page index, requires the two plans equal (else -EPROTO), and replays the
	 * graph. The float workspace is zeroed once before, as the backend's. *info: what the plan
	 * decided. NULL when librlcuda.so was built without FlashInfer. -EINVAL when b's sequences
	 * are not in row order (the backend then runs the in-house kernel). */
	int (*fi_attention)(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
			    size_t cache_elems, const struct rl_cuda_geom *g, const struct rl_batch *b,
			    uint32_t rows, uint32_t nh, uint32_t hd, int graph, enum rl_cuda_dtype dt,
			    struct rl_cuda_fi_info *info);
	/* Why this thread's last failed call above failed: the CUDA call (or FlashInfer step) and
	 * its message, one line. */
	const char *(*last_error)(void);
	/* rl_cuda_gemm_det: Y[rows, out] (fp32 when y_f32, else dt) = X[rows, in] W[out, in]^T */
	int (*gemm_det)(void *Y, int y_f32, const uint16_t *X, const uint16_t *W, uint32_t rows,
			uint32_t in, uint32_t out, enum rl_cuda_dtype dt);
};
const struct rl_cuda_testapi *rl_cuda_testapi(void);

/* `ringlm bench gpu [--json] [...]` (librlcuda_dev.so only): 0 done, 1 error, 2 usage. */
int rl_cuda_bench(int argc, char **argv);

#endif
