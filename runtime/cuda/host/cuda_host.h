/* cuda_host.h — the host-side logic of the CUDA backend that needs no GPU, in plain C so it is
 * unit-tested everywhere (tests/test_cuda_host.c): graph bucket lists and the bucket choice,
 * the per-bucket row padding and capacity rules, packing an rl_batch into the fixed-layout
 * device metadata (kernels/rl_cuda_meta.h), and fp32 -> bf16/fp16 weight conversion. */
#ifndef RL_CUDA_HOST_H
#define RL_CUDA_HOST_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/rl_batch.h"
#include "kernels/rl_cuda_meta.h"
#include "kernels/rl_cuda_dtype.h"
#include "kernels/rl_half.h"

#define RL_CUDA_MAX_BUCKETS 32
#define RL_CUDA_ROW_ALIGN 8       /* eager steps pad rows to this (16-byte GEMM leading dims) */

/* ---- buckets ---- */

/* Parses "16,32,64" into out[] (ascending, distinct, each 1..max_rows). NULL: the default list,
 * powers of two up to min(512, max_rows), then max_rows itself when larger and at most
 * RL_BATCH_MAX_TOKENS (full-budget steps). "" or "0": no buckets (every step eager).
 * 0, or -EINVAL with a one-line reason in err. */
int rl_cuda_host_parse_buckets(const char *s, uint32_t max_rows, uint32_t *out, uint32_t *n,
			       char *err, size_t errlen);
/* A step of more than RL_CUDA_PAD_FREE tokens pads to a bucket only when that adds at most
 * 1/RL_CUDA_PAD_FRAC of its eager rows: such a step is compute-bound, its GEMMs grow with every
 * padded row, and its eager launch (a few us of host time a kernel) hides behind the device's
 * milliseconds. Smaller steps always take a bucket: there the launch is the cost. */
#define RL_CUDA_PAD_FREE 512
#define RL_CUDA_PAD_FRAC 8
/* Index of the smallest bucket >= n_tokens, or -1 when the step is larger than every bucket or
 * above RL_CUDA_PAD_FREE with too much padding (it then runs eagerly on
 * rl_cuda_host_eager_rows(n_tokens) rows). */
int rl_cuda_host_pick_bucket(const uint32_t *buckets, uint32_t n, uint32_t n_tokens);
/* Rows an eager step of n_tokens runs on: rounded up to RL_CUDA_ROW_ALIGN. */
uint32_t rl_cuda_host_eager_rows(uint32_t n_tokens);

/* ---- geometry and per-bucket capacities ---- */

struct rl_cuda_geom {
	uint32_t max_rows;             /* row capacity: max_batch_tokens rounded up to ROW_ALIGN */
	uint32_t max_seqs;
	uint32_t max_samp;             /* sampling rows: max_seqs, plus the draft rows a step may
					* verify (the backend adds them after rl_cuda_host_geom) */
	uint32_t max_parts;            /* split-KV partial results the scratch holds */
	uint32_t max_bt;               /* flat block-table entries */
	uint32_t block_size, n_kv_blocks;
	uint32_t n_kv_heads;
	uint32_t vocab;                /* token ids must be below this */
	uint32_t qt;                   /* query rows per attention item (rows x group <= RL_CUDA_ATTN_QV) */
	uint32_t target_ctas;          /* split decode rows while items x kv heads stay below this */
};

/* Fills g for a model (heads, vocab) and backend limits; target_ctas: about 2 x SMs. */
void rl_cuda_host_geom(struct rl_cuda_geom *g, uint32_t max_batch_tokens, uint32_t max_seqs,
		       uint32_t n_kv_blocks, uint32_t block_size, uint32_t max_ctx,
		       uint32_t n_heads, uint32_t n_kv_heads, uint32_t vocab, uint32_t target_ctas);
/* Capacities of a step padded to `rows` rows: grid sizes of the kernels a graph for that
 * bucket launches. Sampling rows: min(rows, max_samp). Partials: min(max_parts,
 * min(rows, max_seqs) x MAX_SPLITS). Items: ceil(rows / qt) + max_seqs + partials. */
uint32_t rl_cuda_host_samp_cap(const struct rl_cuda_geom *g, uint32_t rows);
uint32_t rl_cuda_host_parts_cap(const struct rl_cuda_geom *g, uint32_t rows);
uint32_t rl_cuda_host_items_cap(const struct rl_cuda_geom *g, uint32_t rows);

/* ---- metadata packing ---- */

/* Byte offsets of each array in the packed image (the same on host and device). */
struct rl_cuda_layout {
	size_t tokens, pos, slot, row_part, row_nparts, seq_bt, items, samp, samp_row, fi_qo, fi_indptr, fi_last, bt;
	size_t max_bytes;              /* image size with a full block table */
};
void rl_cuda_host_layout(const struct rl_cuda_geom *g, struct rl_cuda_layout *l);
/* Pointers into an image at base (host or device). */
struct rl_cuda_meta rl_cuda_host_meta_at(const struct rl_cuda_layout *l, const void *base);

/* Validates b (every index it carries) and packs it for a step padded to `rows` rows
 * (n_tokens <= rows <= max_rows) into buf (layout l, max_bytes). Padding rows get token 0,
 * position 0, slot -1, no items and no partials; sampling rows past n_samp get row -1.
 * In a deterministic b (rl_batch.deterministic) a split row is cut at the fixed chunks of
 * RL_CUDA_DET_CHUNK keys only, with one partial a chunk (row_nparts = its chunks; item part =
 * the partial of its first chunk), up to max_parts partials in all.
 * The image also carries FlashInfer's CSR, so its one copy holds what either attention needs:
 * a decode-only step (sequence i on row i) gets the decode CSR over all `rows` (one request a
 * row); a step with a prefill chunk whose sequences sit in row order gets the prefill CSR over
 * rl_cuda_host_fi_batch(g, rows) requests (hdr.fi_csr says which; RL_CUDA_FI_CSR_NONE
 * otherwise).
 * samp_seq[j] = batch seq of sampling row j, samp_draft[j] = which of its drafts that row
 * verifies (rl_batch.h n_draft: row q_len - 1 - n_draft + k samples for draft_out[k]), -1
 * for its last row. *bytes = the prefix of buf to copy (up to the used block table). 0;
 * -EINVAL for a malformed batch; -E2BIG when it exceeds the geometry. */
int rl_cuda_host_pack(const struct rl_cuda_geom *g, const struct rl_cuda_layout *l,
		      const struct rl_batch *b, uint32_t rows, void *buf, size_t *bytes,
		      uint32_t *samp_seq, int32_t *samp_draft);

/* After rl_cuda_host_pack of b into buf: the constraint masks of its sampling rows
 * (rl_batch_seq.allow) copied to masks (row k: rl_sample_mask_words(vocab) words, room for
 * max_samp rows), and each such row's rl_cuda_samp.mask set to its k. Returns how many: the
 * rows of masks to copy to the device's rl_cuda_meta.masks (0: nothing to copy). */
uint32_t rl_cuda_host_pack_masks(const struct rl_cuda_geom *g, const struct rl_cuda_layout *l,
				 const struct rl_batch *b, void *buf, const uint32_t *samp_seq,
				 const int32_t *samp_draft, uint32_t *masks);

/* Requests of a prefill CSR for a step padded to `rows`: min(rows, max_seqs), fixed per row
 * count so a graph-mode plan (whose launch depends on the counts) serves every step of it. */
uint32_t rl_cuda_host_fi_batch(const struct rl_cuda_geom *g, uint32_t rows);
/* The CSR a FlashInfer graph for `rows` is captured under (mode RL_CUDA_FI_CSR_DECODE: a block
 * a row; PREFILL: rl_cuda_host_fi_batch requests of a block each, the first with all rows but
 * one for each other): a graph-mode plan reads only its counts. qo, kv_indptr [rows + 1]. */
void rl_cuda_host_fi_synth(const struct rl_cuda_geom *g, int mode, uint32_t rows, int32_t *qo,
			   int32_t *kv_indptr);

/* ---- weight conversion ---- */

/* src[n] fp32 -> dst[n] in the device dtype, by kernels/rl_half.h's rounding. */
void     rl_cuda_host_convert(uint16_t *dst, const float *src, size_t n, enum rl_cuda_dtype dt);

#endif
