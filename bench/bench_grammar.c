/* bench_grammar.c — `ringlm bench grammar`: the structured-output engine (constrain/) on real
 * vocabularies: compile time of a constraint, and the per-token mask time over random valid
 * completions.
 *
 * Vocabularies: SmolLM2-135M-Instruct (49,152 tokens) and Gemma 3 270M (262,144) from the
 * model cache (~/.cache/ringlm/models, $RINGLM_CACHE), or --model FILE.gguf (repeatable); one
 * that is absent is skipped, saying so. Constraints: a flat object of 5 typed fields, nested
 * objects and arrays, an enum-heavy object, a regular expression, a recursive schema (a tree
 * of nodes) and two of llama.cpp's GBNF grammars (json.gbnf, arithmetic.gbnf; MIT, The ggml
 * authors), the last three on the grammar matcher (`states`: the configurations the walks
 * met). Per vocabulary and
 * constraint: compile (schema -> regex -> DFA -> handle; the median of 3), the prewarm the
 * runtime's compiler thread then runs (rl_cons_prewarm for RL_RT_CONS_PREWARM_NS: `pre_ms`, and
 * the masks it computed), then --walks random completions (a uniformly drawn allowed token per
 * step; after 40 steps the one nearest the end, so each completion finishes), timing at every
 * step the mask as the runtime thread gets it (the per-state cache warm from the prewarm and
 * the walks so far: `mask`), of those the masks the cache lacked (a state's first visit, on the
 * step's path: `first`, their count and slowest; each at most one trie walk, so bounded by
 * `cold_max`) and the trie walk alone (`cold`).
 * Prints a table; the JSON goes to bench/out/grammar.json (or --json FILE). Never fails on
 * time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/bench_util.h"
#include "clients/cli/cli.h"
#include "constrain/rl_cons.h"
#include "runtime/loop/rl_rt_cons.h"
#include "ipc/rl_clock.h"
#include "runtime/model/rl_model_io.h"
#include "tokenizer/rl_tok.h"

enum { C_SCHEMA, C_REGEX, C_GBNF };
static const struct { const char *name, *text; int kind; } cases[] = {
	{ "flat5",
	  "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":24},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
	  "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9._]+@[a-z0-9]+\\\\.[a-z]{2,4}$\"},\"score\":{\"type\":\"number\"},\"active\":{\"type\":\"boolean\"}},"
	  "\"required\":[\"name\",\"age\",\"email\",\"score\",\"active\"],\"additionalProperties\":false}", 0 },
	{ "nested",
	  "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"customer\":{\"$ref\":\"#/$defs/person\"},"
	  "\"lines\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"},"
	  "\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":999},\"price\":{\"type\":\"number\",\"minimum\":0},\"tags\":{\"type\":\"array\","
	  "\"items\":{\"type\":\"string\",\"maxLength\":12},\"maxItems\":4}},\"required\":[\"sku\",\"qty\",\"price\"],\"additionalProperties\":false},"
	  "\"minItems\":1,\"maxItems\":10},\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":40}},\"required\":[\"id\",\"customer\",\"lines\"],"
	  "\"additionalProperties\":false,\"$defs\":{\"person\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":30},"
	  "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\",\"maxLength\":40},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
	  "\"required\":[\"street\",\"zip\"],\"additionalProperties\":false}},\"required\":[\"name\"],\"additionalProperties\":false}}}", 0 },
	{ "enums",
	  "{\"type\":\"object\",\"properties\":{\"country\":{\"enum\":[\"Argentina\",\"Australia\",\"Austria\",\"Belgium\",\"Brazil\",\"Canada\",\"Chile\","
	  "\"China\",\"Colombia\",\"Denmark\",\"Egypt\",\"Finland\",\"France\",\"Germany\",\"Greece\",\"India\",\"Indonesia\",\"Ireland\",\"Israel\",\"Italy\","
	  "\"Japan\",\"Kenya\",\"Mexico\",\"Netherlands\",\"Nigeria\",\"Norway\",\"Peru\",\"Poland\",\"Portugal\",\"Spain\",\"Sweden\",\"Switzerland\","
	  "\"Thailand\",\"Turkey\",\"Ukraine\",\"United Kingdom\",\"United States\",\"Vietnam\"]},\"level\":{\"enum\":[\"debug\",\"info\",\"notice\","
	  "\"warning\",\"error\",\"critical\",\"alert\",\"emergency\"]},\"status\":{\"enum\":[\"open\",\"closed\",\"pending\",null,0,1,2,true]},"
	  "\"unit\":{\"enum\":[\"mm\",\"cm\",\"m\",\"km\",\"in\",\"ft\",\"yd\",\"mi\"]},\"labels\":{\"type\":\"array\",\"items\":{\"enum\":[\"bug\",\"feature\","
	  "\"docs\",\"perf\",\"security\",\"ux\"]},\"maxItems\":6}},\"required\":[\"country\",\"level\",\"status\"],\"additionalProperties\":false}", 0 },
	{ "regex-date-log",
	  "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z (INFO|WARN|ERROR) [A-Za-z][\\w.-]{0,30}: [^\\n]{1,80}", C_REGEX },
	{ "tree-schema",
	  "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":16},\"value\":{\"type\":\"integer\"},"
	  "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":4}},\"required\":[\"name\"],"
	  "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}", C_SCHEMA },
	{ "gbnf-json",                         /* llama.cpp grammars/json.gbnf */
	  "root   ::= object\n"
	  "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
	  "object ::=\n  \"{\" ws (\n            string \":\" ws value\n    (\",\" ws string \":\" ws value)*\n  )? \"}\" ws\n"
	  "array  ::=\n  \"[\" ws (\n            value\n    (\",\" ws value)*\n  )? \"]\" ws\n"
	  "string ::=\n  \"\\\"\" (\n    [^\"\\\\\\x7F\\x00-\\x1F] |\n    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n  )* \"\\\"\" ws\n"
	  "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
	  "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n", C_GBNF },
	{ "gbnf-arith",                        /* llama.cpp grammars/arithmetic.gbnf */
	  "root  ::= (expr \"=\" ws term \"\\n\")+\n"
	  "expr  ::= term ([-+*/] term)*\n"
	  "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
	  "ident ::= [a-z] [a-z0-9_]* ws\n"
	  "num   ::= [0-9]+ ws\n"
	  "ws    ::= [ \\t\\n]*\n", C_GBNF },
};

struct row {
	const char *vocab, *name;
	double vocab_ms, compile_ms;
	uint32_t states;
	size_t steps, walks;
	uint64_t p50, p99, max, c50, c99, cmax;    /* ns: cached mask, cold trie walk */
	double allowed_mean;
	double pre_ms;                 /* the helper's prewarm (rl_cons_prewarm, the runtime's budget) */
	uint32_t pre_states;           /* masks it computed */
	size_t first;                  /* masks the walks still computed (first visits on the step's path) */
	uint64_t first_max;            /* ns: the slowest of them */
};

static int compile(const struct rl_cons_vocab *v, size_t k, struct rl_cons **c, char *err, size_t errlen)
{
	const char *t = cases[k].text;
	return cases[k].kind == C_REGEX ? rl_cons_compile_regex(v, t, strlen(t), NULL, c, err, errlen)
	     : cases[k].kind == C_GBNF  ? rl_cons_compile_gbnf(v, t, strlen(t), NULL, c, err, errlen)
					: rl_cons_compile_schema(v, t, strlen(t), NULL, c, err, errlen);
}

static int run_vocab(const char *path, const char *label, int walks, struct row *rows, size_t *nrows)
{
	void *blob;
	uint32_t size;
	char err[512];
	struct rl_tok *t = NULL;
	if (rl_gguf_read_vocab(path, &blob, &size, err, sizeof err) || rl_tok_create(blob, size, &t, err, sizeof err)) {
		fprintf(stderr, "ringlm bench grammar: %s: %s\n", path, err);
		return 1;
	}
	free(blob);
	uint64_t t0 = rl_now_ns();
	struct rl_cons_vocab *v;
	if (rl_cons_vocab_from_tok(t, &v)) {
		fprintf(stderr, "ringlm bench grammar: out of memory building the vocabulary trie\n");
		rl_tok_destroy(t);
		return 1;
	}
	double vocab_ms = (double)(rl_now_ns() - t0) / 1e6;
	uint32_t nv = rl_cons_vocab_size(v);
	uint32_t eog[16];
	size_t ne = rl_tok_eog_ids(t, eog, 16);
	size_t words = (nv + 31) / 32;
	uint32_t *mask = malloc(words * 4), *cold = malloc(words * 4), *ids = malloc(nv * sizeof *ids);
	size_t cap = 1 << 16;
	uint64_t *tm = malloc(cap * sizeof *tm), *tc = malloc(cap * sizeof *tc);
	int rc = 0;
	if (!mask || !cold || !ids || !tm || !tc || !ne) {
		fprintf(stderr, "ringlm bench grammar: out of memory\n");
		rc = 1;
		goto out;
	}
	srand(50);
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct row *r = &rows[(*nrows)++];
		memset(r, 0, sizeof *r);
		r->vocab = label;
		r->name = cases[k].name;
		r->vocab_ms = vocab_ms;
		uint64_t ct[3];
		struct rl_cons *c = NULL;
		for (int rep = 0; rep < 3; rep++) {
			if (c)
				rl_cons_destroy(c);
			uint64_t a = rl_now_ns();
			if (compile(v, k, &c, err, sizeof err)) {
				fprintf(stderr, "ringlm bench grammar: %s: %s\n", cases[k].name, err);
				rc = 1;
				goto out;
			}
			ct[rep] = rl_now_ns() - a;
		}
		r->compile_ms = (double)rl_bench_pct(ct, 3, 0.5, 0) / 1e6;
		r->states = rl_cons_n_states(c);
		/* as the runtime's helper leaves the handle: the states nearest the start computed */
		uint64_t p0 = rl_now_ns();
		r->pre_states = rl_cons_prewarm(c, RL_RT_CONS_PREWARM_NS);
		r->pre_ms = (double)(rl_now_ns() - p0) / 1e6;
		size_t n = 0;
		double allowed = 0;
		for (int w = 0; w < walks; w++) {
			uint32_t st = rl_cons_start(c);
			for (int step = 0; step < 2000 && n < cap; step++) {
				uint64_t m0, m1;
				rl_cons_cache_stats(c, NULL, &m0, NULL);
				uint64_t a = rl_now_ns();
				long cnt = rl_cons_mask(c, st, mask);
				uint64_t b = rl_now_ns();
				rl_cons_cache_stats(c, NULL, &m1, NULL);
				if (m1 != m0) {        /* a first visit: computed on the step's path */
					r->first++;
					if (b - a > r->first_max)
						r->first_max = b - a;
				}
				rl_cons_mask_nocache(c, st, cold);
				uint64_t e = rl_now_ns();
				tm[n] = b - a;
				tc[n] = e - b;
				n++;
				allowed += (double)cnt;
				size_t na = 0;
				for (size_t wd = 0; wd < words; wd++)
					for (uint32_t bits = mask[wd]; bits; bits &= bits - 1)
						ids[na++] = (uint32_t)(wd * 32 + (uint32_t)__builtin_ctz(bits));
				if (!na)
					break;
				int acc = rl_cons_accepting(c, st);
				uint32_t pick = ids[rand() % na];
				if (acc && (step > 40 || rand() % 4 == 0))
					pick = eog[0];
				else if (step > 40) {           /* the allowed token nearest the end */
					uint32_t best = UINT32_MAX;
					for (size_t q = 0; q < na; q++) {
						long ns = rl_cons_advance(c, st, ids[q]);
						if (ns > 0 && !rl_cons_vocab_is_eog(v, ids[q]) && rl_cons_dist(c, (uint32_t)ns) < best) {
							best = rl_cons_dist(c, (uint32_t)ns);
							pick = ids[q];
						}
					}
				}
				if (rl_cons_vocab_is_eog(v, pick))
					break;
				long ns = rl_cons_advance(c, st, pick);
				if (ns <= 0)
					break;
				st = (uint32_t)ns;
			}
			r->walks++;
		}
		r->states = rl_cons_n_states(c);       /* a grammar's: those the walks met */
		r->steps = n;
		r->allowed_mean = n ? allowed / (double)n : 0;
		r->p50 = rl_bench_pct(tm, n, 0.5, 0);
		r->p99 = rl_bench_pct(tm, n, 0.99, 1);
		r->max = n ? tm[n - 1] : 0;
		r->c50 = rl_bench_pct(tc, n, 0.5, 0);
		r->c99 = rl_bench_pct(tc, n, 0.99, 1);
		r->cmax = n ? tc[n - 1] : 0;
		rl_cons_destroy(c);
		printf("%-9s %-15s %9.1f %10.2f %7u %7.2f %6u %6zu %9.1f %9.1f %9.1f %6zu %9.1f %9.1f %9.1f %9.1f %9.0f\n", r->vocab,
		       r->name, r->vocab_ms, r->compile_ms, r->states, r->pre_ms, r->pre_states, r->steps, r->p50 / 1e3,
		       r->p99 / 1e3, r->max / 1e3, r->first, r->first_max / 1e3, r->c50 / 1e3, r->c99 / 1e3, r->cmax / 1e3,
		       r->allowed_mean);
		fflush(stdout);
	}
out:
	free(mask);
	free(cold);
	free(ids);
	free(tm);
	free(tc);
	rl_cons_vocab_destroy(v);
	rl_tok_destroy(t);
	return rc;
}

static const char *cached_model(const char *name, char *buf, size_t n)
{
	const char *cache = getenv("RINGLM_CACHE"), *home = getenv("HOME");
	if (cache)
		snprintf(buf, n, "%s/models/%s", cache, name);
	else
		snprintf(buf, n, "%s/.cache/ringlm/models/%s", home ? home : "/root", name);
	return access(buf, R_OK) == 0 ? buf : NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ringlm bench grammar [--model F.gguf]... [--walks N] [--json FILE]\n"
			"  the mask engine (constrain/) on real vocabularies: compile ms, prewarm ms, mask us p50/p99/max,\n"
			"  first visits on the step's path, the cold trie walk\n");
}

int rl_cmd_bench_grammar(int argc, char **argv)
{
	const char *models[8], *json = NULL;
	size_t nm = 0;
	int walks = 20;
	for (int i = 1; i < argc; i++) {                /* argv[0]: "grammar" */
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--model") && v && nm < 8) {
			models[nm++] = v;
			i++;
		} else if (!strcmp(a, "--walks") && v) {
			walks = atoi(v);
			i++;
			if (walks < 1 || walks > 10000) {
				fprintf(stderr, "ringlm bench grammar: --walks %s: give 1..10000\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--json")) {
			json = v && v[0] != '-' ? (i++, v) : NULL;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "ringlm bench grammar: unknown argument '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	static char b1[1024], b2[1024];
	const char *labels[8];
	if (!nm) {
		const char *p;
		if ((p = cached_model("SmolLM2-135M-Instruct.Q4_1.gguf", b1, sizeof b1))) {
			labels[nm] = "smollm2";
			models[nm++] = p;
		} else
			fprintf(stderr, "ringlm bench grammar: SmolLM2 is not in the model cache (bash .ci/models fetches it); skipped\n");
		if ((p = cached_model("gemma-3-270m-q4_k_m.gguf", b2, sizeof b2))) {
			labels[nm] = "gemma3";
			models[nm++] = p;
		} else
			fprintf(stderr, "ringlm bench grammar: Gemma 3 is not in the model cache (bash .ci/models fetches it); skipped\n");
		if (!nm) {
			fprintf(stderr, "ringlm bench grammar: no vocabulary to run on: give --model F.gguf\n");
			return 1;
		}
	} else
		for (size_t i = 0; i < nm; i++) {
			const char *s = strrchr(models[i], '/');
			labels[i] = s ? s + 1 : models[i];
		}
	struct row rows[8 * sizeof cases / sizeof *cases];
	size_t nrows = 0;
	printf("%-9s %-15s %9s %10s %7s %7s %6s %6s %9s %9s %9s %6s %9s %9s %9s %9s %9s\n", "vocab", "constraint", "vocab_ms",
	       "compile_ms", "states", "pre_ms", "pre", "steps", "mask_p50", "mask_p99", "mask_max", "first", "first_max",
	       "cold_p50", "cold_p99", "cold_max", "allowed");
	printf("%-9s %-15s %9s %10s %7s %7s %6s %6s %9s %9s %9s %6s %9s %9s %9s %9s %9s\n", "", "", "", "", "", "", "masks", "",
	       "us", "us", "us", "", "us", "us", "us", "us", "mean");
	int rc = 0;
	for (size_t i = 0; i < nm; i++)
		rc |= run_vocab(models[i], labels[i], walks, rows, &nrows);
	rl_bench_outdir();
	const char *jp = json ? json : "bench/out/grammar.json";
	FILE *f = fopen(jp, "w");
	if (!f) {
		fprintf(stderr, "ringlm bench grammar: cannot write %s: %s\n", jp, strerror(errno));
		return 1;
	}
	fprintf(f, "{\"bench\":\"grammar\",\"walks\":%d,\"rows\":[", walks);
	for (size_t i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		fprintf(f, "%s\n{\"vocab\":\"%s\",\"constraint\":\"%s\",\"vocab_ms\":%.2f,\"compile_ms\":%.3f,\"states\":%u,"
			"\"steps\":%zu,\"walks\":%zu,\"mask_us\":{\"p50\":%.2f,\"p99\":%.2f,\"max\":%.2f},"
			"\"cold_us\":{\"p50\":%.2f,\"p99\":%.2f,\"max\":%.2f},\"allowed_mean\":%.1f,"
			"\"prewarm\":{\"ms\":%.3f,\"masks\":%u},\"first_visits\":{\"count\":%zu,\"max_us\":%.2f}}",
			i ? "," : "", r->vocab, r->name, r->vocab_ms, r->compile_ms, r->states, r->steps, r->walks,
			r->p50 / 1e3, r->p99 / 1e3, r->max / 1e3, r->c50 / 1e3, r->c99 / 1e3, r->cmax / 1e3, r->allowed_mean,
			r->pre_ms, r->pre_states, r->first, r->first_max / 1e3);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	printf("wrote %s\n", jp);
	return rc;
}
