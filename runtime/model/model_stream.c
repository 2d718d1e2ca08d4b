/* model_stream.c — streams a model plan's tensors through caller-provided staging buffers
 * (rl_model_stream), or an fp32 model's weights in the same chunks (rl_model_stream_fp32),
 * to a sink; and converts a chunk's raw bytes to bf16/fp16/fp32 (rl_model_convert).
 *
 * The reader keeps one io_uring read in flight per free staging buffer and hands each chunk
 * to the sink as its read completes, so while the sink converts and enqueues the copy of one
 * chunk, the next ones are being read. A buffer the sink has seen is the sink's until its
 * buf_ready says otherwise (cuda: the event recorded after the buffer's copies completed),
 * so a host-to-device copy still reading a buffer is never overwritten. Without io_uring
 * (old kernel, seccomp) the same chunks come from preads, one at a time. */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/model/model_internal.h"

/* ---------------------------------------------------------------- conversion ------ */

static inline float ld_f32(const uint8_t *p) { float f; memcpy(&f, p, 4); return f; }
static inline uint16_t ld_u16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return h; }
static inline float as_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t as_u32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Conversion goes through fp32 in blocks of exactly BLK weights (a multiple of every block
 * format's 32 or 256 weights):
 * one tight loop decodes, one encodes, and with fixed trip counts and no aliasing -O2's
 * vectorizer takes them. A last partial block is staged through zeroed local buffers. */
#define BLK 512

static void decode(float *restrict f, const uint8_t *restrict s, int sd)
{
	switch (sd) {
	case RL_DT_F32:
		memcpy(f, s, BLK * 4);
		break;
	case RL_DT_BF16:
		for (int i = 0; i < BLK; i++)
			f[i] = as_f32((uint32_t)ld_u16(s + 2 * i) << 16);
		break;
	case RL_DT_F16:
		for (int i = 0; i < BLK; i++)
			f[i] = rl_f16_to_f32(ld_u16(s + 2 * i));
		break;
	default:           /* a block format: BLK is a whole number of its blocks */
		rl_dt_decode(sd, f, s, BLK / rl_dt_info(sd)->blk_elems);
		break;
	}
}

static void encode(uint16_t *restrict o, int dd, const float *restrict f)
{
	if (dd == RL_DT_BF16)
		for (int i = 0; i < BLK; i++)
			o[i] = rl_f32_to_bf16(f[i]);
	else
		for (int i = 0; i < BLK; i++)
			o[i] = rl_f32_to_f16(f[i]);
}

int rl_model_convert(void *dst, int dd, const void *src, int sd, uint64_t n)
{
	const uint8_t *s = src;
	uint16_t *d16 = dst;
	_Static_assert(BLK % 256 == 0, "BLK holds whole blocks of every format");
	if ((dd != RL_DT_F32 && dd != RL_DT_F16 && dd != RL_DT_BF16) || !rl_dt_info(sd) ||
	    n % rl_dt_info(sd)->blk_elems)
		return -EINVAL;
	if (sd == dd) {
		/* through fp32 a value comes back unchanged, except that NaNs are quieted */
		if (sd == RL_DT_F32) {
			memcpy(dst, src, n * 4);
		} else {
			uint16_t above = sd == RL_DT_F16 ? 0x7c00 : 0x7f80, quiet = sd == RL_DT_F16 ? 0x200 : 0x40;
			for (uint64_t i = 0; i < n; i++) {
				uint16_t h = ld_u16(s + 2 * i);
				d16[i] = (h & 0x7fff) > above ? h | quiet : h;
			}
		}
		return 0;
	}
	uint32_t bb, be;
	rl_dt_block(sd, &bb, &be);
	size_t osz = dd == RL_DT_F32 ? 4 : 2;
	float f[BLK];
	uint16_t o[BLK];
	for (uint64_t i = 0; i < n; i += BLK) {
		uint64_t k = n - i < BLK ? n - i : BLK;
		const uint8_t *in = s + i / be * bb;
		if (k < BLK) {
			uint8_t raw[BLK * 4];  /* BLK weights' bytes in any dtype (at most f32's) */
			memset(raw, 0, sizeof raw);
			memcpy(raw, in, k / be * bb);
			decode(f, raw, sd);
		} else {
			decode(f, in, sd);
		}
		uint8_t *out = (uint8_t *)dst + i * osz;
		if (dd == RL_DT_F32) {
			memcpy(out, f, k * 4);
		} else {
			encode(o, dd, f);
			memcpy(out, o, k * 2);
		}
	}
	return 0;
}

int rl_model_convert_is_copy(const void *src, int sd, int dd, uint64_t n)
{
	const uint8_t *s = src;
	if (sd != dd)
		return 0;
	if (sd == RL_DT_F32)
		return 1;
	if (sd != RL_DT_F16 && sd != RL_DT_BF16)
		return 0;
	/* a signalling NaN (quiet bit clear) would come back quieted */
	uint16_t nan_above = sd == RL_DT_F16 ? 0x7c00 : 0x7f80, quiet = sd == RL_DT_F16 ? 0x200 : 0x40;
	int snan = 0;
	for (uint64_t i = 0; i < n; i++) {     /* no early exit: a branch-free scan vectorizes */
		uint16_t h = ld_u16(s + 2 * i);
		snan |= (h & 0x7fff) > nan_above && !(h & quiet);
	}
	return !snan;
}

/* ---------------------------------------------------------------- chunks ---------- */

static const char *dt_name(int dt)
{
	return rl_dt_info(dt) ? rl_dt_info(dt)->name : "?";
}

/* Walks the plan's reads in order, cutting each into chunks of whole blocks. */
struct gen {
	const struct rl_model_plan *p;
	size_t buf_bytes;
	uint64_t max_elems;
	size_t ri;                     /* current read */
	uint64_t pos;                  /* weights of it already handed out */
};

static int next_chunk(struct gen *g, struct rl_model_chunk *c, uint64_t *off)
{
	while (g->ri < g->p->n_reads && g->pos >= g->p->reads[g->ri].nelem) {
		g->ri++;
		g->pos = 0;
	}
	if (g->ri >= g->p->n_reads)
		return 0;
	const struct rl_tread *t = &g->p->reads[g->ri];
	uint32_t bb, be;
	rl_dt_block(t->dtype, &bb, &be);
	uint64_t blocks = g->buf_bytes / bb, left = (t->nelem - g->pos) / be;
	if (g->max_elems && blocks > g->max_elems / be)
		blocks = g->max_elems / be;
	if (blocks > left)
		blocks = left;
	*off = t->off + g->pos / be * bb;
	*c = (struct rl_model_chunk){ .buf = -1, .nbytes = blocks * bb, .elem = t->elem + g->pos,
				      .nelem = blocks * be, .dtype = t->dtype, .read = g->ri };
	g->pos += blocks * be;
	return 1;
}

/* The options and the plan agree: every read can be cut into chunks that fit a buffer. */
static int check_args(const struct rl_model_plan *p, const struct rl_model_stream_opts *o,
		      const struct rl_model_sink *s, char *err, size_t errlen)
{
	const char *name = p && p->n_files ? p->files[0].name : NULL;
	if (!o || !s || !s->chunk || !s->buf_ready || o->n_bufs < 1 ||
	    o->n_bufs > RL_MODEL_STREAM_MAX_BUFS || !o->buf_bytes || o->buf_bytes > (1u << 30)) {
		rl_model_err(err, errlen, name, "bad streaming options (%d buffers of %zu bytes)",
			     o ? o->n_bufs : 0, o ? o->buf_bytes : 0);
		return -EINVAL;
	}
	if (!p)
		return 0;
	if (!o->bufs) {
		rl_model_err(err, errlen, name, "no staging buffers");
		return -EINVAL;
	}
	for (int b = 0; b < o->n_bufs; b++)
		if (!o->bufs[b]) {
			rl_model_err(err, errlen, name, "staging buffer %d is NULL", b);
			return -EINVAL;
		}
	for (size_t i = 0; i < p->n_reads; i++) {
		const struct rl_tread *t = &p->reads[i];
		uint32_t bb, be;
		uint64_t nb;
		if (t->file < 0 || t->file >= p->n_files || !rl_dt_info(t->dtype) ||
		    rl_dt_size(t->dtype, t->nelem, &nb) || nb != t->nbytes) {
			rl_model_err(err, errlen, name, "plan read %zu is inconsistent", i);
			return -EINVAL;
		}
		rl_dt_block(t->dtype, &bb, &be);
		if (o->buf_bytes < bb || (o->max_elems && o->max_elems < be)) {
			rl_model_err(err, errlen, p->files[t->file].name,
				     "staging buffers of %zu bytes (%llu weights) cannot hold one %s block",
				     o->buf_bytes, (unsigned long long)o->max_elems, dt_name(t->dtype));
			return -EINVAL;
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- the reader ------ */

enum { FREE, READING, HELD };

struct slot {
	int state;
	struct rl_model_chunk c;
	int file;
	uint64_t off, got;             /* file offset of the chunk, bytes read so far */
	uint64_t seq;                  /* HELD: order handed out (the oldest is waited first) */
};

struct stream {
	const struct rl_model_plan *p;
	const struct rl_model_stream_opts *o;
	const struct rl_model_sink *s;
	struct slot sl[RL_MODEL_STREAM_MAX_BUFS];
	uint64_t seq;
	char *err;
	size_t errlen;
};

/* Hands a filled buffer to the sink; it is HELD whatever the sink says (it may have
 * enqueued copies from it before failing). */
static int deliver(struct stream *st, int b, uint32_t inflight)
{
	struct slot *x = &st->sl[b];
	x->c.buf = b;
	x->c.inflight = inflight;
	x->state = HELD;
	x->seq = st->seq++;
	return st->s->chunk(st->s->ctx, &x->c, st->err, st->errlen);
}

/* Waits for every HELD buffer, so the caller may free or reuse all of them. After an
 * earlier error (rc != 0) this is best effort and keeps that error's message. */
static int settle(struct stream *st, int rc)
{
	char scratch[256];
	for (int b = 0; b < st->o->n_bufs; b++) {
		if (st->sl[b].state != HELD)
			continue;
		int r = st->s->buf_ready(st->s->ctx, b, 1, rc ? scratch : st->err, rc ? sizeof scratch : st->errlen);
		if (r < 0 && !rc)
			rc = r;
		st->sl[b].state = FREE;
	}
	return rc;
}

/* The HELD buffer handed out first: the one most likely to be free soonest. */
static int oldest_held(const struct stream *st)
{
	int best = -1;
	for (int b = 0; b < st->o->n_bufs; b++)
		if (st->sl[b].state == HELD && (best < 0 || st->sl[b].seq < st->sl[best].seq))
			best = b;
	return best;
}

static int stream_pread(struct stream *st, struct gen *g)
{
	int rc = 0, b = 0;
	struct slot *x;
	uint64_t off;
	while (!rc) {
		x = &st->sl[b];
		if (!next_chunk(g, &x->c, &off))
			break;
		if (x->state == HELD) {
			int r = st->s->buf_ready(st->s->ctx, b, 1, st->err, st->errlen);
			if (r < 0) {
				rc = r;
				break;
			}
			x->state = FREE;
		}
		const struct rl_mfile *f = &st->p->files[st->p->reads[x->c.read].file];
		x->c.data = st->o->bufs[b];
		if ((rc = rl_mfile_pread(f, st->o->bufs[b], x->c.nbytes, off, st->err, st->errlen)))
			break;
		rc = deliver(st, b, 0);
		b = (b + 1) % st->o->n_bufs;
	}
	return settle(st, rc);
}

static void prep_read(struct io_uring *ring, const struct stream *st, int b)
{
	const struct slot *x = &st->sl[b];
	/* never NULL: at most n_bufs requests exist and the ring has 2 * n_bufs entries */
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	io_uring_prep_read(sqe, st->p->files[x->file].fd, (uint8_t *)st->o->bufs[b] + x->got,
			   (unsigned)(x->c.nbytes - x->got), x->off + x->got);
	io_uring_sqe_set_data64(sqe, (uint64_t)b);
}

static int stream_uring(struct stream *st, struct gen *g, struct io_uring *ring)
{
	int rc = 0, more = 1, n = st->o->n_bufs;
	uint32_t inflight = 0, unsubmitted = 0;
	for (;;) {
		int held = 0;
		/* buffers the sink has released become free; free buffers get the next reads */
		for (int b = 0; b < n && !rc; b++) {
			struct slot *x = &st->sl[b];
			if (x->state == HELD) {
				int r = st->s->buf_ready(st->s->ctx, b, 0, st->err, st->errlen);
				if (r < 0)
					rc = r;
				else if (r > 0)
					x->state = FREE;
			}
			if (x->state == FREE && more && !rc) {
				uint64_t off;
				if ((more = next_chunk(g, &x->c, &off))) {
					x->file = st->p->reads[x->c.read].file;
					x->off = off;
					x->got = 0;
					x->c.data = st->o->bufs[b];
					x->state = READING;
					prep_read(ring, st, b);
					inflight++;
					unsubmitted++;
				}
			}
			held += x->state == HELD;
		}
		if (unsubmitted && rc) {
			/* prepared before the error, never submitted: they die with the ring, unread */
			inflight -= unsubmitted;
			unsubmitted = 0;
		} else if (unsubmitted) {
			int r = io_uring_submit(ring);
			if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
				/* the kernel took none of them: likewise */
				rl_model_err(st->err, st->errlen, st->p->files[0].name, "io_uring submit failed: %s", strerror(-r));
				rc = r;
				inflight -= unsubmitted;
				unsubmitted = 0;
			} else if (r > 0) {
				unsubmitted -= (uint32_t)r < unsubmitted ? (uint32_t)r : unsubmitted;
			}
		}
		if (!inflight) {
			if (rc || !more)
				break;
			/* chunks left, every buffer still the sink's: wait for the oldest */
			int b = oldest_held(st), r;
			if (b < 0) {           /* cannot happen: a free buffer would have a read */
				rl_model_err(st->err, st->errlen, st->p->files[0].name, "internal error: no buffer to read into");
				rc = -EIO;
				break;
			}
			r = st->s->buf_ready(st->s->ctx, b, 1, st->err, st->errlen);
			if (r < 0)
				rc = r;
			else
				st->sl[b].state = FREE;
			continue;
		}
		if (unsubmitted)               /* submit said "busy": try again */
			continue;
		struct io_uring_cqe *cqe;
		int r;
		if (held && !rc) {
			/* a held buffer may be released while the reads run: look again soon */
			struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 200000 };
			r = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
			if (r == -ETIME)
				continue;
		} else {
			r = io_uring_wait_cqe(ring, &cqe);
		}
		if (r == -EINTR)
			continue;
		if (r < 0) {
			/* cannot reap: the in-flight buffers may still be written; only the ring's
			 * teardown (by the caller) stops that */
			if (!rc)
				rl_model_err(st->err, st->errlen, st->p->files[0].name, "io_uring wait failed: %s", strerror(-r));
			return rc ? rc : r;
		}
		int b = (int)io_uring_cqe_get_data64(cqe), res = cqe->res;
		io_uring_cqe_seen(ring, cqe);
		struct slot *x = &st->sl[b];
		if (res <= 0 || rc) {
			if (!rc) {
				rl_model_err(st->err, st->errlen, st->p->files[x->file].name,
					     "read of %llu bytes at offset %llu failed: %s",
					     (unsigned long long)(x->c.nbytes - x->got), (unsigned long long)(x->off + x->got),
					     res < 0 ? strerror(-res) : "file shrank");
				rc = res < 0 ? res : -EINVAL;
			}
			x->state = FREE;
			inflight--;
			continue;
		}
		x->got += (uint64_t)res;
		if (x->got < x->c.nbytes) {    /* short read: the rest, from the same slot */
			prep_read(ring, st, b);
			unsubmitted++;
			continue;
		}
		inflight--;
		rc = deliver(st, b, inflight);
	}
	return settle(st, rc);
}

int rl_model_stream(const struct rl_model_plan *p, const struct rl_model_stream_opts *o,
		    const struct rl_model_sink *s, char *err, size_t errlen)
{
	if (!p) {
		rl_model_err(err, errlen, NULL, "no plan to stream");
		return -EINVAL;
	}
	int rc = check_args(p, o, s, err, errlen);
	if (rc)
		return rc;
	struct stream *st = calloc(1, sizeof *st);
	if (!st) {
		rl_model_err(err, errlen, p->n_files ? p->files[0].name : NULL, "out of memory");
		return -ENOMEM;
	}
	*st = (struct stream){ .p = p, .o = o, .s = s, .err = err, .errlen = errlen };
	struct gen g = { .p = p, .buf_bytes = o->buf_bytes, .max_elems = o->max_elems };
	struct io_uring ring;
	/* io_uring may be unavailable (old kernel, seccomp): the same chunks then come by pread */
	if (!o->no_uring && io_uring_queue_init(2 * (unsigned)o->n_bufs, &ring, 0) == 0) {
		rc = stream_uring(st, &g, &ring);
		io_uring_queue_exit(&ring);
	} else {
		rc = stream_pread(st, &g);
	}
	free(st);
	return rc;
}

int rl_model_stream_fp32(const struct rl_model *m, const struct rl_model_stream_opts *o,
			 const struct rl_model_sink *s, char *err, size_t errlen)
{
	int rc = check_args(NULL, o, s, err, errlen);
	if (rc)
		return rc;
	uint64_t cap = o->buf_bytes / 4;
	if (o->max_elems && o->max_elems < cap)
		cap = o->max_elems;
	size_t nseg = rl_model_layout(&m->cfg, NULL);
	struct rl_wseg *segs = calloc(nseg, sizeof *segs);
	struct stream *st = calloc(1, sizeof *st);
	if (!cap || !segs || !st) {
		rl_model_err(err, errlen, m->name, cap ? "out of memory" : "staging buffers hold no weight");
		free(segs);
		free(st);
		return cap ? -ENOMEM : -EINVAL;
	}
	*st = (struct stream){ .o = o, .s = s, .err = err, .errlen = errlen };
	rl_model_layout(&m->cfg, segs);
	int b = 0;
	for (size_t k = 0; k < nseg && !rc; k++) {
		/* the fields' own pointers, not m->mem: a caller may have pointed them elsewhere */
		const float *w = *rl_model_field_slot((struct rl_model *)m, segs[k].field, segs[k].layer);
		for (uint64_t pos = 0; pos < segs[k].n && !rc; pos += cap) {
			struct slot *x = &st->sl[b];
			if (x->state == HELD) {
				if ((rc = st->s->buf_ready(st->s->ctx, b, 1, err, errlen)) < 0)
					break;
				rc = 0;
				x->state = FREE;
			}
			uint64_t nel = segs[k].n - pos < cap ? segs[k].n - pos : cap;
			x->c = (struct rl_model_chunk){ .data = w + pos, .nbytes = nel * 4, .elem = segs[k].off + pos,
							.nelem = nel, .dtype = RL_DT_F32, .read = k };
			rc = deliver(st, b, 0);
			b = (b + 1) % o->n_bufs;
		}
	}
	rc = settle(st, rc);
	free(segs);
	free(st);
	return rc;
}
