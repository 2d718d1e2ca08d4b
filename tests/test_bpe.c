/* test_bpe.c — byte-level BPE (clients/rl_bpe.c) against Hugging Face `tokenizers`, an
 * independent implementation: a vocabulary trained with Llama 3's pre-tokenizer, read both
 * from a vocab-only GGUF (as llama.cpp's converter writes it) and from its tokenizer.json,
 * must give tokenizers' ids on 2000 strings (many scripts, emoji with modifiers, digit runs,
 * whitespace and newline runs, contractions in both cases, control tokens parsed and as
 * text), and decode back to the same bytes. Fixtures: tests/fixtures/bpe (gen_bpe_fixture.py).
 * Tests: clients (rl_bpe, rl_tok), runtime/model (GGUF vocabulary, tokenizer.json).
 */
#include <jansson.h>
#include "tests/rl_test.h"
#include "clients/rl_bpe.h"
#include "clients/rl_tok.h"
#include "runtime/model/model_internal.h"
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

static void bpe_gguf_matches_tokenizers(void)
{
	void *blob;
	uint32_t size;
	char err[512];
	int rc = rl_gguf_read_vocab(DIR "vocab.gguf", &blob, &size, err, sizeof err);
	if (rc == -ENOENT && access(DIR "vocab.gguf", R_OK))
		SKIP("tests/fixtures/bpe not found (run from the repository root)");
	REQUIRE(rc == 0);
	struct rl_tok *t;
	REQUIRE(rl_tok_create(blob, size, &t, err, sizeof err) == 0);
	free(blob);
	CHECK(run_cases(t, "vocab.gguf") == 0);
	rl_tok_destroy(t);
}

static void bpe_tokenizer_json_matches_tokenizers(void)
{
	void *blob;
	uint32_t size;
	char err[512];
	if (access(DIR "tokenizer.json", R_OK))
		SKIP("tests/fixtures/bpe not found (run from the repository root)");
	int rc = rl_hf_tokenizer_blob(DIR "tokenizer.json", 1201, UINT32_MAX, UINT32_MAX, &blob, &size, err, sizeof err);
	CHECKF(rc == 0, "%s", err);
	if (rc)
		return;
	struct rl_tok *t;
	REQUIRE(rl_tok_create(blob, size, &t, err, sizeof err) == 0);
	free(blob);
	CHECK(run_cases(t, "tokenizer.json") == 0);
	rl_tok_destroy(t);
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
	RUN(bpe_tokenizer_json_matches_tokenizers);
	RUN(bpe_bad_blobs_refused);
	TEST_MAIN_END();
}
