/* rl_partition.h — cutting a text at the special tokens written in it, before any
 * pre-tokenizer or merge runs, as llama.cpp's tokenizer_st_partition does: user-defined tokens
 * always, control and unknown tokens only when the caller parses specials; the longest token
 * text first, each one cut out of every remaining stretch of text, left to right. Shared by
 * the SentencePiece (rl_tok.c) and byte-level BPE (rl_bpe.c) encoders. */
#ifndef RL_PARTITION_H
#define RL_PARTITION_H
#include <stddef.h>
#include <stdint.h>

/* The special tokens of a vocabulary, in the order they are tried. */
struct rl_special {
	int32_t id;
	uint32_t len;
	const char *text;              /* not NUL-terminated; owned by the vocabulary */
	int control;                   /* control or unknown: cut only when parsing specials */
};
struct rl_specials { uint32_t n; struct rl_special *s; };

/* A stretch of the text (tok < 0) or a special token found in it. */
struct rl_frag { size_t off, len; int32_t tok; };

/* Fills sp from a vocabulary: is_special(id) says 0 (not special), 1 (user-defined) or 2
 * (control/unknown); text(id) gives its text. 0 or -ENOMEM. */
int  rl_specials_build(struct rl_specials *sp, uint32_t n_vocab,
		       int (*is_special)(const void *v, uint32_t id),
		       const char *(*text)(const void *v, uint32_t id, uint32_t *len), const void *v);
void rl_specials_free(struct rl_specials *sp);
/* 1 when a token's text is one llama.cpp takes for an end of generation ("<|im_end|>",
 * "<end_of_turn>", "</s>" ...) whatever the token's type: such a token ends a request and is
 * a control token, cut from a text only when specials are parsed. */
int  rl_specials_eog_text(const char *s, size_t n);
/* Cuts s[n]: *out (malloc'd) gets the fragments in order; returns their count or -ENOMEM. */
long rl_partition(const struct rl_specials *sp, const char *s, size_t n, int parse_control,
		  struct rl_frag **out);
#endif
