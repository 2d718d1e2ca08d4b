/* rl_model_plan.h — a model file as a plan of reads, and the streaming reader over it.
 *
 * A plan is what a loader knows after parsing headers, config and vocabulary, before it
 * touches a weight: the config, the name, the vocabulary blob, the open file(s) and one
 * rl_tread per tensor (file, offset, bytes, elements, on-disk dtype, and where the tensor
 * goes, as an element offset into the canonical layout below). rl_model_load is "open the
 * plan, then read it into fp32"; the cuda backend instead streams the plan through pinned
 * staging buffers into the device, so no fp32 copy of the model is ever made in RAM.
 *
 * Canonical layout: the order rl_model_alloc places the fp32 weights in one block:
 *   tok_emb [vocab, dim]
 *   per layer: attn_norm [dim], wq [qd, dim], wk [kvd, dim], wv [kvd, dim],
 *              (bq [qd], bk [kvd], bv [kvd] when has_qkv_bias),
 *              (q_norm [hd], k_norm [hd] when has_qk_norm), wo [dim, qd],
 *              (attn_post_norm [dim] when post_norms), ffn_norm [dim],
 *              w_gate [hid, dim], w_down [dim, hid], w_up [hid, dim] (or, with experts,
 *              router [ne, dim] and the stacked gate/up/down), (ffn_post_norm [dim])
 *   out_norm [dim], wcls [vocab, dim] (absent when tied_embeddings)
 * (qd = n_heads * head_dim, kvd = n_kv_heads * head_dim), so an element offset names one
 * weight of one field, and a consumer maps any element range to its own destination.
 */
#ifndef RL_MODEL_PLAN_H
#define RL_MODEL_PLAN_H
#include <stddef.h>
#include <stdint.h>
#include "runtime/model/rl_model_io.h"

/* ---- canonical layout ---- */

enum rl_wfield {
	RL_W_TOK_EMB, RL_W_ATTN_NORM, RL_W_WQ, RL_W_WK, RL_W_WV, RL_W_BQ, RL_W_BK, RL_W_BV,
	RL_W_WO, RL_W_FFN_NORM, RL_W_GATE, RL_W_DOWN, RL_W_UP, RL_W_OUT_NORM, RL_W_WCLS,
	RL_W_QNORM, RL_W_KNORM, RL_W_ROUTER, RL_W_GATE_EXPS, RL_W_UP_EXPS, RL_W_DOWN_EXPS,
	RL_W_ATTN_POST_NORM, RL_W_FFN_POST_NORM,
	RL_W_NFIELDS
};

/* One field of one layer (layer 0 for the global ones) in the canonical layout. */
struct rl_wseg {
	uint64_t off, n;               /* elements */
	uint32_t layer;
	uint8_t  field;                /* enum rl_wfield */
};

/* Most segments a model of n_layers layers has. */
#define RL_MODEL_MAX_SEGS(n_layers) (3 + 20 * (size_t)(n_layers))
/* Writes the segments of c's layout in order (contiguous, from 0 to rl_model_weight_elems)
 * into segs (RL_MODEL_MAX_SEGS entries, or NULL to count) and returns how many. The shape
 * must have passed rl_model_alloc's checks (rl_model_check_shape). */
size_t rl_model_layout(const struct rl_model_config *c, struct rl_wseg *segs);
/* Index of the segment holding element e (segs from rl_model_layout, n of them; e below
 * the layout's end). */
size_t rl_model_layout_find(const struct rl_wseg *segs, size_t n, uint64_t e);
/* 1 for the fields kept in fp32 by every backend (norms, biases); 0 for matrices. */
static inline int rl_wfield_is_vector(int f)
{
	return f == RL_W_ATTN_NORM || f == RL_W_FFN_NORM || f == RL_W_OUT_NORM ||
	       f == RL_W_BQ || f == RL_W_BK || f == RL_W_BV || f == RL_W_QNORM || f == RL_W_KNORM ||
	       f == RL_W_ATTN_POST_NORM || f == RL_W_FFN_POST_NORM;
}

/* ---- plans ---- */

/* On-disk element types: enum rl_dt (rl_model_io.h). */

struct rl_mfile {
	int         fd;
	uint64_t    size;
	char       *name;              /* basename of the path (owned), for error messages */
};

/* One tensor: nbytes at offset off of the plan's file `file`, stored as dtype, holding the
 * nelem weights at canonical elements [elem, elem + nelem). */
struct rl_tread {
	uint64_t off, nbytes, nelem;
	uint64_t elem;
	int      dtype;                /* enum rl_dt */
	int      file;
};

struct rl_model_plan {
	struct rl_model_config cfg;
	char     name[64];
	char     arch[24];             /* GGUF general.architecture ("llama", "gemma3" ...), "" otherwise */
	char     chat_template[16];    /* the template's family (tokenizer/rl_chat.h), "" when none */
	char     chat_system[192];     /* its default system turn (rl_chat_default_system), "" */
	int      norm_plus_one;        /* the file's norm weights w scale by 1 + w (Hugging Face Gemma): the
					* loads add the one, so every backend multiplies by what it holds */
	void    *vocab_blob;           /* llama2.c tokenizer.bin layout (malloc'd), or NULL */
	uint32_t vocab_blob_size;
	struct rl_tread *reads;        /* [n_reads]: every weight exactly once, checked against
					* its file's size */
	size_t   n_reads, reads_cap;
	struct rl_mfile *files;        /* [n_files], open (safetensors: one per shard) */
	int      n_files;
	uint64_t n_elems;              /* canonical layout size: rl_model_weight_elems(&cfg) */
};

/* Opens any supported format (as rl_model_load) and plans it: every header, shape and bound
 * check of a load, and the vocabulary (from the file, or tokenizer_path when given), but no
 * weight is read or allocated. On failure: -errno, one line naming the file in err, and p
 * zeroed (rl_model_plan_close on it is harmless). */
int  rl_model_plan_open(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
			char *err, size_t errlen);
void rl_model_plan_close(struct rl_model_plan *p);
/* Allocates an fp32 model of p's shape and reads every tensor into it (io_uring, converting
 * f16/bf16/q8_0); moves p's vocabulary and name into it. 0, or -errno and one line. */
int  rl_model_plan_load(struct rl_model_plan *p, struct rl_model **out, char *err, size_t errlen);

/* As rl_model_plan_load, with every matrix kept as the file stores it (rl_model_load_stored). */
int  rl_model_plan_load_stored(struct rl_model_plan *p, struct rl_model **out, char *err, size_t errlen);

/* ---- streaming ---- */

/* A run of one tensor read, handed to a sink: raw on-disk bytes of canonical elements
 * [elem, elem + nelem), never splitting a Q8_0 block (32 weights in 34 bytes). */
struct rl_model_chunk {
	int         buf;               /* staging buffer it occupies (0 .. n_bufs-1) */
	const void *data;              /* its bytes: in that buffer (rl_model_stream), or in the
					* model's memory (rl_model_stream_fp32) */
	uint64_t    nbytes, elem, nelem;
	int         dtype;             /* enum rl_dt */
	size_t      read;              /* index into the plan's reads (fp32 source: segment) */
	uint32_t    inflight;          /* reads still in flight while this chunk is handled */
};

/* The consumer. Both callbacks return 0/1 as stated or -errno with a one-line err; an error
 * stops the stream and is what rl_model_stream returns. */
struct rl_model_sink {
	void *ctx;
	/* Handles a chunk (e.g. converts it and enqueues a copy). Buffer c->buf stays the sink's
	 * until buf_ready says it is free again: the bytes may still be read after this returns. */
	int (*chunk)(void *ctx, const struct rl_model_chunk *c, char *err, size_t errlen);
	/* 1 when buffer buf may be overwritten, 0 when not yet; wait != 0 blocks until it may
	 * (then 1). Called only for buffers handed out by chunk. */
	int (*buf_ready)(void *ctx, int buf, int wait, char *err, size_t errlen);
};

struct rl_model_stream_opts {
	void *const *bufs;             /* [n_bufs] staging buffers of buf_bytes each (pinned
					* memory for a GPU); unused by rl_model_stream_fp32 */
	int      n_bufs;               /* 1 .. RL_MODEL_STREAM_MAX_BUFS */
	size_t   buf_bytes;            /* at least one Q8_0 block (34) when the plan has Q8_0 */
	uint64_t max_elems;            /* at most this many weights per chunk (0: no limit) */
	int      no_uring;             /* 1: synchronous preads (as when io_uring is missing) */
};
#define RL_MODEL_STREAM_MAX_BUFS 64

/* Reads every tensor of p in chunks of at most buf_bytes (and max_elems), keeping a read in
 * flight in every free staging buffer while the sink handles a filled one, and gives each
 * chunk to s->chunk as its read completes (in completion order). A buffer is reused only
 * after s->buf_ready said so. Falls back to pread when io_uring is unavailable. On return
 * no read is in flight and every buffer handed out was reported ready (on failure, as far
 * as buf_ready could say). 0, or -errno with one line in err naming the file (or the
 * sink's own error, unchanged). */
int  rl_model_stream(const struct rl_model_plan *p, const struct rl_model_stream_opts *o,
		     const struct rl_model_sink *s, char *err, size_t errlen);
/* The same chunks from an fp32 model in memory (dtype F32, data pointing into m), cycling
 * through o->n_bufs buffer numbers with the same buf_ready gating, at most
 * min(buf_bytes / 4, max_elems) weights per chunk. */
int  rl_model_stream_fp32(const struct rl_model *m, const struct rl_model_stream_opts *o,
			  const struct rl_model_sink *s, char *err, size_t errlen);

/* ---- conversion ---- */

/* Converts nelem weights stored as src_dtype (F32, F16, BF16, Q8_0: nelem a multiple of 32)
 * into dst as dst_dtype (F32, F16 or BF16): bit for bit what decoding to fp32 as
 * rl_model_load does and then rounding with rl_f32_to_bf16 / _f16 gives. dst and
 * src must not overlap. 0, or -EINVAL for an unsupported pair or a partial Q8_0 block. */
int  rl_model_convert(void *dst, int dst_dtype, const void *src, int src_dtype, uint64_t nelem);
/* 1 when rl_model_convert would reproduce src's bytes (same dtype and, for f16/bf16, no
 * signalling NaN to quiet), so they can be uploaded as they are; 0 otherwise. */
int  rl_model_convert_is_copy(const void *src, int src_dtype, int dst_dtype, uint64_t nelem);

#endif
