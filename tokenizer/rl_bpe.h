/* rl_bpe.h — byte-level BPE (GPT-2 style: Llama 3, Qwen2, GPT-2 vocabularies) behind
 * rl_tok.h, and the vocabulary blob that carries it from the model file to the clients.
 *
 * Blob (little-endian; the runtime publishes it in the info segment like the llama2.c one):
 *   "RLB1", u32 n_vocab, u32 n_merges, u32 bos, u32 eos, u32 flags (RL_BPE_*),
 *   u32 spec_len, spec bytes (the pre-tokenizer: rl_pretok.h's spec, its expressions each
 *   "<mode><expr>\0"),
 *   n_vocab x (u8 type (enum rl_tok_type), u32 len, len bytes: the token as the vocabulary
 *             spells it, bytes mapped to GPT-2's printable code points),
 *   n_merges x (u32 len, len bytes: "left right", rank = position).
 * Encoding: special tokens are cut out first (rl_partition.h: user-defined ones always,
 * control tokens only when asked, as llama.cpp's parse_special), the rest is cut into words
 * by the pre-tokenizer (rl_pretok.h), each word's bytes are mapped to code points and merged
 * lowest rank first (leftmost on ties), as llama.cpp's llm_tokenizer_bpe does. */
#ifndef RL_BPE_H
#define RL_BPE_H
#include <stddef.h>
#include <stdint.h>

#define RL_BPE_MAGIC "RLB1"
#define RL_BPE_IGNORE_MERGES 1u        /* a piece that is a whole token is not merged (Llama 3) */
#define RL_BPE_NO_BOS        2u        /* the vocabulary puts no BOS before a text (Qwen2):
					* rl_tok_encode_ex's RL_TOK_BOS adds none */
#define RL_BPE_RAW           4u        /* words merge as UTF-8 chars, bytes fall back to
					* <0xNN> tokens (Gemma 4's SentencePiece-style BPE) */
#define RL_BPE_ESCAPE_WS     8u        /* spaces become U+2581 before splitting */
#define RL_BPE_NL_WHOLE     16u        /* a run of newlines that is a token stays whole */
#define RL_BPE_ADD_EOS      32u        /* the vocabulary puts EOS after a text */

/* token types as GGUF's tokenizer.ggml.token_type numbers them */
enum rl_tok_type { RL_TT_NORMAL = 1, RL_TT_UNKNOWN = 2, RL_TT_CONTROL = 3, RL_TT_USER = 4,
		   RL_TT_UNUSED = 5, RL_TT_BYTE = 6 };

/* Serializes a vocabulary into a blob (malloc'd). tok[i]/tok_len[i] and merge[i]/merge_len[i]
 * are not NUL-terminated. 0, -ENOMEM, or -EINVAL (too large). */
int rl_bpe_blob(uint32_t n_vocab, const char *const *tok, const uint32_t *tok_len, const uint8_t *type,
		uint32_t n_merges, const char *const *merge, const uint32_t *merge_len,
		const char *spec, uint32_t spec_len, uint32_t bos, uint32_t eos, uint32_t flags,
		void **blob, uint32_t *size);

struct rl_bpe;
/* From a blob (untrusted: -EINVAL and one line in err when malformed, or when the
 * pre-tokenizer does not compile). */
int  rl_bpe_create(const void *blob, size_t size, struct rl_bpe **out, char *err, size_t errlen);
void rl_bpe_destroy(struct rl_bpe *b);
uint32_t rl_bpe_vocab_size(const struct rl_bpe *b);
uint32_t rl_bpe_bos(const struct rl_bpe *b);
uint32_t rl_bpe_eos(const struct rl_bpe *b);
/* 1 when the vocabulary puts BOS before a text (no RL_BPE_NO_BOS flag). */
int rl_bpe_adds_bos(const struct rl_bpe *b);
/* 1 when the vocabulary puts EOS after a text (RL_BPE_ADD_EOS). */
int rl_bpe_adds_eos(const struct rl_bpe *b);
/* As rl_tok_encode, with bos_id first when >= 0; special = 1 also cuts control tokens
 * written in the text. */
long rl_bpe_encode(const struct rl_bpe *b, const char *text, size_t len, int32_t bos_id, int special,
		   int32_t *ids, size_t cap);
/* The bytes token id stands for (control tokens: their text). NULL when out of range. */
const char *rl_bpe_decode(const struct rl_bpe *b, int32_t id, size_t *len);
int rl_bpe_type(const struct rl_bpe *b, int32_t id);
/* How the special-token cut sees a token: 0 plain, 1 user-defined (cut always), 2 control or
 * unknown, or a text llama.cpp ends generation at (cut only when parsing specials); -1 out of
 * range. */
int rl_bpe_special_kind(const struct rl_bpe *b, int32_t id);
/* What the blob carries, as it spells it (for writing the vocabulary out again: export-hf):
 * a token's text (GPT-2's code points; NULL out of range), the merges ("left right", rank =
 * index; NULL past the end), the pre-tokenizer spec (rl_pretok.h) and the RL_BPE_* flags. */
const char *rl_bpe_piece(const struct rl_bpe *b, int32_t id, size_t *len);
uint32_t rl_bpe_n_merges(const struct rl_bpe *b);
const char *rl_bpe_merge(const struct rl_bpe *b, uint32_t i, size_t *len);
const char *rl_bpe_spec(const struct rl_bpe *b, size_t *len);
uint32_t rl_bpe_flags(const struct rl_bpe *b);
#endif
