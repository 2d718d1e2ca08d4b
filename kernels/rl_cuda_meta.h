/* rl_cuda_meta.h — the step metadata the CUDA kernels read from fixed device buffers, shared by
 * the host packer (runtime/cuda/host/cuda_host.c, plain C) and the kernels (the .cu files in kernels/).
 *
 * Every step writes one packed host image (header, then fixed-offset arrays sized for the
 * largest step, the flat block table last) and copies it with one cudaMemcpyAsync to the same
 * device address. Kernels take the device pointers below by value, so a graph captured once per
 * padded row count serves any mix of prefill chunks and decode rows: counts and indices are
 * read at run time, and blocks past the live counts exit at once.
 */
#ifndef RL_CUDA_META_H
#define RL_CUDA_META_H
#include <stdint.h>

#define RL_CUDA_MAX_SPLITS 16     /* most KV splits of one decode row */
#define RL_CUDA_SPLIT_CHUNK 256   /* a decode row is split only into chunks of >= this many keys */
#define RL_CUDA_KV_TILE 32        /* keys per attention tile (one per lane) */
#define RL_CUDA_ATTN_QV 32        /* query vectors (rows x heads of a KV head) per attention block */
#define RL_CUDA_DET_CHUNK 256     /* the deterministic mode's fixed KV chunk (a multiple of the tile):
				   * a row's keys are reduced chunk by chunk and merged in order, and a
				   * row may be split only at these boundaries, a partial a chunk */

/* Counts of this step. */
struct rl_cuda_hdr {
	uint32_t n_tokens;             /* live rows */
	uint32_t n_rows;               /* padded rows (the bucket); rows >= n_tokens are padding */
	uint32_t n_seqs;
	uint32_t n_items;              /* attention work items */
	uint32_t n_samp;               /* sampling rows */
	uint32_t n_parts;              /* split-KV partial results */
	uint32_t fi_csr;               /* which FlashInfer CSR the image carries: RL_CUDA_FI_CSR_* */
	uint32_t fi_batch;             /* its requests (padding included) */
};
#define RL_CUDA_FI_CSR_NONE 0
#define RL_CUDA_FI_CSR_DECODE 1       /* decode-only, sequence i on row i: fi_indptr, fi_last */
#define RL_CUDA_FI_CSR_PREFILL 2      /* sequences in row order: fi_qo, fi_indptr, fi_last */

/* One attention work item: nrows consecutive query rows of one sequence (all query heads of
 * one KV head per block), over keys [kv0, kv1) further bounded by each row's causal limit.
 * part < 0: the item covers the rows' whole context and writes the final output; else it
 * writes the unnormalised partial (o, max, sum) of split `part` (nrows == 1). */
struct rl_cuda_item {
	int32_t seq, row0, nrows, kv0, kv1, part;
};

/* One sampling row: the last row of a sequence that samples this step. */
struct rl_cuda_samp {
	float    temperature, top_p;
	uint32_t top_k;
	uint32_t position;             /* position of the token being sampled (its ctx_len) */
	uint64_t seed;
	int32_t  row;                  /* packed row whose hidden state is sampled */
	int32_t  mask;                 /* its constraint's mask: row `mask` of rl_cuda_meta.masks;
					* -1: every token */
};

/* Device (or host image) pointers into the packed metadata. */
struct rl_cuda_meta {
	const struct rl_cuda_hdr *hdr;
	const int32_t *tokens;         /* [max_rows] token id; 0 in padding rows */
	const int32_t *pos;            /* [max_rows] position; 0 in padding rows */
	const int32_t *slot;           /* [max_rows] KV slot block*bs + pos%bs; -1: write nowhere */
	const int32_t *row_part;       /* [max_rows] first partial of a split row, -1 if unsplit */
	const int32_t *row_nparts;     /* [max_rows] partials of the row (0 if unsplit) */
	const int32_t *seq_bt;         /* [max_seqs] offset of each sequence's block table in bt */
	const struct rl_cuda_item *items; /* [max_items] */
	const struct rl_cuda_samp *samp;  /* [max_seqs] */
	const int32_t *samp_row;       /* [max_seqs] row of each sampling row, -1 in padding */
	const int32_t *bt;             /* [max_bt] flat block tables */
	/* FlashInfer's CSR (kernels/rl_cuda_fi.h) over hdr->fi_batch requests: request r (sequence
	 * r; decode: also row r) has the blocks bt[fi_indptr[r] .. fi_indptr[r + 1]), keys in its
	 * last block fi_last[r] and (prefill) the query rows fi_qo[r] .. fi_qo[r + 1]; padding
	 * requests are empty (no rows, no blocks, fi_last 0) */
	const int32_t *fi_qo;          /* [max_rows + 1] */
	const int32_t *fi_indptr;      /* [max_rows + 1] */
	const int32_t *fi_last;        /* [max_rows] */
	/* structured output: the step's constraint masks, rl_sample_mask_words(vocab) words a
	 * row (bit i: token i allowed), rows in the order of the sampling rows that have one; a
	 * buffer of its own, copied only in steps that have masks (NULL where none is allocated) */
	const uint32_t *masks;
};

#endif
