/* rl_partition.c — special tokens cut out of a text first (see rl_partition.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/rl_partition.h"

/* The texts llama.cpp takes for end-of-generation tokens whatever their type (and then treats
 * as control tokens): llama-vocab.cpp's list */
static const char *const eog_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
};

int rl_specials_eog_text(const char *s, size_t n)
{
	for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++)
		if (strlen(eog_texts[i]) == n && !memcmp(eog_texts[i], s, n))
			return 1;
	return 0;
}

static int longest_first(const void *a, const void *b)
{
	const struct rl_special *x = a, *y = b;
	return x->len != y->len ? (x->len < y->len) - (x->len > y->len) : (x->id > y->id) - (x->id < y->id);
}

int rl_specials_build(struct rl_specials *sp, uint32_t n_vocab,
		      int (*is_special)(const void *v, uint32_t id),
		      const char *(*text)(const void *v, uint32_t id, uint32_t *len), const void *v)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < n_vocab; i++)
		n += is_special(v, i) != 0;
	sp->n = 0;
	sp->s = malloc((n + 1) * sizeof *sp->s);
	if (!sp->s)
		return -ENOMEM;
	for (uint32_t i = 0; i < n_vocab; i++) {
		int k = is_special(v, i);
		uint32_t l = 0;
		const char *t = k ? text(v, i, &l) : NULL;
		if (t && l)                /* an empty text never matches */
			sp->s[sp->n++] = (struct rl_special){ (int32_t)i, l, t, k == 2 };
	}
	qsort(sp->s, sp->n, sizeof *sp->s, longest_first);
	return 0;
}

void rl_specials_free(struct rl_specials *sp)
{
	free(sp->s);
	sp->s = NULL;
	sp->n = 0;
}

long rl_partition(const struct rl_specials *sp, const char *s, size_t n, int parse_control,
		  struct rl_frag **out)
{
	size_t cap = 16, nf = 0;
	struct rl_frag *f = malloc(cap * sizeof *f), *g = NULL;
	*out = NULL;
	if (!f)
		return -ENOMEM;
	if (n)
		f[nf++] = (struct rl_frag){ 0, n, -1 };
	for (uint32_t k = 0; k < sp->n && nf; k++) {
		const struct rl_special *sk = &sp->s[k];
		if (sk->control && !parse_control)
			continue;
		const char *t = sk->text;
		size_t l = sk->len;
		/* a quick look first: most specials are in no fragment */
		int any = 0;
		for (size_t i = 0; i < nf && !any; i++)
			any = f[i].tok < 0 && f[i].len >= l && memmem(s + f[i].off, f[i].len, t, l);
		if (!any)
			continue;
		size_t gcap = nf * 2 + 8, ng = 0;
		g = malloc(gcap * sizeof *g);
		if (!g)
			goto nomem;
		for (size_t i = 0; i < nf; i++) {
			size_t off = f[i].off, len = f[i].len;
			const char *m;
			while (f[i].tok < 0 && len >= l && (m = memmem(s + off, len, t, l))) {
				size_t at = (size_t)(m - s);
				if (ng + 3 > gcap) {
					struct rl_frag *h = realloc(g, (gcap *= 2) * sizeof *g);
					if (!h)
						goto nomem;
					g = h;
				}
				if (at > off)
					g[ng++] = (struct rl_frag){ off, at - off, -1 };
				g[ng++] = (struct rl_frag){ at, l, sk->id };
				len -= at + l - off;
				off = at + l;
			}
			if (ng + 1 > gcap) {
				struct rl_frag *h = realloc(g, (gcap *= 2) * sizeof *g);
				if (!h)
					goto nomem;
				g = h;
			}
			if (f[i].tok >= 0)
				g[ng++] = f[i];
			else if (len)
				g[ng++] = (struct rl_frag){ off, len, -1 };
		}
		free(f);
		f = g;
		g = NULL;
		nf = ng;
	}
	*out = f;
	return (long)nf;
nomem:
	free(f);
	free(g);
	return -ENOMEM;
}
