/* test_rt_cons.c — the runtime's constraints (runtime/loop/rl_rt_cons.c) on SmolLM2's real
 * vocabulary: a constraint not compiled yet is compiled on the helper thread while its
 * request waits; requests naming one text share one compile; a compile whose requester left
 * is kept for the next; a failed compile reaches each of its requests with the compiler's
 * reason; the first mask a request gets is the engine's own (an independent compile, walked
 * without the cache); the helper's prewarmed masks are the engine's too; every handle
 * compiling at once refuses the next text with -EBUSY; destroy while compiling leaks nothing
 * (the sanitizer builds run this file).
 * Tests: runtime/loop (rl_rt_cons), constrain (compile, prewarm, mask), tokenizer. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <unistd.h>
#include "tests/rl_test.h"
#include "constrain/rl_cons.h"
#include "ipc/rl_wire.h"
#include "runtime/loop/rl_rt_cons.h"
#include "runtime/model/rl_model_io.h"
#include "tokenizer/rl_tok.h"

#define POOL 48

static void *blob;
static uint32_t blob_size;
static struct rl_cons_vocab *vocab;    /* the same vocabulary, for the independent compiles */

static int load(void)
{
	if (blob)
		return 0;
	const char *path = rl_t_real_model("SmolLM2-135M-Instruct.Q4_1.gguf");
	char err[512];
	struct rl_tok *t;
	if (!path || rl_gguf_read_vocab(path, &blob, &blob_size, err, sizeof err))
		return -1;
	if (rl_tok_create(blob, blob_size, &t, err, sizeof err))
		return -1;
	const int rc = rl_cons_vocab_from_tok(t, &vocab);
	rl_tok_destroy(t);
	return rc;
}

/* a form of n fields (enums, bounded integers, patterned strings, a nested object); tag makes
 * its text, and so its compile, its own */
static void form(char *out, size_t cap, int tag, int n)
{
	size_t k = (size_t)snprintf(out, cap, "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i < n && k < cap; i++) {
		const char *f = i % 4 == 0 ? "{\"enum\":[\"low\",\"mid\",\"high\"]}"
			      : i % 4 == 1 ? "{\"type\":\"integer\",\"minimum\":0,\"maximum\":%d}"
			      : i % 4 == 2 ? "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]{%d}$\"}"
					   : "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}},\"required\":[\"ok\"]}";
		char v[160];
		snprintf(v, sizeof v, f, i % 4 == 1 ? 100 + tag : 2 + tag % 3);
		k += (size_t)snprintf(out + k, cap - k, "%s\"f%d_%d\":%s", i ? "," : "", i, tag, v);
	}
	k += (size_t)snprintf(out + k, cap - k, "},\"required\":[");
	for (int i = 0; i < n && k < cap; i++)
		k += (size_t)snprintf(out + k, cap - k, "%s\"f%d_%d\"", i ? "," : "", i, tag);
	snprintf(out + k, cap - k, "],\"additionalProperties\":false}");
}

struct got { int n, rc[POOL]; uint8_t seen[POOL]; uint32_t mask0[POOL]; char why[POOL][256]; };

static void ready(void *ctx, uint32_t seq, int rc, const uint32_t *allow, const char *why)
{
	struct got *g = ctx;
	g->n++;
	g->seen[seq]++;
	g->rc[seq] = rc;
	g->mask0[seq] = allow ? allow[0] : 0;
	snprintf(g->why[seq], sizeof g->why[seq], "%s", why ? why : "");
}

/* Polls the helper's eventfd and takes its compiles until want requests were reported. */
static int wait_for(struct rl_rt_cons *k, struct got *g, int want)
{
	for (int tries = 0; g->n < want && tries < 600; tries++) {
		struct pollfd p = { .fd = rl_rt_cons_fd(k), .events = POLLIN };
		if (poll(&p, 1, 100) > 0) {
			uint64_t x;
			(void)!read(p.fd, &x, 8);
		}
		rl_rt_cons_poll(k, ready, g);
	}
	return g->n >= want;
}

/* sequence seq's current mask equals the engine's for the start state of text, walked cold */
static int mask_is_engines(const uint32_t *allow, const char *text)
{
	const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS };
	struct rl_cons *c;
	char err[256];
	if (rl_cons_compile_schema(vocab, text, strlen(text), &opts, &c, err, sizeof err))
		return 0;
	const size_t words = rl_cons_mask_words(c);
	uint32_t *m = malloc(words * 4);
	rl_cons_mask_nocache(c, rl_cons_start(c), m);
	const int same = !memcmp(m, allow, words * 4);
	free(m);
	rl_cons_destroy(c);
	return same;
}

static void compiles_wait_off_the_runtime_thread(void)
{
	if (load())
		SKIP("SmolLM2 " RL_T_REAL_WHY);
	struct rl_rt_cons *k;
	REQUIRE(rl_rt_cons_create(blob, blob_size, POOL, 0, 0, RL_RT_CONS_NICE, &k) == 0);
	static char a[16384], b[16384];
	form(a, sizeof a, 1, 24);
	form(b, sizeof b, 2, 24);
	const char *bad = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"idn-email\"}}}";
	const uint32_t *allow[POOL] = { 0 };
	char err[256];
	struct got g = { 0 };
	/* a text not compiled yet waits (1): nothing compiles inside start */
	CHECK(rl_rt_cons_start(k, 0, RL_CONS_KIND_JSON_SCHEMA, a, strlen(a), &allow[0], err, sizeof err) == 1);
	CHECK(rl_rt_cons_start(k, 1, RL_CONS_KIND_JSON_SCHEMA, a, strlen(a), &allow[1], err, sizeof err) == 1);
	CHECK(rl_rt_cons_start(k, 2, RL_CONS_KIND_JSON_SCHEMA, b, strlen(b), &allow[2], err, sizeof err) == 1);
	CHECK(rl_rt_cons_start(k, 3, RL_CONS_KIND_JSON_SCHEMA, bad, strlen(bad), &allow[3], err, sizeof err) == 1);
	CHECK(rl_rt_cons_waiting(k) == 4 && rl_rt_cons_is_waiting(k, 2));
	rl_rt_cons_forget(k, 2);       /* its request cancelled while waiting: no report for it */
	CHECK(rl_rt_cons_waiting(k) == 3 && !rl_rt_cons_is_waiting(k, 2));
	CHECK(rl_rt_cons_error(k, 0) == 0 && rl_rt_cons_advance(k, 0, 1) == -EINVAL);   /* no state yet */
	REQUIRE(wait_for(k, &g, 3));
	usleep(100000);                /* b's compile, which no one waits for, finishes too */
	rl_rt_cons_poll(k, ready, &g);
	CHECK(g.n == 3 && g.seen[0] == 1 && g.seen[1] == 1 && !g.seen[2] && g.seen[3] == 1);
	CHECKF(g.rc[0] == 0 && g.rc[1] == 0, "%d %d: %s", g.rc[0], g.rc[1], g.why[0]);
	CHECKF(g.rc[3] == -EINVAL && strstr(g.why[3], "format"), "%d '%s'", g.rc[3], g.why[3]);
	CHECK(rl_rt_cons_waiting(k) == 0);
	struct rl_rt_cons_stats st;
	rl_rt_cons_get_stats(k, &st);
	CHECKF(st.compiles == 3 && st.prewarmed > 0, "%llu compiles, %llu prewarmed", (unsigned long long)st.compiles,
	       (unsigned long long)st.prewarmed);
	/* the masks handed out are the engine's, and both requests of a share one handle's */
	const uint32_t *m0 = NULL, *m4 = NULL;
	CHECK(rl_rt_cons_start(k, 0, RL_CONS_KIND_JSON_SCHEMA, a, strlen(a), &m0, err, sizeof err) == 0 && m0);
	CHECK(m0 && mask_is_engines(m0, a));
	/* b was compiled though its requester left: the next request naming it starts at once */
	CHECK(rl_rt_cons_start(k, 4, RL_CONS_KIND_JSON_SCHEMA, b, strlen(b), &m4, err, sizeof err) == 0 && m4);
	CHECK(m4 && mask_is_engines(m4, b));
	/* the failed text kept nothing: it compiles (and fails) again */
	CHECK(rl_rt_cons_start(k, 5, RL_CONS_KIND_JSON_SCHEMA, bad, strlen(bad), &m4, err, sizeof err) == 1);
	/* the prewarmed masks along a walk are the engine's: each token the mask allows, first in
	 * id order, for 30 tokens */
	uint32_t tok = 0, steps = 0;
	for (; steps < 30; steps++) {
		const uint32_t *m = m0;
		for (tok = 0; tok < 49152 && !(m[tok >> 5] >> (tok & 31) & 1); tok++)
			;
		if (tok == 49152 || rl_rt_cons_advance(k, 0, tok))
			break;
	}
	CHECK(steps == 30);
	printf("  2 requests shared one compile, 1 left its compile to the cache, 1 got the compiler's reason: %s\n"
	       "  %llu compiles on the helper (%.1f ms, %llu masks computed ahead)\n", g.why[3],
	       (unsigned long long)st.compiles, st.compile_ns / 1e6, (unsigned long long)st.prewarmed);
	rl_rt_cons_destroy(k);         /* with bad's compile maybe still under way */
}

/* What the helper computed ahead is what the engine computes: the masks of every state a walk
 * meets, from a prewarmed handle's cache, against the walk without the cache. */
static void prewarmed_masks_are_the_engines(void)
{
	if (load())
		SKIP("SmolLM2 " RL_T_REAL_WHY);
	static char a[16384];
	form(a, sizeof a, 7, 12);
	const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS };
	struct rl_cons *c;
	char err[256];
	REQUIRE(rl_cons_compile_schema(vocab, a, strlen(a), &opts, &c, err, sizeof err) == 0);
	const uint32_t n = rl_cons_prewarm(c, 2000000000ull);
	uint64_t misses0;
	rl_cons_cache_stats(c, NULL, &misses0, NULL);
	const size_t words = rl_cons_mask_words(c);
	uint32_t *m = malloc(words * 4), *r = malloc(words * 4);
	uint32_t s = rl_cons_start(c), steps = 0, bad = 0, x = 12345;
	for (; steps < 400 && !rl_cons_accepting(c, s); steps++) {
		const long cnt = rl_cons_mask(c, s, m);
		rl_cons_mask_nocache(c, s, r);
		bad += memcmp(m, r, words * 4) != 0;
		if (cnt <= 0)
			break;
		/* a pseudo-random allowed token (the k-th set bit) */
		x = x * 1103515245u + 12345u;
		long want = (long)((x >> 8) % (uint32_t)cnt), id = -1;
		for (uint32_t w = 0; w < words && id < 0; w++)
			for (uint32_t bit = 0; bit < 32; bit++)
				if (m[w] >> bit & 1 && want-- == 0) {
					id = (long)(w * 32 + bit);
					break;
				}
		const long nx = rl_cons_advance(c, s, (uint32_t)id);
		if (nx <= 0 || rl_cons_vocab_is_eog(vocab, (uint32_t)id))
			break;
		s = (uint32_t)nx;
	}
	uint64_t misses;
	rl_cons_cache_stats(c, NULL, &misses, NULL);
	CHECK(n > 1 && bad == 0 && steps > 10);
	printf("  %u states prewarmed; a walk of %u tokens: %u masks differ, %llu computed after the prewarm\n", n, steps,
	       bad, (unsigned long long)(misses - misses0));
	free(m);
	free(r);
	rl_cons_destroy(c);
}

static void every_handle_compiling_refuses_the_next(void)
{
	if (load())
		SKIP("SmolLM2 " RL_T_REAL_WHY);
	struct rl_rt_cons *k;
	REQUIRE(rl_rt_cons_create(blob, blob_size, POOL, 0, 0, 19, &k) == 0);
	char re[64], err[256];
	const uint32_t *allow;
	int waiting = 0;
	for (int i = 0; i < RL_RT_CONS_HANDLES; i++) {
		snprintf(re, sizeof re, "[a-z]{1,%d}x", 3 + i);
		waiting += rl_rt_cons_start(k, (uint32_t)i, RL_CONS_KIND_REGEX, re, strlen(re), &allow, err, sizeof err) >= 0;
	}
	CHECK(waiting == RL_RT_CONS_HANDLES);
	/* a 33rd text while all 32 are compiling or in use, whichever: refused by their count */
	struct got g = { 0 };
	rl_rt_cons_poll(k, ready, &g);
	CHECKF(rl_rt_cons_start(k, 40, RL_CONS_KIND_REGEX, "y+", 2, &allow, err, sizeof err) == -EBUSY &&
	       strstr(err, "32 different constraints"), "'%s'", err);
	rl_rt_cons_destroy(k);         /* done records not taken yet are freed too */
}

static void unknown_kind_and_no_vocabulary(void)
{
	struct rl_rt_cons *k;
	char err[256];
	const uint32_t *allow;
	REQUIRE(rl_rt_cons_create(NULL, 0, 4, 0, 0, RL_RT_CONS_NICE, &k) == 0);
	CHECK(rl_rt_cons_start(k, 0, RL_CONS_KIND_REGEX, "a", 1, &allow, err, sizeof err) == -ENOTSUP &&
	      strstr(err, "vocabulary"));
	CHECK(rl_rt_cons_start(k, 0, 9, "a", 1, &allow, err, sizeof err) == -EINVAL && strstr(err, "kind 9"));
	rl_rt_cons_destroy(k);
}

int main(void)
{
	RUN(compiles_wait_off_the_runtime_thread);
	RUN(prewarmed_masks_are_the_engines);
	RUN(every_handle_compiling_refuses_the_next);
	RUN(unknown_kind_and_no_vocabulary);
	rl_cons_vocab_destroy(vocab);
	free(blob);
	TEST_MAIN_END();
}
