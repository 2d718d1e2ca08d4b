/* rl_tok.h — the tokenizer: clients tokenize with it, the model loaders build its vocabulary
 * blobs. Two kinds of blob: a llama2.c tokenizer.bin
 * (int32 max_token_length, then per token: float score, int32 len, len bytes) for
 * SentencePiece-style vocabularies, whose encoding reproduces llama2.c's encode() token for
 * token (a SentencePiece vocabulary without the dummy prefix, as Gemma's, ends in the
 * trailer RL_SPM_TRAILER + uint32 RL_SPM_NO_PREFIX; llama2.c's files have none); and a byte-level BPE blob (rl_bpe.h: Llama 3, Qwen2, GPT-2), encoded as Hugging
 * Face tokenizers does. The runtime publishes the blob in its info segment, so clients
 * tokenize without the model file. */
#ifndef RL_TOK_H
#define RL_TOK_H
#include <stddef.h>
#include <stdint.h>

struct rl_tok;

/* The SentencePiece blob's optional trailer: these 4 bytes, then uint32 flags */
#define RL_SPM_TRAILER "RLSP"
#define RL_SPM_NO_PREFIX 1u            /* no " " before the text (tokenizer.ggml.add_space_prefix false) */

/* Builds a tokenizer from a blob (copied; the caller keeps its own). The blob is untrusted:
 * -EINVAL and a one-line reason in err when malformed. BOS/EOS default to 1/2 as in llama2.c. */
int  rl_tok_create(const void *blob, size_t size, struct rl_tok **out, char *err, size_t errlen);
/* Same, from a tokenizer.bin file. */
int  rl_tok_load(const char *path, struct rl_tok **out, char *err, size_t errlen);
void rl_tok_destroy(struct rl_tok *t);
uint32_t rl_tok_vocab_size(const struct rl_tok *t);
/* Overrides the BOS/EOS ids (e.g. from the model's config); ids out of range are ignored. */
void rl_tok_set_special(struct rl_tok *t, uint32_t bos, uint32_t eos);
/* Encodes len bytes of text. Writes at most cap ids and returns how many the full encoding
 * has (so a return > cap means "call again with more room"; len + 3 always suffices), or
 * -ENOMEM. */
long rl_tok_encode(const struct rl_tok *t, const char *text, size_t len, int bos, int eos,
		   int32_t *ids, size_t cap);
enum { RL_TOK_BOS = 1, RL_TOK_EOS = 2, RL_TOK_SPECIAL = 4 /* cut control tokens written in the text */ };
long rl_tok_encode_ex(const struct rl_tok *t, const char *text, size_t len, unsigned flags,
		      int32_t *ids, size_t cap);
/* Text of token `tok` following `prev` (-1 for none): the leading space (the dummy prefix, where
 * the vocabulary adds one) is dropped after BOS
 * and "<0xNN>" byte pieces become that raw byte. Not NUL-terminated; *len is set. NULL for
 * an id out of range. */
const char *rl_tok_decode(const struct rl_tok *t, int32_t prev, int32_t tok, size_t *len);
/* Raw vocabulary piece and score of a token (NULL when out of range). */
const char *rl_tok_piece(const struct rl_tok *t, int32_t tok, size_t *len, float *score);
/* Length of the longest prefix of s[n] that does not end inside a UTF-8 character: a final
 * lead byte with fewer continuation bytes than it announces is cut off (at most 3 bytes);
 * anything that could never become a character is kept. */
size_t rl_utf8_complete(const char *s, size_t n);

#endif
