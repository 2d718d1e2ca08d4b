/* fuzz_cons.c — libFuzzer harness for the structured-output compilers (constrain/): the first
 * byte picks GBNF (0), JSON Schema (1) or a regular expression (2), the rest is the text
 * (seeds: llama.cpp's grammars, recursive schemas; tests/fuzz/corpus/cons/). Properties: a
 * compile returns 0 or -errno with a one-line reason; a compiled handle over a small
 * vocabulary (every single byte and a few multi-byte tokens) gives on the states a walk
 * driven by the input's bytes visits the mask that brute force gives (every token's bytes fed
 * from the state), EOS exactly in accepting states, dist 0 exactly there, and never a crash
 * at its state cap (which makes large schemas take the split compile's grammar); with bit 3 of
 * the first byte the masks come after a prewarm.
 * Tests: constrain (rl_cons_compile_*, cons_gbnf.c, cons_gram.c, cons_schema.c, cons_regex.c).
 */
#include "tests/fuzz/fuzz_common.h"
#include "constrain/rl_cons.h"

#define NTOK (256 + 6 + 1)             /* the bytes, a few longer tokens, EOS */

static struct rl_cons_vocab *vocab(void)
{
	static struct rl_cons_vocab *v;
	if (v)
		return v;
	static char b[256];
	static const char *const more[6] = { "{\"", "\":", "ab", "()", "\n ", "\xc3\xa9" };
	const char *tok[NTOK];
	uint32_t len[NTOK], eos = NTOK - 1;
	for (int i = 0; i < 256; i++) {
		b[i] = (char)i;
		tok[i] = &b[i];
		len[i] = 1;
	}
	for (int i = 0; i < 6; i++) {
		tok[256 + i] = more[i];
		len[256 + i] = (uint32_t)strlen(more[i]);
	}
	tok[eos] = "";
	len[eos] = 0;
	if (rl_cons_vocab_create(NTOK, tok, len, NULL, &eos, 1, &v))
		abort();
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 4096)
		return 0;
	struct rl_cons_vocab *v = vocab();
	const char *text = (const char *)data + 1;
	size_t n = size - 1;
	struct rl_cons_opts o = { .flags = RL_CONS_NO_EXTRA_KEYS, .max_states = 2000, .cache_bytes = 4096 };
	struct rl_cons *c = NULL;
	char err[256];
	int rc = data[0] % 3 == 0 ? rl_cons_compile_gbnf(v, text, n, &o, &c, err, sizeof err)
	       : data[0] % 3 == 1 ? rl_cons_compile_schema(v, text, n, &o, &c, err, sizeof err)
				  : rl_cons_compile_regex(v, text, n, &o, &c, err, sizeof err);
	if (rc) {
		FUZZ_ASSERT(rc < 0 && memchr(err, 0, sizeof err) && err[0] && !strchr(err, '\n'));
		return 0;
	}
	uint32_t mask[(NTOK + 31) / 32], want[(NTOK + 31) / 32];
	if (data[0] & 8)               /* the compiler thread's prewarm: its masks are checked below */
		rl_cons_prewarm(c, 2000000);
	uint32_t st = rl_cons_start(c);
	for (size_t i = 0; i < n && i < 64 && st; i++) {
		long k = rl_cons_mask(c, st, mask);
		memset(want, 0, sizeof want);
		long kw = 0;
		for (uint32_t id = 0; id < NTOK; id++) {
			uint32_t l;
			const char *b = rl_cons_vocab_bytes(v, id, &l);
			int ok = b ? rl_cons_feed(c, st, b, l) != RL_CONS_DEAD : rl_cons_vocab_is_eog(v, id) && rl_cons_accepting(c, st);
			if (ok) {
				want[id >> 5] |= 1u << (id & 31);
				kw++;
			}
		}
		if (rl_cons_error(c))
			break;                     /* the state cap: advances fail from here, by name */
		FUZZ_ASSERT(k == kw && !memcmp(mask, want, sizeof mask));
		FUZZ_ASSERT((rl_cons_dist(c, st) == 0) == (rl_cons_accepting(c, st) != 0));
		/* the next token: one the mask allows, chosen by the input */
		uint32_t pick = UINT32_MAX, skip = data[1 + i] % (uint32_t)(k ? k : 1);
		for (uint32_t id = 0; id < NTOK - 1 && pick == UINT32_MAX; id++)
			if (mask[id >> 5] >> (id & 31) & 1 && !skip--)
				pick = id;
		if (pick == UINT32_MAX)
			break;
		long ns = rl_cons_advance(c, st, pick);
		FUZZ_ASSERT(ns > 0 || rl_cons_error(c));
		st = ns > 0 ? (uint32_t)ns : 0;
	}
	rl_cons_destroy(c);
	return 0;
}
