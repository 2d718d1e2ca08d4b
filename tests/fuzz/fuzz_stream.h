/* fuzz_stream.h — for the model-file fuzzers: a file that loads must stream to the same
 * weights. Plans the file again, streams it through two tiny staging buffers (every tensor
 * cut into many chunks, Q8_0 two blocks at a time), decodes each chunk to fp32 with
 * rl_model_convert and traps unless it equals, bit for bit, what rl_model_load put at those
 * elements, and unless every weight came exactly once. */
#ifndef RL_FUZZ_STREAM_H
#define RL_FUZZ_STREAM_H
#include "tests/fuzz/fuzz_common.h"
#include "runtime/model/model_internal.h"

struct fuzz_sink { const struct rl_model *m; uint64_t weights; };

static int fuzz_chunk(void *ctx, const struct rl_model_chunk *c, char *err, size_t errlen)
{
	struct fuzz_sink *s = ctx;
	float f[64];
	FUZZ_ASSERT(c->nelem <= 64 && c->elem + c->nelem <= s->m->mem_size / 4);
	FUZZ_ASSERT(rl_model_convert(f, RL_DT_F32, c->data, c->dtype, c->nelem) == 0);
	FUZZ_ASSERT(!memcmp(f, (const float *)s->m->mem + c->elem, c->nelem * 4));
	s->weights += c->nelem;
	return 0;
}

static int fuzz_ready(void *ctx, int buf, int wait, char *err, size_t errlen) { return 1; }

/* planner: the one the harness's loader uses (rl_model_plan_gguf, ...) */
static inline void fuzz_stream_matches(int (*planner)(const char *, const char *, struct rl_model_plan *, char *, size_t),
				       const char *path, const struct rl_model *m)
{
	struct rl_model_plan p;
	char err[512];
	FUZZ_ASSERT(planner(path, NULL, &p, err, sizeof err) == 0);
	static uint8_t b0[70], b1[70];
	void *bufs[2] = { b0, b1 };
	struct fuzz_sink s = { m, 0 };
	struct rl_model_sink sink = { &s, fuzz_chunk, fuzz_ready };
	/* io_uring for half the inputs, pread for the rest: both paths, and half the ring set-ups */
	struct rl_model_stream_opts o = { .bufs = bufs, .n_bufs = 2, .buf_bytes = sizeof b0,
					  .no_uring = (int)(m->mem_size / 4 + p.n_reads) & 1 };
	FUZZ_ASSERT(rl_model_stream(&p, &o, &sink, err, sizeof err) == 0);
	FUZZ_ASSERT(s.weights == p.n_elems && p.n_elems * 4 == m->mem_size);
	rl_model_plan_close(&p);
}
#endif
