/* cons_schema.c — JSON Schema (the non-recursive subset) compiled into a regular expression in
 * cons_regex.c's syntax, then into the same DFA as any expression.
 *
 * The output is compact JSON (no whitespace anywhere): one spelling per value keeps the
 * automaton small and the masks cacheable, and it is what strict-mode generators emit; a
 * bounded whitespace allowance would multiply the states of every separator for no gain in
 * validity. Object keys come in the schema's 'properties' order; optional ones may be left
 * out. Whatever the output is, it validates against the schema; the converse does not hold
 * (other spellings and key orders are never produced).
 *
 * Enforced: type (object, array, string, number, integer, boolean, null, and lists of them),
 * enum, const (beside other keywords: the values whose compact spelling those keywords'
 * expression matches), properties, required, additionalProperties (false; true or a schema hold
 * vacuously, as no key beyond 'properties' is ever produced), patternProperties (the same,
 * when no declared property's name matches a pattern), a required key 'properties' does not
 * name (its value as additionalProperties says), minProperties/maxProperties (optional keys
 * made required or left out), dependentRequired and draft 4-7's array 'dependencies',
 * propertyNames (on the declared names), items (a schema or false), prefixItems (and drafts
 * 4-2019's items array with additionalItems), minItems, maxItems, minLength, maxLength, pattern
 * (as a whole match of the string, through the regex compiler; with minLength/maxLength when it
 * is one character class repeated), whole multipleOf, format (the formats in `formats` below, each as an
 * expression every checker accepts), minimum/maximum/exclusiveMinimum/exclusiveMaximum
 * (draft 4's boolean forms too) on integers and numbers (a bounded number as fixed-point
 * decimals within the bounds), anyOf, oneOf (as alternation, after checking that no
 * string matches two branches), allOf (its branches merged into one schema: see "merging"
 * below; two different patterns, formats or oneOf lists are refused), keywords beside
 * $ref (allOf of the target and them) and beside anyOf/oneOf (merged into each branch), $ref to
 * "#" or any JSON pointer in the document, recursion included (but not a $ref merged with other
 * keywords inside its own recursion). A $ref is expanded in place; one met again inside its
 * own expansion becomes a rule reference (?&refN) and its target a rule of its own, so a
 * recursive schema compiles to a rule set for the grammar matcher (cons_gram.c) and any other
 * to one expression. A schema too large for one expression or automaton is written again split
 * (RL_SCHEMA_SPLIT: every $ref target and nested object or array a rule, equal ones one rule)
 * and compiled as a grammar (rl_cons_compile_schema). A subschema that no value satisfies (false, an allOf whose
 * branches share no type) is left out where its value is optional (a property not required,
 * an array position past minItems, an anyOf/oneOf branch, one type of a list); where the
 * value is needed the schema is refused, with the reason.
 * Annotations (title, description, default, examples, $schema, $id and draft 4's id,
 * $comment, $anchor, deprecated, readOnly, writeOnly, content*) constrain nothing and are
 * passed over, as are keywords that no JSON Schema draft defines (vendor extensions such as
 * x-*): validators ignore them too, so the output validates either way. Every assertion
 * keyword of a draft that this code does not enforce is refused by name (`asserting`), as is
 * a combination it cannot enforce (e.g. pattern with minLength). */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "constrain/cons_internal.h"
#include "constrain/cons_sbuf.h"
#include "constrain/rl_cons.h"

#define MAX_REF_DEPTH 32
#define MAX_COUNT     100000           /* minItems/maxItems/minLength/maxLength expanded (the
					 * automaton's bounds refuse what grows too large) */
#define ANY_DEPTH     3                /* containers nested inside a value of any kind */

#define SPLIT_TEXT    (128u << 10)     /* expressions above this are tried as a grammar of '$ref'
					* targets first (one expression compiles in time that grows
					* with its text: 3.7 MB took 7 s, its 12 rules 0.2 s) */
#define MAX_TEXT      (16u << 20)      /* bytes appended to all buffers of one compile: the bound
					* on its memory (text grows with nested optional keys) */

/* one compile's appended bytes, across its buffers (a compile runs on one thread), and its
 * bound: MAX_TEXT, or SPLIT_TEXT on a first try that a grammar may take over */
static _Thread_local size_t text_total, text_max;

/* rl_sb_putn within the compile's bound on text */
static void putn(struct rl_sb *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if ((text_total += n) > text_max) {
		b->oom = 2;                    /* too large, not out of memory */
		return;
	}
	rl_sb_putn(b, s, n);
}
static void put(struct rl_sb *b, const char *s) { putn(b, s, strlen(s)); }
static void putf(struct rl_sb *b, const char *fmt, ...)
{
	char t[256];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(t, sizeof t, fmt, ap);
	va_end(ap);
	putn(b, t, k < (int)sizeof t ? (size_t)k : sizeof t - 1);
}
/* bytes as literals of the regex syntax */
static void put_lit(struct rl_sb *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (strchr("\\.^$|?*+()[]{}", s[i]) && s[i]) {
			char e[2] = { '\\', s[i] };
			putn(b, e, 2);
		} else
			putn(b, s + i, 1);
	}
}

struct ctx {
	json_t *root;
	unsigned flags;
	char *err;
	size_t errlen;
	char path[512];                /* where in the schema, for the messages */
	json_t *refs[MAX_REF_DEPTH];   /* $ref targets being expanded: a repeat is recursion */
	int nref;
	json_t *merging[MAX_REF_DEPTH]; /* $ref targets merged with other keywords, while the
					 * merged schema compiles */
	int nmerging;
	json_t **rule;                 /* targets that recursion made rules: rule i is (?&ref<i>) */
	char **rule_ref;               /* their $ref text, for messages */
	size_t nrule, caprule;
	size_t nrec;                   /* rule references written so far */
	size_t nfmt;                   /* 'format' expressions written so far */
};

static int bad(struct ctx *c, const char *fmt, ...)
{
	if (c->err && c->errlen && !c->err[0]) {
		char m[400];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(m, sizeof m, fmt, ap);
		va_end(ap);
		if (c->path[0])
			snprintf(c->err, c->errlen, "%s: %s", c->path, m);
		else
			snprintf(c->err, c->errlen, "%s", m);
	}
	return -EINVAL;
}

/* A return of value() and the merge: no value satisfies the schema (false, no type in common,
 * an impossible required property...). bad() has said why; where the value is optional (a
 * property not required, an array position past minItems, one branch of anyOf) the part is
 * left out instead, and the message unsaid. Never returned by the library: -EINVAL there. */
#define NO_VALUE      1

static void unsay(struct ctx *c)
{
	if (c->err && c->errlen)
		c->err[0] = 0;
}

static size_t path_push(struct ctx *c, const char *fmt, ...)
{
	size_t old = strlen(c->path);
	char seg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(seg, sizeof seg, fmt, ap);
	va_end(ap);
	snprintf(c->path + old, sizeof c->path - old, "%s%s", old ? "." : "", seg);
	return old;
}
static void path_pop(struct ctx *c, size_t old) { c->path[old] = 0; }

/* keywords: what each applies to */
enum { K_ANNOT = 1, K_ANY, K_OBJ, K_ARR, K_STR, K_NUM };
static const struct { const char *name; int kind; } keywords[] = {
	{ "title", K_ANNOT }, { "description", K_ANNOT }, { "default", K_ANNOT }, { "examples", K_ANNOT },
	{ "$schema", K_ANNOT }, { "$id", K_ANNOT }, { "$comment", K_ANNOT }, { "deprecated", K_ANNOT },
	{ "readOnly", K_ANNOT }, { "writeOnly", K_ANNOT }, { "$defs", K_ANNOT }, { "definitions", K_ANNOT },
	{ "id", K_ANNOT }, { "$anchor", K_ANNOT }, { "contentMediaType", K_ANNOT }, { "contentEncoding", K_ANNOT },
	{ "contentSchema", K_ANNOT },
	{ "type", K_ANY }, { "enum", K_ANY }, { "const", K_ANY }, { "anyOf", K_ANY }, { "oneOf", K_ANY },
	{ "allOf", K_ANY }, { "$ref", K_ANY },
	{ "properties", K_OBJ }, { "required", K_OBJ }, { "dependentRequired", K_OBJ }, { "dependencies", K_OBJ },
	{ "propertyNames", K_OBJ },
	{ "minProperties", K_OBJ }, { "maxProperties", K_OBJ }, { "additionalProperties", K_OBJ }, { "patternProperties", K_OBJ },
	{ "items", K_ARR }, { "prefixItems", K_ARR }, { "additionalItems", K_ARR }, { "minItems", K_ARR }, { "maxItems", K_ARR },
	{ "minLength", K_STR }, { "maxLength", K_STR }, { "pattern", K_STR }, { "format", K_STR },
	{ "multipleOf", K_NUM }, { "minimum", K_NUM }, { "maximum", K_NUM }, { "exclusiveMinimum", K_NUM }, { "exclusiveMaximum", K_NUM },
};
/* the assertion keywords of drafts 3 to 2020-12 that are not in `keywords`: refused by name */
static const char *const asserting[] = {
	"not", "if", "then", "else", "dependentSchemas", "contains",
	"minContains", "maxContains", "unevaluatedItems", "unevaluatedProperties",
	"uniqueItems", "divisibleBy",
	"$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "extends", "disallow",
	"$vocabulary", "nullable",             /* OpenAPI 3.0's: "type": [T, "null"] says it */
};
/* a keyword's kind; 0 for an assertion this code does not enforce; K_ANNOT for a keyword no
 * draft defines (validators pass it over as an annotation) */
static int kw_kind(const char *k)
{
	for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
		if (!strcmp(keywords[i].name, k))
			return keywords[i].kind;
	for (size_t i = 0; i < sizeof asserting / sizeof *asserting; i++)
		if (!strcmp(asserting[i], k))
			return 0;
	return K_ANNOT;
}

static int value(struct ctx *c, json_t *s, struct rl_sb *b);
static void any_value(struct rl_sb *b, int depth);

/* recursion: a reference to t's rule, made a rule when it is not one yet */
static int rule_ref(struct ctx *c, json_t *t, const char *ref, struct rl_sb *b)
{
	size_t i = 0;                  /* the same schema written twice is one rule */
	while (i < c->nrule && c->rule[i] != t && !((c->flags & RL_SCHEMA_SPLIT) && json_equal(c->rule[i], t)))
		i++;
	if (i == c->nrule) {
		if (c->nrule == c->caprule) {
			size_t nc = c->caprule ? c->caprule * 2 : 8;
			json_t **nr = realloc(c->rule, nc * sizeof *nr);
			if (nr)
				c->rule = nr;
			char **nn = realloc(c->rule_ref, nc * sizeof *nn);
			if (nn)
				c->rule_ref = nn;
			if (!nr || !nn)
				return -ENOMEM;
			c->caprule = nc;
		}
		if (!(c->rule_ref[i] = strdup(ref)))
			return -ENOMEM;
		c->rule[i] = json_incref(t);   /* a merge's schema outlives its merge */
		c->nrule++;
	}
	putf(b, "(?&ref%zu)", i);
	c->nrec++;
	return 0;
}

/* ---- numbers ---------------------------------------------------------------------------- */
/* Numbers are bounded to what parsers hold: at most 18 integer digits (an int64), 17 fraction
 * digits and a two-digit exponent (a double's range); a valid JSON number beyond them is
 * valid to the schema, but jansson and many others refuse it, and unbounded digit runs are
 * where a sampled walk never ends. */
#define INT_DIGITS "(?:0|[1-9][0-9]{0,17})"
#define FRAC_EXP "(?:\\.[0-9]{1,17})?(?:[eE][+\\-]?[0-9]{1,2})?"
#define NUM_RE "-?" INT_DIGITS FRAC_EXP
#define INF_HI (-1LL)

/* same-length digit strings lo..hi (no sign, leading zeros as written) */
static void digit_range(struct rl_sb *b, const char *lo, const char *hi, size_t L)
{
	if (!L)
		return;
	if (!memcmp(lo, hi, L)) {
		putn(b, lo, L);
		return;
	}
	if (lo[0] == hi[0]) {
		putn(b, lo, 1);
		digit_range(b, lo + 1, hi + 1, L - 1);
		return;
	}
	int zeros = 1, nines = 1;
	for (size_t i = 1; i < L; i++) {
		zeros &= lo[i] == '0';
		nines &= hi[i] == '9';
	}
	if (zeros && nines) {
		putf(b, "[%c-%c]", lo[0], hi[0]);
		if (L > 1)
			putf(b, "[0-9]{%zu}", L - 1);
		return;
	}
	char n9[24], n0[24];
	memset(n9, '9', sizeof n9);
	memset(n0, '0', sizeof n0);
	put(b, "(?:");
	int lo_whole = zeros;              /* lo[0] with any tail goes into the middle range */
	if (!lo_whole) {
		putn(b, lo, 1);
		put(b, "(?:");
		digit_range(b, lo + 1, n9, L - 1);
		put(b, ")|");
	}
	char a = lo_whole ? lo[0] : (char)(lo[0] + 1), z = nines ? hi[0] : (char)(hi[0] - 1);
	if (a <= z) {
		putf(b, "[%c-%c]", a, z);
		if (L > 1)
			putf(b, "[0-9]{%zu}", L - 1);
		if (!nines)
			put(b, "|");
	}
	if (!nines) {
		putn(b, hi, 1);
		put(b, "(?:");
		digit_range(b, n0, hi + 1, L - 1);
		put(b, ")");
	}
	if (b->n && b->p[b->n - 1] == '|')
		b->n--;
	put(b, ")");
}

/* the integers a..b (a >= 0; b INF_HI: no upper bound) written without leading zeros */
static void nonneg_range(struct rl_sb *b, long long a, long long hi)
{
	char sa[24], sh[24], t[24];
	int la = snprintf(sa, sizeof sa, "%lld", a);
	int lh = hi == INF_HI ? la : snprintf(sh, sizeof sh, "%lld", hi);
	put(b, "(?:");
	for (int L = la; L <= lh; L++) {
		const char *lo_s = sa, *hi_s;
		if (L > la) {                      /* 10^(L-1) */
			t[0] = '1';
			memset(t + 1, '0', (size_t)L - 1);
			lo_s = t;
		}
		char n9[24];
		memset(n9, '9', sizeof n9);
		hi_s = hi != INF_HI && L == lh ? sh : n9;
		if (L > la)
			put(b, "|");
		digit_range(b, lo_s, hi_s, (size_t)L);
	}
	if (hi == INF_HI)
		putf(b, "|[1-9][0-9]{%d,17}", la);       /* at most 18 digits, as unbounded integers */
	put(b, ")");
}

/* integers lo..hi; lo LLONG_MIN: none below, hi LLONG_MAX: none above */
static int int_range(struct ctx *c, struct rl_sb *b, long long lo, long long hi)
{
	if (lo > hi)
		return bad(c, "no integer lies between the bounds");
	put(b, "(?:");
	int alt = 0;
	if (lo < 0) {                              /* -m for m in max(1, -hi)..-lo */
		long long m1 = hi < 0 ? -hi : 1, m2 = lo == LLONG_MIN ? INF_HI : -lo;
		put(b, "-");
		nonneg_range(b, m1, m2);
		alt = 1;
	}
	if (hi >= 0) {
		if (alt)
			put(b, "|");
		nonneg_range(b, lo > 0 ? lo : 0, hi == LLONG_MAX ? INF_HI : hi);
	}
	put(b, ")");
	return 0;
}

static int bound(struct ctx *c, json_t *s, const char *k, double *v)
{
	json_t *x = json_object_get(s, k);
	if (!x)
		return 0;
	if (!json_is_number(x))
		return bad(c, "'%s' must be a number", k);
	*v = json_number_value(x);
	if (!(fabs(*v) < 1e15))
		return bad(c, "'%s' %g is beyond the numbers this engine bounds (|x| < 1e15)", k, *v);
	return 1;
}

/* The bounds of s: [lo, hi] with each end inclusive, or exclusive where *lo_ex / *hi_ex say
 * (exclusiveMinimum/exclusiveMaximum as numbers, or draft 4's booleans beside minimum and
 * maximum); -inf/+inf where none. 0 or bad(). */
static int num_bounds(struct ctx *c, json_t *s, double *lo, int *lo_ex, double *hi, int *hi_ex)
{
	double v;
	int r;
	*lo = -INFINITY, *hi = INFINITY, *lo_ex = *hi_ex = 0;
	json_t *emn = json_object_get(s, "exclusiveMinimum"), *emx = json_object_get(s, "exclusiveMaximum");
	if ((r = bound(c, s, "minimum", &v)) < 0)
		return r;
	if (r)
		*lo = v, *lo_ex = json_is_true(emn);
	if (json_is_boolean(emn) || json_is_boolean(emx)) {     /* draft 4 */
		if ((json_is_true(emn) && !r) || (json_is_true(emx) && !json_object_get(s, "maximum")))
			return bad(c, "'exclusiveMinimum'/'exclusiveMaximum' true needs 'minimum'/'maximum' beside it");
	} else if ((r = bound(c, s, "exclusiveMinimum", &v)) < 0) {
		return r;
	} else if (r && v >= *lo) {
		*lo = v, *lo_ex = 1;
	}
	if ((r = bound(c, s, "maximum", &v)) < 0)
		return r;
	if (r)
		*hi = v, *hi_ex = json_is_true(emx);
	if (!json_is_boolean(emx)) {
		if ((r = bound(c, s, "exclusiveMaximum", &v)) < 0)
			return r;
		if (r && v <= *hi)
			*hi = v, *hi_ex = 1;
	}
	return 0;
}

static int integer(struct ctx *c, json_t *s, struct rl_sb *b)
{
	double flo, fhi;
	int lo_ex, hi_ex, r;
	if ((r = num_bounds(c, s, &flo, &lo_ex, &fhi, &hi_ex)))
		return r;
	long long lo = LLONG_MIN, hi = LLONG_MAX;
	if (flo > -INFINITY)
		lo = lo_ex ? (long long)floor(flo) + 1 : (long long)ceil(flo);
	if (fhi < INFINITY)
		hi = hi_ex ? (long long)ceil(fhi) - 1 : (long long)floor(fhi);
	json_t *mo = json_object_get(s, "multipleOf");
	if (mo) {
		/* a whole multiple: 1 binds nothing; a power of ten, trailing zeros; others, the
		 * multiples between the bounds written out when there are few (a validator's float
		 * division is exact on these integers) */
		const double m = json_number_value(mo);
		if (!json_is_number(mo) || !(m > 0))
			return bad(c, "'multipleOf' must be a number above 0");
		if (m != floor(m) || m > 1e15)
			return bad(c, "'multipleOf' %g on integers is supported for whole numbers only", m);
		const long long k = (long long)m;
		long long p10 = 1;
		int d = 0;
		while (p10 < k && d < 15)
			p10 *= 10, d++;
		if (k > 1 && lo != LLONG_MIN && hi != LLONG_MAX && hi >= lo && (hi - lo) / k <= 4096) {
			long long first = lo % k == 0 ? lo : lo + ((lo > 0 ? k : 0) - lo % k);
			if (first > hi) {
				bad(c, "no multiple of %lld lies between the bounds", k);
				return NO_VALUE;
			}
			put(b, "(?:");
			for (long long x = first; x <= hi; x += k)
				putf(b, x == first ? "%lld" : "|%lld", x);
			put(b, ")");
			return 0;
		}
		if (k > 1 && p10 == k && lo == LLONG_MIN && hi == LLONG_MAX) {
			putf(b, "(?:0|-?[1-9][0-9]{0,%d}0{%d})", 17 - d, d);
			return 0;
		}
		if (k > 1)
			return bad(c, "'multipleOf' %lld is supported with bounds around at most 4096 multiples, or as a power of "
				   "ten without bounds", k);
	}
	if (lo == LLONG_MIN && hi == LLONG_MAX) {
		put(b, "-?" INT_DIGITS);
		return 0;
	}
	return int_range(c, b, lo, hi);
}

/* |v| as the shortest fixed-point decimal that reads back as v ("12.5", "0.001", "3") */
static void shortest(double v, char *out, size_t cap)
{
	char e[40];
	v = fabs(v);
	int p = 1;
	for (; p < 17; p++) {
		snprintf(e, sizeof e, "%.*e", p - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	snprintf(e, sizeof e, "%.*e", p - 1, v);
	char dig[24];
	size_t nd = 0;
	const char *q = e;
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9')
			dig[nd++] = *q;
	while (nd > 1 && dig[nd - 1] == '0')
		nd--;
	const int ex = atoi(q + 1);         /* v = d.ddd x 10^ex */
	size_t n = 0;
	if (ex < 0) {
		n += (size_t)snprintf(out, cap, "0.");
		for (int i = 0; i < -ex - 1 && n + 1 < cap; i++)
			out[n++] = '0';
		for (size_t i = 0; i < nd && n + 1 < cap; i++)
			out[n++] = dig[i];
	} else {
		for (int i = 0; i <= ex && n + 1 < cap; i++)
			out[n++] = (size_t)i < nd ? dig[i] : '0';
		if (nd > (size_t)ex + 1 && n + 1 < cap) {
			out[n++] = '.';
			for (size_t i = (size_t)ex + 1; i < nd && n + 1 < cap; i++)
				out[n++] = dig[i];
		}
	}
	out[n] = 0;
}

static int all_zero(const char *d)
{
	while (*d == '0')
		d++;
	return !*d;
}

static int frac_between(struct rl_sb *b, const char *lo, const char *hi, int min, int n);

/* digit d, then fraction digits lo..hi (frac_between, into scratch part) and a '|': 1 when
 * any such rest exists, 0 (nothing written) when none does */
static int digit_then(struct rl_sb *b, struct rl_sb *part, char d, const char *lo, const char *hi, int min, int n)
{
	part->n = 0;
	if (!frac_between(part, lo, hi, min, n))
		return 0;
	putf(b, "%c", d);
	putn(b, part->p, part->n);
	put(b, "|");
	return 1;
}

/* Fraction digit strings F of min..n digits with lo <= F <= hi, compared as fractions (".5"
 * above ".45"; lo "" is 0, hi NULL no bound). Returns how many alternatives it wrote (0: no
 * such F, nothing written). */
static int frac_between(struct rl_sb *b, const char *lo, const char *hi, int min, int n)
{
	if (all_zero(lo) && !hi) {
		if (n >= min)
			putf(b, "[0-9]{%d,%d}", min, n);
		return n >= min;
	}
	int alts = 0;
	struct rl_sb part = { 0 };
	put(b, "(?:");
	if (!min && all_zero(lo)) {        /* no more digits: the value's rest is 0 */
		alts++;
		put(b, "|");
	}
	if (n > 0) {
		const char a1 = *lo ? *lo : '0', b1 = hi ? (*hi ? *hi : '0') : '9';
		const char *lr = *lo ? lo + 1 : lo, *hr = hi ? (*hi ? hi + 1 : hi) : NULL;
		const int m = min ? min - 1 : 0;
		/* digit a1 then the rest within (lr, hr); between them any; b1 then the rest up to hr */
		alts += digit_then(b, &part, a1, lr, a1 == b1 ? hr : NULL, m, n - 1);
		if (a1 != b1) {
			if (a1 + 1 <= b1 - 1) {
				putf(b, "[%c-%c][0-9]{%d,%d}|", a1 + 1, b1 - 1, m, n - 1);
				alts++;
			}
			alts += digit_then(b, &part, b1, "", hr, m, n - 1);
		}
	}
	free(part.p);
	if (b->n && b->p[b->n - 1] == '|')
		b->n--;
	put(b, ")");
	return alts;
}

#define FRAC_MAX 17                    /* fraction digits a bounded number is written with */

/* after an integer part whose value is fixed: nothing or '.' and a fraction in [lo, hi] */
static void frac_part(struct rl_sb *b, const char *lo, const char *hi)
{
	struct rl_sb part = { 0 };
	const int any = frac_between(&part, lo, hi, 1, FRAC_MAX);
	put(b, "(?:");
	if (any) {
		put(b, "\\.");
		putn(b, part.p, part.n);
	}
	if (all_zero(lo))
		put(b, any ? "|" : "");
	put(b, ")");
	if (!all_zero(lo) && !any)             /* not reached: the caller's range holds a value */
		put(b, "[^\\x00-\\xff]");
	free(part.p);
}

/* decimals x, a <= x <= hi (hi NULL: none above), each a fixed-point decimal string; written
 * without an exponent, at most FRAC_MAX fraction digits */
static void nonneg_dec(struct rl_sb *b, const char *a, const char *hi)
{
	long long A = atoll(a), B = hi ? atoll(hi) : 0;
	const char *al = strchr(a, '.'), *bl = hi ? strchr(hi, '.') : NULL;
	al = al ? al + 1 : "";
	bl = hi ? (bl ? bl + 1 : "") : NULL;
	put(b, "(?:");
	if (hi && A == B) {
		putf(b, "%lld", A);
		frac_part(b, al, bl);
	} else {
		putf(b, "%lld", A);
		frac_part(b, al, NULL);
		if (!hi || A + 1 <= B - 1) {
			put(b, "|");
			nonneg_range(b, A + 1, hi ? B - 1 : INF_HI);
			putf(b, "(?:\\.[0-9]{1,%d})?", FRAC_MAX);
		}
		if (hi) {
			putf(b, "|%lld", B);
			frac_part(b, "", bl);
		}
	}
	put(b, ")");
}

/* numbers between the bounds: with none, any JSON number in the engine's spelling; with any,
 * fixed-point decimals of at most FRAC_MAX fraction digits whose value lies within them. An
 * exclusive bound becomes the next double past it, and every bound the shortest decimal that
 * reads back as it: a parser rounds the output to the nearest double, which rounding keeps on
 * the right side of each bound. */
static int number(struct ctx *c, json_t *s, struct rl_sb *b)
{
	double lo, hi;
	int lo_ex, hi_ex, r;
	if ((r = num_bounds(c, s, &lo, &lo_ex, &hi, &hi_ex)))
		return r;
	json_t *mo = json_object_get(s, "multipleOf");
	if (mo && json_is_number(mo) && json_number_value(mo) == floor(json_number_value(mo)))
		return integer(c, s, b);       /* a whole multiple: the integers */
	if (mo)
		return bad(c, "'multipleOf' %g on numbers is not supported (a validator's float division makes 0.3 no "
			   "multiple of 0.1; whole multiples are)", json_number_value(mo));
	if (lo == -INFINITY && hi == INFINITY) {
		put(b, NUM_RE);
		return 0;
	}
	if (lo == 0 && !lo_ex && hi == INFINITY) {     /* no sign: every spelling, exponents too */
		put(b, INT_DIGITS FRAC_EXP);
		return 0;
	}
	if (lo_ex)
		lo = nextafter(lo, INFINITY);
	if (hi_ex)
		hi = nextafter(hi, -INFINITY);
	if (lo > hi)
		return bad(c, "no number lies between the bounds");
	char x[400], y[400];
	put(b, "(?:");
	if (lo < 0) {                          /* -y for y in max(0, -hi)..-lo */
		shortest(hi < 0 ? -hi : 0, x, sizeof x);
		if (lo > -INFINITY)
			shortest(-lo, y, sizeof y);
		put(b, "-");
		nonneg_dec(b, x, lo > -INFINITY ? y : NULL);
	}
	if (hi >= 0) {
		if (lo < 0)
			put(b, "|");
		shortest(lo > 0 ? lo : 0, x, sizeof x);
		if (hi < INFINITY)
			shortest(hi, y, sizeof y);
		nonneg_dec(b, x, hi < INFINITY ? y : NULL);
	}
	put(b, ")");
	return 0;
}

/* ---- strings ---------------------------------------------------------------------------- */
/* one character of a JSON string: a raw one, or an escape (no lone surrogate: JSON parsers
 * refuse \uD800 alone) */
#define STR_CHAR "(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt]|\\\\u(?:[0-9A-Ca-cE-Fe-f][0-9A-Fa-f]{3}|[Dd][0-7][0-9A-Fa-f]{2}))"

static int count_kw(struct ctx *c, json_t *s, const char *k, long *v)
{
	json_t *x = json_object_get(s, k);
	if (!x)
		return 0;
	if (!json_is_integer(x) && !(json_is_real(x) && json_real_value(x) == floor(json_real_value(x))))
		return bad(c, "'%s' must be a non-negative integer", k);
	double d = json_number_value(x);
	if (d < 0)
		return bad(c, "'%s' must be a non-negative integer", k);
	if (d > MAX_COUNT)
		return bad(c, "'%s' %.0f is above the %d this engine expands", k, d, MAX_COUNT);
	*v = (long)d;
	return 1;
}

/* 'format' values as expressions whose every match each checker accepts (RFC 3339 dates and
 * times with February kept to 28 days, RFC 4122 UUIDs, dotted-quad IPv4 without leading zeros,
 * ASCII e-mail addresses and host names, http(s) URIs of such hosts): narrower than the
 * formats, never wider (years 1000-9999: Python has no year 0). */
#define F_DATE "[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define F_TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define F_LABEL "[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?"
#define F_HOST F_LABEL "(?:\\." F_LABEL "){0,3}"
#define F_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
static const struct { const char *name, *re; } formats[] = {
	{ "date", F_DATE },
	{ "time", F_TIME },
	{ "date-time", F_DATE "T" F_TIME },
	{ "uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}" },
	{ "ipv4", F_OCTET "(?:\\." F_OCTET "){3}" },
	{ "email", "[a-z0-9](?:[a-z0-9._+-]{0,30}[a-z0-9])?@" F_LABEL "(?:\\." F_LABEL "){0,2}\\.[a-z]{2,8}" },
	{ "hostname", F_HOST },
	{ "uri", "https?://" F_HOST "(?:/[A-Za-z0-9._~-]{0,20}){0,4}" },
};

/* A pattern that is one character class repeated ("^[a-z0-9-]+$", "\\d{3,5}", "^.*$"): the
 * class into cls, its counts into *lo and *hi (-1: unbounded). 1 when it is of that form. */
static int one_class_rep(const char *p, size_t n, char *cls, size_t cap, long *lo, long *hi)
{
	size_t i = n && p[0] == '^', j;
	if (n > i + 1 && p[n - 1] == '$' && p[n - 2] != '\\')
		n--;
	if (i >= n)
		return 0;
	if (p[i] == '[') {
		j = i + 1;
		j += j < n && p[j] == '^';
		j += j < n && p[j] == ']';
		while (j < n && p[j] != ']')
			j += p[j] == '\\' ? 2 : 1;
		if (j >= n)
			return 0;
		j++;
	} else if (p[i] == '\\' && i + 1 < n && strchr("dDwWsS", p[i + 1])) {
		j = i + 2;
	} else if (p[i] == '.') {
		j = i + 1;
	} else
		return 0;
	if (j - i + 1 > cap || j >= n)
		return 0;
	memcpy(cls, p + i, j - i);
	cls[j - i] = 0;
	char *end;
	if (p[j] == '+' || p[j] == '*') {
		*lo = p[j] == '+', *hi = -1;
		end = (char *)p + j + 1;
	} else if (p[j] == '{') {
		*lo = strtol(p + j + 1, &end, 10);
		*hi = *lo;
		if (end == p + j + 1)
			return 0;
		if (*end == ',') {
			char *e2;
			*hi = strtol(end + 1, &e2, 10);
			*hi = e2 == end + 1 ? -1 : *hi;
			end = e2;
		}
		if (*end++ != '}')
			return 0;
	} else
		return 0;
	return end == p + n;
}

/* the fewest and most bytes of the strings DFA d accepts from state s, memoised in lo/hi
 * (-2: not yet, -3: on the path: a cycle makes the most unbounded, -1) */
static void dfa_len(const struct rl_cons_dfa *d, uint32_t s, long *lo, long *hi)
{
	if (hi[s] != -2)
		return;
	hi[s] = -3;
	long best_lo = d->accept[s] ? 0 : LONG_MAX, best_hi = d->accept[s] ? 0 : LONG_MIN;
	for (uint32_t k = 0; k < d->ncls; k++) {
		const uint32_t t = d->next[(size_t)s * d->ncls + k];
		if (t == RL_CONS_DEAD)
			continue;
		if (hi[t] == -3) {             /* a cycle */
			best_hi = -1;
			continue;
		}
		dfa_len(d, t, lo, hi);
		if (lo[t] != LONG_MAX && lo[t] + 1 < best_lo)
			best_lo = lo[t] + 1;
		if (hi[t] == -1)
			best_hi = -1;
		else if (best_hi != -1 && hi[t] != LONG_MIN && hi[t] + 1 > best_hi)
			best_hi = hi[t] + 1;
	}
	lo[s] = best_lo;
	hi[s] = best_hi;
}

/* the fewest and most characters of a format's expression (ASCII), *hi -1 when unbounded */
static int format_lengths(const char *re, long *lo, long *hi)
{
	struct rl_cons_dfa d;
	char e[200];
	if (rl_cons_regex_dfa(re, strlen(re), 0, 0, &d, e, sizeof e))
		return -ENOMEM;
	long *l = malloc(d.n * sizeof *l), *h = malloc(d.n * sizeof *h);
	if (!l || !h) {
		free(l);
		free(h);
		rl_cons_dfa_free(&d);
		return -ENOMEM;
	}
	for (uint32_t q = 0; q < d.n; q++)
		l[q] = LONG_MAX, h[q] = -2;
	dfa_len(&d, d.start, l, h);
	*lo = l[d.start];
	*hi = h[d.start];
	free(l);
	free(h);
	rl_cons_dfa_free(&d);
	return 0;
}

static int string(struct ctx *c, json_t *s, struct rl_sb *b)
{
	long mn = 0, mx = -1;
	int r1 = count_kw(c, s, "minLength", &mn), r2 = count_kw(c, s, "maxLength", &mx);
	if (r1 < 0 || r2 < 0)
		return -EINVAL;
	if (mx >= 0 && mx < mn)
		return bad(c, "'maxLength' is below 'minLength'");
	json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
	char cls[256], one[300];
	long qlo, qhi;
	if (json_is_string(pat) && !fmt && (r1 || r2) &&
	    one_class_rep(json_string_value(pat), json_string_length(pat), cls, sizeof cls, &qlo, &qhi)) {
		/* one class repeated: its count and the length bounds meet */
		long lo = qlo > mn ? qlo : mn, hi = qhi < 0 ? mx : mx < 0 ? qhi : qhi < mx ? qhi : mx;
		if (hi >= 0 && lo > hi) {
			bad(c, "no string of 'pattern' has a length within 'minLength'/'maxLength'");
			return NO_VALUE;
		}
		snprintf(one, sizeof one, hi >= 0 ? "%s{%ld,%ld}" : "%s{%ld,}", cls, lo, hi);
		pat = json_string(one);
		int rc = pat ? 0 : -ENOMEM;
		if (!rc) {
			json_t *s2 = json_copy(s);
			rc = s2 && !json_object_set_new(s2, "pattern", pat) ? 0 : -ENOMEM;
			if (!rc) {
				json_object_del(s2, "minLength");
				json_object_del(s2, "maxLength");
				rc = string(c, s2, b);
			}
			json_decref(s2);
		}
		return rc;
	}
	if (fmt) {
		if (!json_is_string(fmt))
			return bad(c, "'format' must be a string");
		if (pat)
			return bad(c, "'format' together with 'pattern' is not supported");
		for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
			if (!strcmp(formats[i].name, json_string_value(fmt))) {
				/* lengths that every string of the format's expression (ASCII: a byte a
				 * character) already keeps bind nothing; others would cut it */
				long flo = 0, fhi = -1;
				if ((r1 || r2) && format_lengths(formats[i].re, &flo, &fhi))
					return -ENOMEM;
				/* (with a cycle the fewest is not known exactly: no bound is taken) */
				if ((r1 || r2) && (fhi < 0 ? mx >= 0 || mn > 0 : mn > flo || (mx >= 0 && fhi > mx)))
					return bad(c, "'format' '%s' (%ld to %ld characters) with minLength/maxLength that cut it is not "
						   "supported", formats[i].name, flo, fhi);
				putf(b, "\"%s\"", formats[i].re);
				c->nfmt++;
				return 0;
			}
		return bad(c, "'format' '%s' is not supported (date, time, date-time, uuid, ipv4, email, hostname, uri are)",
			   json_string_value(fmt));
	}
	put(b, "\"");
	if (pat) {
		if (!json_is_string(pat))
			return bad(c, "'pattern' must be a string");
		if (r1 || r2)
			return bad(c, "'pattern' together with 'minLength'/'maxLength' is not supported (beyond one character "
				   "class repeated)");
		/* the expression alone first: its own errors name it, and a ')' it does not open
		 * cannot close the group it is put in */
		struct rl_cons_dfa d;
		char e[300];
		int rc = rl_cons_regex_dfa(json_string_value(pat), json_string_length(pat), 0, 0, &d, e, sizeof e);
		if (rc)
			return bad(c, "'pattern': %s", e);
		rl_cons_dfa_free(&d);
		put(b, "(?J:");
		putn(b, json_string_value(pat), json_string_length(pat));
		put(b, ")");
	} else if (mx >= 0)
		putf(b, STR_CHAR "{%ld,%ld}", mn, mx);
	else if (mn)
		putf(b, STR_CHAR "{%ld,}", mn);
	else
		put(b, STR_CHAR "*");
	put(b, "\"");
	return 0;
}

/* ---- objects and arrays ----------------------------------------------------------------- */
/* patternProperties hold vacuously for the keys never produced, but they also bind each
 * declared property whose name a pattern finds (anywhere in it, as ECMA-262's test does):
 * that combination is refused. */
static int pattern_props(struct ctx *c, json_t *s, json_t *props)
{
	json_t *pp = json_object_get(s, "patternProperties");
	if (!pp)
		return 0;
	if (!json_is_object(pp))
		return bad(c, "'patternProperties' must be an object");
	const char *pat, *name;
	json_t *x, *y;
	json_object_foreach(pp, pat, x) {
		/* a search: unanchored ends get "any text" (a leading '^' / trailing '$' stay anchors) */
		size_t n = strlen(pat);
		int a0 = n && pat[0] == '^', a1 = n > (size_t)a0 && pat[n - 1] == '$' && (n < 2 || pat[n - 2] != '\\');
		struct rl_sb re = { 0 };
		putf(&re, "%s(?:%.*s)%s", a0 ? "" : "[\\s\\S]*", (int)(n - a0 - a1), pat + a0, a1 ? "" : "[\\s\\S]*");
		if (re.oom)
			return -ENOMEM;
		struct rl_cons_dfa d;
		char e[300];
		int rc = rl_cons_regex_dfa(re.p, re.n, 0, 0, &d, e, sizeof e);
		free(re.p);
		if (rc)
			return bad(c, "'patternProperties' '%s': %s", pat, e);
		json_object_foreach(props, name, y) {
			uint32_t st = d.start;
			for (const char *q = name; *q && st != RL_CONS_DEAD; q++)
				st = rl_cons_dfa_step(&d, st, (uint8_t)*q);
			if (st != RL_CONS_DEAD && d.accept[st]) {
				rl_cons_dfa_free(&d);
				return bad(c, "'patternProperties' '%s' binding the declared property '%s' is not supported", pat, name);
			}
		}
		rl_cons_dfa_free(&d);
	}
	return 0;
}

/* in a split compile (RL_SCHEMA_SPLIT), an object or array schema written in place becomes a
 * rule of its own too: a grammar's terminals stay small however the schema nests */
static int split_here(const struct ctx *c, json_t *x)
{
	return (c->flags & RL_SCHEMA_SPLIT) && json_is_object(x) && !json_object_get(x, "$ref") &&
	       (json_object_get(x, "properties") || json_object_get(x, "items") || json_object_get(x, "prefixItems"));
}

static int object(struct ctx *c, json_t *s, struct rl_sb *b);

/* object() on s2, a copy of a schema whose keywords kw[0..nk) were written into its properties
 * p2 and required r2 (unless rc says the rewrite failed); s2, p2 and r2 are released */
static int object_again(struct ctx *c, json_t *s2, json_t *p2, json_t *r2, const char *const *kw, int nk, int rc,
			struct rl_sb *b)
{
	if (!rc && (json_object_set(s2, "properties", p2) || json_object_set(s2, "required", r2)))
		rc = -ENOMEM;
	for (int i = 0; !rc && i < nk; i++)
		json_object_del(s2, kw[i]);
	if (!rc)
		rc = object(c, s2, b);
	json_decref(s2);
	json_decref(p2);
	json_decref(r2);
	return rc;
}

static int has_name(json_t *arr, const char *k)
{
	size_t i;
	json_t *y;
	json_array_foreach(arr, i, y)
		if (json_is_string(y) && !strcmp(json_string_value(y), k))
			return 1;
	return 0;
}

/* dependentRequired (and draft 4-7's array 'dependencies'), propertyNames: the keys written are
 * the named properties, so each decides which of them are written. A key with dependencies:
 * where it is required, they become required; where it is optional and they are not all
 * required, it is left out. A name propertyNames refuses is left out (refused when required). */
static int object_keys(struct ctx *c, json_t *s, json_t *props, json_t *req, json_t *ap, struct rl_sb *b)
{
	json_t *pn = json_object_get(s, "propertyNames");
	if (json_is_true(pn) || (json_is_object(pn) && !json_object_size(pn)))
		pn = NULL;             /* binds nothing */
	if (pn && !props && !json_is_false(ap))
		return bad(c, "'propertyNames' on an object of free keys is not supported");
	json_t *s2 = json_copy(s), *p2 = props ? json_copy(props) : json_object(), *r2 = req ? json_copy(req) : json_array();
	int rc = s2 && p2 && r2 ? 0 : -ENOMEM;
	static const char *const kws[] = { "dependentRequired", "dependencies" };
	for (int changed = 1, round = 0; !rc && changed && round < 64; round++) {
		changed = 0;
		for (int w = 0; w < 2 && !rc; w++) {
			json_t *deps = json_object_get(s, kws[w]), *list;
			const char *k;
			if (deps && !json_is_object(deps))
				rc = bad(c, "'%s' must be an object", kws[w]);
			json_object_foreach(deps, k, list) {
				if (rc)
					break;
				if (json_is_true(list) || (json_is_object(list) && !json_object_size(list)))
					continue;
				if (!json_is_array(list)) {
					rc = bad(c, "'%s' '%s' with a schema is not supported (a list of names is)", kws[w], k);
					break;
				}
				if (!json_object_get(p2, k))
					continue;      /* never written */
				size_t i;
				json_t *y;
				int all = 1;
				json_array_foreach(list, i, y)
					all &= json_is_string(y) && has_name(r2, json_string_value(y));
				if (has_name(r2, k)) {
					json_array_foreach(list, i, y)
						if (!rc && json_is_string(y) && !has_name(r2, json_string_value(y))) {
							rc = json_array_append(r2, y) ? -ENOMEM : 0;
							changed = 1;
						}
				} else if (!all) {
					json_object_del(p2, k);
					changed = 1;
				}
			}
		}
	}
	if (!rc && pn) {
		struct rl_sb pb = { 0 };
		size_t old = path_push(c, "propertyNames");
		rc = value(c, pn, &pb);
		path_pop(c, old);
		if (!rc && pb.oom)
			rc = -ENOMEM;
		struct rl_cons_dfa d;
		char e[300];
		if (!rc && rl_cons_regex_dfa(pb.p, pb.n, RL_RE_INTERNAL, 0, &d, e, sizeof e))
			rc = bad(c, "'propertyNames': %s", e);
		else if (!rc) {
			const char *k;
			json_t *x;
			void *tmp;
			json_object_foreach_safe(p2, tmp, k, x) {
				json_t *kj = json_string(k);
				char *kd = kj ? json_dumps(kj, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
				json_decref(kj);
				uint32_t st = d.start;
				for (const char *q = kd; q && *q && st != RL_CONS_DEAD; q++)
					st = rl_cons_dfa_step(&d, st, (uint8_t)*q);
				free(kd);
				if (st != RL_CONS_DEAD && d.accept[st])
					continue;
				if (has_name(r2, k)) {
					bad(c, "the required property '%s' is a name 'propertyNames' refuses", k);
					rc = NO_VALUE;
					break;
				}
				json_object_del(p2, k);
			}
			rl_cons_dfa_free(&d);
		}
		free(pb.p);
	}
	static const char *const done[] = { "dependentRequired", "dependencies", "propertyNames" };
	return object_again(c, s2, p2, r2, done, 3, rc, b);
}

static int object(struct ctx *c, json_t *s, struct rl_sb *b)
{
	json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
	       *ap = json_object_get(s, "additionalProperties");
	if (props && !json_is_object(props))
		return bad(c, "'properties' must be an object");
	if (req && !json_is_array(req))
		return bad(c, "'required' must be an array");
	if (ap && !json_is_boolean(ap) && !json_is_object(ap))
		return bad(c, "'additionalProperties' must be a schema");
	if (!json_is_false(ap) && !(c->flags & RL_CONS_NO_EXTRA_KEYS))
		return bad(c, "an object schema without \"additionalProperties\": false is not supported (extra keys); "
			   "add it, or compile with RL_CONS_NO_EXTRA_KEYS");
	/* a required key that 'properties' does not name: a property after the named ones, its
	 * value as additionalProperties says (any value when it is absent or true) */
	size_t i;
	json_t *x;
	json_array_foreach(req, i, x)
		if (json_is_string(x) && !json_object_get(props, json_string_value(x)) && !json_is_false(ap) &&
		    !json_object_get(s, "patternProperties")) {
			json_t *s2 = json_copy(s), *p2 = props ? json_copy(props) : json_object();
			size_t j;
			json_t *y;
			int rc = s2 && p2 ? 0 : -ENOMEM;
			json_array_foreach(req, j, y)
				if (!rc && json_is_string(y) && !json_object_get(p2, json_string_value(y)) &&
				    json_object_set(p2, json_string_value(y), ap ? ap : json_true()))
					rc = -ENOMEM;
			if (!rc && json_object_set(s2, "properties", p2))
				rc = -ENOMEM;
			if (!rc)
				rc = object(c, s2, b);
			json_decref(p2);
			json_decref(s2);
			return rc;
		}
	if (json_object_get(s, "dependentRequired") || json_object_get(s, "dependencies") ||
	    json_object_get(s, "propertyNames"))
		return object_keys(c, s, props, req, ap, b);
	long minp = 0, maxp = -1;
	if (count_kw(c, s, "minProperties", &minp) < 0 || count_kw(c, s, "maxProperties", &maxp) < 0)
		return -EINVAL;
	if (json_object_get(s, "minProperties") || json_object_get(s, "maxProperties")) {
		/* the keys written are the named ones: at least minProperties by making the first
		 * optional ones required, at most maxProperties by leaving the last optional ones out
		 * (free keys: at most maxProperties pairs; a least count of them is refused) */
		if (!props && json_is_false(ap) && minp > 0) {
			bad(c, "'minProperties' %ld: no key can be written (no 'properties', additionalProperties false)", minp);
			return NO_VALUE;
		} else if (!props) {
			if (minp > 0)
				return bad(c, "'minProperties' on an object of free keys is not supported");
		} else {
			json_t *s2 = json_copy(s), *p2 = json_copy(props), *r2 = req ? json_copy(req) : json_array();
			int rc = s2 && p2 && r2 ? 0 : -ENOMEM;
			size_t nreq = json_array_size(r2), nprop = json_object_size(p2);
			const char *key;
			json_t *v;
			json_object_foreach(props, key, v) {     /* the first optional ones become required */
				int is_req = 0;
				size_t j;
				json_t *y;
				json_array_foreach(r2, j, y)
					is_req |= json_is_string(y) && !strcmp(json_string_value(y), key);
				if (!rc && !is_req && (long)nreq < minp && !json_is_false(v)) {
					rc = json_array_append_new(r2, json_string(key)) ? -ENOMEM : 0;
					nreq++;
				}
			}
			if (maxp >= 0 && (long)nreq > maxp) {
				bad(c, "'maxProperties' %ld is below the %zu properties required", maxp, nreq);
				rc = rc ? rc : NO_VALUE;
			} else if ((long)nreq < minp && !rc) {
				bad(c, "'minProperties' %ld is above the %zu properties that can be written", minp, nreq);
				rc = NO_VALUE;
			}
			/* the last optional ones out until at most maxProperties remain */
			if (!rc && maxp >= 0 && (long)nprop > maxp) {
				const char **names = calloc(nprop, sizeof *names);
				size_t k = 0;
				if (!names)
					rc = -ENOMEM;
				json_object_foreach(props, key, v)
					if (names)
						names[k++] = key;
				for (size_t q = k; !rc && q-- > 0 && (long)nprop > maxp;) {
					int is_req = 0;
					size_t j;
					json_t *y;
					json_array_foreach(r2, j, y)
						is_req |= json_is_string(y) && !strcmp(json_string_value(y), names[q]);
					if (!is_req) {
						json_object_del(p2, names[q]);
						nprop--;
					}
				}
				free(names);
			}
			static const char *const done[] = { "minProperties", "maxProperties" };
			return object_again(c, s2, p2, r2, done, 2, rc, b);
		}
	}
	int rp = pattern_props(c, s, props);
	if (rp)
		return rp;
	if (!props && !json_is_false(ap) && !req && !json_object_get(s, "patternProperties")) {
		/* no properties named: keys are free, their values by additionalProperties (any
		 * value when it is absent or true) */
		struct rl_sb v = { 0 };
		int rc = 0;
		if (json_is_object(ap)) {
			size_t old = path_push(c, "additionalProperties");
			rc = value(c, ap, &v);
			path_pop(c, old);
		} else
			any_value(&v, ANY_DEPTH - 1);
		if (rc == NO_VALUE) {
			unsay(c);                      /* no key can have a value: no key */
			rc = 0;
			put(b, "\\{\\}");
		} else if (!rc && maxp == 0) {
			put(b, "\\{\\}");
		} else if (!rc) {
			put(b, "\\{(?:\"" STR_CHAR "*\":");
			putn(b, v.p, v.n);
			put(b, "(?:,\"" STR_CHAR "*\":");
			putn(b, v.p, v.n);
			if (maxp > 0)
				putf(b, "){0,%ld})?\\}", maxp - 1);
			else
				put(b, ")*)?\\}");
			rc = v.oom || b->oom ? -ENOMEM : 0;
		}
		free(v.p);
		return rc;
	}
	size_t n = props ? json_object_size(props) : 0, nall = n;
	json_array_foreach(req, i, x) {
		if (!json_is_string(x))
			return bad(c, "'required' must hold strings");
		if (!props || !json_object_get(props, json_string_value(x)))
			return bad(c, "required property '%s' is not in 'properties' (extra keys are not allowed)",
				   json_string_value(x));
	}
	/* each property's "key":value in order, and whether it is required */
	struct rl_sb *pv = calloc(n ? n : 1, sizeof *pv);
	int *must = calloc(n ? n : 1, sizeof *must);
	int rc = 0;
	if (!pv || !must) {
		free(pv);
		free(must);
		return -ENOMEM;
	}
	const char *key;
	size_t k = 0;
	json_object_foreach(props, key, x) {
		json_t *kj = json_string(key);
		char *kd = kj ? json_dumps(kj, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
		json_decref(kj);
		if (!kd) {
			rc = -ENOMEM;
			break;
		}
		put_lit(&pv[k], kd, strlen(kd));
		free(kd);
		put(&pv[k], ":");
		size_t old = path_push(c, "properties.%s", key);
		rc = split_here(c, x) ? rule_ref(c, x, c->path, &pv[k]) : value(c, x, &pv[k]);
		path_pop(c, old);
		int required = 0;
		json_t *y;
		json_array_foreach(req, i, y)
			required |= !strcmp(json_string_value(y), key);
		if (rc == NO_VALUE && !required) {
			unsay(c);                      /* the property cannot appear: left out */
			rc = 0;
			pv[k].n = 0;
			continue;
		}
		if (rc)
			break;
		must[k++] = required;
	}
	n = k;                                 /* the properties that can appear */
	if (!rc) {
		/* first(i): the properties from i on when none came before; after(i): when one did.
		 * after is linear; first branches at each optional property into "it comes first"
		 * or "it is left out", so the text is O(n^2) in the worst case, never exponential. */
		put(b, "\\{");
		size_t opened = 0;
		for (size_t f = 0; f < n; f++) {
			if (!must[f]) {
				put(b, "(?:");
				opened++;
			}
			putn(b, pv[f].p, pv[f].n);
			for (size_t j = f + 1; j < n; j++) {
				put(b, must[j] ? "," : "(?:,");
				putn(b, pv[j].p, pv[j].n);
				if (!must[j])
					put(b, ")?");
			}
			if (must[f])
				break;                 /* a required one must come first when reached */
			put(b, "|");                   /* after the last: the empty alternative */
		}
		for (size_t o = 0; o < opened; o++)
			put(b, ")");
		put(b, "\\}");
	}
	for (size_t j = 0; j < nall; j++)
		free(pv[j].p);
	free(pv);
	free(must);
	return rc;
}

static int array(struct ctx *c, json_t *s, struct rl_sb *b)
{
	json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
	if (json_object_get(s, "additionalItems") || (json_is_array(items) && !prefix)) {
		/* drafts 4 to 2019-09: 'items' as an array is 2020-12's 'prefixItems', and
		 * 'additionalItems' its 'items' (beside an 'items' schema it binds nothing) */
		json_t *s2 = json_copy(s);
		int rc = s2 ? 0 : -ENOMEM;
		if (!rc && json_is_array(items) && !prefix) {
			json_t *more = json_object_get(s, "additionalItems");
			if (json_object_set(s2, "prefixItems", items) ||
			    (more ? json_object_set(s2, "items", more) : json_object_del(s2, "items")))
				rc = -ENOMEM;
		}
		json_object_del(s2, "additionalItems");
		if (!rc)
			rc = array(c, s2, b);
		json_decref(s2);
		return rc;
	}
	if (prefix && !json_is_array(prefix))
		return bad(c, "'prefixItems' must be an array");
	size_t k = prefix ? json_array_size(prefix) : 0;
	if (!items && !(c->flags & RL_CONS_NO_EXTRA_KEYS))
		return bad(c, k ? "'prefixItems' without \"items\" (extra items of any kind) is not supported; add \"items\": false or a schema"
			       : "an array schema without 'items' is not supported");
	int no_more = !items || json_is_false(items);
	long m = 0, M = -1;
	if (count_kw(c, s, "minItems", &m) < 0 || count_kw(c, s, "maxItems", &M) < 0)
		return -EINVAL;
	struct rl_sb item = { 0 };
	int rc = 0;
	if (!no_more) {
		size_t old = path_push(c, "items");
		rc = split_here(c, items) ? rule_ref(c, items, c->path, &item) : value(c, items, &item);
		path_pop(c, old);
		if (rc == NO_VALUE) {
			unsay(c);                      /* no item past the prefix can have a value */
			rc = 0;
			no_more = 1;
		}
		if (rc) {
			free(item.p);
			return rc;
		}
	}
	if (no_more && (M < 0 || M > (long)k))
		M = (long)k;
	if (M >= 0 && m > M) {
		free(item.p);
		return bad(c, "'minItems' is above the items the schema allows");
	}
	put(b, "\\[");
	size_t opened = 0;
	for (long i = 0;; i++) {
		if (M >= 0 && i >= M)
			break;
		if (i >= (long)k) {                     /* the uniform tail */
			long need = m - i > 0 ? m - i : 0;
			if (i == 0) {
				if (!need)
					put(b, "(?:");
				putn(b, item.p, item.n);
				put(b, "(?:,");
				putn(b, item.p, item.n);
				if (M >= 0)
					putf(b, "){%ld,%ld}", need ? need - 1 : 0, M - 1);
				else
					putf(b, "){%ld,}", need ? need - 1 : 0);
				if (!need)
					put(b, ")?");
			} else {
				put(b, "(?:,");
				putn(b, item.p, item.n);
				if (M >= 0)
					putf(b, "){%ld,%ld}", need, M - i);
				else
					putf(b, "){%ld,}", need);
			}
			break;
		}
		size_t mark = b->n, opened_before = opened;
		if (i >= m) {
			put(b, "(?:");
			opened++;
		}
		if (i)
			put(b, ",");
		size_t old = path_push(c, "prefixItems[%ld]", i);
		rc = value(c, json_array_get(prefix, (size_t)i), b);
		path_pop(c, old);
		if (rc == NO_VALUE && i >= m && !b->oom) {
			unsay(c);                      /* no array reaches past position i */
			rc = 0;
			b->n = mark;
			b->p[mark] = 0;
			opened = opened_before;
			break;
		}
		if (rc)
			break;
	}
	for (size_t o = 0; o < opened; o++)
		put(b, ")?");
	put(b, "\\]");
	free(item.p);
	return rc;
}

/* ---- combinators ------------------------------------------------------------------------ */
static int type_of(json_t *v, const char *t)
{
	if (!strcmp(t, "null")) return json_is_null(v);
	if (!strcmp(t, "boolean")) return json_is_boolean(v);
	if (!strcmp(t, "string")) return json_is_string(v);
	if (!strcmp(t, "number")) return json_is_number(v);
	if (!strcmp(t, "integer"))
		return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
	if (!strcmp(t, "array")) return json_is_array(v);
	if (!strcmp(t, "object")) return json_is_object(v);
	return 0;
}

static int type_ok(json_t *type, json_t *v)
{
	if (!type)
		return 1;
	if (json_is_string(type))
		return type_of(v, json_string_value(type));
	size_t i;
	json_t *t;
	json_array_foreach(type, i, t)
		if (type_of(v, json_string_value(t)))
			return 1;
	return 0;
}

/* enum/const: the listed values of the type; with other keywords beside them, those keywords
 * compiled on their own and each value kept when its compact spelling is in that language (a
 * value spelled otherwise, e.g. an object's keys in another order, is left out: never wider) */
static int literals(struct ctx *c, json_t *s, struct rl_sb *b)
{
	json_t *en = json_object_get(s, "enum"), *co = json_object_get(s, "const"), *type = json_object_get(s, "type");
	const char *k, *name = en ? "enum" : "const";
	json_t *x;
	int others = 0, rc = 0;
	json_object_foreach(s, k, x)
		others |= kw_kind(k) != K_ANNOT && strcmp(k, "enum") && strcmp(k, "const") && strcmp(k, "type");
	if (en && co)
		return bad(c, "'enum' together with 'const' is not supported");
	if (en && (!json_is_array(en) || !json_array_size(en)))
		return bad(c, "'enum' must be a non-empty array");
	struct rl_cons_dfa d = { 0 };
	if (others) {
		json_t *rest = json_object();
		struct rl_sb rb = { 0 };
		size_t nrec = c->nrec;
		if (!rest)
			return -ENOMEM;
		json_object_foreach(s, k, x)
			if (strcmp(k, "enum") && strcmp(k, "const") && json_object_set(rest, k, x))
				rc = -ENOMEM;
		if (!rc)
			rc = value(c, rest, &rb);
		json_decref(rest);
		if (!rc && c->nrec != nrec)
			rc = bad(c, "'%s' beside keywords that recurse through '$ref' is not supported", name);
		if (!rc && rb.oom)
			rc = -ENOMEM;
		char e[300];
		if (!rc && rl_cons_regex_dfa(rb.p ? rb.p : "", rb.n, RL_RE_INTERNAL, 0, &d, e, sizeof e))
			rc = bad(c, "the keywords beside '%s': %s", name, e);
		free(rb.p);
		if (rc)
			return rc;
	}
	json_t *one = co ? json_pack("[O]", co) : json_incref(en);
	size_t i, n = 0;
	if (!one)
		rc = -ENOMEM;
	put(b, "(?:");
	json_array_foreach(one, i, x) {
		if (!type_ok(type, x))
			continue;                       /* not of the type: no valid output spells it */
		char *t = json_dumps(x, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
		if (!t) {
			rc = -ENOMEM;
			break;
		}
		uint32_t st = d.start;
		for (const char *q = t; others && *q && st != RL_CONS_DEAD; q++)
			st = rl_cons_dfa_step(&d, st, (uint8_t)*q);
		if (!others || (st != RL_CONS_DEAD && d.accept[st])) {
			if (n++)
				put(b, "|");
			put_lit(b, t, strlen(t));
		}
		free(t);
	}
	put(b, ")");
	json_decref(one);
	if (others)
		rl_cons_dfa_free(&d);
	if (!rc && !n) {               /* no value: left out where it is optional */
		bad(c, others ? "no value of '%s' satisfies the keywords beside it" : "no value of '%s' has the schema's 'type'",
		    name);
		return NO_VALUE;
	}
	return rc;
}

/* the target of a $ref inside this document */
/* A '$ref' within this document: "#" (the root) or "#/a/b/0", a JSON pointer (RFC 6901: ~0
 * '~', ~1 '/'; percent-escapes of the URI fragment decoded) through objects and arrays. */
static json_t *resolve(struct ctx *c, const char *ref)
{
	if (ref[0] != '#' || (ref[1] && ref[1] != '/'))
		return NULL;
	json_t *t = c->root;
	for (const char *p = ref + 1; *p && t;) {
		char key[256];
		size_t o = 0;
		for (p++; *p && *p != '/' && o + 1 < sizeof key; p++) {
			if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
				key[o++] = p[1] == '0' ? '~' : '/';
				p++;
			} else if (p[0] == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
				char h[3] = { p[1], p[2], 0 };
				key[o++] = (char)strtol(h, NULL, 16);
				p += 2;
			} else
				key[o++] = *p;
		}
		if (*p && *p != '/')
			return NULL;               /* a name longer than the buffer */
		key[o] = 0;
		if (json_is_object(t))
			t = json_object_get(t, key);
		else if (json_is_array(t) && o && strspn(key, "0123456789") == o && (o == 1 || key[0] != '0'))
			t = json_array_get(t, strtoul(key, NULL, 10));
		else
			t = NULL;
	}
	return t;
}

/* the schema a '$ref' names; NULL, the error said, when x is not one this compiler follows */
static json_t *ref_target(struct ctx *c, json_t *x)
{
	if (!json_is_string(x)) {
		bad(c, "'$ref' must be a string");
		return NULL;
	}
	json_t *t = resolve(c, json_string_value(x));
	if (!t)
		bad(c, "'$ref' '%s' is not a place in this schema (\"#\" or a JSON pointer \"#/...\"; other documents are not "
		    "fetched)", json_string_value(x));
	return t;
}

/* the language of two DFAs in common is empty: a walk over pairs of states */
static int disjoint(const struct rl_cons_dfa *x, const struct rl_cons_dfa *y)
{
	size_t cap = 1u << 16, n = 0, head = 0, limit = 1u << 20;
	uint64_t *seen = calloc(cap, sizeof *seen), *queue = malloc(limit * sizeof *queue);
	int rc = 1;
	if (!seen || !queue) {
		rc = -ENOMEM;
		goto out;
	}
#define KEY(a, b) (((uint64_t)(a) << 32 | (b)) + 1)
	queue[n++] = KEY(x->start, y->start) - 1;
	seen[(KEY(x->start, y->start) * 0x9E3779B97F4A7C15ull >> 40) & (cap - 1)] = KEY(x->start, y->start);
	while (head < n) {
		uint64_t p = queue[head++];
		uint32_t a = (uint32_t)(p >> 32), bb = (uint32_t)p;
		if (x->accept[a] && y->accept[bb]) {
			rc = 0;
			goto out;
		}
		for (int byte = 0; byte < 256; byte++) {
			uint32_t ta = rl_cons_dfa_step(x, a, (uint8_t)byte), tb = rl_cons_dfa_step(y, bb, (uint8_t)byte);
			if (!ta || !tb)
				continue;
			uint64_t key = KEY(ta, tb);
			size_t h = (key * 0x9E3779B97F4A7C15ull >> 40) & (cap - 1);
			while (seen[h] && seen[h] != key)
				h = (h + 1) & (cap - 1);
			if (seen[h])
				continue;
			if (n >= limit || n * 2 >= cap) {
				if (n >= limit) {
					rc = -E2BIG;
					goto out;
				}
				size_t nc = cap * 2;      /* grow and rehash */
				uint64_t *ns = calloc(nc, sizeof *ns);
				if (!ns) {
					rc = -ENOMEM;
					goto out;
				}
				for (size_t q = 0; q < cap; q++)
					if (seen[q]) {
						size_t j = (seen[q] * 0x9E3779B97F4A7C15ull >> 40) & (nc - 1);
						while (ns[j])
							j = (j + 1) & (nc - 1);
						ns[j] = seen[q];
					}
				free(seen);
				seen = ns;
				cap = nc;
				h = (key * 0x9E3779B97F4A7C15ull >> 40) & (cap - 1);
				while (seen[h])
					h = (h + 1) & (cap - 1);
			}
			seen[h] = key;
			queue[n++] = key - 1;
		}
	}
#undef KEY
out:
	free(seen);
	free(queue);
	return rc;
}

/* ---- allOf, and keywords beside $ref/anyOf/oneOf: merging ------------------------------- */
/* allOf [A, B, ...] is compiled as one schema that holds exactly when every branch does, built
 * keyword by keyword: type sets and enum/const lists intersect, lower bounds take the largest
 * and upper bounds the smallest, properties unite (a property named in several branches gets
 * their schemas merged the same way), required unites; a branch's additionalProperties
 * (false, or a schema) binds the properties that only other branches name (false leaves them
 * out, a schema is merged into each), items and prefixItems merge position by position. What
 * has no exact merge (two different patterns, formats or sets of oneOf alternatives) is
 * refused by name; anyOf in several parts becomes the anyOf of their branches' combinations.
 * Keywords beside $ref are allOf [target, the rest] (draft 2019 and later), and keywords
 * beside anyOf/oneOf are merged into each branch (S and (A or B) is (S and A) or (S and B)).
 * A merged branch that no value satisfies (no type in common, no enum value left) is dropped
 * from anyOf/oneOf, and refused in allOf. */
#define MAX_MERGE     16               /* merges nested inside merges (properties, items) */

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_FRAC = 64, T_ALL = 127 };

struct part { json_t *s; int origin; };    /* origin: allOf/anyOf/oneOf branch i, or below */
#define O_BESIDE (-1)                   /* the keywords beside the combinator */
#define O_TARGET (-2)                   /* the target of a $ref beside other keywords */
struct parts {
	struct part *v;
	size_t n, cap;
	json_t *target[MAX_REF_DEPTH];  /* $ref targets merged in: on the expansion stack while
					 * the result compiles, so recursion through them ends */
	int ntarget;
};
struct mctx {
	struct ctx *c;
	const char *kw;                 /* "allOf", "$ref", "anyOf", "oneOf": for the messages */
	char sub[200];                  /* where inside the merged schema, e.g. properties.a */
};

static void parts_free(struct parts *p)
{
	for (size_t i = 0; i < p->n; i++)
		json_decref(p->v[i].s);
	free(p->v);
	memset(p, 0, sizeof *p);
}

static void who(const struct mctx *m, int o, char *w, size_t n)
{
	if (o == O_BESIDE)
		snprintf(w, n, "the keywords beside '%s'", m->kw);
	else if (o == O_TARGET)
		snprintf(w, n, "the '$ref' target");
	else
		snprintf(w, n, "branch %d", o);
}

/* parts a and b (origins) both set keyword k, differently, and no merge is exact */
static int clash(struct mctx *m, int a, int b, const char *k, const char *why)
{
	char wa[64], wb[64], in[220] = "";
	if (m->sub[0])
		snprintf(in, sizeof in, " in %s", m->sub);
	if (a == b) {
		who(m, a, wa, sizeof wa);
		return bad(m->c, "'%s': %s sets '%s'%s twice, through '$ref' or 'allOf' (%s)", m->kw, wa, k, in, why);
	}
	if (a >= 0 && b >= 0)
		return bad(m->c, "'%s': branches %d and %d both set '%s'%s (%s)", m->kw, a, b, k, in, why);
	who(m, a, wa, sizeof wa);
	who(m, b, wb, sizeof wb);
	return bad(m->c, "'%s': %s and %s both set '%s'%s (%s)", m->kw, wa, wb, k, in, why);
}

/* no value satisfies every part: refused in allOf (bad() says why), dropped from anyOf/oneOf */
static int no_value(struct mctx *m, const char *why)
{
	bad(m->c, "'%s': no value satisfies every part%s%s (%s)", m->kw, m->sub[0] ? " of " : "", m->sub, why);
	return NO_VALUE;
}

static int type_bits(struct ctx *c, json_t *type, unsigned *out)
{
	static const struct { const char *name; unsigned bits; } tb[] = {
		{ "null", T_NULL }, { "boolean", T_BOOL }, { "object", T_OBJ }, { "array", T_ARR },
		{ "string", T_STR }, { "integer", T_INT }, { "number", T_INT | T_FRAC },
	};
	if (!json_is_string(type) && !(json_is_array(type) && json_array_size(type)))
		return bad(c, "'type' must be a string or a non-empty array of strings");
	size_t i, nt = json_is_array(type) ? json_array_size(type) : 1;
	*out = 0;
	for (i = 0; i < nt; i++) {
		json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
		size_t k = 0;
		while (k < sizeof tb / sizeof *tb && !(json_is_string(t) && !strcmp(tb[k].name, json_string_value(t))))
			k++;
		if (k == sizeof tb / sizeof *tb)
			return bad(c, "'type' %s%s%s is not a JSON Schema type", json_is_string(t) ? "'" : "",
				   json_is_string(t) ? json_string_value(t) : "(not a string)", json_is_string(t) ? "'" : "");
		*out |= tb[k].bits;
	}
	return 0;
}

static json_t *bits_type(unsigned bits)
{
	static const struct { const char *name; unsigned bits; } tb[] = {
		{ "object", T_OBJ }, { "array", T_ARR }, { "string", T_STR }, { "number", T_INT | T_FRAC },
		{ "integer", T_INT }, { "boolean", T_BOOL }, { "null", T_NULL },
	};
	json_t *a = json_array();
	for (size_t k = 0; a && k < sizeof tb / sizeof *tb; k++)
		if ((bits & tb[k].bits) == tb[k].bits) {
			json_array_append_new(a, json_string(tb[k].name));
			bits &= ~tb[k].bits;
		}
	if (a && json_array_size(a) == 1) {
		json_t *one = json_incref(json_array_get(a, 0));
		json_decref(a);
		return one;
	}
	return a;
}

static unsigned value_bits(json_t *v)
{
	if (json_is_null(v)) return T_NULL;
	if (json_is_boolean(v)) return T_BOOL;
	if (json_is_object(v)) return T_OBJ;
	if (json_is_array(v)) return T_ARR;
	if (json_is_string(v)) return T_STR;
	if (json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))))
		return T_INT;
	return T_FRAC;
}

static unsigned kind_bits(int kind)
{
	return kind == K_OBJ ? T_OBJ : kind == K_ARR ? T_ARR : kind == K_STR ? T_STR : kind == K_NUM ? T_INT | T_FRAC : 0;
}

/* s as parts whose keywords all hold at once: $ref targets and allOf branches taken apart,
 * the rest of s one part. A part of true adds nothing; false: NO_VALUE. */
static int flatten(struct mctx *m, json_t *s, int origin, struct parts *p, int depth)
{
	struct ctx *c = m->c;
	if (depth > MAX_REF_DEPTH)
		return bad(c, "'%s': '$ref' and 'allOf' nest deeper than %d", m->kw, MAX_REF_DEPTH);
	if (json_is_true(s))
		return 0;
	if (json_is_false(s))
		return no_value(m, "a schema of false");
	if (!json_is_object(s))
		return bad(c, "a schema must be an object");
	const char *k;
	json_t *x, *type = json_object_get(s, "type");
	unsigned tb = T_ALL;
	int rc;
	if (type && (rc = type_bits(c, type, &tb)))
		return rc;
	json_object_foreach(s, k, x) {
		if (!kw_kind(k))
			return bad(c, "'%s' is not supported", k);
	}
	if ((x = json_object_get(s, "$ref"))) {
		json_t *t = ref_target(c, x);
		if (!t)
			return -EINVAL;
		/* inside t's own expansion, or merged into it again and again: recursion, where each
		 * merge would be a new schema to expand (met twice in merges, it is a plain nested use) */
		int seen = 0;
		for (int i = 0; i < c->nref; i++)
			seen += 3 * (c->refs[i] == t);
		for (int i = 0; i < c->nmerging; i++)
			seen += c->merging[i] == t;
		if (seen > 2)
			return bad(c, "'%s': '$ref' '%s' merged with other keywords inside its own recursion is not "
				   "supported (the merged schema would be a new rule each time)", m->kw, json_string_value(x));
		if (p->ntarget < MAX_REF_DEPTH)
			p->target[p->ntarget++] = t;
		if ((rc = flatten(m, t, origin, p, depth + 1)))
			return rc;
	}
	if ((x = json_object_get(s, "allOf"))) {
		if (!json_is_array(x) || !json_array_size(x))
			return bad(c, "'allOf' must be a non-empty array");
		size_t i;
		json_t *y;
		json_array_foreach(x, i, y)
			if ((rc = flatten(m, y, origin, p, depth + 1)))
				return rc;
	}
	json_t *rest = json_object();
	if (!rest)
		return -ENOMEM;
	json_object_foreach(s, k, x)
		if (strcmp(k, "$ref") && strcmp(k, "allOf") && json_object_set(rest, k, x)) {
			json_decref(rest);
			return -ENOMEM;
		}
	if (!json_object_size(rest)) {
		json_decref(rest);
		return 0;
	}
	if (RL_GROW(p->v, p->cap, p->n + 1, 8)) {
		json_decref(rest);
		return -ENOMEM;
	}
	p->v[p->n++] = (struct part){ rest, origin };
	return 0;
}

static int merge_n(struct mctx *m, const struct part *v, size_t n, int depth, json_t **out);

/* the merge of sub-schemas (each with the origin of the part it came from) at m->sub + seg;
 * *out NULL when there are none */
static int merge_subs(struct mctx *m, const struct part *sub, size_t k, int depth, const char *seg, json_t **out)
{
	*out = NULL;
	if (!k)
		return 0;
	size_t same = 1;
	while (same < k && json_equal(sub[0].s, sub[same].s))
		same++;
	if (same == k) {                       /* one schema, or the same one again: no merge */
		*out = json_incref(sub[0].s);
		return 0;
	}
	size_t old = strlen(m->sub);
	snprintf(m->sub + old, sizeof m->sub - old, "%s%s", old ? "." : "", seg);
	struct parts p = { 0 };
	int rc = 0;
	size_t pold = path_push(m->c, "%s", seg);  /* for what flatten() finds unsupported */
	for (size_t i = 0; i < k && !rc; i++)
		rc = flatten(m, sub[i].s, sub[i].origin, &p, 0);
	path_pop(m->c, pold);
	if (!rc)
		rc = merge_n(m, p.v, p.n, depth + 1, out);
	parts_free(&p);
	m->sub[old] = 0;
	return rc;
}

/* the keywords that merge by taking the largest (lower bounds) or smallest (upper) value */
static const struct { const char *k; int largest; } bounds[] = {
	{ "minimum", 1 }, { "exclusiveMinimum", 1 }, { "minLength", 1 }, { "minItems", 1 }, { "minProperties", 1 },
	{ "maximum", 0 }, { "exclusiveMaximum", 0 }, { "maxLength", 0 }, { "maxItems", 0 }, { "maxProperties", 0 },
};
/* the keywords that merge only when equal */
static const struct { const char *k, *why; } equal_only[] = {
	{ "pattern", "the intersection of two patterns is not supported" },
	{ "format", "a value of two formats is not supported" },
	{ "oneOf", "two sets of oneOf alternatives in one schema are not supported" },
	{ "multipleOf", "two different multipleOf in one schema are not supported" },
	{ "dependentRequired", "two different dependentRequired in one schema are not supported" },
	{ "dependencies", "two different dependencies in one schema are not supported" },
	{ "propertyNames", "two different propertyNames in one schema are not supported" },
	{ "additionalItems", "two different additionalItems in one schema are not supported" },
};
#define MAX_CROSS     64               /* anyOf branches from the product of several anyOf */

/* the object keywords of the parts merged into r; NO_VALUE: no object satisfies them all */
static int merge_objects(struct mctx *m, const struct part *v, size_t n, int depth, json_t *r)
{
	struct ctx *c = m->c;
	json_t *names = json_object(), *req = json_array(), *props = json_object(), *x, *y;
	struct part *sub = calloc(n, sizeof *sub);
	int rc = 0, any_props = 0;
	const char *k;
	size_t i, j, ns;
	if (!names || !req || !props || !sub) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n && !rc; i++) {
		json_t *pr = json_object_get(v[i].s, "properties"), *rq = json_object_get(v[i].s, "required"),
		       *ap = json_object_get(v[i].s, "additionalProperties");
		if (pr && !json_is_object(pr))
			rc = bad(c, "'properties' must be an object");
		else if (rq && !json_is_array(rq))
			rc = bad(c, "'required' must be an array");
		else if (ap && !json_is_boolean(ap) && !json_is_object(ap))
			rc = bad(c, "'additionalProperties' must be a schema");
		any_props |= pr != NULL;
		json_object_foreach(pr, k, x)
			json_object_set_new(names, k, json_null());
		json_array_foreach(rq, j, x) {
			if (!json_is_string(x)) {
				rc = bad(c, "'required' must hold strings");
				break;
			}
			size_t q;
			json_array_foreach(req, q, y)
				if (json_equal(x, y))
					break;
			if (q == json_array_size(req))
				json_array_append(req, x);
		}
	}
	json_object_foreach(names, k, x) {
		if (rc)
			break;
		int dropped = 0, is_req = 0;
		json_array_foreach(req, j, y)
			is_req |= !strcmp(json_string_value(y), k);
		for (i = ns = 0; i < n; i++) {
			json_t *mine = json_object_get(json_object_get(v[i].s, "properties"), k),
			       *ap = json_object_get(v[i].s, "additionalProperties");
			if (mine) {
				sub[ns++] = (struct part){ mine, v[i].origin };
				continue;
			}
			if (!ap || json_is_true(ap))
				continue;
			if (json_object_get(v[i].s, "patternProperties")) {
				char w[64];
				who(m, v[i].origin, w, sizeof w);
				rc = bad(c, "'%s': 'patternProperties' with 'additionalProperties' in %s, beside a property "
					 "another part names ('%s'), is not supported", m->kw, w, k);
				break;
			}
			if (json_is_false(ap))
				dropped = 1;
			else
				sub[ns++] = (struct part){ ap, v[i].origin };
		}
		json_t *ms = NULL;
		if (!rc && !dropped) {
			char seg[160];
			snprintf(seg, sizeof seg, "properties.%s", k);
			rc = merge_subs(m, sub, ns, depth, seg, &ms);
			if (rc == NO_VALUE && !is_req) {
				unsay(c);         /* the property cannot appear: it is left out */
				rc = 0;
				dropped = 1;
			}
		}
		if (!rc && dropped && is_req) {
			char why[200];
			snprintf(why, sizeof why, "required property '%s' is disallowed by another part", k);
			rc = no_value(m, why);         /* no object: merge_n keeps the other types */
		}
		if (!rc && !dropped && json_object_set_new(props, k, ms ? ms : json_true()))
			rc = -ENOMEM;
	}
	/* a required property no part names: a part with additionalProperties false rules it out */
	json_array_foreach(req, j, y) {
		if (rc || json_object_get(names, json_string_value(y)))
			continue;
		for (i = 0; i < n && !json_is_false(json_object_get(v[i].s, "additionalProperties")); i++)
			;
		if (i < n) {
			char why[200];
			snprintf(why, sizeof why, "required property '%s' is disallowed by another part", json_string_value(y));
			rc = no_value(m, why);
		}
	}
	if (rc)
		goto out;
	if (any_props && json_object_set(r, "properties", props))
		rc = -ENOMEM;
	if (!rc && json_array_size(req) && json_object_set(r, "required", req))
		rc = -ENOMEM;
	/* additionalProperties: false in any part is false; else the schemas merged */
	int ap_false = 0, ap_true = 0;
	for (i = ns = 0; i < n && !rc; i++) {
		json_t *ap = json_object_get(v[i].s, "additionalProperties");
		ap_false |= json_is_false(ap);
		ap_true |= json_is_true(ap);
		if (json_is_object(ap))
			sub[ns++] = (struct part){ ap, v[i].origin };
	}
	json_t *ms = NULL;
	if (!rc && ap_false)
		ms = json_false();
	else if (!rc && (rc = merge_subs(m, sub, ns, depth, "additionalProperties", &ms)) == NO_VALUE) {
		unsay(c);                 /* no extra key can have a value: none is allowed */
		rc = 0;
		ms = json_false();
	} else if (!rc && !ms && ap_true)
		ms = json_true();
	if (!rc && ms && json_object_set_new(r, "additionalProperties", ms))
		rc = -ENOMEM;
	/* patternProperties: united, one pattern in several parts merged */
	json_t *pats = json_object(), *mp = json_object();
	if (!pats || !mp)
		rc = -ENOMEM;
	for (i = 0; i < n && !rc; i++) {
		json_t *pp = json_object_get(v[i].s, "patternProperties");
		if (pp && !json_is_object(pp))
			rc = bad(c, "'patternProperties' must be an object");
		json_object_foreach(pp, k, x)
			json_object_set_new(pats, k, json_null());
	}
	json_object_foreach(pats, k, x) {
		if (rc)
			break;
		for (i = ns = 0; i < n; i++)
			if ((y = json_object_get(json_object_get(v[i].s, "patternProperties"), k)))
				sub[ns++] = (struct part){ y, v[i].origin };
		char seg[160];
		snprintf(seg, sizeof seg, "patternProperties.%s", k);
		if ((rc = merge_subs(m, sub, ns, depth, seg, &ms)) == NO_VALUE) {
			unsay(c);         /* keys matching it cannot appear */
			rc = 0;
			ms = json_false();
		}
		if (!rc && json_object_set_new(mp, k, ms))
			rc = -ENOMEM;
	}
	if (!rc && json_object_size(mp) && json_object_set(r, "patternProperties", mp))
		rc = -ENOMEM;
	json_decref(pats);
	json_decref(mp);
out:
	json_decref(names);
	json_decref(req);
	json_decref(props);
	free(sub);
	return rc;
}

static int merge_arrays(struct mctx *m, const struct part *v, size_t n, int depth, json_t *r)
{
	struct ctx *c = m->c;
	struct part *sub = calloc(n, sizeof *sub);
	json_t *pre = json_array();
	size_t i, ns, L = 0, cap = (size_t)-1;
	int rc = 0;
	if (!sub || !pre) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n && !rc; i++) {
		json_t *p = json_object_get(v[i].s, "prefixItems"), *it = json_object_get(v[i].s, "items");
		if (p && !json_is_array(p))
			rc = bad(c, "'prefixItems' must be an array");
		else if (it && !json_is_object(it) && !json_is_boolean(it))
			rc = bad(c, "'items' must be a schema");
		if (json_array_size(p) > L)
			L = json_array_size(p);
		if (json_is_false(it) && json_array_size(p) < cap)
			cap = json_array_size(p);      /* no item past this part's prefix */
	}
	/* position q: each part's prefixItems[q], or its items past its prefix */
	for (size_t q = 0; q < L && q < cap && !rc; q++) {
		for (i = ns = 0; i < n; i++) {
			json_t *p = json_object_get(v[i].s, "prefixItems"), *it = json_object_get(v[i].s, "items");
			if (q < json_array_size(p))
				sub[ns++] = (struct part){ json_array_get(p, q), v[i].origin };
			else if (json_is_object(it))
				sub[ns++] = (struct part){ it, v[i].origin };
		}
		char seg[40];
		snprintf(seg, sizeof seg, "prefixItems[%zu]", q);
		json_t *ms;
		if ((rc = merge_subs(m, sub, ns, depth, seg, &ms)) == NO_VALUE) {
			unsay(c);                 /* no array reaches past q */
			rc = 0;
			cap = q;
			break;
		}
		if (!rc && json_array_append_new(pre, ms ? ms : json_true()))
			rc = -ENOMEM;
	}
	if (!rc && json_array_size(pre) && json_object_set(r, "prefixItems", pre))
		rc = -ENOMEM;
	/* items: past every prefix */
	int any_items = 0;
	for (i = ns = 0; i < n && !rc; i++) {
		json_t *it = json_object_get(v[i].s, "items");
		any_items |= it != NULL;
		if (json_is_object(it))
			sub[ns++] = (struct part){ it, v[i].origin };
	}
	json_t *ms = NULL;
	if (!rc && cap != (size_t)-1)
		ms = json_false();
	else if (!rc && (rc = merge_subs(m, sub, ns, depth, "items", &ms)) == NO_VALUE) {
		unsay(c);                 /* no item past the prefix can have a value */
		rc = 0;
		ms = json_false();
	} else if (!rc && !ms && any_items)
		ms = json_true();
	if (!rc && ms && json_object_set_new(r, "items", ms))
		rc = -ENOMEM;
out:
	json_decref(pre);
	free(sub);
	return rc;
}

/* one schema that holds exactly when every part does (parts as flatten() makes them) */
static int merge_n(struct mctx *m, const struct part *v, size_t n, int depth, json_t **out)
{
	struct ctx *c = m->c;
	*out = NULL;
	if (depth > MAX_MERGE)
		return bad(c, "'%s': merges nest deeper than %d (two recursive schemas merged?)", m->kw, MAX_MERGE);
	if (!n) {
		*out = json_true();
		return 0;
	}
	if (n == 1) {
		*out = json_incref(v[0].s);
		return 0;
	}
	json_t *r = json_object(), *x, *vals = NULL;
	if (!r)
		return -ENOMEM;
	int rc = 0, typed = 0;
	unsigned tb = T_ALL;
	size_t i, j;
	const char *k;
	for (i = 0; i < n && !rc; i++)
		if ((x = json_object_get(v[i].s, "type"))) {
			unsigned b;
			if (!(rc = type_bits(c, x, &b)))
				tb &= b;
			typed = 1;
		}
	if (!rc && typed) {
		if (!tb)
			rc = no_value(m, "no 'type' in common");
		else if (json_object_set_new(r, "type", bits_type(tb)))
			rc = -ENOMEM;
	}
	/* enum and const: the values every list holds, of the type */
	for (i = 0; i < n && !rc; i++) {
		static const char *const lk[] = { "enum", "const" };
		for (int l = 0; l < 2 && !rc; l++) {
			json_t *e = json_object_get(v[i].s, lk[l]);
			if (!e)
				continue;
			if (!l && (!json_is_array(e) || !json_array_size(e))) {
				rc = bad(c, "'enum' must be a non-empty array");
				break;
			}
			json_t *list = l ? json_pack("[O]", e) : json_incref(e);
			if (!list) {
				rc = -ENOMEM;
				break;
			}
			if (!vals)
				vals = json_deep_copy(list);
			else
				for (j = json_array_size(vals); j-- > 0;) {
					size_t q;
					json_t *y;
					json_array_foreach(list, q, y)
						if (json_equal(json_array_get(vals, j), y))
							break;
					if (q == json_array_size(list))
						json_array_remove(vals, j);
				}
			json_decref(list);
			if (!vals)
				rc = -ENOMEM;
		}
	}
	if (!rc && vals) {
		for (j = json_array_size(vals); typed && j-- > 0;)
			if (!(value_bits(json_array_get(vals, j)) & tb))
				json_array_remove(vals, j);
		if (!json_array_size(vals))
			rc = no_value(m, "no value of 'enum'/'const' is in every part");
		else if (json_object_set(r, "enum", vals))
			rc = -ENOMEM;
	}
	json_decref(vals);
	/* bounds: the tightest */
	for (size_t b = 0; b < sizeof bounds / sizeof *bounds && !rc; b++) {
		json_t *best = NULL;
		for (i = 0; i < n; i++) {
			if (!(x = json_object_get(v[i].s, bounds[b].k)))
				continue;
			if (!json_is_number(x)) {
				rc = bad(c, "'%s' must be a number", bounds[b].k);
				break;
			}
			if (!best || (bounds[b].largest ? json_number_value(x) > json_number_value(best)
							: json_number_value(x) < json_number_value(best)))
				best = x;
		}
		if (!rc && best && json_object_set(r, bounds[b].k, best))
			rc = -ENOMEM;
	}
	/* anyOf in several parts: (A1 or A2) and (B1 or B2) is the anyOf of each Ai with each Bj */
	json_t *cross = NULL;
	int cfirst = -1;
	for (i = 0; i < n && !rc; i++) {
		if (!(x = json_object_get(v[i].s, "anyOf")))
			continue;
		if (!json_is_array(x) || !json_array_size(x)) {
			rc = bad(c, "'anyOf' must be a non-empty array");
			break;
		}
		if (!cross) {
			cross = json_copy(x);
			cfirst = (int)i;
			rc = cross ? 0 : -ENOMEM;
			continue;
		}
		if (json_equal(x, json_object_get(v[cfirst].s, "anyOf")))
			continue;
		if (json_array_size(cross) * json_array_size(x) > MAX_CROSS) {
			char why[80];
			snprintf(why, sizeof why, "more than %d combinations of their branches", MAX_CROSS);
			rc = clash(m, v[cfirst].origin, v[i].origin, "anyOf", why);
			break;
		}
		json_t *nx = json_array(), *a, *bb;
		size_t p, q;
		json_array_foreach(cross, p, a)
			json_array_foreach(x, q, bb)
				if (!nx || json_array_append_new(nx, json_pack("{s[OO]}", "allOf", a, bb)))
					rc = -ENOMEM;
		json_decref(cross);
		cross = nx;
	}
	if (!rc && cross && json_object_set(r, "anyOf", cross))
		rc = -ENOMEM;
	json_decref(cross);
	/* equal or refused */
	for (size_t e = 0; e < sizeof equal_only / sizeof *equal_only && !rc; e++) {
		int first = -1;
		for (i = 0; i < n && !rc; i++) {
			if (!(x = json_object_get(v[i].s, equal_only[e].k)))
				continue;
			if (first < 0)
				first = (int)i;
			else if (!json_equal(x, json_object_get(v[first].s, equal_only[e].k)))
				rc = clash(m, v[first].origin, v[i].origin, equal_only[e].k, equal_only[e].why);
		}
		if (!rc && first >= 0 && json_object_set(r, equal_only[e].k, json_object_get(v[first].s, equal_only[e].k)))
			rc = -ENOMEM;
	}
	if (!rc && tb & T_OBJ && (rc = merge_objects(m, v, n, depth, r)) == NO_VALUE && tb != T_OBJ) {
		unsay(c);                      /* no object: the other types remain */
		rc = 0;
		tb &= ~(unsigned)T_OBJ;
		typed = 1;
		if (json_object_set_new(r, "type", bits_type(tb)))
			rc = -ENOMEM;
	}
	if (!rc && tb & T_ARR)
		rc = merge_arrays(m, v, n, depth, r);
	/* annotations: the first part's; a keyword for a type the merged type leaves out binds
	 * nothing and is left out */
	for (i = 0; i < n && !rc; i++)
		json_object_foreach(v[i].s, k, x)
			if (kw_kind(k) == K_ANNOT && !json_object_get(r, k) && json_object_set(r, k, x))
				rc = -ENOMEM;
	void *tmp;
	if (!rc && typed)
		json_object_foreach_safe(r, tmp, k, x)
			if (kind_bits(kw_kind(k)) && !(kind_bits(kw_kind(k)) & tb))
				json_object_del(r, k);
	if (rc) {
		json_decref(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* s with its $ref and allOf merged into one schema (the parts' targets in p) */
static int merge_schema(struct ctx *c, json_t *s, const char *kw, struct parts *p, json_t **out)
{
	struct mctx m = { .c = c, .kw = kw };
	json_t *x, *rest = json_object();
	const char *k;
	int rc = 0;
	if (!rest)
		return -ENOMEM;
	json_object_foreach(s, k, x)
		if (strcmp(k, "$ref") && strcmp(k, "allOf"))
			json_object_set(rest, k, x);
	if ((x = json_object_get(s, "$ref"))) {
		json_t *r = json_pack("{sO}", "$ref", x);
		rc = r ? flatten(&m, r, O_TARGET, p, 0) : -ENOMEM;
		json_decref(r);
	}
	if (!rc)
		rc = flatten(&m, rest, O_BESIDE, p, 0);
	json_decref(rest);
	if (!rc && (x = json_object_get(s, "allOf"))) {
		if (!json_is_array(x) || !json_array_size(x))
			rc = bad(c, "'allOf' must be a non-empty array");
		for (size_t i = 0; i < json_array_size(x) && !rc; i++) {
			size_t old = path_push(c, "allOf[%zu]", i);
			rc = flatten(&m, json_array_get(x, i), (int)i, p, 0);
			path_pop(c, old);
		}
	}
	if (!rc)
		rc = merge_n(&m, p->v, p->n, 0, out);
	return rc;
}

/* value() of a merged schema, the targets merged into it noted (flatten() ends recursion
 * through them) */
static int value_merged(struct ctx *c, json_t *s, const struct parts *p, struct rl_sb *b)
{
	if (c->nmerging + p->ntarget > MAX_REF_DEPTH)
		return bad(c, "'$ref' nests deeper than %d", MAX_REF_DEPTH);
	int base = c->nmerging;
	for (int i = 0; i < p->ntarget; i++)
		c->merging[c->nmerging++] = p->target[i];
	int rc = value(c, s, b);
	c->nmerging = base;
	return rc;
}

/* anyOf/oneOf: each branch (with the keywords beside kw merged in, when `beside`) as one
 * alternative; a branch no value satisfies (false, or a merge with no value) is never matched
 * and is left out */
static int alternatives(struct ctx *c, json_t *s, const char *kw, int beside, struct rl_sb *b)
{
	json_t *arr = json_object_get(s, kw), *rest = NULL, *x;
	if (!json_is_array(arr) || !json_array_size(arr))
		return bad(c, "'%s' must be a non-empty array", kw);
	size_t n = json_array_size(arr), nlive = 0;
	struct rl_sb *br = calloc(n, sizeof *br);
	char *live = calloc(n, 1);
	int rc = 0;
	if (beside && (rest = json_object())) {
		const char *k;
		json_object_foreach(s, k, x)
			if (strcmp(k, kw) && json_object_set(rest, k, x))
				rc = -ENOMEM;
	}
	if (!br || !live || (beside && !rest)) {
		free(br);
		free(live);
		json_decref(rest);
		return -ENOMEM;
	}
	size_t nrec = c->nrec, nfmt = c->nfmt;
	for (size_t i = 0; i < n && !rc; i++) {
		json_t *bi = json_array_get(arr, i);
		if (json_is_false(bi))
			continue;
		struct mctx m = { .c = c, .kw = kw };
		struct parts p = { 0 };
		json_t *ms = NULL;
		/* merged: beside other keywords, or an allOf (whose parts may have no value in common,
		 * which drops the branch rather than refusing the schema) */
		int merge = rest || json_object_get(bi, "allOf");
		if (rest)
			rc = flatten(&m, rest, O_BESIDE, &p, 0);
		size_t old = path_push(c, "%s[%zu]", kw, i);
		if (merge && !rc)
			rc = flatten(&m, bi, (int)i, &p, 0);
		path_pop(c, old);                      /* the merge's messages name the branch */
		if (merge && !rc)
			rc = merge_n(&m, p.v, p.n, 0, &ms);
		if (rc == NO_VALUE) {
			unsay(c);                      /* this branch never holds beside the rest */
			rc = 0;
		} else if (!rc) {
			old = path_push(c, "%s[%zu]", kw, i);
			rc = merge ? value_merged(c, ms, &p, &br[i]) : value(c, bi, &br[i]);
			path_pop(c, old);
			if (rc == NO_VALUE) {
				unsay(c);
				rc = 0;
			} else if (!rc) {
				live[i] = 1;
				nlive++;
			}
		}
		json_decref(ms);
		parts_free(&p);
		if (!rc && br[i].oom)
			rc = -ENOMEM;
	}
	json_decref(rest);
	if (!rc && !nlive) {
		bad(c, "no branch of '%s' can hold a value%s", kw, beside ? " together with the keywords beside it" : "");
		rc = NO_VALUE;
	}
	if (!rc && !strcmp(kw, "oneOf") && c->nrec != nrec)
		rc = bad(c, "'oneOf' with recursive branches is not supported (their overlap cannot be checked; use anyOf)");
	/* a validator may read 'format' as an annotation (2020-12's default; python jsonschema
	 * without rfc3987 for 'uri'): then branches our formats keep apart all match */
	if (!rc && !strcmp(kw, "oneOf") && c->nfmt != nfmt && nlive > 1)
		rc = bad(c, "'oneOf' with 'format' in its branches is not supported (a validator that reads formats as "
			 "annotations finds them overlapping; use anyOf)");
	if (!rc && !strcmp(kw, "oneOf")) {
		/* an output that two branches match fails oneOf: the branches must be disjoint */
		struct rl_cons_dfa *d = calloc(n, sizeof *d);
		char e[300];
		if (!d)
			rc = -ENOMEM;
		for (size_t i = 0; i < n && !rc; i++)
			if (live[i] && rl_cons_regex_dfa(br[i].p, br[i].n, RL_RE_INTERNAL, 0, &d[i], e, sizeof e))
				rc = bad(c, "'oneOf[%zu]': %s", i, e);
		for (size_t i = 0; i < n && !rc; i++)
			for (size_t j = i + 1; j < n && !rc; j++) {
				if (!live[i] || !live[j])
					continue;
				int r = disjoint(&d[i], &d[j]);
				if (r == 0)
					rc = bad(c, "'oneOf' branches %zu and %zu both match some value (oneOf as alternation needs disjoint branches; use anyOf)", i, j);
				else if (r < 0)
					rc = bad(c, "'oneOf' branches %zu and %zu are too large to check for overlap", i, j);
			}
		for (size_t i = 0; d && i < n; i++)
			rl_cons_dfa_free(&d[i]);
		free(d);
	}
	if (!rc) {
		put(b, "(?:");
		for (size_t i = 0, first = 1; i < n; i++) {
			if (!live[i])
				continue;
			if (!first)
				put(b, "|");
			first = 0;
			putn(b, br[i].p, br[i].n);
		}
		put(b, ")");
	}
	for (size_t i = 0; i < n; i++)
		free(br[i].p);
	free(br);
	free(live);
	return rc;
}

static int typed(struct ctx *c, json_t *s, const char *t, struct rl_sb *b)
{
	if (!strcmp(t, "null")) { put(b, "null"); return 0; }
	if (!strcmp(t, "boolean")) { put(b, "(?:true|false)"); return 0; }
	if (!strcmp(t, "string")) return string(c, s, b);
	if (!strcmp(t, "integer")) return integer(c, s, b);
	if (!strcmp(t, "number")) return number(c, s, b);
	if (!strcmp(t, "object")) return object(c, s, b);
	if (!strcmp(t, "array")) return array(c, s, b);
	return bad(c, "unknown type '%s'", t);
}
static int kind_of_type(const char *t)
{
	return !strcmp(t, "object") ? K_OBJ : !strcmp(t, "array") ? K_ARR : !strcmp(t, "string") ? K_STR
		: !strcmp(t, "integer") || !strcmp(t, "number") ? K_NUM : 0;
}

/* Any JSON value, containers nested at most depth deep (compact, as every output): where a
 * schema allows any value, the automaton allows these; deeper nesting is the limit. */
static void any_value(struct rl_sb *b, int depth)
{
	put(b, "(?:null|true|false|" NUM_RE "|\"" STR_CHAR "*\"");
	if (depth > 0) {
		put(b, "|\\[(?:");
		any_value(b, depth - 1);
		put(b, "(?:,");
		any_value(b, depth - 1);
		put(b, ")*)?\\]|\\{(?:\"" STR_CHAR "*\":");
		any_value(b, depth - 1);
		put(b, "(?:,\"" STR_CHAR "*\":");
		any_value(b, depth - 1);
		put(b, ")*)?\\}");
	}
	put(b, ")");
}

/* A schema without 'type' whose keywords bind some types (e.g. {"maxLength": 3}: a string is
 * at most 3 long, a value of another type is free): each type as its keywords make it (a
 * number with bounds as decimals within them), and a type this code cannot hold to them is left out,
 * never loosened: the output is always a value the schema takes. null and booleans, which no
 * keyword here binds, always remain. */
static int untyped(struct ctx *c, json_t *s, struct rl_sb *b)
{
	static const char *const kinds[] = { "string", "number", "array", "object" };
	int numeric = 0;
	const char *k;
	json_t *x;
	json_object_foreach(s, k, x)
		numeric |= kw_kind(k) == K_NUM;
	put(b, "(?:null|true|false");
	if (!numeric)
		put(b, "|" NUM_RE);
	for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
		if (!numeric && i == 1)
			continue;
		struct rl_sb part = { 0 };
		const size_t elen = c->err && c->errlen ? strlen(c->err) : 0;
		const int rc = typed(c, s, kinds[i], &part);
		if ((rc == -EINVAL || rc == NO_VALUE) && c->err && c->errlen)
			c->err[elen] = 0;      /* that type is left out, its reason with it */
		else if (rc) {
			free(part.p);
			return rc;
		}
		if (!rc && !part.oom) {
			put(b, "|");
			putn(b, part.p, part.n);
		}
		free(part.p);
	}
	put(b, ")");
	return b->oom ? -ENOMEM : 0;
}

static int value(struct ctx *c, json_t *s, struct rl_sb *b)
{
	if (json_is_true(s)) {
		any_value(b, ANY_DEPTH);
		return 0;
	}
	if (json_is_false(s)) {
		bad(c, "a schema of false (no value) cannot be generated");
		return NO_VALUE;
	}
	if (!json_is_object(s))
		return bad(c, "a schema must be an object");
	const char *k;
	json_t *x;
	int constraining = 0;
	json_object_foreach(s, k, x) {
		int kind = kw_kind(k);
		if (!kind)
			return bad(c, "'%s' is not supported", k);
		constraining += kind != K_ANNOT;
	}
	json_t *all = json_object_get(s, "allOf");
	if ((json_object_get(s, "$ref") && constraining > 1) ||
	    (all && !(constraining == 1 && json_is_array(all) && json_array_size(all) == 1))) {
		/* one schema that holds where all of them do */
		struct parts p = { 0 };
		json_t *ms = NULL;
		int rc = merge_schema(c, s, all ? "allOf" : "$ref", &p, &ms);
		if (!rc)
			rc = value_merged(c, ms, &p, b);
		json_decref(ms);
		parts_free(&p);
		return rc;
	}
	if ((x = json_object_get(s, "$ref"))) {
		json_t *t = ref_target(c, x);
		if (!t)
			return -EINVAL;
		for (int i = 0; i < c->nref; i++)
			if (c->refs[i] == t)
				return rule_ref(c, t, json_string_value(x), b);
		if (c->flags & RL_SCHEMA_SPLIT)         /* every target a rule, written once */
			return rule_ref(c, t, json_string_value(x), b);
		if (c->nref == MAX_REF_DEPTH)
			return bad(c, "'$ref' nests deeper than %d", MAX_REF_DEPTH);
		c->refs[c->nref++] = t;
		size_t old = path_push(c, "%s", json_string_value(x));
		int rc = value(c, t, b);
		path_pop(c, old);
		c->nref--;
		return rc;
	}
	static const char *const comb[] = { "anyOf", "oneOf", "allOf" };
	for (int i = 0; i < 3; i++) {
		if (!(x = json_object_get(s, comb[i])))
			continue;
		if (i < 2)
			return alternatives(c, s, comb[i], constraining > 1, b);
		size_t old = path_push(c, "allOf[0]");
		int rc = value(c, json_array_get(x, 0), b);
		path_pop(c, old);
		return rc;
	}
	json_t *type = json_object_get(s, "type");
	if (type && !json_is_string(type) && !(json_is_array(type) && json_array_size(type)))
		return bad(c, "'type' must be a string or a non-empty array of strings");
	size_t i, nt = json_is_array(type) ? json_array_size(type) : 1;
	for (i = 0; type && i < nt; i++) {
		json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
		if (!json_is_string(t) || (!kind_of_type(json_string_value(t)) &&
					   strcmp(json_string_value(t), "null") && strcmp(json_string_value(t), "boolean")))
			return bad(c, "'type' %s%s%s is not a JSON Schema type", json_is_string(t) ? "'" : "",
				   json_is_string(t) ? json_string_value(t) : "(not a string)", json_is_string(t) ? "'" : "");
	}
	if (json_object_get(s, "enum") || json_object_get(s, "const"))
		return literals(c, s, b);
	if (!type && !constraining) {          /* annotations only: any value */
		any_value(b, ANY_DEPTH);
		return 0;
	}
	if (!type)
		return untyped(c, s, b);
	/* a keyword no listed type uses binds nothing (validators pass it over: 'format' 'int32' on
	 * an integer, as OpenAPI writes it): each type's code reads its own keywords alone */
	if (nt == 1)
		return typed(c, s, json_string_value(json_is_array(type) ? json_array_get(type, 0) : type), b);
	put(b, "(?:");
	int any = 0;
	for (i = 0; i < nt; i++) {
		size_t mark = b->n;
		if (any)
			put(b, "|");
		int rc = typed(c, s, json_string_value(json_array_get(type, i)), b);
		if (rc == NO_VALUE && !b->oom) {
			unsay(c);                      /* no value of this type: the others remain */
			b->n = mark;
			b->p[mark] = 0;
			continue;
		}
		if (rc)
			return rc;
		any = 1;
	}
	put(b, ")");
	if (!any) {
		bad(c, "no value of any of the schema's types satisfies its keywords");
		return NO_VALUE;
	}
	return 0;
}

int rl_cons_schema_rules(const char *schema, size_t len, unsigned flags, struct rl_cons_rules *out, char *err,
			 size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	memset(out, 0, sizeof *out);
	json_error_t je;
	json_t *root = json_loadb(schema, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
	if (!root) {
		snprintf(err, errlen, "the schema is not JSON: %s (line %d)", je.text, je.line);
		return -EINVAL;
	}
	struct ctx c = { .root = root, .flags = flags, .err = err, .errlen = errlen };
	struct rl_sb b = { 0 };
	text_total = 0;
	text_max = flags & RL_SCHEMA_SMALL ? SPLIT_TEXT : MAX_TEXT;
	int rc = value(&c, root, &b);
	if (!rc && !b.oom)
		rc = rl_cons_rules_add(out, "root", b.p ? b.p : "", b.n);
	/* each rule's body: its target expanded with itself on the stack, so its own recursion
	 * refers to it (the list grows as bodies find other recursion) */
	for (size_t i = 0; i < c.nrule && !rc; i++) {
		b.n = 0;
		c.refs[0] = c.rule[i];
		c.nref = 1;
		c.path[0] = 0;
		path_push(&c, "%s", c.rule_ref[i]);
		rc = value(&c, c.rule[i], &b);
		char name[32];
		snprintf(name, sizeof name, "ref%zu", i);
		if (!rc && !b.oom)
			rc = rl_cons_rules_add(out, name, b.p ? b.p : "", b.n);
	}
	json_decref(root);
	if (rc == NO_VALUE)
		rc = -EINVAL;                          /* bad() said why */
	if (text_total > text_max && (!rc || rc == -ENOMEM)) {
		if (err && errlen)
			snprintf(err, errlen, "the schema expands to more than %u KiB of expression (many optional "
				 "properties, nested deep?)", (unsigned)(text_max >> 10));
		rc = -E2BIG;
	}
	if (!rc && b.oom)
		rc = -ENOMEM;
	free(b.p);
	for (size_t i = 0; i < c.nrule; i++)
		free(c.rule_ref[i]);
	for (size_t i = 0; i < c.nrule; i++)
		json_decref(c.rule[i]);
	free(c.rule);
	free(c.rule_ref);
	if (rc) {
		if (rc == -ENOMEM && err && errlen)
			snprintf(err, errlen, "out of memory");
		rl_cons_rules_free(out);
	}
	return rc;
}

int rl_cons_schema_to_regex(const char *schema, size_t len, unsigned flags, char **out, char *err, size_t errlen)
{
	*out = NULL;
	struct rl_cons_rules r;
	int rc = rl_cons_schema_rules(schema, len, flags, &r, err, errlen);
	if (rc)
		return rc;
	if (r.n > 1) {
		snprintf(err, errlen, "the schema recurses through '$ref' ('%s'): no regular expression holds it "
			 "(it compiles to a grammar)", r.n > 1 ? "see its $defs" : "");
		rl_cons_rules_free(&r);
		return -EINVAL;
	}
	*out = r.body[0];
	r.body[0] = NULL;
	rl_cons_rules_free(&r);
	return 0;
}

int rl_cons_compile_schema(const struct rl_cons_vocab *v, const char *schema, size_t len,
			   const struct rl_cons_opts *opts, struct rl_cons **out, char *err, size_t errlen)
{
	/* One automaton where it stays small (the fastest masks); past SPLIT_TEXT of expression,
	 * or past the automaton's bounds, each '$ref' target a rule written once and the set a
	 * grammar over small terminal DFAs, its states met as outputs reach them; a schema without
	 * a '$ref' to split at tries one automaton up to the full bounds. */
	struct rl_cons_rules r;
	const unsigned flags = opts ? opts->flags : 0;
	int rc = rl_cons_schema_rules(schema, len, flags | RL_SCHEMA_SMALL, &r, err, errlen);
	if (!rc) {
		rc = rl_cons_compile_rules(v, &r, RL_RE_INTERNAL, opts, out, err, errlen);
		rl_cons_rules_free(&r);
	}
	if (rc != -E2BIG)
		return rc;
	if ((rc = rl_cons_schema_rules(schema, len, flags | RL_SCHEMA_SPLIT, &r, err, errlen)))
		return rc;
	if (r.n > 1) {
		rc = rl_cons_compile_rules(v, &r, RL_RE_INTERNAL | RL_GRAM_KEEP, opts, out, err, errlen);
		rl_cons_rules_free(&r);
		return rc;
	}
	rl_cons_rules_free(&r);
	if ((rc = rl_cons_schema_rules(schema, len, flags, &r, err, errlen)))
		return rc;
	rc = rl_cons_compile_rules(v, &r, RL_RE_INTERNAL, opts, out, err, errlen);
	rl_cons_rules_free(&r);
	return rc;
}
