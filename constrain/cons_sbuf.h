/* cons_sbuf.h — a growing text buffer, always NUL-terminated: what the expression writers
 * (cons_schema.c, cons_gbnf.c) and the tool-call prompt and regex builder (clients/
 * chat_tools.c) append their text to. A failed allocation sets oom and makes later appends do
 * nothing, so a writer appends freely and checks once at the end. */
#ifndef RL_CONS_SBUF_H
#define RL_CONS_SBUF_H
#include <stdlib.h>
#include <string.h>

struct rl_sb { char *p; size_t n, cap; int oom; };

static inline void rl_sb_putn(struct rl_sb *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t nc = (b->n + n + 1) * 2;
		char *np = realloc(b->p, nc);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = nc;
	}
	if (n)                                 /* s may be NULL when n is 0 */
		memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static inline void rl_sb_puts(struct rl_sb *b, const char *s) { rl_sb_putn(b, s, strlen(s)); }

/* s inserted at offset at (at <= b->n) */
static inline void rl_sb_insert(struct rl_sb *b, size_t at, const char *s)
{
	size_t k = strlen(s), tail = b->n - at;
	rl_sb_putn(b, s, k);                   /* room first */
	if (b->oom)
		return;
	memmove(b->p + at + k, b->p + at, tail);
	memcpy(b->p + at, s, k);
}
#endif
