/* rl_batch.h — the step description: what the scheduler builds each step and every backend
 * (sim, cpu, cuda) consumes. One contract, so the scheduler serves all backends unchanged.
 *
 * Layout of one step with S sequences and T token rows:
 *   rows [0, T) are packed prefill chunks first (seqs[0 .. n_prefill)), then decode tokens
 *   (seqs[n_prefill .. S), exactly one row each). Row r belongs to seqs[row_seq[r]].
 *   A sequence's rows are [q_start, q_start + q_len) and sit at positions
 *   [ctx_len - q_len, ctx_len): the KV of positions < ctx_len - q_len is already cached
 *   (earlier chunks, or prefix-cache hits) and is reached through the block table.
 *   Position p of a sequence lives in block block_table[p / block_size], slot p % block_size.
 *   A decoding sequence verifying n_draft draft tokens (speculative decoding) is packed with
 *   the chunks: its rows are its last accepted token then the drafts, and it samples at its
 *   last n_draft + 1 rows (each token keyed by its own position, as one-row decode would).
 */
#ifndef RL_BATCH_H
#define RL_BATCH_H
#include <stdint.h>

/* The largest step (tokens in one batch) any part of ringlm plans for: the automatic
 * budget's ceiling and the CUDA backend's largest default graph. */
#define RL_BATCH_MAX_TOKENS 8192

/* Sampling parameters of one request. temperature == 0 means greedy (argmax, lowest id wins
 * ties). top_k == 0 means no top-k cut; top_p >= 1 means no nucleus cut. Random draws are keyed
 * by (seed, position of the token being sampled) so output never depends on batch mates. */
struct rl_sampling {
	float    temperature;
	float    top_p;
	uint32_t top_k;
	uint32_t _pad;
	uint64_t seed;
};

struct rl_batch_seq {
	uint32_t q_start;              /* first row of this sequence in the packed rows */
	uint32_t q_len;                /* rows this step: chunk length, or 1 for decode */
	uint32_t ctx_len;              /* KV length after this step (cached prefix + q_len) */
	uint32_t n_blocks;             /* entries of block_table covering [0, ctx_len) */
	const uint32_t *block_table;   /* [n_blocks] physical KV block ids */
	uint32_t sample;               /* 1: sample the token at position ctx_len from the last row */
	uint32_t seq_id;               /* scheduler's pool index (stable while the sequence lives) */
	struct rl_sampling sp;
	uint32_t logprobs;             /* sampling seqs: 0, or 1 + n: keep the sampled token's
					* log-probability and the n most likely (rl_backend logprobs) */
	/* prompt log-probabilities (rl_backend prompt_logprobs): the 1 + n of the prompt positions
	 * [plp_lo, plp_hi) this chunk predicts (row r predicts position ctx_len - q_len + r + 1),
	 * plp_hi <= plp_lo when none; next_token is the token after the chunk's last row (that
	 * row's target), UINT32_MAX when it has none here */
	uint32_t prompt_logprobs, plp_lo, plp_hi, next_token;
	/* speculative decoding (sample must be 1): the last n_draft rows are draft tokens, and
	 * the backend writes draft_out[j] (j < n_draft), the token sampled from row
	 * q_len - 1 - n_draft + j, i.e. for position ctx_len - n_draft + j; the last row's token
	 * goes to finish()'s out as usual. The scheduler compares them with the drafts. */
	uint32_t n_draft;
	int32_t *draft_out;
	/* structured output (sample must be 1): the tokens the request's constraint allows at
	 * each sampled position, n_draft + 1 bitmasks of rl_sample_mask_words(vocab) words (bit
	 * i % 32 of word i / 32: token i), each with at least one bit set: mask j for the row
	 * that samples position ctx_len - n_draft + j. NULL: every token. The backend samples (and
	 * reports log-probabilities) from the distribution restricted to them. */
	const uint32_t *allow;
};

struct rl_batch {
	uint32_t n_tokens;             /* T: rows in this step */
	uint32_t n_seqs;               /* S */
	uint32_t n_prefill;            /* seqs[0 .. n_prefill) are prefill chunks */
	uint32_t block_size;           /* tokens per KV block */
	const uint32_t *tokens;        /* [T] input token id of each row */
	const uint32_t *pos;           /* [T] position of each row within its sequence */
	const uint32_t *row_seq;       /* [T] index into seqs[] of each row */
	const struct rl_batch_seq *seqs; /* [S] */
	/* 1: the deterministic contract (`ringlmd --deterministic`, or a request that asks for it
	 * is in this step): each row's logits are the bits it would get alone or in any other
	 * step, whatever shares the step, its row count, the chunking and the thread count
	 * (row-invariant kernels, reductions in an order fixed by the row and position alone) */
	uint32_t deterministic;
};

#endif
