/* test_bpe.c — byte-level BPE (tokenizer/rl_bpe.c) against Hugging Face `tokenizers`, an
 * independent implementation: a vocabulary trained with Llama 3's pre-tokenizer, read both
 * from its tokenizer.json and from a vocab-only GGUF carrying the same vocabulary with the
 * keys llama.cpp's converter writes (made here from the JSON: no model file in git),
 * must give tokenizers' ids on 2000 strings (many scripts, emoji with modifiers, digit runs,
 * whitespace and newline runs, contractions in both cases, control tokens parsed and as
 * text), and decode back to the same bytes. Fixtures: tests/fixtures/bpe (gen_bpe_fixture.py).
 * Tests: tokenizer (rl_bpe, rl_tok), runtime/model (GGUF vocabulary, tokenizer.json).
 */
#include <errno.h>
#include <jansson.h>
#include "tests/rl_test.h"
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_pretok.h"
#include "tokenizer/rl_tok.h"
#include "runtime/model/rl_model_io.h"

#define DIR "tests/fixtures/bpe/"

static int run_cases(struct rl_tok *t, const char *what)
{
	json_error_t je;
	json_t *cases = json_load_file(DIR "cases.json", 0, &je);
	if (!cases)
		return -1;
	size_t i, bad = 0, bad_plain = 0, bad_dec = 0, n = json_array_size(cases);
	json_t *c;
	int32_t ids[4096];
	json_array_foreach(cases, i, c) {
		const char *text = json_string_value(json_object_get(c, "text"));
		size_t len = strlen(text);
		for (int plain = 0; plain < 2; plain++) {
			json_t *want = json_object_get(c, plain ? "ids_plain" : "ids");
			long k = rl_tok_encode_ex(t, text, len, plain ? 0 : RL_TOK_SPECIAL, ids, 4096);
			int same = k == (long)json_array_size(want);
			for (long x = 0; same && x < k; x++)
				same = ids[x] == json_integer_value(json_array_get(want, (size_t)x));
			if (!same && (plain ? bad_plain : bad) < 3) {
				fprintf(stderr, "  %s%s: \"%s\": ringlm %ld ids [", what, plain ? " (control tokens as text)" : "", text, k);
				for (long x = 0; x < k && x < 24; x++)
					fprintf(stderr, " %d", ids[x]);
				fprintf(stderr, " ], tokenizers %zu [", json_array_size(want));
				for (size_t x = 0; x < json_array_size(want) && x < 24; x++)
					fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, x)));
				fprintf(stderr, " ]\n");
			}
			*(plain ? &bad_plain : &bad) += !same;
			if (plain && k > 0 && k <= 4096) {        /* decoding gives the bytes back */
				char out[8192];
				size_t o = 0;
				for (long x = 0; x < k; x++) {
					size_t pl;
					const char *p = rl_tok_decode(t, -1, ids[x], &pl);
					if (p && o + pl < sizeof out) {
						memcpy(out + o, p, pl);
						o += pl;
					}
				}
				bad_dec += o != len || memcmp(out, text, len);
			}
		}
	}
	printf("  %s: %zu strings; %zu/%zu differ from tokenizers (control tokens parsed), %zu/%zu (as text); %zu decode differently\n",
	       what, n, bad, n, bad_plain, n, bad_dec);
	json_decref(cases);
	return (int)(bad + bad_plain + bad_dec);
}

/* ---- a vocab-only GGUF v3, written by the GGUF spec from the tokenizer.json ---- */
static void w32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void w64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void wstr(FILE *f, const char *s) { w64(f, strlen(s)); fwrite(s, 1, strlen(s), f); }
static void wkey(FILE *f, const char *k, uint32_t type) { wstr(f, k); w32(f, type); }
enum { G_U32 = 4, G_I32 = 5, G_BOOL = 7, G_STR = 8, G_ARR = 9 };

/* pre: tokenizer.ggml.pre; add_bos: tokenizer.ggml.add_bos_token, -1 for none */
static int write_vocab_gguf(const char *json, const char *path, const char *pre, int add_bos)
{
	json_error_t je;
	json_t *j = json_load_file(json, 0, &je);
	if (!j)
		return -1;
	json_t *model = json_object_get(j, "model"), *vocab = json_object_get(model, "vocab");
	json_t *merges = json_object_get(model, "merges"), *added = json_object_get(j, "added_tokens");
	size_t n = json_object_size(vocab) + json_array_size(added), i;
	const char **tok = calloc(n, sizeof *tok);
	int32_t *type = calloc(n, sizeof *type);
	const char *k;
	json_t *v;
	json_object_foreach(vocab, k, v) {
		tok[json_integer_value(v)] = k;
		type[json_integer_value(v)] = 1;                               /* normal */
	}
	uint32_t bos = 0, eos = 0;
	json_array_foreach(added, i, v) {
		json_int_t id = json_integer_value(json_object_get(v, "id"));
		tok[id] = json_string_value(json_object_get(v, "content"));
		type[id] = json_is_true(json_object_get(v, "special")) ? 3 : 4; /* control, user-defined */
		bos = !strcmp(tok[id], "<|begin_of_text|>") ? (uint32_t)id : bos;
		eos = !strcmp(tok[id], "<|eot_id|>") ? (uint32_t)id : eos;
	}
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	fwrite("GGUF", 1, 4, f);
	w32(f, 3);
	w64(f, 0);             /* tensors */
	w64(f, 8 + (add_bos >= 0));    /* key-value pairs */
	wkey(f, "general.architecture", G_STR); wstr(f, "llama");
	wkey(f, "tokenizer.ggml.model", G_STR); wstr(f, "gpt2");
	wkey(f, "tokenizer.ggml.pre", G_STR); wstr(f, pre);
	wkey(f, "tokenizer.ggml.tokens", G_ARR); w32(f, G_STR); w64(f, n);
	for (i = 0; i < n; i++)
		wstr(f, tok[i] ? tok[i] : "");
	wkey(f, "tokenizer.ggml.token_type", G_ARR); w32(f, G_I32); w64(f, n);
	for (i = 0; i < n; i++)
		w32(f, (uint32_t)type[i]);
	wkey(f, "tokenizer.ggml.merges", G_ARR); w32(f, G_STR); w64(f, json_array_size(merges));
	json_array_foreach(merges, i, v) {
		if (json_is_string(v)) {
			wstr(f, json_string_value(v));
		} else {       /* ["left", "right"] */
			char m[1024];
			snprintf(m, sizeof m, "%s %s", json_string_value(json_array_get(v, 0)),
				 json_string_value(json_array_get(v, 1)));
			wstr(f, m);
		}
	}
	wkey(f, "tokenizer.ggml.bos_token_id", G_U32); w32(f, bos);
	wkey(f, "tokenizer.ggml.eos_token_id", G_U32); w32(f, eos);
	if (add_bos >= 0) {
		wkey(f, "tokenizer.ggml.add_bos_token", G_BOOL);
		fputc(add_bos, f);
	}
	int bad = ferror(f);
	fclose(f);
	free(tok);
	free(type);
	json_decref(j);
	return bad ? -1 : 0;
}

static void bpe_gguf_matches_tokenizers(void)
{
	void *blob;
	uint32_t size;
	char err[512], path[64];
	if (access(DIR "tokenizer.json", R_OK))
		SKIP("tests/fixtures/bpe not found (run from the repository root)");
	snprintf(path, sizeof path, "/tmp/rl-bpe-%d.gguf", (int)getpid());
	REQUIRE(write_vocab_gguf(DIR "tokenizer.json", path, "llama-bpe", -1) == 0);
	int rc = rl_gguf_read_vocab(path, &blob, &size, err, sizeof err);
	unlink(path);
	CHECKF(rc == 0, "%s", err);
	if (rc)
		return;

	struct rl_tok *t;
	REQUIRE(rl_tok_create(blob, size, &t, err, sizeof err) == 0);
	free(blob);
	CHECK(run_cases(t, "GGUF") == 0);
	rl_tok_destroy(t);
}

static void bpe_tokenizer_json_matches_tokenizers(void)
{
	void *blob;
	uint32_t size;
	char err[512];
	if (access(DIR "tokenizer.json", R_OK))
		SKIP("tests/fixtures/bpe not found (run from the repository root)");
	int rc = rl_hf_tokenizer_blob(DIR "tokenizer.json", 0, UINT32_MAX, UINT32_MAX, &blob, &size, err, sizeof err);
	CHECKF(rc == 0, "%s", err);
	if (rc)
		return;
	struct rl_tok *t;
	REQUIRE(rl_tok_create(blob, size, &t, err, sizeof err) == 0);
	free(blob);
	CHECK(run_cases(t, "tokenizer.json") == 0);
	rl_tok_destroy(t);
}

/* A tokenizer.json pre-tokenizer of several steps, SmolLM2's (Digits with individual digits,
 * then ByteLevel with its regex), runs its steps in order as Hugging Face `tokenizers` does
 * (digits_cases.json, from gen_digits_cases.py); a step ringlm does not run is refused by name. */
static void bpe_tokenizer_json_steps_in_order(void)
{
	json_error_t je;
	json_t *j = json_load_file(DIR "tokenizer.json", 0, &je), *fx = json_load_file(DIR "digits_cases.json", 0, &je);
	json_t *strings = json_load_file("tests/fixtures/llamacpp/strings.json", 0, &je);
	REQUIRE(j && fx && strings);
	json_object_set(j, "pre_tokenizer", json_object_get(fx, "pre_tokenizer"));
	char path[64], err[512];
	snprintf(path, sizeof path, "/tmp/rl-bpe-seq-%d.json", (int)getpid());
	REQUIRE(json_dump_file(j, path, 0) == 0);
	void *blob;
	uint32_t size;
	int rc = rl_hf_tokenizer_blob(path, 0, UINT32_MAX, UINT32_MAX, &blob, &size, err, sizeof err);
	CHECKF(rc == 0, "%s", err);
	struct rl_tok *t = NULL;
	if (!rc) {
		REQUIRE(rl_tok_create(blob, size, &t, err, sizeof err) == 0);
		free(blob);
		size_t i, bad = 0;
		json_t *s;
		static int32_t got[8192];
		json_array_foreach(strings, i, s) {
			json_t *w = json_array_get(json_object_get(fx, "ids"), i);
			long n = rl_tok_encode_ex(t, json_string_value(s), json_string_length(s), 0, got, 8192);
			int same = n == (long)json_array_size(w);
			for (long k = 0; same && k < n; k++)
				same = got[k] == json_integer_value(json_array_get(w, k));
			if (!same && !bad++)
				fprintf(stderr, "  string %zu \"%s\" differs from tokenizers\n", i, json_string_value(s));
		}
		CHECKF(!bad, "%zu of %zu strings differ from tokenizers", bad, json_array_size(strings));
		rl_tok_destroy(t);
	}
	/* a Whitespace step (or any other ringlm does not run) is named */
	json_t *ws = json_pack("{s:s, s:[{s:s}]}", "type", "Sequence", "pretokenizers", "type", "WhitespaceSplit");
	json_object_set_new(j, "pre_tokenizer", ws);
	REQUIRE(json_dump_file(j, path, 0) == 0);
	rc = rl_hf_tokenizer_blob(path, 0, UINT32_MAX, UINT32_MAX, &blob, &size, err, sizeof err);
	CHECKF(rc == -ENOTSUP && strstr(err, "WhitespaceSplit"), "rc %d: %s", rc, err);
	unlink(path);
	json_decref(j);
	json_decref(fx);
	json_decref(strings);
}

/* RL_TOK_BOS adds BOS only where the vocabulary says so, as llama.cpp's add_special:
 * GGUF's tokenizer.ggml.add_bos_token (absent: yes, but no for Qwen2's pre-tokenizer),
 * tokenizer.json's post-processor (Llama 3's TemplateProcessing: yes; none: no). */
static int first_id(const void *blob, uint32_t size, int32_t *first, long *n)
{
	struct rl_tok *t;
	char err[256];
	int32_t ids[64];
	if (rl_tok_create(blob, size, &t, err, sizeof err))
		return -1;
	*n = rl_tok_encode_ex(t, "hello world", 11, RL_TOK_BOS, ids, 64);
	*first = ids[0];
	rl_tok_destroy(t);
	return 0;
}

static int collect(void *ctx, const uint8_t *w, size_t n)
{
	char *o = ctx;
	size_t l = strlen(o);
	if (l + n + 2 > 4096)
		return -ENOSPC;
	memcpy(o + l, w, n);
	o[l + n] = '|';
	o[l + n + 1] = 0;
	return 0;
}

/* GPT-4o's pre-tokenizer (Phi-4-mini's GGUF names it "gpt-4o"), run as llama.cpp runs it,
 * splits as the Python `regex` module splits with the pattern of its tokenizer.json
 * (expected pieces below, from regex 2026.5.9): case runs, contractions, digit triples,
 * newline runs; except where llama.cpp's collapsed categories differ: a non-ASCII capital
 * counts as neither upper nor lower case there, so "ÉCOLE" is "É" and "COLE" in llama.cpp
 * (tests/fixtures/llamacpp/pretok.json holds llama.cpp's own ids) */
static void bpe_gpt4o_pattern_splits(void)
{
	static const struct { const char *text, *pieces; } c[] = {
		{ "HelloWorld's 12345 abc", "Hello|World's| |123|45| abc|" },
		{ "I'M here\n\n  x/y", "I'M| here|\n\n| | x|/y|" },
		{ "\xc3\x89" "COLE \xc3\xa9t\xc3\xa9 2024!!", "\xc3\x89|COLE| \xc3\xa9t\xc3\xa9| |202|4|!!|" },
		{ "camelCaseXMLParser don't", "camel|Case|XMLParser| don't|" },
		{ "  \t tabs\r\nend", "  \t| tabs|\r\n|end|" },
	};
	const struct rl_pretok_def *d = rl_pretok_find("gpt-4o");
	REQUIRE(d && rl_pretok_find("llama4") == d && rl_pretok_find("dbrx")->exprs[0] == rl_pretok_find("llama-bpe")->exprs[0]);
	CHECK(!rl_pretok_find("gpt2") && !rl_pretok_find("gpt") && !rl_pretok_find(""));
	char spec[4096], err[256], got[4096];
	size_t sl = rl_pretok_spec(d->exprs, 1, spec, sizeof spec);
	REQUIRE(sl <= sizeof spec);
	struct rl_pretok *p;
	REQUIRE(rl_pretok_create(spec, sl, &p, err, sizeof err) == 0);
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		got[0] = 0;
		REQUIRE(rl_pretok_split(p, c[i].text, strlen(c[i].text), collect, got) == 0);
		CHECKF(!strcmp(got, c[i].pieces), "\"%s\": pieces \"%s\"", c[i].text, got);
	}
	rl_pretok_destroy(p);
}

/* ids "1 2 3" into out; returns how many */
static long parse_ids(const char *s, int32_t *out, long cap)
{
	long n = 0;
	for (char *e; s && *s; s = e) {
		long v = strtol(s, &e, 10);
		if (e == s)
			break;
		if (n < cap)
			out[n] = (int32_t)v;
		n++;
	}
	return n;
}

/* Every tokenizer.ggml.pre name llama.cpp 0c1e570 reads is in rl_pretok.c's table (and no
 * other), and each, on a vocabulary no real file of it has (the fixture's), gives llama.cpp's
 * own ids on every string of tests/fixtures/llamacpp/strings.json (with specials added; the
 * files say no BOS). Where llama.cpp aborts on a string, the string is left out. */
static void bpe_every_pretokenizer_matches_llamacpp(void)
{
	json_error_t je;
	json_t *fx = json_load_file("tests/fixtures/llamacpp/pretok.json", 0, &je);
	json_t *strings = json_load_file("tests/fixtures/llamacpp/strings.json", 0, &je);
	REQUIRE(fx && strings && access(DIR "tokenizer.json", R_OK) == 0);
	json_t *names = json_object_get(fx, "pre_type");
	const char *k;
	json_t *v;
	size_t n_names = 0;
	json_object_foreach(names, k, v) {
		CHECKF(rl_pretok_find(k), "llama.cpp reads tokenizer.ggml.pre \"%s\"; rl_pretok.c has no row for it", k);
		n_names++;
	}
	size_t ours = 0;
	for (size_t i = 0; rl_pretok_def_at(i); i++)
		for (const char *s = rl_pretok_def_at(i)->names; s; s = strchr(s, ',') ? strchr(s, ',') + 1 : NULL) {
			char nm[64];
			snprintf(nm, sizeof nm, "%.*s", (int)(strchr(s, ',') ? strchr(s, ',') - s : (long)strlen(s)), s);
			CHECKF(json_object_get(names, nm), "rl_pretok.c has \"%s\", which llama.cpp does not read", nm);
			ours++;
		}
	CHECKF(ours == n_names, "%zu names in rl_pretok.c, %zu in llama.cpp", ours, n_names);
	/* name -> its list of expected ids (one string of ids per test string, null: llama.cpp aborts) */
	json_t *expect = json_object();
	size_t i;
	json_array_foreach(json_object_get(fx, "outputs"), i, v) {
		size_t j;
		json_t *nm;
		json_array_foreach(json_object_get(v, "names"), j, nm)
			json_object_set(expect, json_string_value(nm), json_object_get(v, "ids"));
	}
	json_object_foreach(json_object_get(fx, "partial"), k, v)
		json_object_set(expect, k, v);
	char path[64], err[512];
	snprintf(path, sizeof path, "/tmp/rl-bpe-pre-%d.gguf", (int)getpid());
	size_t names_bad = 0, checked = 0;
	json_object_foreach(expect, k, v) {
		REQUIRE(write_vocab_gguf(DIR "tokenizer.json", path, k, 0) == 0);
		void *blob;
		uint32_t size;
		struct rl_tok *t;
		int rc = rl_gguf_read_vocab(path, &blob, &size, err, sizeof err);
		CHECKF(rc == 0, "pre %s: %s", k, err);
		if (rc)
			continue;
		rc = rl_tok_create(blob, size, &t, err, sizeof err);
		free(blob);
		CHECKF(rc == 0, "pre %s: %s", k, err);
		if (rc)
			continue;
		static int32_t want[8192], got[8192];
		size_t bad = 0, j;
		json_t *s;
		json_array_foreach(strings, j, s) {
			json_t *e = json_array_get(v, j);
			if (json_is_null(e))
				continue;
			long nw = parse_ids(json_string_value(e), want, 8192);
			long ng = rl_tok_encode_ex(t, json_string_value(s), json_string_length(s), RL_TOK_BOS, got, 8192);
			checked++;
			if (ng == nw && !memcmp(got, want, nw * sizeof *got))
				continue;
			if (!bad++) {
				fprintf(stderr, "  pre %s, string %zu \"%s\":\n   llama.cpp %s\n   ringlm   ", k, j,
					json_string_value(s), json_string_value(e));
				for (long x = 0; x < ng && x < 40; x++)
					fprintf(stderr, " %d", got[x]);
				fprintf(stderr, "\n");
			}
		}
		names_bad += bad > 0;
		CHECKF(!bad, "pre %s: %zu of %zu strings tokenize differently from llama.cpp", k, bad,
		       json_array_size(strings));
		rl_tok_destroy(t);
	}
	unlink(path);
	printf("  %zu pre-tokenizer names, %zu strings checked: %zu names differ from llama.cpp\n",
	       json_object_size(expect), checked, names_bad);
	json_decref(expect);
	json_decref(fx);
	json_decref(strings);
}

static void bpe_bos_follows_the_vocabulary(void)
{
	if (access(DIR "tokenizer.json", R_OK))
		SKIP("tests/fixtures/bpe not found (run from the repository root)");
	static const struct { const char *pre; int add_bos, want; } g[] = {
		{ "llama-bpe", -1, 1 }, { "llama-bpe", 1, 1 }, { "llama-bpe", 0, 0 }, { "qwen2", -1, 0 },
		{ "qwen2", 1, 1 },
	};
	char err[512], path[64];
	void *blob;
	uint32_t size, bos = UINT32_MAX;
	long n, n_plain = -1;
	int32_t first;
	snprintf(path, sizeof path, "/tmp/rl-bpe-bos-%d.gguf", (int)getpid());
	for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
		REQUIRE(write_vocab_gguf(DIR "tokenizer.json", path, g[i].pre, g[i].add_bos) == 0);
		int rc = rl_gguf_read_vocab(path, &blob, &size, err, sizeof err);
		REQUIRE(rc == 0 || (fprintf(stderr, "%s\n", err), 0));
		struct rl_bpe *b;
		REQUIRE(rl_bpe_create(blob, size, &b, err, sizeof err) == 0);
		bos = rl_bpe_bos(b);
		rl_bpe_destroy(b);
		REQUIRE(first_id(blob, size, &first, &n) == 0);
		free(blob);
		if (!g[i].want && n_plain < 0)
			n_plain = n;
		CHECKF((first == (int32_t)bos) == g[i].want, "pre %s add_bos_token %d: first id %d, BOS %u",
		       g[i].pre, g[i].add_bos, first, bos);
	}
	unlink(path);
	CHECK(n_plain > 0);
	/* tokenizer.json: the fixture has no post-processor, so no BOS; Llama 3's template adds it */
	REQUIRE(rl_hf_tokenizer_blob(DIR "tokenizer.json", 0, bos, UINT32_MAX, &blob, &size, err, sizeof err) == 0);
	REQUIRE(first_id(blob, size, &first, &n) == 0);
	free(blob);
	CHECK(first != (int32_t)bos && n == n_plain);
	json_error_t je;
	json_t *j = json_load_file(DIR "tokenizer.json", 0, &je);
	REQUIRE(j);
	json_t *pp = json_pack("{s:s, s:[{s:s}, {s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}]}]}",
		"type", "Sequence", "processors", "type", "ByteLevel", "type", "TemplateProcessing", "single",
		"SpecialToken", "id", "<|begin_of_text|>", "type_id", 0, "Sequence", "id", "A", "type_id", 0);
	REQUIRE(pp);
	json_object_set_new(j, "post_processor", pp);
	snprintf(path, sizeof path, "/tmp/rl-bpe-bos-%d.json", (int)getpid());
	REQUIRE(json_dump_file(j, path, 0) == 0);
	json_decref(j);
	int rc = rl_hf_tokenizer_blob(path, 0, bos, UINT32_MAX, &blob, &size, err, sizeof err);
	unlink(path);
	REQUIRE(rc == 0);
	REQUIRE(first_id(blob, size, &first, &n) == 0);
	free(blob);
	CHECK(first == (int32_t)bos && n == n_plain + 1);
}

/* Malformed blobs are refused with a reason, never crash. */
static void bpe_bad_blobs_refused(void)
{
	void *blob;
	uint32_t size;
	char err[512];
	const char *tok[2] = { "a", "b" }, *mer[1] = { "a b" };
	uint32_t tl[2] = { 1, 1 }, ml[1] = { 3 };
	const char *broken[] = { "[", NULL }, *gpt2[] = { RL_PRETOK_HF_GPT2, NULL };
	char spec[512];
	size_t sl = rl_pretok_spec(broken, 0, spec, sizeof spec);
	REQUIRE(rl_bpe_blob(2, tok, tl, NULL, 1, mer, ml, spec, (uint32_t)sl, 0, 1, 0, &blob, &size) == 0);
	struct rl_tok *t;
	CHECK(rl_tok_create(blob, size, &t, err, sizeof err) == -EINVAL && strstr(err, "pre-tokenizer"));
	free(blob);
	REQUIRE(rl_bpe_blob(2, tok, tl, NULL, 1, mer, ml, "Ux", 2, 0, 1, 0, &blob, &size) == 0);
	CHECK(rl_tok_create(blob, size, &t, err, sizeof err) == -EINVAL && strstr(err, "pre-tokenizer"));
	free(blob);
	sl = rl_pretok_spec(gpt2, 0, spec, sizeof spec);
	REQUIRE(rl_bpe_blob(2, tok, tl, NULL, 1, mer, ml, spec, (uint32_t)sl, 0, 1, 0, &blob, &size) == 0);
	for (uint32_t cut = 0; cut < size; cut++)
		if (rl_tok_create(blob, cut, &t, err, sizeof err) == 0) {
			rl_tok_destroy(t);
			CHECKF(0, "a blob cut at %u of %u was accepted", cut, size);
		}
	free(blob);
}

int main(void)
{
	RUN(bpe_gguf_matches_tokenizers);
	RUN(bpe_bos_follows_the_vocabulary);
	RUN(bpe_gpt4o_pattern_splits);
	RUN(bpe_every_pretokenizer_matches_llamacpp);
	RUN(bpe_tokenizer_json_matches_tokenizers);
	RUN(bpe_tokenizer_json_steps_in_order);
	RUN(bpe_bad_blobs_refused);
	TEST_MAIN_END();
}
