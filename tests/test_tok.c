/* test_tok.c — rl_tok against llama2.c's encode(): ids from the fixture that our independent
 * Python port (tests/ref/llama2c_encode.py) produced for tokenizer.bin and tok512.bin, decode
 * round trips, a synthetic vocabulary (always runs), and malformed blobs.
 * Tests: tokenizer (rl_tok).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include "tests/rl_test.h"
#include "tokenizer/rl_tok.h"

static int unhex(const char *h, char *out)
{
	int n = 0;
	for (; h[0] && h[1]; h += 2) {
		unsigned v;
		sscanf(h, "%2x", &v);
		out[n++] = (char)v;
	}
	return n;
}

static void test_fixture(void)
{
	FILE *f = fopen("tests/fixtures/tok_expected.txt", "r");
	REQUIRE(f);
	struct rl_tok *tk[2] = {0};
	const char *names[2] = { "tokenizer.bin", "tok512.bin" };
	char err[256];
	for (int i = 0; i < 2; i++) {
		const char *p = rl_t_model(names[i]);
		if (p)
			CHECKF(rl_tok_load(p, &tk[i], err, sizeof err) == 0, "%s", err);
	}
	if (!tk[0] && !tk[1]) {
		fclose(f);
		SKIP("tokenizer.bin and tok512.bin absent");
	}
	static char line[1 << 16], text[1 << 15];
	static int32_t ids[1 << 14];
	int cases = 0;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *tok = strtok(line, "\t"), *bos = strtok(NULL, "\t");
		char *hex = bos + strlen(bos) + 1;
		char *exp = strchr(hex, '\t');
		REQUIRE(tok && bos && exp);
		*exp++ = 0;
		struct rl_tok *t = tk[strcmp(tok, "tokenizer.bin") ? 1 : 0];
		if (!t)
			continue;
		int len = unhex(hex, text);
		long n = rl_tok_encode(t, text, len, atoi(bos), 0, ids, 1 << 14);
		char got[1 << 15];
		size_t o = 0;
		got[0] = 0;
		for (long k = 0; k < n && o < sizeof got - 16; k++)
			o += snprintf(got + o, sizeof got - o, k ? " %d" : "%d", ids[k]);
		CHECKF(!strcmp(got, exp), "%s bos=%s text=%s\n   got  %s\n   want %s", tok, bos, hex, got, exp);
		cases++;
	}
	fclose(f);
	CHECK(cases >= 50);
	rl_tok_destroy(tk[0]);
	rl_tok_destroy(tk[1]);
}

static void test_roundtrip(void)
{
	const char *p = rl_t_model("tokenizer.bin");
	if (!p)
		SKIP("tokenizer.bin absent");
	struct rl_tok *t;
	char err[256];
	REQUIRE(rl_tok_load(p, &t, err, sizeof err) == 0);
	CHECK(rl_tok_vocab_size(t) == 32000);
	const char *texts[] = { "Hello world", "naïve café 🦙 emoji\n", "  spaces  ", "x", "<0x41>",
				"日本語", "1+1=2; \"quotes\" (parens)" };
	for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
		int32_t ids[256];
		long n = rl_tok_encode(t, texts[i], strlen(texts[i]), 1, 1, ids, 256);
		REQUIRE(n >= 3 && n <= 256);
		CHECK(ids[0] == 1 && ids[n - 1] == 2);
		char out[512];
		size_t o = 0;
		for (long k = 1; k < n - 1; k++) {
			size_t len;
			const char *s = rl_tok_decode(t, ids[k - 1], ids[k], &len);
			REQUIRE(s && o + len < sizeof out);
			memcpy(out + o, s, len);
			o += len;
		}
		out[o] = 0;
		CHECKF(!strcmp(out, texts[i]), "'%s' -> '%s'", texts[i], out);
		/* too little room: the full count comes back, only cap ids are written */
		int32_t two[2] = { -7, -7 };
		CHECK(rl_tok_encode(t, texts[i], strlen(texts[i]), 1, 1, two, 1) == n && two[1] == -7);
	}
	size_t len;
	CHECK(rl_tok_decode(t, -1, 32000, &len) == NULL);
	CHECK(rl_tok_decode(t, -1, -1, &len) == NULL);
	rl_tok_destroy(t);
}

/* A llama2.c blob from a list of (piece, score). */
static size_t mkblob(uint8_t *b, const char **pieces, const float *scores, int n)
{
	int32_t maxlen = 1;
	for (int i = 0; i < n; i++)
		if ((int32_t)strlen(pieces[i]) > maxlen)
			maxlen = strlen(pieces[i]);
	size_t o = 0;
	memcpy(b, &maxlen, 4); o += 4;
	for (int i = 0; i < n; i++) {
		int32_t l = strlen(pieces[i]);
		memcpy(b + o, &scores[i], 4);
		memcpy(b + o + 4, &l, 4);
		memcpy(b + o + 8, pieces[i], l);
		o += 8 + l;
	}
	return o;
}

static void test_synthetic(void)
{
	static const char *pieces[300];
	static float scores[300];
	static char bytes[256][8];
	int n = 0;
	pieces[n++] = "<unk>"; pieces[n++] = "\n<s>\n"; pieces[n++] = "\n</s>\n";
	for (int b = 0; b < 256; b++) {
		snprintf(bytes[b], 8, "<0x%02X>", b);
		pieces[n++] = bytes[b];
	}
	int first = n;
	const char *extra[] = { " ", "a", "b", "c", "ab", "bc", " a", " ab", "abc" };
	const float sc[] = { -1, -2, -3, -4, -5, -5, -6, -7, -0.5f };
	for (int i = 0; i < 9; i++) {
		pieces[n] = extra[i];
		scores[n++] = sc[i];
	}
	static uint8_t blob[8192];
	size_t sz = mkblob(blob, pieces, scores, n);
	struct rl_tok *t;
	char err[256];
	REQUIRE(rl_tok_create(blob, sz, &t, err, sizeof err) == 0);
	int32_t ids[32];
	/* " abc": [" ","a","b","c"]; "ab"(-5) and "bc"(-5) tie with " a"(-6) lower: leftmost
	 * best is " a"? no: scores -5 beat -6, and "ab" is left of "bc" → [" ","ab","c"], then
	 * " ab"(-7) vs "abc"(-0.5): "abc" wins → [" ","abc"] */
	long k = rl_tok_encode(t, "abc", 3, 0, 0, ids, 32);
	CHECK(k == 2 && ids[0] == first && ids[1] == first + 8);
	/* 'z' is not in the vocabulary: byte fallback to <0x7A> = 3 + 0x7a */
	k = rl_tok_encode(t, "z", 1, 1, 1, ids, 32);
	CHECK(k == 4 && ids[0] == 1 && ids[1] == first && ids[2] == 3 + 'z' && ids[3] == 2);
	size_t len;
	const char *s = rl_tok_decode(t, 1, ids[2], &len);
	CHECK(s && len == 1 && *s == 'z');
	s = rl_tok_decode(t, 1, first + 6, &len);   /* " a" after BOS loses its space */
	CHECK(s && len == 1 && *s == 'a');
	s = rl_tok_decode(t, 5, first + 6, &len);
	CHECK(s && len == 2 && !memcmp(s, " a", 2));
	k = rl_tok_encode(t, "", 0, 1, 0, ids, 32);
	CHECK(k == 1 && ids[0] == 1);
	rl_tok_destroy(t);

	/* malformed blobs: every truncation, bad lengths, NaN score */
	int bad = 0;
	for (size_t cut = 0; cut < sz; cut++) {
		int rc = rl_tok_create(blob, cut, &t, err, sizeof err);
		if (rc == 0) {
			rl_tok_destroy(t);  /* a cut at an entry boundary is a smaller valid vocabulary */
			continue;
		}
		bad++;
		CHECK(rc == -EINVAL && err[0] && !strchr(err, '\n'));
	}
	CHECK(bad > (int)sz / 2);
	uint8_t copy[8192];
	memcpy(copy, blob, sz);
	int32_t v = -1;
	memcpy(copy + 4 + 4, &v, 4);                /* first entry's length */
	CHECK(rl_tok_create(copy, sz, &t, err, sizeof err) == -EINVAL);
	v = 0x7fffffff;
	memcpy(copy + 4 + 4, &v, 4);
	CHECK(rl_tok_create(copy, sz, &t, err, sizeof err) == -EINVAL);
	memcpy(copy, blob, sz);
	memcpy(copy, &v, 4);                        /* max_token_length */
	CHECK(rl_tok_create(copy, sz, &t, err, sizeof err) == -EINVAL);
	memcpy(copy, blob, sz);
	float nan = NAN;
	memcpy(copy + 4, &nan, 4);
	CHECK(rl_tok_create(copy, sz, &t, err, sizeof err) == -EINVAL);
	CHECK(rl_tok_load("/nonexistent/tok.bin", &t, err, sizeof err) == -ENOENT && strstr(err, "tok.bin"));
}

int main(void)
{
	RUN(test_fixture);
	RUN(test_roundtrip);
	RUN(test_synthetic);
	TEST_MAIN_END();
}
