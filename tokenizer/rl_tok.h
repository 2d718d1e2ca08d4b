/* rl_tok.h — the tokenizer: clients tokenize with it, the model loaders build its vocabulary
 * blobs. Two kinds of blob: a llama2.c tokenizer.bin
 * (int32 max_token_length, then per token: float score, int32 len, len bytes) for
 * SentencePiece vocabularies, optionally followed by a trailer (below) with what a GGUF file
 * says of them; and a byte-level BPE blob (rl_bpe.h: Llama 3, Qwen2, GPT-2 ...).
 * SentencePiece encoding is llama.cpp's llm_tokenizer_spm: special tokens cut out first
 * (user-defined ones always, control ones when asked), a " " before each stretch of text that
 * starts the text or follows a special token (unless the vocabulary says no), then the
 * highest-scoring adjacent pair of pieces merged first (leftmost on ties), pieces that are no
 * token falling back to <0xNN> bytes. A llama2.c tokenizer.bin (no trailer) encodes as
 * llama2.c's encode(). The runtime publishes the blob in its info segment, so clients
 * tokenize without the model file. */
#ifndef RL_TOK_H
#define RL_TOK_H
#include <stddef.h>
#include <stdint.h>

struct rl_tok;

/* The SentencePiece blob's optional trailer, after the pieces: either the short form
 * "RLSP", u32 flags; or u8 type[n] (enum rl_tok_type, one a piece), u32 n, u32 flags,
 * u32 bos, u32 eos, "RLS2" (what a GGUF vocabulary says). */
#define RL_SPM_TRAILER  "RLSP"
#define RL_SPM_TRAILER2 "RLS2"
#define RL_SPM_NO_PREFIX 1u            /* no " " before the text (tokenizer.ggml.add_space_prefix false) */
#define RL_SPM_NO_BOS    2u            /* no BOS before a text (tokenizer.ggml.add_bos_token false) */
#define RL_SPM_ADD_EOS   4u            /* EOS after a text (tokenizer.ggml.add_eos_token true) */
struct rl_spm_trailer {
	size_t len;                    /* bytes of the trailer; 0: none */
	uint32_t flags, n, bos, eos;   /* n, bos, eos: long form only (else 0, 1, 2) */
	const uint8_t *type;           /* long form only, else NULL */
};
/* Reads the trailer at the end of a SentencePiece blob (t->len = 0 when there is none). */
void rl_tok_spm_trailer(const void *blob, size_t size, struct rl_spm_trailer *t);

/* SentencePiece's U+2581 as the space the blob spells it: s[n] into dst (NULL: only measure),
 * each U+2581 as ' '; returns the length. The loaders write pieces with it, the encoder reads
 * text with it (llama.cpp cannot tell an escaped space from a written U+2581 either). */
size_t rl_tok_spm_spaces(char *dst, const char *s, size_t n);

/* Builds a tokenizer from a blob (copied; the caller keeps its own). The blob is untrusted:
 * -EINVAL and a one-line reason in err when malformed. BOS/EOS come from the blob (a llama2.c
 * one: 1/2 as in llama2.c). */
int  rl_tok_create(const void *blob, size_t size, struct rl_tok **out, char *err, size_t errlen);
/* Same, from a tokenizer.bin file. */
int  rl_tok_load(const char *path, struct rl_tok **out, char *err, size_t errlen);
void rl_tok_destroy(struct rl_tok *t);
uint32_t rl_tok_vocab_size(const struct rl_tok *t);
/* Overrides the BOS/EOS ids (e.g. from the model's config); ids out of range are ignored. */
void rl_tok_set_special(struct rl_tok *t, uint32_t bos, uint32_t eos);
/* Encodes len bytes of text. Writes at most cap ids and returns how many the full encoding
 * has (so a return > cap means "call again with more room"; 3 x len + 3 always suffices: an
 * invalid UTF-8 byte reads as U+FFFD, three byte-level pieces), or
 * -ENOMEM. */
long rl_tok_encode(const struct rl_tok *t, const char *text, size_t len, int bos, int eos,
		   int32_t *ids, size_t cap);
/* RL_TOK_BOS: the special tokens the vocabulary adds (BOS where it adds one, EOS where it
 * adds one: llama.cpp's add_special); RL_TOK_EOS: EOS after the text whatever it says. */
enum { RL_TOK_BOS = 1, RL_TOK_EOS = 2, RL_TOK_SPECIAL = 4 /* cut control tokens written in the text */ };
long rl_tok_encode_ex(const struct rl_tok *t, const char *text, size_t len, unsigned flags,
		      int32_t *ids, size_t cap);
/* Text of token `tok` following `prev` (-1 for none): the leading space (the dummy prefix, where
 * the vocabulary adds one) is dropped after BOS
 * and "<0xNN>" byte pieces become that raw byte. Not NUL-terminated; *len is set. NULL for
 * an id out of range. */
const char *rl_tok_decode(const struct rl_tok *t, int32_t prev, int32_t tok, size_t *len);
/* The end-of-generation ids of a vocabulary: EOS and every token whose text llama.cpp takes
 * for one (rl_specials_eog_text), at most cap written to ids; returns how many there are. */
size_t rl_tok_eog_ids(const struct rl_tok *t, uint32_t *ids, size_t cap);
/* A token's type (enum rl_tok_type in rl_bpe.h: normal, control, user-defined, byte ...) as
 * the vocabulary says it; a llama2.c vocabulary, which says none: control for BOS and EOS,
 * normal for the rest. -1 for an id out of range. */
int rl_tok_type(const struct rl_tok *t, int32_t tok);
/* How the special-token cut sees a token (rl_partition.h): 0 plain text, 1 user-defined (cut
 * from every text), 2 control, unknown or an end-of-generation text (cut only with
 * RL_TOK_SPECIAL); -1 out of range. */
int rl_tok_special_kind(const struct rl_tok *t, int32_t tok);
/* A token's text as the vocabulary spells it: SentencePiece pieces with U+2581 as ' ' and
 * BOS/EOS without llama2.c's newlines; byte-level BPE tokens in GPT-2's code points. NULL
 * out of range. */
const char *rl_tok_text(const struct rl_tok *t, int32_t tok, size_t *len);
/* The byte-level BPE vocabulary behind t (rl_bpe.h), or NULL for a SentencePiece one. */
struct rl_bpe;
const struct rl_bpe *rl_tok_bpe(const struct rl_tok *t);
/* A SentencePiece vocabulary's RL_SPM_* flags (0 for a byte-level BPE one). */
uint32_t rl_tok_spm_flags(const struct rl_tok *t);
/* Raw vocabulary piece and score of a token (NULL when out of range). */
const char *rl_tok_piece(const struct rl_tok *t, int32_t tok, size_t *len, float *score);
/* Length of the longest prefix of s[n] that does not end inside a UTF-8 character: a final
 * lead byte with fewer continuation bytes than it announces is cut off (at most 3 bytes);
 * anything that could never become a character is kept. */
size_t rl_utf8_complete(const char *s, size_t n);

#endif
