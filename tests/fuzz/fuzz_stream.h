/* fuzz_stream.h — for the model-file fuzzers: a file that loads must stream to the same
 * weights. Plans the file again, streams it through two tiny staging buffers (every tensor
 * cut into many chunks of at most 64 weights, Q8_0 two blocks at a time; buffers and chunks
 * grow to one block where a type's block is larger), decodes each chunk to fp32 with
 * rl_model_convert and traps unless it equals, bit for bit, what rl_model_load put at those
 * elements, and unless every weight came exactly once. */
#ifndef RL_FUZZ_STREAM_H
#define RL_FUZZ_STREAM_H
#include "tests/fuzz/fuzz_common.h"
#include "runtime/model/model_internal.h"

enum { FUZZ_MAX_BLOCK = 256 };   /* the largest block of any type, in weights and bytes */
struct fuzz_sink { const struct rl_model *m; uint64_t weights, max_elems; };

static int fuzz_chunk(void *ctx, const struct rl_model_chunk *c, char *err, size_t errlen)
{
	struct fuzz_sink *s = ctx;
	float f[FUZZ_MAX_BLOCK];
	FUZZ_ASSERT(c->nelem <= s->max_elems && c->elem + c->nelem <= s->m->mem_size / 4);
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
	/* 70 bytes and 64 weights, or one block of the plan's largest type (a Q5_0 file once
	 * came as 96 weights a chunk into a 64-float check) */
	static uint8_t b0[FUZZ_MAX_BLOCK], b1[FUZZ_MAX_BLOCK];
	size_t buf_bytes = 70;
	uint64_t max_elems = 64;
	for (size_t i = 0; i < p.n_reads; i++) {
		uint32_t bb, be;
		rl_dt_block(p.reads[i].dtype, &bb, &be);
		FUZZ_ASSERT(bb <= FUZZ_MAX_BLOCK && be <= FUZZ_MAX_BLOCK);
		buf_bytes = bb > buf_bytes ? bb : buf_bytes;
		max_elems = be > max_elems ? be : max_elems;
	}
	void *bufs[2] = { b0, b1 };
	struct fuzz_sink s = { m, 0, max_elems };
	struct rl_model_sink sink = { &s, fuzz_chunk, fuzz_ready };
	/* io_uring for half the inputs, pread for the rest: both paths, and half the ring set-ups */
	struct rl_model_stream_opts o = { .bufs = bufs, .n_bufs = 2, .buf_bytes = buf_bytes, .max_elems = max_elems,
					  .no_uring = (int)(m->mem_size / 4 + p.n_reads) & 1 };
	FUZZ_ASSERT(rl_model_stream(&p, &o, &sink, err, sizeof err) == 0);
	FUZZ_ASSERT(s.weights == p.n_elems && p.n_elems * 4 == m->mem_size);
	rl_model_plan_close(&p);
}
#endif
