/* model_vocab_synth.c — a synthetic SentencePiece-style vocabulary for random models, so a
 * model made by `ringlm mkmodel` without a tokenizer still tokenizes and detokenizes any text:
 * <unk>, BOS, EOS, the 256 <0xNN> byte pieces (ids 3..258, where llama2.c's byte fallback
 * expects them), every printable ASCII character, then strings over " etaoinshrdlucmfwypvbgkjqxz"
 * of length 2, 3, 4 in order. Each longer piece is a known piece plus one character, so BPE
 * merges can reach it; scores fall with the index so shorter, earlier pieces merge first. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/model/model_internal.h"

static const char alpha[] = " etaoinshrdlucmfwypvbgkjqxz";

int rl_model_synth_vocab(uint32_t n, void **blob, uint32_t *size)
{
	*blob = NULL;
	*size = 0;
	if (n < 259 || n > (1u << 22))
		return -EINVAL;
	const uint64_t na = sizeof alpha - 1;
	/* capacity: 259 + 95 + na^2 + na^3 + na^4 ≈ 551k pieces of at most 6 bytes */
	if (n > 259 + 95 + na * na + na * na * na + na * na * na * na)
		return -EINVAL;
	size_t cap = 4 + (size_t)n * (8 + 6);
	uint8_t *b = malloc(cap);
	if (!b)
		return -ENOMEM;
	size_t o = 4;
	uint32_t id = 0;
	int32_t maxlen = 0;
#define ADD(str, len, sc) do { float s_ = (sc); int32_t l_ = (len); memcpy(b + o, &s_, 4); \
	memcpy(b + o + 4, &l_, 4); memcpy(b + o + 8, (str), l_); o += 8 + l_; \
	if (l_ > maxlen) { maxlen = l_; } id++; } while (0)
	ADD("<unk>", 5, 0.0f);
	ADD("\n<s>\n", 5, 0.0f);
	ADD("\n</s>\n", 6, 0.0f);
	for (int c = 0; c < 256; c++) {
		char s[8];
		snprintf(s, sizeof s, "<0x%02X>", c);
		ADD(s, 6, 0.0f);
	}
	for (int c = 32; c < 127 && id < n; c++) {
		char s = (char)c;
		ADD(&s, 1, -(float)(id - 259));
	}
	for (int len = 2; len <= 4 && id < n; len++) {
		uint64_t count = 1;
		for (int i = 0; i < len; i++)
			count *= na;
		for (uint64_t x = 0; x < count && id < n; x++) {
			char s[4];
			uint64_t y = x;
			for (int i = len - 1; i >= 0; i--, y /= na)
				s[i] = alpha[y % na];
			ADD(s, len, -(float)(id - 259));
		}
	}
#undef ADD
	memcpy(b, &maxlen, 4);
	*blob = b;
	*size = (uint32_t)o;
	return 0;
}
