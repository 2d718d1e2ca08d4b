/* cons_regex.c — regular expressions to a byte-level DFA: a parser for a subset of Python's
 * re syntax into a small tree, Thompson's construction into an NFA over byte ranges, subset
 * construction (eager, capped) into a DFA, and the pruning that makes state 0 the only dead one.
 *
 * Syntax: literals (UTF-8), escapes (\n \t \r \f \v \a \0 \xHH \uHHHH \UHHHHHHHH, escaped
 * punctuation), classes [...] with ranges and ^, '.', \d \w \s and \D \W \S (see cls_perl:
 * what they admit matches under ASCII and Unicode meanings alike), groups (...) (?:...) (?P<name>...), alternation, * + ? {m} {m,} {m,n}
 * {,n}; lazy quantifiers are taken (the set of whole matches does not depend on laziness).
 * Matching is always of the whole output, so '^' first and '$' last are accepted and mean
 * nothing more. Classes and '.' are over code points (compiled to UTF-8 byte sequences;
 * surrogates are never matched: they are no valid UTF-8). Refused by name: backreferences,
 * lookaround, atomic groups, possessive quantifiers, \b \B \A \Z, inline flags, '^'/'$'
 * elsewhere. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "constrain/cons_internal.h"

#define MAX_REPEAT 100000              /* {m,n} bounds: larger is refused by name (the NFA and DFA
					 * bounds refuse what grows too large) */
#define MAX_NFA    (1u << 22)          /* NFA states: the expression's expanded size */
#define MAX_WORK   (1ull << 29)        /* NFA state visits while building the DFA: the bound on
					* a compile's time (~1 s) where the states stay few but
					* each is a large set (long repetitions of long pieces) */
#define MAX_CP     0x10FFFFu

/* ---- the tree (struct rl_re_node, cons_internal.h) -------------------------------------- */

struct parser {
	const unsigned char *s;
	size_t n, i;
	unsigned flags;
	int json;                      /* inside (?J:...) */
	int cls_neg;                   /* inside a [^...] class */
	int depth;
	char *err;
	size_t errlen;
	int failed;
	const char *const *names;      /* RL_RE_RULES: the rule set's names */
	size_t nnames;
};

static int fail(struct parser *p, const char *fmt, ...)
{
	if (!p->failed && p->err && p->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(p->err, p->errlen, fmt, ap);
		va_end(ap);
	}
	p->failed = 1;
	return -EINVAL;
}

static void node_free(struct rl_re_node *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->nkid; i++)
		node_free(x->kid[i]);
	free(x->kid);
	free(x->r);
	free(x);
}

static struct rl_re_node *node_new(struct parser *p, int kind)
{
	struct rl_re_node *x = calloc(1, sizeof *x);
	if (!x) {
		fail(p, "out of memory");
		return NULL;
	}
	x->kind = kind;
	x->json = p->json;
	return x;
}

static int kid_add(struct parser *p, struct rl_re_node *x, struct rl_re_node *k)
{
	struct rl_re_node **nk = realloc(x->kid, (x->nkid + 1) * sizeof *nk);
	if (!nk) {
		node_free(k);
		return fail(p, "out of memory");
	}
	x->kid = nk;
	x->kid[x->nkid++] = k;
	return 0;
}

/* class building: ranges appended, then normalised */
struct cls { struct rl_re_range *r; size_t n, cap; };
static int cls_add(struct cls *c, uint32_t lo, uint32_t hi)
{
	if (RL_GROW(c->r, c->cap, c->n + 1, 8))
		return -ENOMEM;
	c->r[c->n++] = (struct rl_re_range){ lo, hi };
	return 0;
}
static int by_lo(const void *a, const void *b)
{
	const struct rl_re_range *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}
static void cls_norm(struct cls *c)
{
	if (!c->n)
		return;
	qsort(c->r, c->n, sizeof *c->r, by_lo);
	size_t o = 0;
	for (size_t i = 1; i < c->n; i++) {
		if (c->r[i].lo <= c->r[o].hi + 1) {
			if (c->r[i].hi > c->r[o].hi)
				c->r[o].hi = c->r[i].hi;
		} else
			c->r[++o] = c->r[i];
	}
	c->n = o + 1;
}
static int cls_negate(struct cls *c)
{
	cls_norm(c);
	struct cls o = { 0 };
	uint32_t at = 0;
	int rc = 0;
	for (size_t i = 0; i < c->n && !rc; i++) {
		if (c->r[i].lo > at)
			rc = cls_add(&o, at, c->r[i].lo - 1);
		at = c->r[i].hi + 1;
	}
	if (!rc && at <= MAX_CP)
		rc = cls_add(&o, at, MAX_CP);
	free(c->r);
	*c = o;
	return rc;
}

/* \d \w \s and their complements into c. Which characters they mean depends on the reader
 * (Python's re: Unicode; re.ASCII and ECMA-262's \d \w: ASCII; ECMA-262's \s: Unicode spaces),
 * and an output must match under each (JSON Schema's `pattern` is checked by validators of
 * either kind). So a set that is admitted as it is takes the narrow, ASCII meaning, and a set
 * whose complement is admitted (\D \W \S, or \d \w \s inside [^...]) the wide one: \s with
 * every Unicode space either reader knows, \d and \w with all of non-ASCII. [^\D] and its
 * kind flip once more. in_neg: c is a [^...] class's member list. */
static int cls_perl(struct cls *c, int ch, int in_neg)
{
	static const struct rl_re_range uspace[] = {            /* beyond ASCII's \t-\r and ' ' */
		{ 0x1C, 0x1F }, { 0x85, 0x85 }, { 0xA0, 0xA0 }, { 0x1680, 0x1680 }, { 0x2000, 0x200A },
		{ 0x2028, 0x2029 }, { 0x202F, 0x202F }, { 0x205F, 0x205F }, { 0x3000, 0x3000 }, { 0xFEFF, 0xFEFF },
	};
	int upper = ch < 'a', wide = upper != !!in_neg;
	struct cls t = { 0 };
	int rc = 0;
	switch (ch | 0x20) {
	case 'd': rc = cls_add(&t, '0', '9'); break;
	case 'w': rc = cls_add(&t, '0', '9') | cls_add(&t, 'A', 'Z') | cls_add(&t, 'a', 'z') | cls_add(&t, '_', '_'); break;
	case 's':
		rc = cls_add(&t, '\t', '\r') | cls_add(&t, ' ', ' ');
		for (size_t i = 0; wide && i < sizeof uspace / sizeof *uspace; i++)
			rc |= cls_add(&t, uspace[i].lo, uspace[i].hi);
		break;
	}
	if (wide && (ch | 0x20) != 's')
		rc |= cls_add(&t, 0x80, MAX_CP);
	if (!rc && upper)
		rc = cls_negate(&t);
	for (size_t i = 0; i < t.n && !rc; i++)
		rc = cls_add(c, t.r[i].lo, t.r[i].hi);
	free(t.r);
	return rc ? -ENOMEM : 0;
}

static struct rl_re_node *class_node(struct parser *p, struct cls *c)
{
	cls_norm(c);
	struct rl_re_node *x = node_new(p, N_CLASS);
	if (!x) {
		free(c->r);
		return NULL;
	}
	x->r = c->r;
	x->nr = c->n;
	return x;
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* one UTF-8 code point at p->i (validated) */
static int read_cp(struct parser *p, uint32_t *cp)
{
	const unsigned char *s = p->s + p->i;
	size_t left = p->n - p->i;
	uint32_t c = s[0];
	size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
	if (!k || k > left)
		return fail(p, "invalid UTF-8 at byte %zu of the expression", p->i);
	if (k > 1)
		c &= 0x3F >> (k - 1);
	for (size_t j = 1; j < k; j++) {
		if ((s[j] & 0xC0) != 0x80)
			return fail(p, "invalid UTF-8 at byte %zu of the expression", p->i);
		c = c << 6 | (s[j] & 0x3F);
	}
	static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	if (c < least[k] || c > MAX_CP || (c >= 0xD800 && c <= 0xDFFF))
		return fail(p, "invalid UTF-8 at byte %zu of the expression", p->i);
	p->i += k;
	*cp = c;
	return 0;
}

/* An escape after '\' (p->i at the char after it). Sets *cp for a single code point, or adds
 * a Perl class to c (when c is given) and sets *cp = UINT32_MAX. */
static int read_escape(struct parser *p, uint32_t *cp, struct cls *c, int in_class)
{
	if (p->i >= p->n)
		return fail(p, "a '\\' ends the expression");
	int ch = p->s[p->i];
	switch (ch) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
		if (!c)
			return fail(p, "a class range ends in '\\%c'", ch);
		p->i++;
		if (cls_perl(c, ch, in_class && p->cls_neg))
			return fail(p, "out of memory");
		*cp = UINT32_MAX;
		return 0;
	case 'n': *cp = '\n'; p->i++; return 0;
	case 't': *cp = '\t'; p->i++; return 0;
	case 'r': *cp = '\r'; p->i++; return 0;
	case 'f': *cp = '\f'; p->i++; return 0;
	case 'v': *cp = '\v'; p->i++; return 0;
	case 'a': *cp = 7; p->i++; return 0;
	case '0': {                            /* octal, up to 3 digits as Python */
		uint32_t v = 0;
		size_t k = 0;
		while (k < 3 && p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '7') {
			v = v * 8 + (p->s[p->i++] - '0');
			k++;
		}
		*cp = v;
		return 0;
	}
	case 'x': case 'u': case 'U': {
		size_t k = ch == 'x' ? 2 : ch == 'u' ? 4 : 8;
		uint32_t v = 0;
		for (size_t j = 1; j <= k; j++) {
			int h = p->i + j < p->n ? hexval(p->s[p->i + j]) : -1;
			if (h < 0)
				return fail(p, "'\\%c' needs %zu hex digits", ch, k);
			v = v << 4 | (uint32_t)h;
		}
		if (v > MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
			return fail(p, "'\\%c' names no Unicode scalar value", ch);
		p->i += k + 1;
		*cp = v;
		return 0;
	}
	case 'b':
		if (in_class) {
			*cp = 8;
			p->i++;
			return 0;
		}
		return fail(p, "word boundaries ('\\b') are not supported");
	case 'B': return fail(p, "word boundaries ('\\B') are not supported");
	case 'A': case 'Z': case 'z': case 'G':
		return fail(p, "the anchor '\\%c' is not supported (matching is anchored at both ends)", ch);
	case 'N': return fail(p, "named characters ('\\N{...}') are not supported");
	case 'p': case 'P': return fail(p, "Unicode properties ('\\%c{...}') are not supported", ch);
	case 'k': return fail(p, "backreferences ('\\k') are not supported");
	default:
		if (ch >= '1' && ch <= '9')
			return fail(p, "backreferences ('\\%c') are not supported", ch);
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
			return fail(p, "bad escape '\\%c'", ch);
		return read_cp(p, cp);         /* escaped punctuation or any other char: itself */
	}
}

static struct rl_re_node *parse_alt(struct parser *p, int top);

static struct rl_re_node *parse_class(struct parser *p)
{
	struct cls c = { 0 };
	int neg = 0;
	size_t open = p->i - 1;
	if (p->i < p->n && p->s[p->i] == '^') {
		neg = 1;
		p->i++;
	}
	p->cls_neg = neg;
	int first = 1;
	for (;;) {
		if (p->i >= p->n) {
			free(c.r);
			fail(p, "the class opened at byte %zu is not closed", open);
			return NULL;
		}
		if (p->s[p->i] == ']' && !first) {
			p->i++;
			break;
		}
		first = 0;
		uint32_t lo, hi;
		if (p->s[p->i] == '\\') {
			p->i++;
			if (read_escape(p, &lo, &c, 1))
				goto bad;
		} else if (read_cp(p, &lo))
			goto bad;
		if (lo == UINT32_MAX)
			continue;                       /* \d etc.: added */
		hi = lo;
		if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
			p->i++;
			if (p->s[p->i] == '\\') {
				p->i++;
				if (read_escape(p, &hi, NULL, 1))
					goto bad;
				if (hi == UINT32_MAX) {
					fail(p, "a class range ends in a class escape");
					goto bad;
				}
			} else if (read_cp(p, &hi))
				goto bad;
			if (hi < lo) {
				fail(p, "the class range at byte %zu is reversed", p->i);
				goto bad;
			}
		}
		if (cls_add(&c, lo, hi)) {
			fail(p, "out of memory");
			goto bad;
		}
	}
	if (neg && cls_negate(&c)) {
		fail(p, "out of memory");
		goto bad;
	}
	return class_node(p, &c);
bad:
	free(c.r);
	return NULL;
}

/* {m}, {m,}, {m,n}, {,n} at p->i (on '{'): 1 and the bounds, 0 when it is no quantifier (the
 * '{' is then a literal, as in Python) */
static int read_braces(struct parser *p, int *mn, int *mx)
{
	size_t i = p->i + 1;
	long a = -1, b = -1;
	while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') {
		a = (a < 0 ? 0 : a) * 10 + (p->s[i++] - '0');
		if (a > 1000000)
			a = 1000000;
	}
	if (i < p->n && p->s[i] == '}') {
		if (a < 0)
			return 0;
		b = a;
	} else if (i < p->n && p->s[i] == ',') {
		i++;
		while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') {
			b = (b < 0 ? 0 : b) * 10 + (p->s[i++] - '0');
			if (b > 1000000)
				b = 1000000;
		}
		if (i >= p->n || p->s[i] != '}')
			return 0;
		if (a < 0)
			a = 0;
	} else
		return 0;
	p->i = i + 1;
	*mn = (int)a;
	*mx = (int)b;
	return 1;
}

static struct rl_re_node *parse_atom(struct parser *p, int *anchor_end)
{
	int ch = p->s[p->i];
	struct cls c = { 0 };
	uint32_t cp;
	switch (ch) {
	case '(': {
		p->i++;
		int was_json = p->json;
		if (p->i < p->n && p->s[p->i] == '?') {
			const char *q = (const char *)p->s + p->i + 1;
			size_t left = p->n - p->i - 1;
#define AT(lit) (left >= sizeof lit - 1 && !memcmp(q, lit, sizeof lit - 1))
			if (AT(":"))
				p->i += 2;
			else if (AT("P<") || AT("<") ) {
				if (AT("<=") || AT("<!")) {
					fail(p, "lookbehind ('(?%.2s') is not supported", q);
					return NULL;
				}
				const char *e = memchr(q, '>', left);
				if (!e) {
					fail(p, "a group name is not closed");
					return NULL;
				}
				p->i = (size_t)((const unsigned char *)e - p->s) + 1;
			} else if (AT("=") || AT("!")) {
				fail(p, "lookahead ('(?%c') is not supported", *q);
				return NULL;
			} else if (AT("P=")) {
				fail(p, "backreferences ('(?P=') are not supported");
				return NULL;
			} else if (AT(">")) {
				fail(p, "atomic groups ('(?>') are not supported");
				return NULL;
			} else if (AT("#")) {
				fail(p, "comments ('(?#') are not supported");
				return NULL;
			} else if (AT("(")) {
				fail(p, "conditional groups ('(?(') are not supported");
				return NULL;
			} else if (AT("&") && (p->flags & RL_RE_RULES)) {
				const char *e = memchr(q, ')', left), *nm = q + 1;
				size_t k = e ? (size_t)(e - nm) : 0;
				for (size_t r = 0; e && r < p->nnames; r++)
					if (strlen(p->names[r]) == k && !memcmp(p->names[r], nm, k)) {
						struct rl_re_node *x = node_new(p, N_REF);
						if (x)
							x->min = (int)r;
						p->i = (size_t)((const unsigned char *)e - p->s) + 1;
						return x;
					}
				fail(p, e ? "'(?&%.*s)' names no rule" : "a '(?&' is not closed", (int)(k > 60 ? 60 : k), nm);
				return NULL;
			} else if (AT("J:") && (p->flags & RL_RE_INTERNAL)) {
				p->i += 3;
				p->json = 1;
			} else {
				fail(p, "inline flags ('(?%c') are not supported", left ? *q : '?');
				return NULL;
			}
#undef AT
		}
		if (++p->depth > 200) {
			fail(p, "groups nest deeper than 200");
			return NULL;
		}
		struct rl_re_node *x = parse_alt(p, p->json && !was_json);
		p->depth--;
		p->json = was_json;
		if (!x)
			return NULL;
		if (p->i >= p->n || p->s[p->i] != ')') {
			node_free(x);
			fail(p, "a '(' is not closed");
			return NULL;
		}
		p->i++;
		return x;
	}
	case '[':
		p->i++;
		return parse_class(p);
	case '.':
		p->i++;
		if (cls_add(&c, '\n', '\n') || cls_negate(&c)) {
			free(c.r);
			fail(p, "out of memory");
			return NULL;
		}
		return class_node(p, &c);
	case '\\':
		p->i++;
		if (read_escape(p, &cp, &c, 0)) {
			free(c.r);
			return NULL;
		}
		if (cp != UINT32_MAX && cls_add(&c, cp, cp)) {
			fail(p, "out of memory");
			return NULL;
		}
		return class_node(p, &c);
	case '*': case '+': case '?':
		fail(p, "nothing to repeat at byte %zu ('%c')", p->i, ch);
		return NULL;
	case ')':
		fail(p, "unbalanced ')' at byte %zu", p->i);
		return NULL;
	case '$':
		*anchor_end = 1;
		p->i++;
		return node_new(p, N_EMPTY);
	default:
		if (ch == '{') {
			int a, b;
			size_t save = p->i;
			if (read_braces(p, &a, &b)) {
				p->i = save;
				fail(p, "nothing to repeat at byte %zu ('{')", p->i);
				return NULL;
			}
		}
		if (read_cp(p, &cp))
			return NULL;
		if (cls_add(&c, cp, cp)) {
			fail(p, "out of memory");
			return NULL;
		}
		return class_node(p, &c);
	}
}

/* a sequence; top: the outermost level of the expression (or of a (?J:...) body), where '^'
 * may open and '$' may close a branch */
static struct rl_re_node *parse_seq(struct parser *p, int top)
{
	struct rl_re_node *cat = node_new(p, N_CAT);
	if (!cat)
		return NULL;
	int ended = 0;                          /* a '$' was read: only the branch's end may follow */
	if (top && p->i < p->n && p->s[p->i] == '^')
		p->i++;
	while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
		if (ended || p->s[p->i] == '^') {
			node_free(cat);
			fail(p, "'%c' inside the expression is not supported (matching is anchored at both ends)",
			     ended ? '$' : '^');
			return NULL;
		}
		int anchor_end = 0;
		struct rl_re_node *a = parse_atom(p, &anchor_end);
		if (!a) {
			node_free(cat);
			return NULL;
		}
		if (anchor_end) {
			if (!top) {
				node_free(a);
				node_free(cat);
				fail(p, "'$' inside the expression is not supported (matching is anchored at both ends)");
				return NULL;
			}
			ended = 1;
			node_free(a);
			continue;
		}
		int reps = 0;
		while (p->i < p->n) {
			int ch = p->s[p->i], mn, mx;
			if (ch == '*' || ch == '+' || ch == '?') {
				mn = ch == '+';
				mx = ch == '?' ? 1 : -1;
				p->i++;
			} else if (ch == '{' && read_braces(p, &mn, &mx)) {
				if (mx >= 0 && mx < mn) {
					node_free(a);
					node_free(cat);
					fail(p, "the repetition {%d,%d} has min above max", mn, mx);
					return NULL;
				}
			} else
				break;
			if (reps++) {
				node_free(a);
				node_free(cat);
				fail(p, "multiple repeat at byte %zu", p->i - 1);
				return NULL;
			}
			if (mn > MAX_REPEAT || mx > MAX_REPEAT) {
				node_free(a);
				node_free(cat);
				fail(p, "repetition counts above %d are not supported", MAX_REPEAT);
				return NULL;
			}
			if (p->i < p->n && p->s[p->i] == '?')
				p->i++;                 /* lazy: the same whole matches */
			else if (p->i < p->n && p->s[p->i] == '+') {
				node_free(a);
				node_free(cat);
				fail(p, "possessive quantifiers are not supported");
				return NULL;
			}
			struct rl_re_node *r = node_new(p, N_REP);
			if (!r || kid_add(p, r, a)) {
				free(r);
				node_free(cat);
				return NULL;
			}
			r->min = mn;
			r->max = mx;
			a = r;
		}
		if (kid_add(p, cat, a)) {
			node_free(cat);
			return NULL;
		}
	}
	return cat;
}

static struct rl_re_node *parse_alt(struct parser *p, int top)
{
	struct rl_re_node *alt = node_new(p, N_ALT);
	if (!alt)
		return NULL;
	for (;;) {
		struct rl_re_node *s = parse_seq(p, top);
		if (!s || kid_add(p, alt, s)) {
			node_free(alt);
			return NULL;
		}
		if (p->i < p->n && p->s[p->i] == '|')
			p->i++;
		else
			break;
	}
	return alt;
}

/* ---- the NFA ---------------------------------------------------------------------------- */
enum { S_EPS, S_BYTE, S_MATCH };
struct nst { uint8_t kind, lo, hi; int32_t out, out1; };
struct nfa { struct nst *s; uint32_t n, cap; int oom, big; };
struct frag { int32_t start, end; };    /* end: an S_EPS whose out is still -1 */

static int32_t nst_new(struct nfa *a, int kind, int lo, int hi)
{
	if (a->n == a->cap) {
		if (a->cap >= MAX_NFA) {
			a->big = 1;
			return -1;
		}
		if (RL_GROW(a->s, a->cap, a->n + 1, 256)) {
			a->oom = 1;
			return -1;
		}
	}
	a->s[a->n] = (struct nst){ (uint8_t)kind, (uint8_t)lo, (uint8_t)hi, -1, -1 };
	return (int32_t)a->n++;
}
#define BAD(a) ((a)->oom || (a)->big)

static struct frag frag_empty(struct nfa *a)
{
	int32_t s = nst_new(a, S_EPS, 0, 0);
	return (struct frag){ s, s };
}

/* start: an eps state; add one more branch out of it (a chain of splits) */
static int32_t branch_from(struct nfa *a, int32_t *tail)
{
	/* *tail is an eps state with a free out or out1 slot; returns it or a new split */
	struct nst *t = &a->s[*tail];
	if (t->out < 0)
		return *tail;
	if (t->out1 < 0)
		return *tail;
	int32_t n = nst_new(a, S_EPS, 0, 0);
	if (n < 0)
		return -1;
	/* move the second branch of *tail to n and chain */
	a->s[n].out = a->s[*tail].out1;
	a->s[*tail].out1 = n;
	*tail = n;
	return n;
}
static void eps_link(struct nfa *a, int32_t from, int32_t to)
{
	if (a->s[from].out < 0)
		a->s[from].out = to;
	else
		a->s[from].out1 = to;
}

/* one byte sequence of ranges lo[k]..hi[k] from start to end */
static void add_seq(struct nfa *a, int32_t *split, int32_t end, const uint8_t *lo, const uint8_t *hi, int k)
{
	int32_t from = branch_from(a, split);
	if (from < 0)
		return;
	int32_t prev = -1, first = -1;
	for (int j = 0; j < k; j++) {
		int32_t b = nst_new(a, S_BYTE, lo[j], hi[j]);
		if (b < 0)
			return;
		if (prev >= 0)
			a->s[prev].out = b;
		else
			first = b;
		prev = b;
	}
	a->s[prev].out = end;
	eps_link(a, from, first);
}

static int utf8_enc(uint32_t c, uint8_t *b)
{
	if (c < 0x80) { b[0] = (uint8_t)c; return 1; }
	if (c < 0x800) { b[0] = 0xC0 | c >> 6; b[1] = 0x80 | (c & 0x3F); return 2; }
	if (c < 0x10000) { b[0] = 0xE0 | c >> 12; b[1] = 0x80 | (c >> 6 & 0x3F); b[2] = 0x80 | (c & 0x3F); return 3; }
	b[0] = 0xF0 | c >> 18; b[1] = 0x80 | (c >> 12 & 0x3F); b[2] = 0x80 | (c >> 6 & 0x3F); b[3] = 0x80 | (c & 0x3F);
	return 4;
}

/* code points lo..hi (no surrogates inside) as UTF-8 byte-range sequences (RE2's split) */
static void utf8_range(struct nfa *a, int32_t *split, int32_t end, uint32_t lo, uint32_t hi)
{
	if (lo > hi || BAD(a))
		return;
	static const uint32_t lim[3] = { 0x7F, 0x7FF, 0xFFFF };
	for (int i = 0; i < 3; i++)
		if (lo <= lim[i] && hi > lim[i]) {
			utf8_range(a, split, end, lo, lim[i]);
			utf8_range(a, split, end, lim[i] + 1, hi);
			return;
		}
	uint8_t bl[4], bh[4];
	int k = utf8_enc(lo, bl);
	for (int i = 1; i < k; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if (lo & m) {
				utf8_range(a, split, end, lo, lo | m);
				utf8_range(a, split, end, (lo | m) + 1, hi);
				return;
			}
			if ((hi & m) != m) {
				utf8_range(a, split, end, lo, (hi & ~m) - 1);
				utf8_range(a, split, end, hi & ~m, hi);
				return;
			}
		}
	}
	utf8_enc(hi, bh);
	add_seq(a, split, end, bl, bh, k);
}

/* lo..hi as UTF-8, surrogates left out */
static void cp_range(struct nfa *a, int32_t *split, int32_t end, uint32_t lo, uint32_t hi)
{
	if (lo < 0xD800 && hi > 0xDFFF) {
		utf8_range(a, split, end, lo, 0xD7FF);
		utf8_range(a, split, end, 0xE000, hi);
		return;
	}
	if (lo >= 0xD800 && hi <= 0xDFFF)
		return;
	if (lo >= 0xD800 && lo <= 0xDFFF)
		lo = 0xE000;
	if (hi >= 0xD800 && hi <= 0xDFFF)
		hi = 0xD7FF;
	utf8_range(a, split, end, lo, hi);
}

static int is_json_special(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

static struct frag compile_class(struct nfa *a, const struct rl_re_node *x)
{
	int32_t start = nst_new(a, S_EPS, 0, 0), end = nst_new(a, S_EPS, 0, 0);
	if (BAD(a))
		return (struct frag){ -1, -1 };
	int32_t split = start;
	for (size_t i = 0; i < x->nr; i++) {
		uint32_t lo = x->r[i].lo, hi = x->r[i].hi;
		if (x->json) {                  /* escaped forms of the specials, then the rest */
			for (uint32_t c = lo; c <= hi && c < 0x80; c++) {
				if (!is_json_special(c))
					continue;
				char e[8];
				int k = c == '"' ? snprintf(e, sizeof e, "\\\"") : c == '\\' ? snprintf(e, sizeof e, "\\\\")
					: c == '\n' ? snprintf(e, sizeof e, "\\n") : c == '\t' ? snprintf(e, sizeof e, "\\t")
					: c == '\r' ? snprintf(e, sizeof e, "\\r") : c == 8 ? snprintf(e, sizeof e, "\\b")
					: c == 12 ? snprintf(e, sizeof e, "\\f") : snprintf(e, sizeof e, "\\u%04x", c);
				add_seq(a, &split, end, (const uint8_t *)e, (const uint8_t *)e, k);
			}
			if (lo < 0x20)
				lo = 0x20;
			for (; lo <= hi; ) {         /* cut out '"' and '\\' */
				uint32_t stop = hi;
				if (lo <= '"' && hi >= '"')
					stop = lo == '"' ? lo : '"' - 1;
				else if (lo <= '\\' && hi >= '\\')
					stop = lo == '\\' ? lo : '\\' - 1;
				if (!is_json_special(lo) || lo != stop)
					cp_range(a, &split, end, lo, stop);
				lo = stop + 1;
				if (!lo)
					break;
			}
			continue;
		}
		cp_range(a, &split, end, lo, hi);
	}
	return (struct frag){ start, end };
}

static struct frag compile(struct nfa *a, const struct rl_re_node *x)
{
	struct frag f = { -1, -1 };
	if (BAD(a))
		return f;
	switch (x->kind) {
	case N_EMPTY:
		return frag_empty(a);
	case N_CLASS:
		return compile_class(a, x);
	case N_CAT:
		f = frag_empty(a);
		for (size_t i = 0; i < x->nkid && !BAD(a); i++) {
			struct frag k = compile(a, x->kid[i]);
			if (BAD(a))
				break;
			a->s[f.end].out = k.start;
			f.end = k.end;
		}
		return f;
	case N_ALT: {
		if (x->nkid == 1)
			return compile(a, x->kid[0]);
		int32_t start = nst_new(a, S_EPS, 0, 0), end = nst_new(a, S_EPS, 0, 0);
		int32_t split = start;
		for (size_t i = 0; i < x->nkid && !BAD(a); i++) {
			struct frag k = compile(a, x->kid[i]);
			if (BAD(a))
				break;
			int32_t from = branch_from(a, &split);
			if (from < 0)
				break;
			eps_link(a, from, k.start);
			a->s[k.end].out = end;
		}
		return (struct frag){ start, end };
	}
	case N_REP: {
		f = frag_empty(a);
		for (int i = 0; i < x->min && !BAD(a); i++) {
			struct frag k = compile(a, x->kid[0]);
			if (BAD(a))
				break;
			a->s[f.end].out = k.start;
			f.end = k.end;
		}
		if (BAD(a))
			return f;
		if (x->max < 0) {               /* loop: split -> body -> back to split */
			int32_t sp = nst_new(a, S_EPS, 0, 0), end = nst_new(a, S_EPS, 0, 0);
			struct frag k = compile(a, x->kid[0]);
			if (BAD(a))
				return f;
			a->s[f.end].out = sp;
			a->s[sp].out = k.start;
			a->s[sp].out1 = end;
			a->s[k.end].out = sp;
			f.end = end;
			return f;
		}
		int32_t end = nst_new(a, S_EPS, 0, 0);
		for (int i = x->min; i < x->max && !BAD(a); i++) {   /* nested optionals */
			int32_t sp = nst_new(a, S_EPS, 0, 0);
			struct frag k = compile(a, x->kid[0]);
			if (BAD(a))
				return f;
			a->s[f.end].out = sp;
			a->s[sp].out = k.start;
			a->s[sp].out1 = end;
			f.end = k.end;
		}
		if (!BAD(a)) {
			a->s[f.end].out = end;
			f.end = end;
		}
		return f;
	}
	}
	return f;
}

/* ---- subset construction ---------------------------------------------------------------- */
struct builder {
	const struct nfa *a;
	uint32_t *mark, gen;
	int32_t *stack;
	uint32_t *pool;                /* every DFA state's sorted NFA set, back to back */
	size_t npool, cappool;
	uint64_t *off;                 /* [state] start in pool; off[n] = npool */
	uint32_t n, cap;
	struct rl_idtab hash;          /* the states by their sets */
};

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return a < b ? -1 : a > b;
}

/* the epsilon closure of seeds[k] into out (byte and match states only, sorted) */
static uint32_t closure(struct builder *b, const int32_t *seeds, uint32_t k, uint32_t *out)
{
	uint32_t no = 0, sp = 0;
	b->gen++;
	for (uint32_t i = 0; i < k; i++)
		if (b->mark[seeds[i]] != b->gen) {
			b->mark[seeds[i]] = b->gen;
			b->stack[sp++] = seeds[i];
		}
	while (sp) {
		int32_t s = b->stack[--sp];
		const struct nst *x = &b->a->s[s];
		if (x->kind != S_EPS) {
			out[no++] = (uint32_t)s;
			continue;
		}
		if (x->out >= 0 && b->mark[x->out] != b->gen) {
			b->mark[x->out] = b->gen;
			b->stack[sp++] = x->out;
		}
		if (x->out1 >= 0 && b->mark[x->out1] != b->gen) {
			b->mark[x->out1] = b->gen;
			b->stack[sp++] = x->out1;
		}
	}
	qsort(out, no, sizeof *out, cmp_u32);
	return no;
}


static uint64_t state_hash(const void *ctx, uint32_t id)
{
	const struct builder *b = ctx;
	return rl_hash_ids(b->pool + b->off[id], (uint32_t)(b->off[id + 1] - b->off[id]));
}

/* the state of set s[k]: found or added; -1 on no memory, -2 over the cap */
static int64_t intern(struct builder *b, const uint32_t *s, uint32_t k, uint32_t max_states)
{
	uint32_t i = rl_idtab_at(&b->hash, rl_hash_ids(s, k));
	for (; b->hash.slot[i]; i = rl_idtab_next(&b->hash, i)) {
		uint32_t id = b->hash.slot[i] - 1;
		uint64_t o = b->off[id], len = b->off[id + 1] - o;
		if (len == k && (!k || !memcmp(b->pool + o, s, k * sizeof *s)))
			return id;
	}
	if (b->n >= max_states)
		return -2;
	if (b->n + 1 >= b->cap) {
		uint32_t nc = b->cap * 2;
		uint64_t *no = realloc(b->off, (nc + 1) * sizeof *no);
		if (!no)
			return -1;
		b->off = no;
		b->cap = nc;
	}
	if (RL_GROW(b->pool, b->cappool, b->npool + k, 64))
		return -1;
	if (k)                                 /* the empty set (the dead state) has no members */
		memcpy(b->pool + b->npool, s, k * sizeof *s);
	b->npool += k;
	uint32_t id = b->n++;
	b->off[b->n] = b->npool;
	return rl_idtab_put(&b->hash, i, id, 0, b->n, state_hash, b) ? -1 : id;
}

void rl_cons_dfa_free(struct rl_cons_dfa *d)
{
	free(d->next);
	free(d->accept);
	free(d->cont);
	memset(d, 0, sizeof *d);
}

static int build_dfa(const struct nfa *a, int32_t start, int32_t match, uint32_t max_states,
		     struct rl_cons_dfa *d)
{
	/* byte classes: bytes no range boundary separates behave alike */
	uint8_t edge[257] = { 0 };
	for (uint32_t i = 0; i < a->n; i++)
		if (a->s[i].kind == S_BYTE) {
			edge[a->s[i].lo] = 1;
			edge[a->s[i].hi + 1] = 1;
		}
	uint32_t ncls = 0;
	uint8_t rep[256];
	for (int c = 0; c < 256; c++) {
		if (c == 0 || edge[c])
			rep[ncls++] = (uint8_t)c;
		d->cls[c] = (uint8_t)(ncls - 1);
	}
	d->ncls = ncls;

	struct builder b = { .a = a, .cap = 1024 };
	b.mark = calloc(a->n, sizeof *b.mark);
	b.stack = malloc(a->n * sizeof *b.stack);
	b.off = calloc(b.cap + 1, sizeof *b.off);
	rl_idtab_init(&b.hash, 4096);
	uint32_t *set = calloc(a->n, sizeof *set);      /* (zeroed: GCC cannot see that intern reads none of it for k = 0) */
	int32_t *seeds = malloc(a->n * sizeof *seeds);
	uint32_t *next = NULL;
	size_t next_cap = 0;
	int rc = 0;
	if (!b.mark || !b.stack || !b.off || !b.hash.slot || !set || !seeds) {
		rc = -ENOMEM;
		goto out;
	}
	/* state 0: the empty set (dead), made first so that the numbering already has it at 0 */
	if (intern(&b, set, 0, max_states) != 0) {
		rc = -ENOMEM;
		goto out;
	}
	int32_t st = start;
	uint32_t k = closure(&b, &st, 1, set);
	int64_t s0 = intern(&b, set, k, max_states);
	if (s0 < 0) {
		rc = s0 == -2 ? -E2BIG : -ENOMEM;
		goto out;
	}
	d->start = (uint32_t)s0;
	uint64_t work = 0;
	for (uint32_t s = 0; s < b.n; s++) {      /* b.n grows as states are found */
		work += (b.off[s + 1] - b.off[s]) * (uint64_t)(ncls + 1);
		if (work > MAX_WORK) {
			rc = -ETIME;
			goto out;
		}
		if (RL_GROW(next, next_cap, (size_t)(s + 1) * ncls, (size_t)ncls * 1024)) {
			rc = -ENOMEM;
			goto out;
		}
		for (uint32_t c = 0; c < ncls; c++) {
			uint8_t byte = rep[c];
			uint32_t ns = 0;
			uint64_t o = b.off[s], e = b.off[s + 1];
			for (uint64_t j = o; j < e; j++) {
				const struct nst *x = &a->s[b.pool[j]];
				if (x->kind == S_BYTE && byte >= x->lo && byte <= x->hi)
					seeds[ns++] = x->out;
			}
			k = ns ? closure(&b, seeds, ns, set) : 0;
			int64_t t = intern(&b, set, k, max_states);
			if (t < 0) {
				rc = t == -2 ? -E2BIG : -ENOMEM;
				goto out;
			}
			next[(size_t)s * ncls + c] = (uint32_t)t;
		}
	}
	uint32_t n = b.n;
	/* live states: those an accepting state can be reached from (reverse BFS) */
	uint8_t *live = calloc(n, 1), *acc = calloc(n, 1);
	uint32_t *rcount = calloc((size_t)n + 1, sizeof *rcount), *radj = NULL, *queue = malloc(n * sizeof *queue);
	if (!live || !acc || !rcount || !queue || !(radj = malloc((size_t)n * ncls * sizeof *radj))) {
		free(live); free(acc); free(rcount); free(radj); free(queue);
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t s = 0; s < n; s++) {
		for (uint64_t j = b.off[s]; j < b.off[s + 1]; j++)
			if ((int32_t)b.pool[j] == match)
				acc[s] = 1;
		for (uint32_t c = 0; c < ncls; c++)
			rcount[next[(size_t)s * ncls + c] + 1]++;
	}
	for (uint32_t s = 0; s < n; s++)
		rcount[s + 1] += rcount[s];
	for (uint32_t s = 0; s < n; s++)
		for (uint32_t c = 0; c < ncls; c++)
			radj[rcount[next[(size_t)s * ncls + c]]++] = s;
	for (uint32_t s = n; s > 0; s--)       /* back to starts */
		rcount[s] = rcount[s - 1];
	rcount[0] = 0;
	uint32_t qh = 0, qt = 0;
	for (uint32_t s = 0; s < n; s++)
		if (acc[s]) {
			live[s] = 1;
			queue[qt++] = s;
		}
	while (qh < qt) {
		uint32_t s = queue[qh++];
		for (uint32_t j = rcount[s]; j < rcount[s + 1]; j++)
			if (!live[radj[j]]) {
				live[radj[j]] = 1;
				queue[qt++] = radj[j];
			}
	}
	free(radj);
	if (!live[d->start]) {
		free(live); free(acc); free(rcount); free(queue);
		rc = -ENOENT;
		goto out;
	}
	/* renumber: dead 0, the live ones after it in order of discovery */
	uint32_t *map = rcount, m = 1;
	for (uint32_t s = 0; s < n; s++)
		map[s] = live[s] ? m++ : 0;
	d->n = m;
	d->next = calloc((size_t)m * ncls, sizeof *d->next);
	d->accept = calloc(m, 1);
	d->cont = calloc(m, 1);
	if (!d->next || !d->accept || !d->cont) {
		free(live); free(acc); free(rcount); free(queue);
		rl_cons_dfa_free(d);
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t s = 0; s < n; s++) {
		if (!live[s])
			continue;
		uint32_t to = map[s];
		d->accept[to] = acc[s];
		for (uint32_t c = 0; c < ncls; c++) {
			uint32_t t = map[next[(size_t)s * ncls + c]];
			d->next[(size_t)to * ncls + c] = t;
			d->cont[to] |= t != 0;
		}
	}
	d->start = map[d->start];
	free(live); free(acc); free(rcount); free(queue);
out:
	free(b.mark); free(b.stack); free(b.off); free(b.hash.slot); free(b.pool);
	free(set); free(seeds); free(next);
	return rc;
}

void rl_cons_tree_free(struct rl_re_node *x) { node_free(x); }

int rl_cons_regex_tree(const char *re, size_t len, unsigned pflags, const char *const *names, size_t nnames,
		       struct rl_re_node **out, char *err, size_t errlen)
{
	*out = NULL;
	if (err && errlen)
		err[0] = 0;
	struct parser p = { .s = (const unsigned char *)re, .n = len, .flags = pflags, .err = err, .errlen = errlen,
			    .names = names, .nnames = nnames };
	struct rl_re_node *root = parse_alt(&p, 1);
	if (root && p.i < p.n) {
		fail(&p, "unbalanced ')' at byte %zu", p.i);
		node_free(root);
		root = NULL;
	}
	if (!root)
		return p.failed ? -EINVAL : -ENOMEM;
	*out = root;
	return 0;
}

static int has_ref(const struct rl_re_node *x)
{
	if (x->kind == N_REF)
		return 1;
	for (size_t i = 0; i < x->nkid; i++)
		if (has_ref(x->kid[i]))
			return 1;
	return 0;
}

int rl_cons_tree_dfa(const struct rl_re_node *root, uint32_t max_states, struct rl_cons_dfa *out, char *err,
		     size_t errlen)
{
	memset(out, 0, sizeof *out);
	if (has_ref(root)) {                   /* a caller's mistake: rules are the grammar's */
		snprintf(err, errlen, "a rule reference where a regular expression was expected");
		return -EINVAL;
	}
	struct nfa a = { 0 };
	struct frag f = compile(&a, root);
	int32_t match = BAD(&a) ? -1 : nst_new(&a, S_MATCH, 0, 0);
	if (BAD(&a)) {
		free(a.s);
		if (a.big) {
			snprintf(err, errlen, "the expression expands to more than %u NFA states (large repetition counts or lengths?)", MAX_NFA);
			return -E2BIG;
		}
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	a.s[f.end].out = match;
	int rc = build_dfa(&a, f.start, match, max_states ? max_states : 100000, out);
	free(a.s);
	if (rc == -E2BIG)
		snprintf(err, errlen, "the automaton needs more than %u states (large repetition counts, lengths or many alternatives?)",
			 max_states ? max_states : 100000);
	else if (rc == -ETIME) {
		snprintf(err, errlen, "the automaton takes too long to build (large repetition counts of long pieces?)");
		rc = -E2BIG;
	}
	else if (rc == -ENOENT)
		snprintf(err, errlen, "the expression matches no string");
	else if (rc)
		snprintf(err, errlen, "out of memory");
	return rc;
}

int rl_cons_regex_dfa(const char *re, size_t len, unsigned pflags, uint32_t max_states,
		      struct rl_cons_dfa *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	struct rl_re_node *root;
	int rc = rl_cons_regex_tree(re, len, pflags & ~RL_RE_RULES, NULL, 0, &root, err, errlen);
	if (rc)
		return rc;
	rc = rl_cons_tree_dfa(root, max_states, out, err, errlen);
	node_free(root);
	return rc == -ENOENT ? -EINVAL : rc;
}
