/* rl_pretok.h — pre-tokenizers: how a byte-level BPE vocabulary cuts text into words before
 * the merges. One table owns the facts: for every tokenizer.ggml.pre name llama.cpp 0c1e570
 * reads, its split expressions (applied in order, each one cutting the pieces the previous
 * left) and its flags. The splitter runs them the way llama.cpp does, so a GGUF file tokenizes
 * as llama.cpp tokenizes it:
 *   'U'  a Unicode regex on the text itself (PCRE2 with Unicode properties; \s is the Unicode
 *        White_Space set): Hugging Face tokenizers' Split, and the expressions llama.cpp
 *        matches with hand-written code (GPT-2's, Llama 3's, Qwen2's ...).
 *   'C'  any other expression with a \p{..} class: llama.cpp runs std::regex over a
 *        "collapsed" text, every non-ASCII code point replaced by one byte for its category
 *        (letter, number, punctuation, mark, symbol; whitespace as \v; others 0xD0), and each
 *        \p{..} by that byte plus the ASCII members of the category. Its quirks (\p{Lu}
 *        matches any letter, [^a-z] any non-ASCII letter) are reproduced by doing the same.
 *   'W'  an expression without \p{..}: std::wregex over code points, non-ASCII whitespace
 *        replaced by \v first.
 *   'D'  digit runs cut into groups of three from the right, the leading group joined to the
 *        text before it (llama.cpp's hand-written splitter for AFMoE and Tiny Aya).
 * A piece never crosses a cut an earlier expression made; text no expression matched stays a
 * piece of its own. Invalid UTF-8 reads as U+FFFD, as in llama.cpp. */
#ifndef RL_PRETOK_H
#define RL_PRETOK_H
#include <stddef.h>
#include <stdint.h>

enum {
	RL_PRE_IGNORE_MERGES = 1,   /* a word that is a whole token is not merged (Llama 3) */
	RL_PRE_ADD_BOS       = 2,   /* BOS before a text unless the file says otherwise */
	RL_PRE_ESCAPE_WS     = 4,   /* spaces become U+2581 before splitting (Gemma 4) */
	RL_PRE_NO_BOS_ID     = 8,   /* the vocabulary has no BOS (ChatGLM 4) */
	RL_PRE_RAW           = 16,  /* words merge as UTF-8, not GPT-2's byte code points */
	RL_PRE_NL_WHOLE      = 32,  /* a run of newlines that is a token stays whole (Gemma 4) */
};

struct rl_pretok_def {
	const char *names;             /* comma-separated tokenizer.ggml.pre values */
	const char *const *exprs;      /* NULL-terminated, applied in order */
	uint32_t flags;                /* RL_PRE_* */
};

/* Hugging Face's ByteLevel regex (GPT-2's) */
#define RL_PRETOK_HF_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* The row of a tokenizer.ggml.pre name, or NULL for one llama.cpp does not read either. */
const struct rl_pretok_def *rl_pretok_find(const char *pre_name);
/* The i-th row (NULL past the end): for tests that walk the table. */
const struct rl_pretok_def *rl_pretok_def_at(size_t i);

/* The spec a vocabulary blob carries: each expression as "<mode><expr>\0". llama = 1 picks
 * each mode as llama.cpp does; llama = 0 makes every expression 'U' (tokenizer.json). Returns
 * the length (also when it exceeds cap, writing nothing then). */
size_t rl_pretok_spec(const char *const *exprs, int llama, char *out, size_t cap);

struct rl_pretok;
/* Compiles a spec (untrusted: -EINVAL and one line in err when malformed). */
int  rl_pretok_create(const char *spec, size_t len, struct rl_pretok **out, char *err, size_t errlen);
void rl_pretok_destroy(struct rl_pretok *p);
/* Cuts text[len] into words and calls word() on each in order with its bytes (code points
 * re-encoded: an invalid byte arrives as U+FFFD). 0, the first non-zero word() result, or
 * -ENOMEM / -EINVAL (a regex that failed to run). */
int  rl_pretok_split(const struct rl_pretok *p, const char *text, size_t len,
		     int (*word)(void *ctx, const uint8_t *w, size_t n), void *ctx);

#endif
