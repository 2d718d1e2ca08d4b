/* cuda_stage.h — the cuda backend's weight upload, in plain C so it is unit-tested without a
 * GPU (tests/test_upload.c): where every weight lives in the device's weight allocation
 * (rl_cuda_stage_layout, which backend_cuda.c carves its pointers from), and the sink logic
 * that turns one streamed chunk (rl_model_plan.h) into conversions into a pinned buffer and
 * host-to-device copies. The copies and the per-buffer completion marks are callbacks: on the
 * GPU cudaMemcpyAsync and cudaEventRecord, in the tests a memcpy into a host image. */
#ifndef RL_CUDA_STAGE_H
#define RL_CUDA_STAGE_H
#include <stddef.h>
#include <stdint.h>
#include "runtime/cuda/host/cuda_host.h"
#include "kernels/rl_model.h"
#include "runtime/model/rl_model_plan.h"

/* Byte offsets from the base of the device weight allocation, each buffer 256-byte aligned:
 *   emb [vocab, dim], wcls [vocab, dim] (== emb when tied)      weight dtype (2 bytes)
 *   out_norm [dim], inv_freq [head_dim / 2]                     fp32
 *   per layer (layer l at + l * layer_stride):
 *     wqkv [qd + 2 kvd, dim] (q, k, v rows stacked), wo [dim, qd],
 *     wgu [2 hid, dim] (gate, up stacked), wdown [dim, hid]     weight dtype
 *     attn_norm, ffn_norm [dim], bqkv [qd + 2 kvd] (SIZE_MAX without biases)   fp32 */
struct rl_cuda_wlayout {
	size_t emb, wcls, out_norm, inv_freq;
	size_t wqkv, wo, wgu, wdown, attn_norm, ffn_norm, bqkv;
	size_t qknorm;                 /* [2 hd] f32: q's, then k's per-head norm weights (Qwen3), or SIZE_MAX */
	size_t layer_stride;
	size_t bytes;                  /* the whole allocation */
};
void   rl_cuda_stage_layout(const struct rl_model_config *c, struct rl_cuda_wlayout *w);
/* Byte offset of weight i of (field, layer) in the allocation. */
size_t rl_cuda_stage_dest(const struct rl_model_config *c, const struct rl_cuda_wlayout *w,
			  int field, uint32_t layer, uint64_t i);

struct rl_cuda_stager {
	struct rl_model_config cfg;
	struct rl_cuda_wlayout wl;
	struct rl_wseg *segs;          /* the canonical layout, [n_segs] */
	size_t n_segs;
	int    wdt;                    /* matrices on the device: RL_DT_BF16 or RL_DT_F16 */
	void *const *conv;             /* per staging buffer: conv_bytes of (pinned) room for
					* converted weights */
	size_t conv_bytes;
	/* Enqueues a copy of n bytes at src to allocation offset dst. 0 or -errno + err. */
	int (*copy)(void *ctx, size_t dst, const void *src, size_t n, char *err, size_t errlen);
	/* Every copy reading staging buffer buf (or its conversion room) is enqueued: mark it
	 * (cuda: record the buffer's event), so the sink's buf_ready can tell when it is free. */
	int (*seal)(void *ctx, int buf, char *err, size_t errlen);
	void *ctx;
	uint64_t bytes_direct;         /* uploaded straight from the chunk's bytes */
	uint64_t bytes_converted;      /* uploaded from the conversion room */
};

/* Sets s up for a model of shape c stored as wdt (norms and biases stay fp32); the caller
 * then fills conv, conv_bytes, copy, seal and ctx. 0, -EINVAL (bad wdt) or -ENOMEM. */
int  rl_cuda_stage_init(struct rl_cuda_stager *s, const struct rl_model_config *c,
			enum rl_cuda_dtype wdt);
void rl_cuda_stage_free(struct rl_cuda_stager *s);
/* Most weights a chunk may hold for its conversions to fit conv_bytes whatever the fields
 * (fp32 ones take 4 bytes): the stream's max_elems. */
static inline uint64_t rl_cuda_stage_max_elems(size_t conv_bytes) { return conv_bytes / 4; }
/* A sink's chunk callback: each run of the chunk that falls in one field goes to its device
 * place, straight from c->data when no conversion would change the bytes, else converted
 * into conv[c->buf] first; then seal(c->buf). 0, or -errno with one line in err. */
int  rl_cuda_stage_chunk(struct rl_cuda_stager *s, const struct rl_model_chunk *c,
			 char *err, size_t errlen);

#endif
