/* test_constrain.c — structured output's engine core (constrain/) against oracles it does not
 * share code with:
 *  - regular expressions: Python's re.fullmatch verdicts on 2,700 strings over 48 patterns
 *    (tests/fixtures/constrain/regex.json, gen_constrain_fixtures.py), refusals by name;
 *  - JSON Schema: the `jsonschema` package's verdicts (schemas.json): every invalid instance
 *    rejected, every canonical valid one accepted; integer bounds against arithmetic;
 *    refused keywords named in the error;
 *  - grammars (GBNF, recursive schemas; the pushdown matcher): llama.cpp's grammars/ corpus
 *    compiles; json.gbnf against Python's json, arithmetic.gbnf against a recogniser written in
 *    Python, recursive schemas against `jsonschema` (grammar.json, gen_grammar_fixtures.py);
 *    unsupported GBNF refused by name;
 *  - the token mask on the real SmolLM2 (49k) and Gemma 3 (262k) vocabularies: equal to running
 *    every token's bytes through the automaton, on every state random walks visit; the walks
 *    end in JSON that jansson parses and a small validator here (pcre2 for 'pattern') accepts,
 *    or (json.gbnf) that a recursive pcre2 pattern written from the grammar matches; EOS
 *    exactly in accepting states, control tokens never.
 * Tests: constrain (rl_cons_*), tokenizer (rl_tok_type, rl_tok_decode). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include "tests/rl_test.h"
#include "constrain/rl_cons.h"
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_tok.h"
#include "runtime/model/rl_model_io.h"

#define FIX "tests/fixtures/constrain/"

/* a vocabulary of the 256 single bytes: the DFA seen through the public interface */
static struct rl_cons_vocab *byte_vocab(void)
{
	static char b[256];
	const char *tok[256];
	uint32_t len[256];
	for (int i = 0; i < 256; i++) {
		b[i] = (char)i;
		tok[i] = &b[i];
		len[i] = 1;
	}
	struct rl_cons_vocab *v = NULL;
	return rl_cons_vocab_create(256, tok, len, NULL, NULL, 0, &v) ? NULL : v;
}

static int matches(struct rl_cons *c, const char *s, size_t n)
{
	uint32_t st = rl_cons_feed(c, rl_cons_start(c), s, n);
	return st != RL_CONS_DEAD && rl_cons_accepting(c, st);
}

static void regex_vs_python(void)
{
	json_error_t je;
	json_t *fx = json_load_file(FIX "regex.json", JSON_ALLOW_NUL, &je);
	REQUIRE(fx);
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	size_t i, n = 0, bad = 0, npos = 0, narrowed = 0;
	json_t *r;
	json_array_foreach(fx, i, r) {
		json_t *p = json_object_get(r, "pattern");
		const char *ps = json_string_value(p);
		/* \D \W and [^\d] [^\w] admit only ASCII (cls_perl): no Unicode digit/word table */
		int narrows = strstr(ps, "\\D") || strstr(ps, "\\W") ||
			      (strstr(ps, "[^") && (strstr(ps, "\\d") || strstr(ps, "\\w")));
		struct rl_cons *c;
		char err[256];
		int rc = rl_cons_compile_regex(v, json_string_value(p), json_string_length(p), NULL, &c, err, sizeof err);
		CHECKF(rc == 0, "/%s/: %s", json_string_value(p), err);
		if (rc)
			continue;
		size_t k;
		json_t *cs;
		json_array_foreach(json_object_get(r, "cases"), k, cs) {
			json_t *s = json_array_get(cs, 0);
			int want = json_is_true(json_array_get(cs, 1));
			int got = matches(c, json_string_value(s), json_string_length(s));
			n++;
			npos += want;
			int ascii = 1;
			for (const char *q = json_string_value(s); *q; q++)
				ascii &= (unsigned char)*q < 0x80;
			if (want && !got && narrows && !ascii) {
				narrowed++;
				continue;
			}
			if (got != want && bad++ < 10)
				fprintf(stderr, "  /%s/ on \"%s\": %d, Python %d\n", json_string_value(p), json_string_value(s), got, want);
		}
		rl_cons_destroy(c);
	}
	printf("  %zu patterns, %zu strings (%zu matching), %zu disagree with Python, %zu narrowed (non-ASCII in \\D \\W [^\\d])\n",
	       json_array_size(fx), n, npos, bad, narrowed);
	CHECK(bad == 0);
	CHECK(n > 2000 && npos > 250);
	rl_cons_vocab_destroy(v);
	json_decref(fx);
}

static void regex_refused_by_name(void)
{
	static const char *const tab[][2] = {
		{ "(a)\\1", "backreference" }, { "(?=a)a", "lookahead" }, { "(?!a)b", "lookahead" },
		{ "(?<=a)b", "lookbehind" }, { "(?<!a)b", "lookbehind" }, { "(?P<x>a)(?P=x)", "backreference" },
		{ "a*+", "possessive" }, { "(?>a)", "atomic" }, { "\\bword", "word boundar" },
		{ "(?i)abc", "inline flags" }, { "a^b", "'^' inside" }, { "a$b", "'$' inside" },
		{ "a{200000}", "above 100000" }, { "(a", "not closed" }, { "a)", "unbalanced" },
		{ "[a", "not closed" }, { "*a", "nothing to repeat" }, { "a**", "multiple repeat" },
		{ "[z-a]", "reversed" }, { "\\q", "bad escape" }, { "\\p{L}", "Unicode properties" },
		{ "\xff", "invalid UTF-8" }, { "[^\\x00-\\U0010ffff]", "matches no string" },
		{ "\\Aa", "anchor" }, { "(?J:a)", "inline flags" },
	};
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	for (size_t i = 0; i < sizeof tab / sizeof *tab; i++) {
		struct rl_cons *c = NULL;
		char err[256] = "";
		int rc = rl_cons_compile_regex(v, tab[i][0], strlen(tab[i][0]), NULL, &c, err, sizeof err);
		CHECKF(rc == -EINVAL && strstr(err, tab[i][1]), "/%s/: rc %d, \"%s\" (want \"%s\")", tab[i][0], rc, err, tab[i][1]);
		if (!rc)
			rl_cons_destroy(c);
	}
	/* the state cap is an error, not a hang or a crash */
	struct rl_cons_opts o = { .max_states = 50 };
	struct rl_cons *c = NULL;
	char err[256];
	CHECK(rl_cons_compile_regex(v, "[ab]*a[ab]{20}", 14, &o, &c, err, sizeof err) == -E2BIG && strstr(err, "states"));
	rl_cons_vocab_destroy(v);
}

/* A keyword of a type the schema does not have binds nothing, as validators read it (python
 * jsonschema 4.23: {"type":["integer","null"],"format":"int32","minLength":2} holds for 5, -7 and
 * null; {"type":"string","minimum":1,"maxLength":3} for "ab", not "abcd"): passed over, the
 * schema's own keywords still enforced. */
static void keywords_of_other_types_bind_nothing(void)
{
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	static const struct { const char *schema, *text; int ok; } tab[] = {
		{ "{\"type\":[\"integer\",\"null\"],\"format\":\"int32\",\"minLength\":2}", "5", 1 },
		{ "{\"type\":[\"integer\",\"null\"],\"format\":\"int32\",\"minLength\":2}", "-7", 1 },
		{ "{\"type\":[\"integer\",\"null\"],\"format\":\"int32\",\"minLength\":2}", "null", 1 },
		{ "{\"type\":[\"integer\",\"null\"],\"format\":\"int32\",\"minLength\":2}", "\"ab\"", 0 },
		{ "{\"type\":\"string\",\"minimum\":1,\"maxLength\":3}", "\"ab\"", 1 },
		{ "{\"type\":\"string\",\"minimum\":1,\"maxLength\":3}", "\"abcd\"", 0 },
		{ "{\"type\":\"string\",\"minimum\":1,\"maxLength\":3}", "1", 0 },
	};
	for (size_t i = 0; i < sizeof tab / sizeof *tab; i++) {
		struct rl_cons *c = NULL;
		char err[256] = "";
		int rc = rl_cons_compile_schema(v, tab[i].schema, strlen(tab[i].schema), NULL, &c, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", tab[i].schema, err);
		if (rc)
			continue;
		const uint32_t s = rl_cons_feed(c, rl_cons_start(c), tab[i].text, strlen(tab[i].text));
		CHECKF((s != RL_CONS_DEAD && rl_cons_accepting(c, s)) == tab[i].ok, "%s on %s", tab[i].schema, tab[i].text);
		rl_cons_destroy(c);
	}
	rl_cons_vocab_destroy(v);
}

/* What users write beyond the core (JSONSchemaBench's most common refusals once), against python
 * jsonschema 4.23's verdicts (Draft 7 where 'additionalItems' is, else 2020-12), taken when
 * this table was written: one character class repeated with minLength/maxLength, a required
 * key 'properties' does not name, drafts 4-2019's 'items' array and 'additionalItems', '$ref'
 * to "#" and to a JSON pointer, an optional property no value can have, minProperties and
 * maxProperties, whole multipleOf, dependentRequired (draft 7's 'dependencies'), propertyNames. Nothing accepted is
 * invalid; the spellings the compiler writes are accepted (a pattern is matched whole, so
 * "1234567" for "\\d{2,6}" with minLength 4, valid as a search, is not written). */
static void more_of_what_users_write(void)
{
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	static const struct { const char *schema, *text; int valid, written; } tab[] = {
		{ "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":3}",
		  "\"ab\"", 1, 1 },
		{ "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":3}",
		  "\"abcd\"", 0, 0 },
		{ "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":3}",
		  "\"\"", 0, 0 },
		{ "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":3}",
		  "\"a1\"", 0, 0 },
		{ "{\"type\":\"string\",\"pattern\":\"\\\\d{2,6}\",\"minLength\":4}",
		  "\"1234\"", 1, 1 },
		{ "{\"type\":\"string\",\"pattern\":\"\\\\d{2,6}\",\"minLength\":4}",
		  "\"123\"", 0, 0 },
		{ "{\"type\":\"string\",\"pattern\":\"\\\\d{2,6}\",\"minLength\":4}",
		  "\"1234567\"", 1, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"],\"additionalProperties\":{\"type\":\"boolean\"}}",
		  "{\"a\":1,\"b\":true}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"],\"additionalProperties\":{\"type\":\"boolean\"}}",
		  "{\"a\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"],\"additionalProperties\":{\"type\":\"boolean\"}}",
		  "{\"a\":1,\"b\":2}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"b\"]}",
		  "{\"b\":null}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"b\"]}",
		  "{\"a\":1,\"b\":[1]}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"b\"]}",
		  "{\"a\":1}", 0, 0 },
		{ "{\"type\":\"array\",\"items\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"additionalItems\":false}",
		  "[1,\"a\"]", 1, 1 },
		{ "{\"type\":\"array\",\"items\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"additionalItems\":false}",
		  "[1]", 1, 1 },
		{ "{\"type\":\"array\",\"items\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"additionalItems\":false}",
		  "[1,\"a\",2]", 0, 0 },
		{ "{\"type\":\"array\",\"items\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"additionalItems\":false}",
		  "[\"a\"]", 0, 0 },
		{ "{\"type\":\"array\",\"items\":[{\"type\":\"integer\"}],\"additionalItems\":{\"type\":\"boolean\"}}",
		  "[1,true,false]", 1, 1 },
		{ "{\"type\":\"array\",\"items\":[{\"type\":\"integer\"}],\"additionalItems\":{\"type\":\"boolean\"}}",
		  "[1,2]", 0, 0 },
		{ "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"additionalItems\":false}",
		  "[1,2,3]", 1, 1 },
		{ "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"additionalItems\":false}",
		  "[\"a\"]", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2}},\"required\":[\"n\"],\"additionalProperties\":false}",
		  "{\"n\":1,\"kids\":[{\"n\":2}]}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2}},\"required\":[\"n\"],\"additionalProperties\":false}",
		  "{\"kids\":[]}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"$ref\":\"#/properties/a\"}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}",
		  "{\"a\":\"x\",\"b\":\"y\"}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"$ref\":\"#/properties/a\"}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}",
		  "{\"a\":\"x\",\"b\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"enum\":[\"x\"]},\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
		  "{\"b\":1}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"enum\":[\"x\"]},\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
		  "{\"a\":\"x\",\"b\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},\"minProperties\":2,\"additionalProperties\":false}",
		  "{\"a\":1,\"b\":2}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},\"minProperties\":2,\"additionalProperties\":false}",
		  "{\"a\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},\"minProperties\":2,\"additionalProperties\":false}",
		  "{\"c\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},\"maxProperties\":1,\"additionalProperties\":false}",
		  "{\"a\":1}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},\"maxProperties\":1,\"additionalProperties\":false}",
		  "{\"a\":1,\"b\":2}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},\"maxProperties\":1,\"additionalProperties\":false}",
		  "{}", 1, 1 },
		{ "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"maxProperties\":2}",
		  "{\"x\":1,\"y\":2}", 1, 1 },
		{ "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"maxProperties\":2}",
		  "{\"x\":1,\"y\":2,\"z\":3}", 0, 0 },
		{ "{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":-12,\"maximum\":20}",
		  "-10", 1, 1 },
		{ "{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":-12,\"maximum\":20}",
		  "15", 1, 1 },
		{ "{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":-12,\"maximum\":20}",
		  "0", 1, 1 },
		{ "{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":-12,\"maximum\":20}",
		  "12", 0, 0 },
		{ "{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":-12,\"maximum\":20}",
		  "25", 0, 0 },
		{ "{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":-12,\"maximum\":20}",
		  "-15", 0, 0 },
		{ "{\"type\":\"integer\",\"multipleOf\":100}",
		  "300", 1, 1 },
		{ "{\"type\":\"integer\",\"multipleOf\":100}",
		  "0", 1, 1 },
		{ "{\"type\":\"integer\",\"multipleOf\":100}",
		  "-1200", 1, 1 },
		{ "{\"type\":\"integer\",\"multipleOf\":100}",
		  "350", 0, 0 },
		{ "{\"type\":\"number\",\"multipleOf\":1,\"maximum\":3}",
		  "2", 1, 1 },
		{ "{\"type\":\"number\",\"multipleOf\":1,\"maximum\":3}",
		  "-4", 1, 1 },
		{ "{\"type\":\"number\",\"multipleOf\":1,\"maximum\":3}",
		  "2.5", 0, 0 },
		{ "{\"type\":\"number\",\"multipleOf\":1,\"maximum\":3}",
		  "4", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"dependentRequired\":{\"a\":[\"b\"]},\"additionalProperties\":false}",
		  "{\"b\":2}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"dependentRequired\":{\"a\":[\"b\"]},\"additionalProperties\":false}",
		  "{\"a\":1,\"b\":2}", 1, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"dependentRequired\":{\"a\":[\"b\"]},\"additionalProperties\":false}",
		  "{\"a\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"dependentRequired\":{\"a\":[\"b\"]},\"additionalProperties\":false}",
		  "{\"a\":1,\"b\":2}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"dependentRequired\":{\"a\":[\"b\"]},\"additionalProperties\":false}",
		  "{\"a\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"dependencies\":{\"a\":[\"b\"]},\"additionalProperties\":false}",
		  "{\"a\":1,\"b\":2}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"dependencies\":{\"a\":[\"b\"]},\"additionalProperties\":false}",
		  "{\"a\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"},\"abcd\":{\"type\":\"integer\"}},\"propertyNames\":{\"maxLength\":3}}",
		  "{\"ab\":1}", 1, 1 },
		{ "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"},\"abcd\":{\"type\":\"integer\"}},\"propertyNames\":{\"maxLength\":3}}",
		  "{\"abcd\":1}", 0, 0 },
		{ "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"},\"abcd\":{\"type\":\"integer\"}},\"propertyNames\":{\"maxLength\":3}}",
		  "{}", 1, 1 },
		{ "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"additionalProperties\":false},{\"minProperties\":1}]}",
		  "{\"a\":1}", 1, 1 },
		{ "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"additionalProperties\":false},{\"minProperties\":1}]}",
		  "{}", 0, 0 },
		{ "{\"type\":\"string\",\"format\":\"date\",\"minLength\":8,\"maxLength\":20}",
		  "\"2024-01-31\"", 1, 1 },
		{ "{\"type\":\"string\",\"format\":\"date\",\"minLength\":8,\"maxLength\":20}",
		  "\"2024-1-31\"", 0, 0 },
		{ "{\"type\":\"string\",\"format\":\"date\",\"minLength\":8,\"maxLength\":20}",
		  "\"x\"", 0, 0 },
	};
	const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS };
	for (size_t i = 0; i < sizeof tab / sizeof *tab; i++) {
		struct rl_cons *c = NULL;
		char err[256] = "";
		int rc = rl_cons_compile_schema(v, tab[i].schema, strlen(tab[i].schema), &opts, &c, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", tab[i].schema, err);
		if (rc)
			continue;
		const int got = matches(c, tab[i].text, strlen(tab[i].text));
		CHECKF(!got || tab[i].valid, "%s accepts %s, which the validator rejects", tab[i].schema, tab[i].text);
		CHECKF(got || !tab[i].written, "%s rejects %s", tab[i].schema, tab[i].text);
		rl_cons_destroy(c);
	}
	rl_cons_vocab_destroy(v);
}

static void schema_vs_jsonschema(void)
{
	json_error_t je;
	json_t *fx = json_load_file(FIX "schemas.json", 0, &je);
	REQUIRE(fx);
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	size_t i, n = 0, nvalid = 0, ninvalid = 0, bad = 0;
	json_t *r;
	json_array_foreach(fx, i, r) {
		json_t *s = json_object_get(r, "schema");
		struct rl_cons *c;
		char err[256];
		const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS };   /* as the runtime */
		int rc = rl_cons_compile_schema(v, json_string_value(s), json_string_length(s), &opts, &c, err, sizeof err);
		CHECKF(rc == 0, "schema %zu: %s", i, err);
		if (rc)
			continue;
		size_t k;
		json_t *cs;
		json_array_foreach(json_object_get(r, "cases"), k, cs) {
			json_t *t = json_object_get(cs, "text");
			int valid = json_is_true(json_object_get(cs, "valid")), canon = json_is_true(json_object_get(cs, "canonical"));
			int got = matches(c, json_string_value(t), json_string_length(t));
			if (!valid || canon) {
				n++;
				nvalid += valid;
				ninvalid += !valid;
				if (got != valid && bad++ < 10)
					fprintf(stderr, "  schema %zu on %s: %s, jsonschema %s\n", i, json_string_value(t),
						got ? "accepted" : "rejected", valid ? "valid" : "invalid");
			}
		}
		rl_cons_destroy(c);
	}
	printf("  %zu schemas: %zu canonical valid instances accepted?, %zu invalid rejected?; %zu wrong\n",
	       json_array_size(fx), nvalid, ninvalid, bad);
	CHECK(bad == 0);
	CHECK(nvalid > 150 && ninvalid > 1000);
	rl_cons_vocab_destroy(v);
	json_decref(fx);
}

/* grammars against oracles that share no code with them (grammar.json) */
static void grammar_vs_oracles(void)
{
	json_error_t je;
	json_t *fx = json_load_file(FIX "grammar.json", 0, &je);
	REQUIRE(fx);
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	size_t i, k, n = 0, nvalid = 0, bad = 0;
	json_t *g, *cs;
	json_array_foreach(json_object_get(fx, "gbnf"), i, g) {
		json_t *t = json_object_get(g, "grammar");
		struct rl_cons *c;
		char err[256];
		int rc = rl_cons_compile_gbnf(v, json_string_value(t), json_string_length(t), NULL, &c, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", json_string_value(json_object_get(g, "name")), err);
		if (rc)
			continue;
		CHECK(rl_cons_is_grammar(c));
		json_array_foreach(json_object_get(g, "cases"), k, cs) {
			json_t *x = json_object_get(cs, "text");
			int want = json_is_true(json_object_get(cs, "valid"));
			int got = matches(c, json_string_value(x), json_string_length(x));
			n++;
			nvalid += want;
			if (got != want && bad++ < 10)
				fprintf(stderr, "  %s on \"%s\": %d, oracle %d\n", json_string_value(json_object_get(g, "name")),
					json_string_value(x), got, want);
		}
		rl_cons_destroy(c);
	}
	size_t ns = 0, sv = 0, si = 0;
	json_array_foreach(json_object_get(fx, "schemas"), i, g) {
		json_t *t = json_object_get(g, "schema");
		struct rl_cons *c;
		char err[256];
		int rc = rl_cons_compile_schema(v, json_string_value(t), json_string_length(t), NULL, &c, err, sizeof err);
		CHECKF(rc == 0, "recursive schema %zu: %s", i, err);
		if (rc)
			continue;
		CHECK(rl_cons_is_grammar(c));
		json_array_foreach(json_object_get(g, "cases"), k, cs) {
			json_t *x = json_object_get(cs, "text");
			int valid = json_is_true(json_object_get(cs, "valid")), canon = json_is_true(json_object_get(cs, "canonical"));
			if (valid && !canon)
				continue;              /* valid in another spelling or key order: no label for us */
			int got = matches(c, json_string_value(x), json_string_length(x));
			ns++;
			sv += valid;
			si += !valid;
			if (got != valid && bad++ < 10)
				fprintf(stderr, "  recursive schema %zu on %s: %d, jsonschema %d\n", i, json_string_value(x), got, valid);
		}
		rl_cons_destroy(c);
	}
	printf("  GBNF: %zu strings (%zu in the language) against Python oracles; recursive schemas: %zu canonical valid, "
	       "%zu invalid; %zu wrong\n", n, nvalid, sv, si, bad);
	CHECK(bad == 0);
	CHECK(n > 1000 && nvalid > 300 && sv > 60 && si > 300);
	rl_cons_vocab_destroy(v);
	json_decref(fx);
}

/* llama.cpp's grammars/ compile (each on the matcher it needs); what is not taken is refused
 * by name; a grammar's state cap is an error, not a crash */
static void gbnf_corpus_and_refusals(void)
{
	static const char *const corpus[] = { "arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list" };
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	for (size_t i = 0; i < sizeof corpus / sizeof *corpus; i++) {
		char path[200], err[256];
		snprintf(path, sizeof path, FIX "gbnf/%s.gbnf", corpus[i]);
		FILE *f = fopen(path, "rb");
		REQUIRE(f);
		static char text[8192];
		size_t n = fread(text, 1, sizeof text, f);
		fclose(f);
		struct rl_cons *c;
		int rc = rl_cons_compile_gbnf(v, text, n, NULL, &c, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", path, err);
		if (!rc)
			rl_cons_destroy(c);
	}
	static const char *const tab[][2] = {
		{ "root ::= expr\nexpr ::= expr \"+\" [0-9] | [0-9]\n", "'expr' is left-recursive" },
		{ "root ::= a\na ::= [ ]* a \"x\" | \"y\"\n", "'a' is left-recursive" },
		{ "root ::= \"x\" root\n", "derives no finite string" },
		{ "root ::= \"a\" <[12]>\n", "token references" },
		{ "root ::= !<[12]>\n", "token references" },
		{ "root ::= foo\n", "'foo' is used but not defined" },
		{ "top ::= \"a\"\n", "no 'root' rule" },
		{ "root ::= \"a\"\nroot ::= \"b\"\n", "defined twice" },
		{ "root ::= \"\\q\"\n", "unknown escape" },
		{ "root ::= \"abc\n", "not closed" },
		{ "root ::= [a-z\n", "not closed" },
		{ "root ::= (\"a\"\n", "expecting ')'" },
		{ "root ::= \"a\"{2000}\n", "above 1000" },
		{ "root ::= \"a\"{3,2}\n", "min above max" },
		{ "root ::= *\"a\"\n", "nothing before it to repeat" },
		{ "root = \"a\"\n", "expecting '::='" },
		{ "root ::= \"\\uD800\"\n", "no Unicode scalar value" },
		{ "root ::= \"\xff\"\n", "invalid UTF-8" },
		{ "root ::= [z-a]\n", "reversed" },
		{ "root ::= []\n", "matches no string" },
		{ "root ::= \"a\" ) \n", "expecting the end of the line" },
	};
	for (size_t i = 0; i < sizeof tab / sizeof *tab; i++) {
		struct rl_cons *c = NULL;
		char err[256] = "";
		int rc = rl_cons_compile_gbnf(v, tab[i][0], strlen(tab[i][0]), NULL, &c, err, sizeof err);
		CHECKF(rc == -EINVAL && strstr(err, tab[i][1]), "%s: rc %d, \"%s\" (want \"%s\")", tab[i][0], rc, err, tab[i][1]);
		if (!rc)
			rl_cons_destroy(c);
	}
	/* a grammar's states are met as outputs go: past the cap its advances fail, by name */
	struct rl_cons_opts o = { .max_states = 40 };
	struct rl_cons *c = NULL;
	char err[256];
	const char *g = "root ::= \"(\" root \")\" | \"x\"\n";
	REQUIRE(rl_cons_compile_gbnf(v, g, strlen(g), &o, &c, err, sizeof err) == 0);
	uint32_t st = rl_cons_start(c);
	long r = 0;
	for (int i = 0; i < 100 && r >= 0; i++)
		if ((r = rl_cons_advance(c, st, '(')) >= 0)
			st = (uint32_t)r;
	CHECKF(r == -E2BIG && rl_cons_error(c) == -E2BIG, "advance %ld, error %d", r, rl_cons_error(c));
	rl_cons_destroy(c);
	rl_cons_vocab_destroy(v);
}

/* integer bounds as regexes: every integer near the bounds against arithmetic */
/* Bounded numbers against the validator's own reading: python jsonschema parses a number to
 * the nearest double and compares doubles, which strtod and C's comparisons do the same way.
 * Bounds of every kind (inclusive, exclusive, draft 4's boolean forms, fractions that no
 * double holds exactly, negative, one-sided) on decimals around each bound, at the bound's
 * own digits and one digit past them: the automaton accepts a spelling only when the value is
 * in range (never out of range), and every in-range fixed-point spelling of at most 17
 * fraction digits and 15 significant digits (a decimal of 15 digits is the only one of its
 * length that reads as its double, so none of them lies between a bound's shortest spelling,
 * which the automaton is built from, and the bound's double; longer spellings of a bound's
 * own double may be left out: never written, never invalid). */
static void number_bounds(void)
{
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	static const char *const sch[] = {
		"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}",
		"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":100}",
		"{\"type\":\"number\",\"minimum\":0.1,\"exclusiveMaximum\":0.3}",
		"{\"type\":\"number\",\"exclusiveMinimum\":0.1}",
		"{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":-0.25}",
		"{\"type\":\"number\",\"minimum\":-12.75,\"maximum\":3.125}",
		"{\"type\":\"number\",\"maximum\":-1e-5}",
		"{\"type\":\"number\",\"minimum\":1.5,\"exclusiveMinimum\":true,\"maximum\":2}",
		"{\"type\":\"number\",\"minimum\":19.99,\"maximum\":19.99}",
		"{\"type\":\"number\",\"exclusiveMaximum\":1000000.5,\"minimum\":999999.5}",
		"{\"minimum\":0.5,\"maximum\":4}",
	};
	static const double lo[] = { 0, 0, 0.1, 0.1, -2.5, -12.75, -INFINITY, 1.5, 19.99, 999999.5, 0.5 };
	static const double hi[] = { 1, 100, 0.3, INFINITY, -0.25, 3.125, -1e-5, 2, 19.99, 1000000.5, 4 };
	static const int lx[] = { 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0 }, hx[] = { 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0 };
	size_t checked = 0, accepted = 0, bad = 0;
	srand(51);
	for (size_t t = 0; t < sizeof sch / sizeof *sch; t++) {
		struct rl_cons *c;
		char err[256];
		int rc = rl_cons_compile_schema(v, sch[t], strlen(sch[t]), NULL, &c, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", sch[t], err);
		if (rc)
			continue;
		/* candidates: around each finite bound, at 0..18 fraction digits, and random values */
		for (int k = 0; k < 4000; k++) {
			const double base = k % 2 ? (isfinite(lo[t]) ? lo[t] : hi[t]) : (isfinite(hi[t]) ? hi[t] : lo[t]);
			double x = base;
			const int digits = k % 19;
			if (k % 3 == 0)
				x += ((double)rand() / RAND_MAX - 0.5) * pow(10, -(rand() % 18));
			else if (k % 3 == 1)
				x = base * ((double)rand() / RAND_MAX * 3 - 1);
			char s[64];
			int n = snprintf(s, sizeof s, "%.*f", digits, x);
			if (!strcmp(s, "-0") || !strncmp(s, "-0.", 3))
				continue;      /* "-0" parses to -0.0: valid too, not a spelling written */
			const double y = strtod(s, NULL);
			const int want = (lx[t] ? y > lo[t] : y >= lo[t]) && (hx[t] ? y < hi[t] : y <= hi[t]);
			const int got = matches(c, s, (size_t)n);
			int sig = 0, lead = 1;
			for (const char *p = s; *p; p++)
				if (*p >= '0' && *p <= '9' && !(lead && *p == '0'))
					sig++, lead = 0;
			for (const char *p = s + n - 1; digits && p > s && *p == '0'; p--)
				sig--;         /* trailing zeros of the fraction */
			checked++;
			accepted += got;
			/* fixed-point with at most 17 fraction and 15 significant digits: written exactly
			 * when in range */
			if (got != want && digits <= 17 && sig <= 15 && bad++ < 10)
				fprintf(stderr, "  %s on %s: %s, the validator %s\n", sch[t], s, got ? "accepted" : "rejected",
					want ? "valid" : "invalid");
			else if (got && !want && bad++ < 10)
				fprintf(stderr, "  %s on %s: accepted, the validator: invalid\n", sch[t], s);
		}
		CHECKF(!matches(c, "01", 2) && !matches(c, "1.", 2) && !matches(c, "1e0", 3), "%s", sch[t]);
		rl_cons_destroy(c);
	}
	printf("  %zu decimals checked against %zu bounded number schemas (%zu in range), %zu wrong\n", checked,
	       sizeof sch / sizeof *sch, accepted, bad);
	CHECK(bad == 0 && checked > 30000 && accepted > 5000);
	rl_cons_vocab_destroy(v);
}

static void integer_bounds(void)
{
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	srand(50);
	static const long long fixed[][2] = { { 0, 0 }, { -1, 1 }, { 7, 7 }, { 10, 99 }, { 9, 100 }, { -123, 4567 },
					      { 1, 1000000 }, { -999, -100 }, { 35, 291 }, { 100, 109 } };
	size_t checked = 0, bad = 0;
	for (int t = 0; t < 60; t++) {
		long long lo, hi;
		int has_lo = 1, has_hi = 1;
		if (t < 10) {
			lo = fixed[t][0];
			hi = fixed[t][1];
		} else {
			lo = rand() % 20000 - 10000;
			hi = lo + rand() % (t < 40 ? 300 : 30000);
			has_lo = t % 7 != 3;
			has_hi = t % 5 != 2;
		}
		char sch[200];
		int o = snprintf(sch, sizeof sch, "{\"type\":\"integer\"");
		if (has_lo)
			o += snprintf(sch + o, sizeof sch - (size_t)o, ",\"minimum\":%lld", lo);
		if (has_hi)
			o += snprintf(sch + o, sizeof sch - (size_t)o, ",\"maximum\":%lld", hi);
		snprintf(sch + o, sizeof sch - (size_t)o, "}");
		struct rl_cons *c;
		char err[256];
		int rc = rl_cons_compile_schema(v, sch, strlen(sch), NULL, &c, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", sch, err);
		if (rc)
			continue;
		for (long long x = lo - 150; x <= hi + 150; x += (hi - lo > 2000 ? 7 : 1)) {
			char s[32];
			int k = snprintf(s, sizeof s, "%lld", x);
			int want = (!has_lo || x >= lo) && (!has_hi || x <= hi);
			checked++;
			if (matches(c, s, (size_t)k) != want && bad++ < 10)
				fprintf(stderr, "  %s on %s: %d\n", sch, s, !want);
		}
		CHECKF(!matches(c, "01", 2) && !matches(c, "-", 1) && !matches(c, "1.0", 3), "%s", sch);
		rl_cons_destroy(c);
	}
	printf("  %zu integers checked against 60 bound pairs, %zu wrong\n", checked, bad);
	CHECK(bad == 0 && checked > 10000);
	rl_cons_vocab_destroy(v);
}

/* A schema whose expression would grow past the bound (optional keys nested through $ref:
 * O(n^2) text a level) is refused by size, fast, in bounded memory. */
/* A schema too large for one automaton: a grammar whose rules are its '$ref' targets and its
 * nested objects (each written once, however often it appears), whose answers are those of
 * the schema: 30 optional keys in three levels, each key's value the next, through '$ref' and
 * written inline. With nothing to split at (an array of 1000 strings), refused by size,
 * saying so. */
static void schema_too_large_becomes_a_grammar(void)
{
	char *sch = malloc(1 << 16);
	REQUIRE(sch);
	size_t n = (size_t)sprintf(sch, "{\"$defs\":{");
	for (int l = 0; l < 3; l++) {
		n += (size_t)sprintf(sch + n, "%s\"l%d\":{\"type\":\"object\",\"properties\":{", l ? "," : "", l);
		for (int k = 0; k < 30; k++)
			n += (size_t)sprintf(sch + n, "%s\"k%d\":%s", k ? "," : "", k,
					     l < 2 ? (l ? "{\"$ref\":\"#/$defs/l2\"}" : "{\"$ref\":\"#/$defs/l1\"}") : "{\"type\":\"string\"}");
		n += (size_t)sprintf(sch + n, "},\"additionalProperties\":false}");
	}
	n += (size_t)sprintf(sch + n, "},\"$ref\":\"#/$defs/l0\"}");
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	struct rl_cons *c = NULL;
	char err[512] = "";
	int rc = rl_cons_compile_schema(v, sch, n, NULL, &c, err, sizeof err);
	CHECKF(rc == 0 && rl_cons_is_grammar(c), "rc %d: %s", rc, err);
	if (!rc) {
		static const char *const yes[] = { "{}", "{\"k0\":{}}", "{\"k3\":{\"k29\":{\"k0\":\"x\",\"k5\":\"\"}},\"k7\":{}}" };
		static const char *const no[] = { "{\"k0\":1}", "{\"k3\":{\"k2\":{\"k0\":{}}}}", "{\"k1\":{},\"k0\":{}}", "{\"k30\":{}}" };
		for (size_t i = 0; i < 3; i++)
			CHECKF(matches(c, yes[i], strlen(yes[i])), "%s", yes[i]);
		for (size_t i = 0; i < 4; i++)
			CHECKF(!matches(c, no[i], strlen(no[i])), "%s", no[i]);
		rl_cons_destroy(c);
	}
	/* the same, the levels written inline */
	const char *leaf = "{\"type\":\"string\"}";
	char *lvl[3] = { 0 };
	for (int l = 2; l >= 0; l--) {
		size_t m = 0, cap = (size_t)1 << 20;
		char *t = malloc(cap);
		m += (size_t)snprintf(t + m, cap - m, "{\"type\":\"object\",\"properties\":{");
		for (int k = 0; k < 30; k++)
			m += (size_t)snprintf(t + m, cap - m, "%s\"k%d\":%s", k ? "," : "", k, l == 2 ? leaf : lvl[l + 1]);
		snprintf(t + m, cap - m, "},\"additionalProperties\":false}");
		lvl[l] = t;
	}
	rc = rl_cons_compile_schema(v, lvl[0], strlen(lvl[0]), NULL, &c, err, sizeof err);
	CHECKF(rc == 0 && rl_cons_is_grammar(c), "rc %d: %s", rc, err);
	if (!rc) {
		static const char yes[] = "{\"k3\":{\"k29\":{\"k0\":\"x\",\"k5\":\"\"}},\"k7\":{}}",
				  no[] = "{\"k3\":{\"k2\":{\"k0\":{}}}}";
		CHECK(matches(c, yes, strlen(yes)) && !matches(c, no, strlen(no)));
		rl_cons_destroy(c);
	}
	static const char flat[] = "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":100},\"minItems\":1000,"
				   "\"maxItems\":1000}";
	rc = rl_cons_compile_schema(v, flat, strlen(flat), NULL, &c, err, sizeof err);
	CHECKF(rc == -E2BIG && strstr(err, "more than"), "rc %d: %s", rc, err);
	if (!rc)
		rl_cons_destroy(c);
	for (int l = 0; l < 3; l++)
		free(lvl[l]);
	rl_cons_vocab_destroy(v);
	free(sch);
}

static void schema_refused_by_name(void)
{
	static const char *const tab[][2] = {
		{ "{\"type\":\"string\",\"format\":\"idn-email\"}", "'format' 'idn-email' is not supported" },
		{ "{\"type\":\"string\",\"format\":\"date\",\"maxLength\":4}", "(10 to 10 characters) with minLength/maxLength that cut it" },
		{ "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"}},\"patternProperties\":{\"b\":{}},\"additionalProperties\":false}",
		  "'patternProperties' 'b' binding the declared property 'ab'" },
		{ "{\"type\":\"object\",\"properties\":{}}", "additionalProperties" },
		{ "{\"type\":\"object\",\"additionalProperties\":true}", "without \"additionalProperties\": false" },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"minProperties\":2,\"additionalProperties\":false}",
		  "'minProperties' 2 is above the 1 properties" },
		{ "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false},{\"minProperties\":2}]}",
		  "'minProperties' 2 is above the 1 properties" },
		{ "{\"type\":\"object\",\"additionalProperties\":false,\"minProperties\":1}", "'minProperties' 1: no key can be written" },
		{ "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}", "'uniqueItems' is not supported" },
		{ "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"contains\":{\"type\":\"string\"}}", "'contains' is not supported" },
		{ "{\"type\":\"array\"}", "without 'items'" },
		{ "{\"type\":\"integer\",\"multipleOf\":3}", "'multipleOf' 3 is supported with bounds" },
		{ "{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookahead" },
		{ "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "'pattern' together with" },
		{ "{\"$defs\":{\"n\":{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}]}},\"$ref\":\"#/$defs/n\"}",
		  "'oneOf' with recursive branches" },
		{ "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"k\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}",
		  "derives no finite string" },
		{ "{\"$ref\":\"http://x/y\"}", "'$ref' 'http://x/y'" },
		/* merges: what has no exact merge, and what no value satisfies */
		{ "{\"allOf\":[{\"type\":\"string\",\"pattern\":\"a+\"},{\"maxLength\":2},{\"pattern\":\"b+\"}]}",
		  "'allOf': branches 0 and 2 both set 'pattern' (the intersection of two patterns is not supported)" },
		{ "{\"type\":\"string\",\"pattern\":\"a\",\"anyOf\":[{\"pattern\":\"b\"},{\"maxLength\":1}]}",
		  "'anyOf': the keywords beside 'anyOf' and branch 0 both set 'pattern' (the intersection of two patterns is not supported)" },
		{ "{\"$defs\":{\"p\":{\"type\":\"string\",\"pattern\":\"a\"}},\"$ref\":\"#/$defs/p\",\"pattern\":\"b\"}",
		  "'$ref': the '$ref' target and the keywords beside '$ref' both set 'pattern' (the intersection of two patterns is not supported)" },
		{ "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"date\"}},\"additionalProperties\":false},"
		  "{\"properties\":{\"a\":{\"format\":\"uuid\"}}}]}",
		  "'allOf': branches 0 and 1 both set 'format' in properties.a (a value of two formats is not supported)" },
		{ "{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"string\"}],\"allOf\":[{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"integer\"}]}]}",
		  "'allOf': the keywords beside 'allOf' and branch 0 both set 'oneOf' (two sets of oneOf alternatives in one schema are not supported)" },
		{ "{\"allOf\":[{\"anyOf\":[{\"type\":\"integer\"}]},{\"anyOf\":[{\"type\":\"null\"}]}]}", "no branch of 'anyOf' can hold a value" },
		{ "{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "'allOf': no value satisfies every part (no 'type' in common)" },
		{ "{\"allOf\":[{\"enum\":[1,2]},{\"enum\":[3]}]}",
		  "'allOf': no value satisfies every part (no value of 'enum'/'const' is in every part)" },
		{ "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false},"
		  "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}]}",
		  "'allOf': no value satisfies every part (required property 'b' is disallowed by another part)" },
		{ "{\"allOf\":[{\"type\":\"integer\"},{\"not\":{}}]}", "allOf[1]: 'not' is not supported" },
		{ "{\"type\":\"object\",\"properties\":{\"x\":false},\"required\":[\"x\"],\"additionalProperties\":false}",
		  "properties.x: a schema of false (no value) cannot be generated" },
		{ "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}},{\"properties\":{\"a\":{\"type\":\"integer\"}}}]}",
		  "properties.a: 'not' is not supported" },
		{ "{\"type\":\"string\",\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}",
		  "no branch of 'anyOf' can hold a value together with the keywords beside it" },
		{ "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#/$defs/n\",\"required\":[\"k\"]}},\"additionalProperties\":false}},"
		  "\"$ref\":\"#/$defs/n\"}",
		  "#/$defs/n.properties.k: '$ref': '$ref' '#/$defs/n' merged with other keywords inside its own recursion is not supported" },
		{ "{\"allOf\":[{\"type\":\"object\",\"patternProperties\":{\"^x\":{}},\"additionalProperties\":false},"
		  "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"}}}]}",
		  "'allOf': 'patternProperties' with 'additionalProperties' in branch 0, beside a property another part names ('b'), is not supported" },
		{ "{\"type\":\"integer\",\"oneOf\":[{\"minimum\":0},{\"maximum\":5}]}", "'oneOf' branches 0 and 1 both match some value" },
		{ "{\"allOf\":[{\"$ref\":\"#/$defs/a\"},{\"$ref\":\"#/$defs/b\"}],\"$defs\":{\"a\":{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#/$defs/a\"}}},"
		  "\"b\":{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#/$defs/b\"}}}}}",
		  "'allOf': merges nest deeper than 16 (two recursive schemas merged?)" },
		{ "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "'oneOf' branches 0 and 1" },
		{ "{\"type\":\"strin\"}", "'strin' is not a JSON Schema type" },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
		  "required property 'b'" },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"if\":{}}},\"additionalProperties\":false}",
		  "properties.a: 'if' is not supported" },
		{ "{\"type\":\"string\",\"enum\":[\"abcd\",\"efgh\"],\"maxLength\":3}", "no value of 'enum' satisfies the keywords beside it" },
		{ "{\"type\":\"string\",\"enum\":[1,2]}", "no value of 'enum'" },
		{ "{\"type\":\"string\",\"maxLength\":500000}", "above the 100000" },
		{ "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer" },
		{ "{\"type\":\"string\"", "not JSON" },
		{ "{\"type\":\"integer\",\"nullable\":true}", "'nullable' is not supported" },
	};
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	for (size_t i = 0; i < sizeof tab / sizeof *tab; i++) {
		struct rl_cons *c = NULL;
		char err[512] = "";
		int rc = rl_cons_compile_schema(v, tab[i][0], strlen(tab[i][0]), NULL, &c, err, sizeof err);
		CHECKF(rc == -EINVAL && strstr(err, tab[i][1]), "%s: rc %d, \"%s\" (want \"%s\")", tab[i][0], rc, err, tab[i][1]);
		if (!rc)
			rl_cons_destroy(c);
	}
	/* RL_CONS_NO_EXTRA_KEYS: no additionalProperties reads as false */
	struct rl_cons_opts o = { .flags = RL_CONS_NO_EXTRA_KEYS };
	struct rl_cons *c = NULL;
	char err[256];
	const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}";
	CHECK(rl_cons_compile_schema(v, s, strlen(s), &o, &c, err, sizeof err) == 0);
	if (c) {
		CHECK(matches(c, "{\"a\":1}", 7) && matches(c, "{}", 2) && !matches(c, "{\"b\":1}", 7));
		rl_cons_destroy(c);
	}
	rl_cons_vocab_destroy(v);
}

/* allOf, keywords beside $ref and beside anyOf/oneOf: merged schemas accept what every part
 * takes in the compiler's spelling, and nothing that a part refuses (jsonschema's verdicts on
 * more of them: schemas.json) */
static void schema_merges(void)
{
	static const struct { const char *schema, *in[4], *out[6]; } tab[] = {
		/* objects: properties and required united, a property of both merged */
		{ "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"a\"]},"
		  "{\"type\":\"object\",\"properties\":{\"a\":{\"maximum\":9},\"b\":{\"type\":\"string\",\"maxLength\":2}},\"additionalProperties\":false}]}",
		  { "{\"a\":0}", "{\"a\":9,\"b\":\"xy\"}" },
		  { "{\"a\":10}", "{\"a\":-1}", "{\"b\":\"x\"}", "{\"a\":1,\"b\":\"xyz\"}", "{\"a\":1,\"c\":1}" } },
		/* additionalProperties false in one part leaves out what only the other names */
		{ "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false},"
		  "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{\"type\":\"string\"}}}]}",
		  { "{\"a\":1}", "{}" }, { "{\"a\":1,\"b\":\"x\"}", "{\"b\":\"x\"}" } },
		/* additionalProperties as a schema binds the other part's properties */
		{ "{\"allOf\":[{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}},"
		  "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[\"integer\",\"string\"]}},\"required\":[\"a\"]}]}",
		  { "{\"a\":5}" }, { "{\"a\":\"x\"}", "{}" } },
		/* numbers, strings, types: bounds tightened, types intersected, the rest dropped */
		{ "{\"allOf\":[{\"type\":\"number\",\"minimum\":-5},{\"type\":\"integer\",\"maximum\":50,\"exclusiveMinimum\":-3},{\"minimum\":-10}]}",
		  { "-2", "50" }, { "-3", "51", "1.5", "\"x\"" } },
		{ "{\"allOf\":[{\"type\":[\"string\",\"integer\"],\"minLength\":2,\"minimum\":0},{\"type\":[\"string\",\"null\"],\"maxLength\":3}]}",
		  { "\"ab\"", "\"abc\"" }, { "\"a\"", "\"abcd\"", "1", "null" } },
		{ "{\"allOf\":[{\"enum\":[\"a\",\"b\",1]},{\"enum\":[\"b\",1,2]},{\"type\":\"string\"}]}", { "\"b\"" }, { "\"a\"", "1", "2" } },
		/* arrays: position by position, items false caps the length */
		{ "{\"allOf\":[{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false},"
		  "{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"string\"],\"maxLength\":2,\"minimum\":0},\"minItems\":1}]}",
		  { "[1]", "[0,\"ab\"]" }, { "[]", "[-1]", "[1,\"abc\"]", "[1,\"a\",2]" } },
		/* $ref beside other keywords: allOf of the target and them */
		{ "{\"$defs\":{\"base\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"]}},"
		  "\"$ref\":\"#/$defs/base\",\"properties\":{\"id\":{\"maximum\":3},\"x\":{\"type\":\"boolean\"}},\"additionalProperties\":false}",
		  { "{\"id\":3}", "{\"id\":-7,\"x\":true}" }, { "{\"id\":4}", "{\"x\":true}", "{\"id\":1,\"y\":1}" } },
		/* anyOf/oneOf beside keywords: merged into each branch; an impossible branch dropped */
		{ "{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"a\",\"b\"]},\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},"
		  "\"additionalProperties\":false,\"oneOf\":[{\"properties\":{\"kind\":{\"const\":\"a\"}},\"required\":[\"kind\",\"a\"]},"
		  "{\"properties\":{\"kind\":{\"const\":\"b\"}},\"required\":[\"kind\",\"b\"]}]}",
		  { "{\"kind\":\"a\",\"a\":1}", "{\"kind\":\"b\",\"b\":\"x\"}", "{\"kind\":\"a\",\"a\":1,\"b\":\"x\"}" },
		  { "{\"kind\":\"a\",\"b\":\"x\"}", "{\"kind\":\"c\",\"a\":1}", "{\"a\":1}" } },
		{ "{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1},{\"type\":\"integer\"},{\"minLength\":4,\"maxLength\":4}],\"description\":\"d\"}",
		  { "\"a\"", "\"abcd\"" }, { "\"ab\"", "1", "\"abcde\"" } },
		/* enum/const beside other keywords: the values in their language, in compact spelling */
		{ "{\"allOf\":[{\"type\":[\"string\",\"integer\"],\"maxLength\":3},{\"enum\":[\"ab\",\"abcd\",1,null]}]}",
		  { "\"ab\"", "1" }, { "\"abcd\"", "null" } },
		{ "{\"enum\":[{\"b\":1,\"a\":2},{\"a\":1,\"b\":2},{\"a\":\"x\"}],\"type\":\"object\","
		  "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
		  { "{\"a\":1,\"b\":2}" }, { "{\"b\":1,\"a\":2}", "{\"a\":\"x\"}", "{\"a\":2,\"b\":1}" } },
		{ "{\"enum\":[1,2,\"abcd\"],\"maxLength\":3}", { "1", "2" }, { "\"abcd\"" } },
		/* anyOf in two parts: each combination of their branches, the impossible ones dropped */
		{ "{\"allOf\":[{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\",\"maximum\":3}]},"
		  "{\"anyOf\":[{\"type\":\"string\",\"minLength\":1},{\"type\":\"null\"},{\"minimum\":0}]}]}",
		  { "\"\"", "\"ab\"", "3", "0" }, { "\"abc\"", "null", "-1", "4" } },
		/* a part with no value where the value is optional: left out */
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"x\":false,"
		  "\"y\":{\"allOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},\"additionalProperties\":false}",
		  { "{}", "{\"a\":1}" }, { "{\"x\":1}", "{\"y\":null}", "{\"a\":1,\"y\":\"s\"}" } },
		{ "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},false],\"items\":{\"type\":\"string\"}}",
		  { "[]", "[1]" }, { "[1,\"a\"]", "[1,2]" } },
		{ "{\"type\":[\"object\",\"null\"],\"properties\":{\"x\":false},\"required\":[\"x\"],\"additionalProperties\":false}",
		  { "null" }, { "{}", "{\"x\":1}" } },
		/* a required property ruled out leaves the other types */
		{ "{\"type\":[\"integer\",\"object\"],\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false,"
		  "\"allOf\":[{\"required\":[\"b\"]}]}", { "7" }, { "{}", "{\"a\":1}" } },
	};
	struct rl_cons_vocab *v = byte_vocab();
	REQUIRE(v);
	for (size_t i = 0; i < sizeof tab / sizeof *tab; i++) {
		struct rl_cons *c = NULL;
		char err[512] = "";
		const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS };   /* as the runtime */
		int rc = rl_cons_compile_schema(v, tab[i].schema, strlen(tab[i].schema), &opts, &c, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", tab[i].schema, err);
		if (rc)
			continue;
		for (size_t k = 0; k < 4 && tab[i].in[k]; k++)
			CHECKF(matches(c, tab[i].in[k], strlen(tab[i].in[k])), "schema %zu rejects %s", i, tab[i].in[k]);
		for (size_t k = 0; k < 6 && tab[i].out[k]; k++)
			CHECKF(!matches(c, tab[i].out[k], strlen(tab[i].out[k])), "schema %zu accepts %s", i, tab[i].out[k]);
		rl_cons_destroy(c);
	}
	/* a target merged in and used again plainly inside is not recursion: one expression */
	const char *s = "{\"$defs\":{\"A\":{\"type\":[\"object\",\"string\"],\"properties\":{\"y\":{\"type\":\"integer\"}}}},"
			"\"allOf\":[{\"$ref\":\"#/$defs/A\"},{\"properties\":{\"x\":{\"$ref\":\"#/$defs/A\",\"maxLength\":3}}}]}";
	char *re = NULL, err[512] = "";
	CHECKF(rl_cons_schema_to_regex(s, strlen(s), RL_CONS_NO_EXTRA_KEYS, &re, err, sizeof err) == 0, "%s", err);
	free(re);
	rl_cons_vocab_destroy(v);
}

/* ---- a small validator for the walks (independent of the compiler: pcre2 for patterns) ---- */
static json_t *g_root;
static int cp_len(const char *s, size_t n)
{
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}
static int is_type(json_t *x, const char *t)
{
	if (!strcmp(t, "integer")) return json_is_integer(x);
	if (!strcmp(t, "number")) return json_is_number(x);
	if (!strcmp(t, "string")) return json_is_string(x);
	if (!strcmp(t, "boolean")) return json_is_boolean(x);
	if (!strcmp(t, "null")) return json_is_null(x);
	if (!strcmp(t, "object")) return json_is_object(x);
	if (!strcmp(t, "array")) return json_is_array(x);
	return 0;
}
static int validate(json_t *s, json_t *x)
{
	json_t *k;
	if ((k = json_object_get(s, "$ref")))
		return validate(json_object_get(json_object_get(g_root, "$defs"), strrchr(json_string_value(k), '/') + 1), x);
	if ((k = json_object_get(s, "anyOf")) || (k = json_object_get(s, "oneOf"))) {
		size_t i, hits = 0;
		json_t *b;
		json_array_foreach(k, i, b)
			hits += validate(b, x);
		return json_object_get(s, "oneOf") ? hits == 1 : hits >= 1;
	}
	if ((k = json_object_get(s, "enum"))) {
		size_t i;
		json_t *e;
		json_array_foreach(k, i, e)
			if (json_equal(e, x))
				return 1;
		return 0;
	}
	if ((k = json_object_get(s, "const")))
		return json_equal(k, x);
	json_t *t = json_object_get(s, "type");
	int ok = 0;
	if (json_is_string(t))
		ok = is_type(x, json_string_value(t));
	else {
		size_t i;
		json_t *e;
		json_array_foreach(t, i, e)
			ok |= is_type(x, json_string_value(e));
	}
	if (!ok)
		return 0;
	if (json_is_number(x)) {
		double d = json_number_value(x);
		if ((k = json_object_get(s, "minimum")) && d < json_number_value(k)) return 0;
		if ((k = json_object_get(s, "maximum")) && d > json_number_value(k)) return 0;
		if ((k = json_object_get(s, "exclusiveMinimum")) && d <= json_number_value(k)) return 0;
		if ((k = json_object_get(s, "exclusiveMaximum")) && d >= json_number_value(k)) return 0;
	}
	if (json_is_string(x)) {
		int n = cp_len(json_string_value(x), json_string_length(x));
		if ((k = json_object_get(s, "minLength")) && n < json_integer_value(k)) return 0;
		if ((k = json_object_get(s, "maxLength")) && n > json_integer_value(k)) return 0;
		if ((k = json_object_get(s, "pattern"))) {
			int e;
			PCRE2_SIZE eo;
			pcre2_code *re = pcre2_compile((PCRE2_SPTR)json_string_value(k), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &e, &eo, NULL);
			if (!re)
				return 0;
			pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
			int m = pcre2_match(re, (PCRE2_SPTR)json_string_value(x), json_string_length(x), 0, 0, md, NULL);
			pcre2_match_data_free(md);
			pcre2_code_free(re);
			if (m < 0) return 0;
		}
	}
	if (json_is_array(x)) {
		size_t n = json_array_size(x), i;
		json_t *pre = json_object_get(s, "prefixItems"), *it = json_object_get(s, "items"), *e;
		if ((k = json_object_get(s, "minItems")) && n < (size_t)json_integer_value(k)) return 0;
		if ((k = json_object_get(s, "maxItems")) && n > (size_t)json_integer_value(k)) return 0;
		json_array_foreach(x, i, e) {
			json_t *sub = i < json_array_size(pre) ? json_array_get(pre, i) : it;
			if (!sub || json_is_false(sub) || !validate(sub, e))
				return 0;
		}
	}
	if (json_is_object(x)) {
		json_t *props = json_object_get(s, "properties"), *e;
		const char *key;
		size_t i;
		json_object_foreach(x, key, e)
			if (!json_object_get(props, key) || !validate(json_object_get(props, key), e))
				return 0;
		json_array_foreach(json_object_get(s, "required"), i, e)
			if (!json_object_get(x, json_string_value(e)))
				return 0;
	}
	return 1;
}

/* ---- the real vocabularies ------------------------------------------------------------- */
static const char *const models[] = { "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf" };

static struct rl_tok *load_tok(const char *path)
{
	void *blob;
	uint32_t size;
	char err[512];
	struct rl_tok *t = NULL;
	if (rl_gguf_read_vocab(path, &blob, &size, err, sizeof err)) {
		fprintf(stderr, "  %s: %s\n", path, err);
		return NULL;
	}
	if (rl_tok_create(blob, size, &t, err, sizeof err))
		fprintf(stderr, "  %s: %s\n", path, err);
	free(blob);
	return t;
}

/* the mask by brute force: every token's bytes through the DFA */
static long brute_mask(struct rl_cons *c, const struct rl_cons_vocab *v, uint32_t st, uint32_t *m)
{
	uint32_t n = rl_cons_vocab_size(v);
	long cnt = 0;
	memset(m, 0, rl_cons_mask_words(c) * 4);
	for (uint32_t id = 0; id < n; id++) {
		uint32_t len;
		const char *b = rl_cons_vocab_bytes(v, id, &len);
		int ok = b ? rl_cons_feed(c, st, b, len) != RL_CONS_DEAD : rl_cons_vocab_is_eog(v, id) && rl_cons_accepting(c, st);
		if (ok) {
			m[id >> 5] |= 1u << (id & 31);
			cnt++;
		}
	}
	return cnt;
}

static const char *const walk_schemas[] = {
	"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
	"\"score\":{\"type\":\"number\"},\"active\":{\"type\":\"boolean\"},\"tag\":{\"type\":[\"string\",\"null\"],\"maxLength\":6},"
	"\"desc\":{\"type\":\"string\"}},"
	"\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
	"\"properties\":{\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]{3}$\"},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99}},"
	"\"required\":[\"sku\",\"qty\"],\"additionalProperties\":false},\"minItems\":1,\"maxItems\":4},\"meta\":{\"$ref\":\"#/$defs/meta\"}},"
	"\"required\":[\"id\",\"items\"],\"additionalProperties\":false,\"$defs\":{\"meta\":{\"type\":\"object\",\"properties\":{\"source\":"
	"{\"enum\":[\"web\",\"app\",\"api\"]},\"ts\":{\"type\":\"integer\",\"exclusiveMinimum\":-1000,\"exclusiveMaximum\":1000}},\"additionalProperties\":false}}}",
	"{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\",\"cyan\",\"magenta\",\"yellow\"]},"
	"\"size\":{\"enum\":[\"XS\",\"S\",\"M\",1,2,null,true]},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3},"
	"\"note\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":8}},\"required\":[\"color\",\"size\"],\"additionalProperties\":false}",
	"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"minLength\":1,\"maxLength\":5},{\"oneOf\":[{\"type\":\"integer\",\"maximum\":-3},"
	"{\"type\":\"null\"},{\"type\":\"boolean\"}]}],\"items\":{\"type\":\"number\",\"minimum\":0},\"maxItems\":5}",
};

/* grammars walked too: a recursive schema (validate() follows its $ref) and llama.cpp's
 * json.gbnf, whose outputs a recursive pcre2 pattern written from the grammar checks (a
 * backtracking engine: nothing shared with the matcher) */
static const char walk_tree[] =
	"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"
	"\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":3}},\"required\":[\"name\"],"
	"\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
static const char json_gbnf_pcre[] =
	"(?(DEFINE)(?<ws>(?:|[ ]|\\n[ \\t]{0,20}))"
	"(?<value>(?&object)|(?&array)|(?&string)|(?&number)|(?:true|false|null)(?&ws))"
	"(?<object>\\{(?&ws)(?:(?&string):(?&ws)(?&value)(?:,(?&ws)(?&string):(?&ws)(?&value))*)?\\}(?&ws))"
	"(?<array>\\[(?&ws)(?:(?&value)(?:,(?&ws)(?&value))*)?\\](?&ws))"
	"(?<string>\"(?:[^\"\\\\\\x7F\\x00-\\x1F]|\\\\(?:[\"\\\\bfnrt]|u[0-9a-fA-F]{4}))*\"(?&ws))"
	"(?<number>-?(?:[0-9]|[1-9][0-9]{0,15})(?:\\.[0-9]+)?(?:[eE][-+]?[0-9][1-9]{0,15})?(?&ws)))"
	"\\A(?&object)\\z";

static int gbnf_json_ok(const char *s, size_t n)
{
	int e;
	PCRE2_SIZE eo;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)json_gbnf_pcre, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &e, &eo, NULL);
	if (!re)
		return -1;
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	int m = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	return m >= 0;
}

static char *read_fixture(const char *name, size_t *n)
{
	FILE *f = fopen(name, "rb");
	if (!f)
		return NULL;
	char *b = malloc(1 << 16);
	*n = b ? fread(b, 1, 1 << 16, f) : 0;
	fclose(f);
	return b;
}

static void walks_on(size_t m, const char *path, int n_walks)
{
	struct rl_tok *t = load_tok(path);
	REQUIRE(t);
	struct rl_cons_vocab *v;
	REQUIRE(rl_cons_vocab_from_tok(t, &v) == 0);
	uint32_t nv = rl_cons_vocab_size(v);
	uint32_t eog[16];
	size_t ne = rl_tok_eog_ids(t, eog, 16);
	/* control tokens never have text; every EOG id is one */
	size_t ncontrol = 0;
	for (uint32_t id = 0; id < nv; id++) {
		int ty = rl_tok_type(t, (int32_t)id);
		uint32_t l;
		if (ty == RL_TT_CONTROL) {
			ncontrol++;
			CHECKF(!rl_cons_vocab_bytes(v, id, &l), "%s: control token %u has text", models[m], id);
		}
	}
	for (size_t e = 0; e < ne && e < 16; e++)
		CHECK(rl_cons_vocab_is_eog(v, eog[e]));
	size_t words = (nv + 31) / 32;
	uint32_t *mask = malloc(words * 4), *want = malloc(words * 4), *ids = malloc(nv * sizeof *ids);
	REQUIRE(mask && want && ids);
	srand(50 + (unsigned)m);
	size_t states_checked = 0, mask_bad = 0, walks = 0, walk_bad = 0, eos_bad = 0, total_tokens = 0;
	uint64_t plain_masks[8] = { 0 };        /* per handle: masks made by the plain-token shortcut */
	const size_t nschema = sizeof walk_schemas / sizeof *walk_schemas;
	size_t gbnf_len = 0;
	char *gbnf = read_fixture(FIX "gbnf/json.gbnf", &gbnf_len);
	REQUIRE(gbnf && gbnf_json_ok("{\"a\": [1, {}]}", 14) == 1);
	for (size_t si = 0; si < nschema + 2; si++) {
		struct rl_cons *c;
		char err[300];
		const char *text = si < nschema ? walk_schemas[si] : walk_tree;
		int rc = si == nschema + 1 ? rl_cons_compile_gbnf(v, gbnf, gbnf_len, NULL, &c, err, sizeof err)
					   : rl_cons_compile_schema(v, text, strlen(text), NULL, &c, err, sizeof err);
		CHECKF(rc == 0, "schema %zu: %s", si, err);
		if (rc)
			continue;
		CHECK(rl_cons_is_grammar(c) == (si >= nschema));
		json_t *schema = si <= nschema ? json_loads(text, 0, NULL) : NULL;
		g_root = schema;
		for (int w = 0; w < n_walks; w++) {
			uint32_t st = rl_cons_start(c);
			char out[8192];
			size_t on = 0;
			int ended = 0;
			for (int step = 0; step < 400 && !ended; step++) {
				long cnt = rl_cons_mask(c, st, mask);
				/* check against brute force while the states are new (the cache's copy later) */
				if (states_checked < (m ? 60u : 400u) || (step % 16) == 0) {
					long wc = brute_mask(c, v, st, want);
					states_checked++;
					if ((wc != cnt || memcmp(mask, want, words * 4)) && mask_bad++ < 5)
						fprintf(stderr, "  %s schema %zu state %u: mask %ld tokens, brute force %ld\n", models[m], si, st, cnt, wc);
				}
				int acc = rl_cons_accepting(c, st), eos_in = 0;
				for (size_t e = 0; e < ne && e < 16; e++)
					eos_in |= (mask[eog[e] >> 5] >> (eog[e] & 31)) & 1;
				eos_bad += eos_in != acc;
				size_t na = 0;
				for (uint32_t id = 0; id < nv; id++)
					if (mask[id >> 5] >> (id & 31) & 1)
						ids[na++] = id;
				if (!na)
					break;
				uint32_t pick;
				if (acc && (rand() % 3 == 0 || step > 60))
					pick = eog[0];
				else if (step > 40) {                  /* head for the end: the nearest allowed token */
					uint32_t best = UINT32_MAX;
					pick = ids[0];
					for (size_t k = 0; k < na; k++) {
						long ns = rl_cons_advance(c, st, ids[k]);
						uint32_t dd = ns < 0 ? UINT32_MAX : rl_cons_vocab_is_eog(v, ids[k]) ? 0 : rl_cons_dist(c, (uint32_t)ns);
						if (dd < best || (dd == best && rand() % 4 == 0)) {
							best = dd;
							pick = ids[k];
						}
					}
				} else
					pick = ids[rand() % na];
				long ns = rl_cons_advance(c, st, pick);
				CHECK(ns >= 0);
				if (ns < 0)
					break;
				total_tokens++;
				if (rl_cons_vocab_is_eog(v, pick)) {
					ended = 1;
					break;
				}
				uint32_t l;
				const char *b = rl_cons_vocab_bytes(v, pick, &l);
				if (on + l < sizeof out) {
					memcpy(out + on, b, l);
					on += l;
				}
				st = (uint32_t)ns;
			}
			walks++;
			json_error_t je;
			json_t *x = ended && schema ? json_loadb(out, on, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je) : NULL;
			int ok = schema ? x && validate(schema, x) : ended && gbnf_json_ok(out, on) == 1;
			if (!ok && walk_bad++ < 5)
				fprintf(stderr, "  %s schema %zu walk %d%s: %.*s\n", models[m], si, w, ended ? "" : " did not end",
					(int)on, out);
			if (w < 1)
				printf("    %s schema %zu: %.*s\n", models[m], si, (int)(on < 200 ? on : 200), out);
			json_decref(x);
		}
		uint64_t hits, misses;
		rl_cons_cache_stats(c, &hits, &misses, NULL);
		CHECK(hits > 0);
		plain_masks[si < 8 ? si : 7] = rl_cons_plain_masks(c);
		json_decref(schema);
		rl_cons_destroy(c);
		g_root = NULL;
	}
	printf("  %s: %u tokens (%zu control), %zu walks (%zu tokens), %zu states checked by brute force; "
	       "%zu masks wrong, %zu walks invalid, %zu EOS wrong\n", models[m], nv, ncontrol, walks, total_tokens,
	       states_checked, mask_bad, walk_bad, eos_bad);
	CHECK(mask_bad == 0 && walk_bad == 0 && eos_bad == 0);
	/* the unbounded strings (schema 0's "desc", json.gbnf's) took the plain-token shortcut, and
	 * the brute force above checked those masks too */
	printf("  %s: masks by the plain-token shortcut: schema 0 %llu, json.gbnf %llu\n", models[m],
	       (unsigned long long)plain_masks[0], (unsigned long long)plain_masks[nschema + 1]);
	CHECK(plain_masks[0] > 0 && plain_masks[nschema + 1] > 0);
	free(gbnf);
	free(mask);
	free(want);
	free(ids);
	rl_cons_vocab_destroy(v);
	rl_tok_destroy(t);
}

static void mask_walks_smollm2(void)
{
	const char *p = rl_t_real_model(models[0]);
	if (!p)
		SKIP("SmolLM2 " RL_T_REAL_WHY);
	walks_on(0, p, getenv("RL_SLOW") ? 4 : 25);
}

static void mask_walks_gemma3(void)
{
	const char *p = rl_t_real_model(models[1]);
	if (!p)
		SKIP("Gemma 3 " RL_T_REAL_WHY);
	walks_on(1, p, getenv("RL_SLOW") ? 2 : 6);
}

/* SentencePiece: U+2581 is a space in the mask's bytes, byte pieces are their byte; a regex
 * over spaces and a multi-byte character works through them */
static void vocab_bytes_gemma3(void)
{
	const char *p = rl_t_real_model(models[1]);
	if (!p)
		SKIP("Gemma 3 " RL_T_REAL_WHY);
	struct rl_tok *t = load_tok(p);
	REQUIRE(t);
	struct rl_cons_vocab *v;
	REQUIRE(rl_cons_vocab_from_tok(t, &v) == 0);
	size_t with_2581 = 0, bytes1 = 0;
	for (uint32_t id = 0; id < rl_cons_vocab_size(v); id++) {
		uint32_t l;
		const char *b = rl_cons_vocab_bytes(v, id, &l);
		if (b && l >= 3 && memmem(b, l, "\xe2\x96\x81", 3))
			with_2581++;
		if (rl_tok_type(t, (int32_t)id) == RL_TT_BYTE && b && l == 1)
			bytes1++;
	}
	CHECKF(with_2581 == 0, "%zu tokens still spell U+2581", with_2581);
	CHECKF(bytes1 == 256, "%zu byte tokens of one byte", bytes1);
	struct rl_cons *c;
	char err[200];
	const char *re = " ?(日本| hello)+";
	REQUIRE(rl_cons_compile_regex(v, re, strlen(re), NULL, &c, err, sizeof err) == 0);
	int32_t ids[16];
	long n = rl_tok_encode_ex(t, " hello日本 hello", strlen(" hello日本 hello"), 0, ids, 16);
	REQUIRE(n > 0 && n < 16);
	uint32_t st = rl_cons_start(c);
	for (long i = 0; i < n; i++) {
		long ns = rl_cons_advance(c, st, (uint32_t)ids[i]);
		CHECKF(ns > 0, "token %ld (%d) refused", i, ids[i]);
		if (ns <= 0)
			break;
		st = (uint32_t)ns;
	}
	CHECK(rl_cons_accepting(c, st));
	rl_cons_destroy(c);
	rl_cons_vocab_destroy(v);
	rl_tok_destroy(t);
}

/* the cache: a bound of a few masks evicts, and what it returns is still the mask */
static void mask_cache_lru(void)
{
	const char *toks[] = { "a", "b", "ab", "ba", "c", "", "abc", "<eos>", "<ctl>" };
	uint32_t len[9];
	for (int i = 0; i < 9; i++)
		len[i] = (uint32_t)strlen(toks[i]);
	uint8_t special[9] = { 0, 0, 0, 0, 0, 0, 0, 0, 1 };
	uint32_t eog = 7;
	struct rl_cons_vocab *v;
	REQUIRE(rl_cons_vocab_create(9, toks, len, special, &eog, 1, &v) == 0);
	struct rl_cons_opts o = { .cache_bytes = 2 * 4 };     /* room for two one-word masks */
	struct rl_cons *c;
	char err[100];
	REQUIRE(rl_cons_compile_regex(v, "(ab)*c?", 7, &o, &c, err, sizeof err) == 0);
	uint32_t m[1], w[1];
	uint32_t s0 = rl_cons_start(c), s1 = (uint32_t)rl_cons_advance(c, s0, 0), s2 = (uint32_t)rl_cons_advance(c, s0, 4);
	uint32_t seq[] = { s0, s1, s2, s0, s1, s2, s2, s0 };
	for (size_t i = 0; i < 8; i++) {
		long k = rl_cons_mask(c, seq[i], m);
		long kw = rl_cons_mask_nocache(c, seq[i], w);
		CHECK(k == kw && m[0] == w[0]);
	}
	/* start: "a", "ab", "abc", "c", EOS (empty matches); never "", "<ctl>" */
	rl_cons_mask(c, s0, m);
	CHECKF(m[0] == (1u << 0 | 1u << 2 | 1u << 4 | 1u << 6 | 1u << 7), "mask %#x", m[0]);
	rl_cons_mask(c, s1, m);                   /* after "a": "b" only, no EOS */
	CHECKF(m[0] == (1u << 1 | 1u << 3), "mask %#x", m[0]);
	CHECK(rl_cons_advance(c, s1, 7) == -EINVAL && rl_cons_advance(c, s0, 8) == -EINVAL);
	CHECK(!rl_cons_can_continue(c, s2) && rl_cons_accepting(c, s2));
	uint64_t hits, misses;
	size_t bytes;
	rl_cons_cache_stats(c, &hits, &misses, &bytes);
	CHECKF(misses == 7 + 1 && hits == 1 + 1 && bytes == 8, "hits %llu misses %llu bytes %zu", (unsigned long long)hits,
	       (unsigned long long)misses, bytes);
	rl_cons_destroy(c);
	rl_cons_vocab_destroy(v);
}

int main(void)
{
	RUN(regex_vs_python);
	RUN(regex_refused_by_name);
	RUN(schema_vs_jsonschema);
	RUN(number_bounds);
	RUN(more_of_what_users_write);
	RUN(keywords_of_other_types_bind_nothing);
	RUN(integer_bounds);
	RUN(schema_refused_by_name);
	RUN(schema_merges);
	RUN(schema_too_large_becomes_a_grammar);
	RUN(mask_cache_lru);
	RUN(grammar_vs_oracles);
	RUN(gbnf_corpus_and_refusals);
	RUN(vocab_bytes_gemma3);
	RUN(mask_walks_smollm2);
	RUN(mask_walks_gemma3);
	TEST_MAIN_END();
}
