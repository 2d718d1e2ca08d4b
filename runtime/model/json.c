/* json.c — strict JSON parser (see rl_json.h): no trailing commas, no comments, no leading
 * zeros, escapes and surrogate pairs checked, raw control characters rejected, nesting and
 * element counts bounded by the input so hostile headers cannot exhaust the stack. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/model/rl_json.h"

#define MAX_DEPTH 64

struct jp { const char *s; size_t n, i; char *err; size_t errlen; int failed; };

static void fail(struct jp *p, const char *why)
{
	if (!p->failed)
		snprintf(p->err, p->errlen, "invalid JSON at byte %zu: %s", p->i, why);
	p->failed = 1;
}

static void ws(struct jp *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
		p->i++;
}

static int hex4(struct jp *p, unsigned *out)
{
	if (p->n - p->i < 4)
		return -1;
	unsigned v = 0;
	for (int k = 0; k < 4; k++) {
		char c = p->s[p->i++];
		v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
			      c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99);
		if (v > 0xffff)
			return -1;
	}
	*out = v;
	return 0;
}

static char *str(struct jp *p, size_t *len)
{
	p->i++;                                   /* opening quote */
	char *o = malloc(p->n - p->i + 1);        /* decoded is never longer than encoded */
	size_t w = 0;
	if (!o) {
		fail(p, "out of memory");
		return NULL;
	}
	while (p->i < p->n) {
		unsigned char c = (unsigned char)p->s[p->i++];
		if (c == '"') {
			o[w] = 0;
			*len = w;
			return o;
		}
		if (c < 0x20)
			break;
		if (c != '\\') {
			o[w++] = (char)c;
			continue;
		}
		if (p->i >= p->n)
			break;
		c = (unsigned char)p->s[p->i++];
		const char *esc = strchr("\"\\/bfnrt", c);
		if (esc && c) {
			o[w++] = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"];
			continue;
		}
		unsigned u, lo;
		if (c != 'u' || hex4(p, &u))
			break;
		if (u >= 0xd800 && u < 0xdc00) {      /* high surrogate: a low one must follow */
			if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
				break;
			p->i += 2;
			if (hex4(p, &lo) || lo < 0xdc00 || lo > 0xdfff)
				break;
			u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
		} else if (u >= 0xdc00 && u < 0xe000) {
			break;
		}
		if (u < 0x80) {
			o[w++] = (char)u;
		} else if (u < 0x800) {
			o[w++] = (char)(0xc0 | u >> 6); o[w++] = (char)(0x80 | (u & 0x3f));
		} else if (u < 0x10000) {
			o[w++] = (char)(0xe0 | u >> 12); o[w++] = (char)(0x80 | ((u >> 6) & 0x3f));
			o[w++] = (char)(0x80 | (u & 0x3f));
		} else {
			o[w++] = (char)(0xf0 | u >> 18); o[w++] = (char)(0x80 | ((u >> 12) & 0x3f));
			o[w++] = (char)(0x80 | ((u >> 6) & 0x3f)); o[w++] = (char)(0x80 | (u & 0x3f));
		}
	}
	free(o);
	fail(p, "bad string");
	return NULL;
}

static void value(struct jp *p, struct rl_json *j, int depth);

static void container(struct jp *p, struct rl_json *j, int depth, int obj)
{
	char close = obj ? '}' : ']';
	size_t cap = 0;
	p->i++;
	ws(p);
	if (p->i < p->n && p->s[p->i] == close) {
		p->i++;
		return;
	}
	for (;;) {
		if (j->n == cap) {
			cap = cap ? cap * 2 : 8;
			struct rl_json *nv = realloc(j->v, cap * sizeof *nv);
			char **nk = obj ? realloc(j->k, cap * sizeof *nk) : NULL;
			if (nv)
				j->v = nv;
			if (nk)
				j->k = nk;
			if (!nv || (obj && !nk)) {
				fail(p, "out of memory");
				return;
			}
		}
		memset(&j->v[j->n], 0, sizeof *j->v);
		if (obj) {
			ws(p);
			size_t kl;
			if (p->i >= p->n || p->s[p->i] != '"' || !(j->k[j->n] = str(p, &kl))) {
				fail(p, "expected a key");
				return;
			}
			ws(p);
			if (p->i >= p->n || p->s[p->i] != ':') {
				j->n++;
				fail(p, "expected ':'");
				return;
			}
			p->i++;
		}
		j->n++;
		value(p, &j->v[j->n - 1], depth + 1);
		if (p->failed)
			return;
		ws(p);
		if (p->i < p->n && p->s[p->i] == ',') {
			p->i++;
			continue;
		}
		if (p->i < p->n && p->s[p->i] == close) {
			p->i++;
			return;
		}
		fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
		return;
	}
}

static void value(struct jp *p, struct rl_json *j, int depth)
{
	ws(p);
	if (depth > MAX_DEPTH) {
		fail(p, "nested too deeply");
		return;
	}
	if (p->i >= p->n) {
		fail(p, "unexpected end");
		return;
	}
	char c = p->s[p->i];
	size_t rest = p->n - p->i;
	if (c == '{' || c == '[') {
		j->type = c == '{' ? RL_JSON_OBJ : RL_JSON_ARR;
		container(p, j, depth, c == '{');
	} else if (c == '"') {
		j->type = RL_JSON_STR;
		j->str = str(p, &j->slen);
	} else if (rest >= 4 && !memcmp(p->s + p->i, "true", 4)) {
		j->type = RL_JSON_BOOL; j->num = 1; p->i += 4;
	} else if (rest >= 5 && !memcmp(p->s + p->i, "false", 5)) {
		j->type = RL_JSON_BOOL; p->i += 5;
	} else if (rest >= 4 && !memcmp(p->s + p->i, "null", 4)) {
		j->type = RL_JSON_NULL; p->i += 4;
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
		size_t st = p->i, k = p->i;
		const char *s = p->s;
		if (s[k] == '-')
			k++;
#define DIGITS(min) do { size_t d0 = k; while (k < p->n && s[k] >= '0' && s[k] <= '9') k++; \
	if (k - d0 < (min)) { fail(p, "bad number"); return; } } while (0)
		if (k < p->n && s[k] == '0')
			k++;
		else
			DIGITS(1);
		if (k < p->n && s[k] == '.') { k++; DIGITS(1); }
		if (k < p->n && (s[k] == 'e' || s[k] == 'E')) {
			k++;
			if (k < p->n && (s[k] == '+' || s[k] == '-'))
				k++;
			DIGITS(1);
		}
#undef DIGITS
		char buf[64];
		if (k - st >= sizeof buf) {
			fail(p, "number too long");
			return;
		}
		memcpy(buf, s + st, k - st);
		buf[k - st] = 0;
		j->type = RL_JSON_NUM;
		j->num = strtod(buf, NULL);
		p->i = k;
	} else {
		fail(p, "unexpected character");
	}
}

static void release(struct rl_json *j)
{
	for (size_t i = 0; i < j->n; i++) {
		release(&j->v[i]);
		if (j->k)
			free(j->k[i]);
	}
	free(j->v);
	free(j->k);
	free(j->str);
}

void rl_json_free(struct rl_json *j)
{
	if (j) {
		release(j);
		free(j);
	}
}

struct rl_json *rl_json_parse(const char *s, size_t len, char *err, size_t errlen)
{
	struct jp p = { s, len, 0, err, errlen, 0 };
	struct rl_json *j = calloc(1, sizeof *j);
	if (!j) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	value(&p, j, 0);
	ws(&p);
	if (!p.failed && p.i != p.n)
		fail(&p, "trailing characters");
	if (p.failed) {
		rl_json_free(j);
		return NULL;
	}
	return j;
}

const struct rl_json *rl_json_get(const struct rl_json *o, const char *key)
{
	if (!o || o->type != RL_JSON_OBJ)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (!strcmp(o->k[i], key))
			return &o->v[i];
	return NULL;
}
