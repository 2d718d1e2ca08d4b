/* cuda_internal.h — the cuda backend's state, shared by backend_cuda.c (create, step),
 * cuda_testapi.c (kernel test entry points) and cuda_bench.c (`ringlm bench gpu`). */
#ifndef RL_CUDA_INTERNAL_H
#define RL_CUDA_INTERNAL_H
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include "runtime/backend/rl_backend.h"
#include "kernels/rl_model.h"
#include "runtime/cuda/host/cuda_host.h"
#include "kernels/rl_cuda_fi.h"
#include "runtime/cuda/rl_cuda_api.h"

struct rl_cuda_layer {
	uint16_t *wqkv;                /* [qd + 2 kvd, dim] in the weight dtype (wdt) */
	uint16_t *wo;                  /* [dim, qd] */
	uint16_t *wgu;                 /* [2 hid, dim] */
	uint16_t *wdown;               /* [dim, hid] */
	float *attn_norm, *ffn_norm;   /* [dim] */
	float *bqkv;                   /* [qd + 2 kvd] or NULL */
	float *qknorm;                 /* [2 hd]: q's, then k's per-head norm weights (Qwen3), or NULL */
};

struct rl_cuda {
	struct rl_backend be;
	struct rl_model_config cfg;
	uint32_t dim, hd, qd, kvd, hid, vocab, nl, nh, nkv;
	struct rl_cuda_geom g;
	struct rl_cuda_layout lay;
	cudaStream_t st;
	cudaEvent_t done;
	cublasHandle_t blas;
	void *blas_ws;

	void *weights;                 /* one allocation for all weights */
	uint16_t *emb, *wcls;          /* [vocab, dim]; wcls == emb when tied */
	float *out_norm, *inv_freq;
	struct rl_cuda_layer *L;       /* [nl] */
	uint16_t *kc, *vc;             /* [nl][n_blocks][nkv][bs][hd] */
	size_t layer_kv;               /* elements per layer of kc / vc */

	void *act;                     /* one allocation for the buffers below */
	float *x, *delta;
	uint16_t *xb, *qkv, *q, *att, *gu, *h, *xs;
	float *logits, *probs, *part_o, *part_ml;
	int32_t *ids;

	void *meta_h, *meta_d;         /* pinned host image, its fixed device copy */
	struct rl_cuda_meta md;        /* pointers into meta_d */
	int32_t *ids_h;                /* pinned [max_samp] */
	uint32_t *masks_h, *masks_d;   /* constraint masks: pinned [max_samp][mask words], its device
					* copy (rl_cuda_meta.masks), copied only in steps that have some */

	uint32_t buckets[RL_CUDA_MAX_BUCKETS], n_buckets;
	cudaGraphExec_t graph[RL_CUDA_MAX_BUCKETS];
	int use_graphs;

	/* The deterministic mode (rl_batch.deterministic): a step enqueued with det_step set runs
	 * the batch-invariant kernels (rl_cuda_gemm_det for every GEMM, rl_cuda_attention_det) and
	 * never FlashInfer. Its graphs are a key of their own, graph_det[bucket], captured the
	 * first time a deterministic step takes that bucket (a server that never asks for the mode
	 * captures none), with graph_det_kernels[bucket] kernels. */
	int det_step;
	cudaGraphExec_t graph_det[RL_CUDA_MAX_BUCKETS];
	uint32_t graph_det_kernels[RL_CUDA_MAX_BUCKETS];

	/* FlashInfer attention (--cuda-attn flashinfer; kernels/rl_cuda_fi.h): each bucket has two
	 * more graphs, captured under a graph-mode plan for that bucket, whose launch depends on
	 * the counts only: graph_fi for decode-only steps (plan by rows), graph_fp for steps with a
	 * prefill chunk (plan by rows and rl_cuda_host_fi_batch requests). A step replays one only
	 * when its own plan equals the captured one (checked; else it runs eagerly). */
	int fi;                        /* on */
	int fi_step;                   /* the forward being enqueued uses it: RL_CUDA_FI_CSR_* */
	struct rl_cuda_fi_ws fi_ws;    /* shared: a step plans into it before it runs */
	struct rl_cuda_fi_plan fi_plan;                        /* of the step being enqueued */
	struct rl_cuda_fi_plan fi_graph_plan[RL_CUDA_MAX_BUCKETS];
	struct rl_cuda_fi_plan fi_pgraph_plan[RL_CUDA_MAX_BUCKETS];
	cudaGraphExec_t graph_fi[RL_CUDA_MAX_BUCKETS];
	cudaGraphExec_t graph_fp[RL_CUDA_MAX_BUCKETS];
	uint32_t fi_rows;              /* decode steps of up to this many (padded) rows use it */
	/* kernels each captured graph launches, by attention (RL_CUDA_FI_CSR_*: in-house, FlashInfer
	 * decode, FlashInfer prefill) and bucket: a step's kernel count (rl_cuda_stats) */
	uint32_t graph_kernels[3][RL_CUDA_MAX_BUCKETS];

	struct rl_cuda_stats stats;    /* steps by path (rl_backend_cuda_stats) */
	char err[256];                 /* why the last launch/finish failed (rl_backend_cuda_last_error) */

	const struct rl_batch *cur;    /* launched, not finished */
	uint32_t *samp_seq;            /* [max_samp] batch seq of each sampling row */
	int32_t  *samp_draft;          /* [max_samp] the draft it verifies, -1 for the seq's last row */
	uint32_t n_samp, n_seqs;
	int last_valid;                /* logits of the last finished step are readable */

	enum rl_cuda_dtype wdt;        /* storage of weights, 2-byte activations and KV */
	void *vocab_blob;              /* owned when the weights were streamed from a file */
	uint32_t vocab_blob_size;
};

/* Y[rows, out] (fp32 when y_f32, else c->wdt) = X[rows, in] W[out, in]^T (both c->wdt) on
 * c->st, computed in fp32: cuBLAS, or rl_cuda_gemm_det under c->det_step. 0 or -EIO. */
int rl_cuda_gemm(struct rl_cuda *c, void *Y, int y_f32, const uint16_t *X, const uint16_t *W,
		 uint32_t rows, uint32_t in, uint32_t out);
/* Enqueues a whole step for `rows` padded rows on c->st (graph body or eager). */
int rl_cuda_forward(struct rl_cuda *c, uint32_t rows);

#endif
