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
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include "tests/rl_test.h"
#include "tokenizer/rl_bpe.h"
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

/* GPT-4o's pre-tokenizer pattern (Phi-4-mini's GGUF names it "gpt-4o") splits as the Python
 * `regex` module splits with the pattern of its tokenizer.json (expected pieces below, from
 * regex 2026.5.9): case runs, contractions, digit triples, newline runs */
static void bpe_gpt4o_pattern_splits(void)
{
	static const struct { const char *text, *pieces[8]; } c[] = {
		{ "HelloWorld's 12345 abc", { "Hello", "World's", " ", "123", "45", " abc" } },
		{ "I'M here\n\n  x/y", { "I'M", " here", "\n\n", " ", " x", "/y" } },
		{ "\xc3\x89" "COLE \xc3\xa9t\xc3\xa9 2024!!", { "\xc3\x89" "COLE", " \xc3\xa9t\xc3\xa9", " ", "202", "4", "!!" } },
		{ "camelCaseXMLParser don't", { "camel", "Case", "XMLParser", " don't" } },
		{ "  \t tabs\r\nend", { "  \t", " tabs", "\r\n", "end" } },
	};
	const char *pat = rl_bpe_pattern("gpt-4o");
	REQUIRE(pat && rl_bpe_pattern("llama4") == pat && rl_bpe_pattern("dbrx") == rl_bpe_pattern("llama-bpe"));
	int e;
	PCRE2_SIZE eo;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &e, &eo, NULL);
	REQUIRE(re);
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		const size_t len = strlen(c[i].text);
		size_t at = 0, k = 0;
		while (at < len && pcre2_match(re, (PCRE2_SPTR)c[i].text, len, at, 0, md, NULL) > 0) {
			const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
			const char *want = c[i].pieces[k++];
			CHECKF(want && ov[1] - ov[0] == strlen(want) && !memcmp(c[i].text + ov[0], want, strlen(want)),
			       "\"%s\": piece %zu is \"%.*s\"", c[i].text, k - 1, (int)(ov[1] - ov[0]), c[i].text + ov[0]);
			at = ov[1];
		}
		CHECKF(at == len && !c[i].pieces[k], "\"%s\": %zu pieces", c[i].text, k);
	}
	pcre2_match_data_free(md);
	pcre2_code_free(re);
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
	REQUIRE(rl_bpe_blob(2, tok, tl, NULL, 1, mer, ml, "[", 0, 1, 0, &blob, &size) == 0);
	struct rl_tok *t;
	CHECK(rl_tok_create(blob, size, &t, err, sizeof err) == -EINVAL && strstr(err, "pattern"));
	free(blob);
	REQUIRE(rl_bpe_blob(2, tok, tl, NULL, 1, mer, ml, rl_bpe_pattern("gpt2"), 0, 1, 0, &blob, &size) == 0);
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
	RUN(bpe_tokenizer_json_matches_tokenizers);
	RUN(bpe_bad_blobs_refused);
	TEST_MAIN_END();
}
