/* fuzz_tok.c — libFuzzer harness for the tokenizer: a vocabulary blob (llama2.c
 * tokenizer.bin layout, with or without the GGUF trailer, or a byte-level BPE blob with its
 * pre-tokenizer spec; seeds of each from make_tok_seeds.py) and text to encode. Input: u16
 * little-endian blob length, the blob, then the text. Properties: encode returns the
 * documented count and every id it writes is in the vocabulary and decodes; with control
 * tokens parsed too.
 * Tests: tokenizer (rl_tok, rl_bpe, rl_pretok, rl_partition).
 */
#include "tests/fuzz/fuzz_common.h"
#include "tokenizer/rl_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t blen = data[0] | (size_t)data[1] << 8;
	if (blen > size - 2)
		blen = size - 2;
	const uint8_t *blob = data + 2, *text = blob + blen;
	size_t tlen = size - 2 - blen;
	struct rl_tok *t;
	char err[256];
	if (rl_tok_create(blob, blen, &t, err, sizeof err)) {
		FUZZ_ASSERT(memchr(err, 0, sizeof err) && err[0]);
		return 0;
	}
	uint32_t nv = rl_tok_vocab_size(t);
	size_t cap = 3 * tlen + 3;     /* invalid UTF-8 bytes read as U+FFFD: up to 3 pieces a byte */
	int32_t *ids = malloc(cap * sizeof *ids);
	long n = rl_tok_encode(t, (const char *)text, tlen, blen & 1, blen & 2, ids, cap);
	FUZZ_ASSERT(n >= 0 && (size_t)n <= cap);
	int32_t prev = -1;
	for (long i = 0; i < n; i++) {
		FUZZ_ASSERT(ids[i] >= 0 && (uint32_t)ids[i] < nv);
		size_t len;
		FUZZ_ASSERT(rl_tok_decode(t, prev, ids[i], &len) != NULL);
		prev = ids[i];
	}
	/* a short buffer: the count still says how much room the full encoding needs */
	if (n > 1)
		FUZZ_ASSERT(rl_tok_encode(t, (const char *)text, tlen, blen & 1, blen & 2, ids, 1) == n);
	/* control tokens parsed from the text */
	n = rl_tok_encode_ex(t, (const char *)text, tlen, RL_TOK_BOS | RL_TOK_SPECIAL, ids, cap);
	FUZZ_ASSERT(n >= 0 && (size_t)n <= cap);
	for (long i = 0; i < n; i++)
		FUZZ_ASSERT(ids[i] >= 0 && (uint32_t)ids[i] < nv);
	free(ids);
	rl_tok_destroy(t);
	return 0;
}
