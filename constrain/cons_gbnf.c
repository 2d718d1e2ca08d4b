/* cons_gbnf.c — grammars in llama.cpp's GBNF, read into a rule set (cons_internal.h) whose
 * bodies are in the regex compiler's syntax with (?&NAME) for a rule; cons_gram.c compiles it.
 *
 * Why GBNF: llama.cpp users bring GBNF files, and its grammars/ folder (JSON, arithmetic, C,
 * chess, lists...) is a ready corpus of real grammars to test against; it is also close to
 * the regex syntax this engine already compiles (Lark's lexer/parser split would need a
 * second front end for little gain).
 *
 * Taken, as llama.cpp's parser (src/llama-grammar.cpp) reads them: rules `name ::= body` with
 * names of [a-zA-Z0-9-]; alternatives `|`; sequences; "literals" and [classes] (with ^ and
 * ranges) with the escapes \xHH \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \] \-; `.` (any code
 * point); groups ( ); repetition * + ? {m} {m,} {m,n}, also stacked (x?*); comments # to the
 * end of the line; newlines inside groups and after `|`, a rule ending at a newline otherwise.
 * Matching starts at `root`; code points match as UTF-8 bytes. Refused by name: token
 * references (<[id]>, <token>, !<...>; this engine constrains text, not token ids), a rule
 * defined twice (llama.cpp keeps the last), an undefined rule, left recursion (cons_gram.c),
 * surrogate code points, invalid UTF-8, repetition counts above 1000. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "constrain/cons_internal.h"
#include "constrain/cons_sbuf.h"

/* one code point in the regex syntax, so that no character means more than itself */
static void put_cp(struct rl_sb *b, uint32_t c)
{
	char t[16];
	if ((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))
		snprintf(t, sizeof t, "%c", (char)c);
	else if (c < 0x80)
		snprintf(t, sizeof t, "\\x%02x", c);
	else if (c < 0x10000)
		snprintf(t, sizeof t, "\\u%04x", c);
	else
		snprintf(t, sizeof t, "\\U%08x", c);
	rl_sb_puts(b, t);
}

struct gp {
	const unsigned char *s;
	size_t n, i;
	char *err;
	size_t errlen;
	int failed;
	char **refs;                   /* every rule name a body names, to check they are defined */
	size_t nrefs, caprefs;
	int depth;
};

static int gfail(struct gp *p, const char *fmt, ...)
{
	if (!p->failed && p->err && p->errlen) {
		size_t line = 1;
		for (size_t k = 0; k < p->i && k < p->n; k++)
			line += p->s[k] == '\n';
		char m[200];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(m, sizeof m, fmt, ap);
		va_end(ap);
		snprintf(p->err, p->errlen, "GBNF line %zu: %s", line, m);
	}
	p->failed = 1;
	return -EINVAL;
}

static int at(const struct gp *p, size_t k) { return p->i + k < p->n ? p->s[p->i + k] : 0; }
static int word_char(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'; }

static void space(struct gp *p, int newline_ok)
{
	for (;;) {
		int c = at(p, 0);
		if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n')))
			p->i++;
		else if (c == '#')
			while (p->i < p->n && p->s[p->i] != '\r' && p->s[p->i] != '\n')
				p->i++;
		else
			return;
	}
}

static int hex(struct gp *p, size_t k, uint32_t *v)
{
	*v = 0;
	for (size_t j = 0; j < k; j++) {
		int c = at(p, j);
		int h = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
		if (h < 0)
			return gfail(p, "expecting %zu hex digits", k);
		*v = *v << 4 | (uint32_t)h;
	}
	p->i += k;
	return 0;
}

/* one character of a literal or class: an escape or a UTF-8 code point */
static int gchar(struct gp *p, uint32_t *cp)
{
	int c = at(p, 0);
	if (p->i >= p->n)
		return gfail(p, "unexpected end of the grammar");
	if (c == '\\') {
		int e = at(p, 1);
		p->i += 2;
		switch (e) {
		case 'x': return hex(p, 2, cp);
		case 'u': return hex(p, 4, cp);
		case 'U': return hex(p, 8, cp);
		case 't': *cp = '\t'; return 0;
		case 'r': *cp = '\r'; return 0;
		case 'n': *cp = '\n'; return 0;
		case '\\': case '"': case '[': case ']': case '-': *cp = (uint32_t)e; return 0;
		default:
			p->i -= 2;
			return (e > 0x20 && e < 0x7f) ? gfail(p, "unknown escape '\\%c'", e) : gfail(p, "unknown escape '\\' then byte 0x%02x", (unsigned)(unsigned char)e);
		}
	}
	if (!c)
		return gfail(p, "a NUL byte in the grammar");
	uint32_t v = (uint32_t)c;
	size_t k = v < 0x80 ? 1 : (v & 0xE0) == 0xC0 ? 2 : (v & 0xF0) == 0xE0 ? 3 : (v & 0xF8) == 0xF0 ? 4 : 0;
	if (!k || p->i + k > p->n)
		return gfail(p, "invalid UTF-8");
	if (k > 1)
		v &= 0x3Fu >> (k - 1);
	for (size_t j = 1; j < k; j++) {
		if ((p->s[p->i + j] & 0xC0) != 0x80)
			return gfail(p, "invalid UTF-8");
		v = v << 6 | (p->s[p->i + j] & 0x3Fu);
	}
	static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	if (v < least[k] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return gfail(p, "invalid UTF-8");
	p->i += k;
	*cp = v;
	return 0;
}

static int check_cp(struct gp *p, uint32_t c)
{
	if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
		return gfail(p, "U+%X is no Unicode scalar value (surrogates and values past U+10FFFF match no UTF-8)", c);
	return 0;
}

static int ref_add(struct gp *p, const char *name, size_t k)
{
	if (RL_GROW(p->refs, p->caprefs, p->nrefs + 1, 32))
		return gfail(p, "out of memory");
	if (!(p->refs[p->nrefs] = strndup(name, k)))
		return gfail(p, "out of memory");
	p->nrefs++;
	return 0;
}

static int alternates(struct gp *p, struct rl_sb *b, int nested);

/* a sequence of items into b, until '|', ')' or (not nested) a newline */
static int sequence(struct gp *p, struct rl_sb *b, int nested)
{
	size_t last = SIZE_MAX;                /* where the last item starts in b */
	while (p->i < p->n && !p->failed) {
		int c = at(p, 0);
		size_t start = b->n;
		if (c == '"') {
			p->i++;
			rl_sb_puts(b, "(?:");
			while (at(p, 0) != '"') {
				uint32_t cp;
				if (p->i >= p->n)
					return gfail(p, "a literal is not closed");
				if (gchar(p, &cp) || check_cp(p, cp))
					return -EINVAL;
				put_cp(b, cp);
			}
			rl_sb_puts(b, ")");
			p->i++;
			last = start;
		} else if (c == '[') {
			p->i++;
			rl_sb_puts(b, "[");
			int neg = at(p, 0) == '^';
			if (neg) {
				rl_sb_puts(b, "^");
				p->i++;
			}
			int any = 0;
			while (at(p, 0) != ']') {
				uint32_t lo, hi;
				if (p->i >= p->n)
					return gfail(p, "a character class is not closed");
				if (gchar(p, &lo) || check_cp(p, lo))
					return -EINVAL;
				put_cp(b, lo);
				if (at(p, 0) == '-' && at(p, 1) != ']' && p->i + 1 < p->n) {
					p->i++;
					if (gchar(p, &hi) || check_cp(p, hi))
						return -EINVAL;
					if (hi < lo)
						return gfail(p, "the class range U+%X-U+%X is reversed", lo, hi);
					rl_sb_puts(b, "-");
					put_cp(b, hi);
				}
				any = 1;
			}
			p->i++;
			if (!any) {                    /* [] matches nothing, [^] anything */
				b->n = start;
				rl_sb_puts(b, neg ? "[\\x00-\\U0010ffff]" : "[^\\x00-\\U0010ffff]");
			} else
				rl_sb_puts(b, "]");
			last = start;
		} else if (c == '<' || c == '!') {
			return gfail(p, "token references ('%c...') are not supported: this engine constrains text, not token ids", c);
		} else if (word_char(c)) {
			size_t k = 0;
			while (word_char(at(p, k)))
				k++;
			if (ref_add(p, (const char *)p->s + p->i, k))
				return -EINVAL;
			rl_sb_puts(b, "(?&");
			rl_sb_putn(b, (const char *)p->s + p->i, k);
			rl_sb_puts(b, ")");
			p->i += k;
			last = start;
		} else if (c == '(') {
			if (++p->depth > 100)
				return gfail(p, "groups nest deeper than 100");
			p->i++;
			space(p, 1);
			rl_sb_puts(b, "(?:");
			if (alternates(p, b, 1))
				return -EINVAL;
			if (at(p, 0) != ')')
				return gfail(p, "expecting ')'");
			p->i++;
			p->depth--;
			rl_sb_puts(b, ")");
			last = start;
		} else if (c == '.') {
			p->i++;
			rl_sb_puts(b, "[\\x00-\\U0010ffff]");
			last = start;
		} else if (c == '*' || c == '+' || c == '?' || c == '{') {
			if (last == SIZE_MAX)
				return gfail(p, "'%c' with nothing before it to repeat", c);
			char q[40];
			if (c == '{') {
				p->i++;
				space(p, nested);
				unsigned long m = 0, M = 0;
				int digits = 0, bounded = 1;
				while (at(p, 0) >= '0' && at(p, 0) <= '9' && digits < 9) {
					m = m * 10 + (unsigned long)(at(p, 0) - '0');
					p->i++;
					digits++;
				}
				if (!digits)
					return gfail(p, "expecting an integer after '{'");
				space(p, nested);
				if (at(p, 0) == '}')
					M = m;
				else if (at(p, 0) == ',') {
					p->i++;
					space(p, nested);
					digits = 0;
					while (at(p, 0) >= '0' && at(p, 0) <= '9' && digits < 9) {
						M = M * 10 + (unsigned long)(at(p, 0) - '0');
						p->i++;
						digits++;
					}
					bounded = digits > 0;
					space(p, nested);
					if (at(p, 0) != '}')
						return gfail(p, "expecting '}'");
				} else
					return gfail(p, "expecting ',' or '}' in a repetition");
				if (m > 1000 || (bounded && M > 1000))
					return gfail(p, "repetition counts above 1000 are not supported");
				if (bounded && M < m)
					return gfail(p, "the repetition {%lu,%lu} has min above max", m, M);
				if (bounded)
					snprintf(q, sizeof q, "{%lu,%lu}", m, M);
				else
					snprintf(q, sizeof q, "{%lu,}", m);
			} else
				snprintf(q, sizeof q, "%c", c);
			p->i++;
			/* the item with its repetitions so far, as one group (x?* repeats x?) */
			rl_sb_insert(b, last, "(?:");
			rl_sb_puts(b, ")");
			rl_sb_puts(b, q);
		} else
			break;
		space(p, nested);
	}
	return p->failed ? -EINVAL : 0;
}

static int alternates(struct gp *p, struct rl_sb *b, int nested)
{
	if (sequence(p, b, nested))
		return -EINVAL;
	while (at(p, 0) == '|') {
		p->i++;
		space(p, 1);
		rl_sb_puts(b, "|");
		if (sequence(p, b, nested))
			return -EINVAL;
	}
	return 0;
}

int rl_cons_gbnf_rules(const char *text, size_t len, struct rl_cons_rules *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	if (err && errlen)
		err[0] = 0;
	struct gp p = { .s = (const unsigned char *)text, .n = len, .err = err, .errlen = errlen };
	struct rl_cons_rules r = { 0 };
	struct rl_sb b = { 0 };
	int rc = 0;
	space(&p, 1);
	while (p.i < p.n && !rc) {
		size_t k = 0;
		while (word_char(at(&p, k)))
			k++;
		if (!k) {
			rc = gfail(&p, "expecting a rule name");
			break;
		}
		char name[128];
		if (k >= sizeof name) {
			rc = gfail(&p, "a rule name longer than %zu bytes", sizeof name - 1);
			break;
		}
		memcpy(name, p.s + p.i, k);
		name[k] = 0;
		p.i += k;
		for (size_t j = 0; j < r.n; j++)
			if (!strcmp(r.name[j], name)) {
				rc = gfail(&p, "rule '%s' is defined twice", name);
				break;
			}
		if (rc)
			break;
		space(&p, 0);
		if (at(&p, 0) != ':' || at(&p, 1) != ':' || at(&p, 2) != '=') {
			rc = gfail(&p, "expecting '::=' after '%s'", name);
			break;
		}
		p.i += 3;
		space(&p, 1);
		b.n = 0;
		rl_sb_puts(&b, "");
		if (alternates(&p, &b, 0)) {
			rc = -EINVAL;
			break;
		}
		if (at(&p, 0) == '\r')
			p.i += at(&p, 1) == '\n' ? 2 : 1;
		else if (at(&p, 0) == '\n')
			p.i++;
		else if (p.i < p.n) {
			rc = gfail(&p, "expecting the end of the line, not '%c'", at(&p, 0));
			break;
		}
		if (b.oom || rl_cons_rules_add(&r, name, b.p, b.n)) {
			rc = gfail(&p, "out of memory");
			break;
		}
		space(&p, 1);
	}
	if (!rc && !p.failed) {
		for (size_t q = 0; q < p.nrefs && !rc; q++) {
			size_t j = 0;
			while (j < r.n && strcmp(r.name[j], p.refs[q]))
				j++;
			if (j == r.n) {
				snprintf(err, errlen, "GBNF: rule '%s' is used but not defined", p.refs[q]);
				rc = -EINVAL;
			}
		}
		size_t root = 0;
		while (!rc && root < r.n && strcmp(r.name[root], "root"))
			root++;
		if (!rc && root == r.n) {
			snprintf(err, errlen, "GBNF: the grammar has no 'root' rule (matching starts there)");
			rc = -EINVAL;
		}
		if (!rc && root) {                 /* root first: rule 0 is where matching starts */
			char *t;
			size_t l;
			t = r.name[0]; r.name[0] = r.name[root]; r.name[root] = t;
			t = r.body[0]; r.body[0] = r.body[root]; r.body[root] = t;
			l = r.len[0]; r.len[0] = r.len[root]; r.len[root] = l;
		}
	}
	if (p.failed && !rc)
		rc = -EINVAL;
	for (size_t q = 0; q < p.nrefs; q++)
		free(p.refs[q]);
	free(p.refs);
	free(b.p);
	if (rc) {
		rl_cons_rules_free(&r);
		return rc;
	}
	*out = r;
	return 0;
}
