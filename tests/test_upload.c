/* test_upload.c — the cuda backend's weight path, without a GPU: loader plans, the streaming
 * reader (io_uring and pread), the raw -> bf16/fp16 converter and the stager (cuda_stage.c).
 *
 * A fake device plays the cuda sink: the stager's copies land in a host image of the device
 * weight allocation only when the reader asks whether the staging buffer is free (as a DMA
 * finishes after cudaMemcpyAsync returns), and "not yet" is answered a few times at random, so
 * a buffer reused too early shows up as wrong bytes. Every model file (stories260K .bin and
 * .gguf, generated GGUF in f32/f16/bf16/q8_0, safetensors f32/f16/bf16 with biases and
 * shards) is streamed with small and odd staging sizes and must give, bit for bit and byte
 * for byte written once, the image that rl_model_load + rl_f32_to_bf16 / _f16 give.
 * Also: truncated files, a failing sink, bad options, --cuda-dtype (fp16 accepted by the cuda
 * backend, an unknown dtype refused).
 * Tests: runtime/model (plans, model_stream), runtime/cuda/host (cuda_stage), runtime/loop (--cuda-dtype).
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/rl_test.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/model/rl_model_plan.h"
#include "runtime/model/model_internal.h"
#include "runtime/cuda/host/cuda_host.h"
#include "runtime/cuda/host/cuda_stage.h"
#include "runtime/backend/rl_backend.h"
#include "runtime/loop/rl_rt_backend.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/loop/rl_rt_args.h"


static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

/* ---------------------------------------------------------------- the fake device - */

#define NB_MAX 8
#define PEND_MAX 16

struct pend { size_t dst; const void *src; size_t n; };

struct fake {
	struct rl_cuda_stager st;
	uint8_t *img, *writes;         /* the device image; how often each byte was written */
	size_t bytes;
	int nb;
	void *bufs[NB_MAX], *conv[NB_MAX];
	struct pend pend[NB_MAX][PEND_MAX];   /* copies enqueued, not yet landed */
	int npend[NB_MAX], polls_left[NB_MAX];
	int cur;                       /* buffer of the chunk being staged */
	long chunks, fail_at, ready_fail_at, readies;
	int failed, after_fail, reused_held, bad_buf;
	uint32_t max_inflight;
	uint64_t landed, weights;
};

static void land(struct fake *f, int b)
{
	for (int i = 0; i < f->npend[b]; i++) {
		const struct pend *p = &f->pend[b][i];
		memcpy(f->img + p->dst, p->src, p->n);
		for (size_t j = 0; j < p->n; j++)
			f->writes[p->dst + j]++;
		f->landed += p->n;
	}
	f->npend[b] = 0;
}

static int f_copy(void *ctx, size_t dst, const void *src, size_t n, char *err, size_t errlen)
{
	struct fake *f = ctx;
	int b = f->cur;
	if (dst > f->bytes || n > f->bytes - dst || f->npend[b] == PEND_MAX) {
		snprintf(err, errlen, "fake: bad copy of %zu bytes to %zu", n, dst);
		return -EFAULT;
	}
	f->pend[b][f->npend[b]++] = (struct pend){ dst, src, n };
	return 0;
}

static int f_seal(void *ctx, int b, char *err, size_t errlen)
{
	struct fake *f = ctx;
	f->polls_left[b] = (int)(rnd() % 3);   /* the "DMA" takes 0-2 polls */
	return 0;
}

static int f_chunk(void *ctx, const struct rl_model_chunk *c, char *err, size_t errlen)
{
	struct fake *f = ctx;
	if (f->failed)
		f->after_fail++;
	if (c->buf < 0 || c->buf >= f->nb) {
		f->bad_buf++;
		snprintf(err, errlen, "fake: chunk in buffer %d", c->buf);
		return -EINVAL;
	}
	if (f->npend[c->buf])          /* refilled while copies from it were pending */
		f->reused_held++;
	if (f->fail_at >= 0 && f->chunks == f->fail_at) {
		f->failed = 1;
		snprintf(err, errlen, "fake: device lost at chunk %ld", f->chunks);
		return -EIO;
	}
	f->chunks++;
	f->weights += c->nelem;
	if (c->inflight > f->max_inflight)
		f->max_inflight = c->inflight;
	f->cur = c->buf;
	return rl_cuda_stage_chunk(&f->st, c, err, errlen);
}

static int f_ready(void *ctx, int b, int wait, char *err, size_t errlen)
{
	struct fake *f = ctx;
	if (f->ready_fail_at >= 0 && f->readies++ == f->ready_fail_at) {
		snprintf(err, errlen, "fake: event query failed");
		return -EIO;
	}
	if (!wait && f->polls_left[b] > 0) {
		f->polls_left[b]--;
		return 0;
	}
	land(f, b);
	return 1;
}

/* Staging geometry: nb buffers of buf_bytes, conv_bytes of conversion room each. */
struct geom { int nb; size_t buf_bytes, conv_bytes; int no_uring; };

static int fake_init(struct fake *f, const struct rl_model_config *c, int wdt, const struct geom *g)
{
	memset(f, 0, sizeof *f);
	if (rl_cuda_stage_init(&f->st, c, wdt))
		return -1;
	f->bytes = f->st.wl.bytes;
	f->img = calloc(1, f->bytes);
	f->writes = calloc(1, f->bytes);
	f->nb = g->nb;
	for (int b = 0; b < g->nb; b++) {
		f->bufs[b] = malloc(g->buf_bytes);
		f->conv[b] = malloc(g->conv_bytes);
		if (!f->bufs[b] || !f->conv[b])
			return -1;
		memset(f->bufs[b], 0xa5, g->buf_bytes);
	}
	f->st.conv = f->conv;
	f->st.conv_bytes = g->conv_bytes;
	f->st.copy = f_copy;
	f->st.seal = f_seal;
	f->st.ctx = f;
	f->fail_at = f->ready_fail_at = -1;
	return f->img && f->writes ? 0 : -1;
}

static void fake_free(struct fake *f)
{
	for (int b = 0; b < f->nb; b++) {
		free(f->bufs[b]);
		free(f->conv[b]);
	}
	free(f->img);
	free(f->writes);
	rl_cuda_stage_free(&f->st);
}

/* Streams plan (or m, when plan is NULL) into f. */
static int fake_stream(struct fake *f, const struct rl_model_plan *plan, const struct rl_model *m,
		       const struct geom *g, char *err, size_t errlen)
{
	struct rl_model_sink s = { .ctx = f, .chunk = f_chunk, .buf_ready = f_ready };
	struct rl_model_stream_opts o = { .bufs = f->bufs, .n_bufs = g->nb, .buf_bytes = g->buf_bytes,
					  .max_elems = rl_cuda_stage_max_elems(g->conv_bytes),
					  .no_uring = g->no_uring };
	return plan ? rl_model_stream(plan, &o, &s, err, errlen) : rl_model_stream_fp32(m, &o, &s, err, errlen);
}

/* ---------------------------------------------------------------- the reference --- */

/* The device image the old upload made: fp32 weights converted by rl_cuda_host_convert,
 * placed field by field (written independently of rl_cuda_stage_dest); mask marks every
 * byte written. */
static void ref_image(const struct rl_model *m, int wdt, uint8_t *img, uint8_t *mask)
{
	const struct rl_model_config *c = &m->cfg;
	struct rl_cuda_wlayout w;
	rl_cuda_stage_layout(c, &w);
	memset(img, 0, w.bytes);
	memset(mask, 0, w.bytes);
	size_t d = c->dim, v = c->vocab_size, h = c->hidden_dim, qd = (size_t)c->n_heads * c->head_dim,
	       kvd = (size_t)c->n_kv_heads * c->head_dim;
#define W16(off, src, n) do { rl_cuda_host_convert((uint16_t *)(img + (off)), (src), (n), (enum rl_cuda_dtype)wdt); \
	memset(mask + (off), 1, 2 * (n)); } while (0)
#define W32(off, src, n) do { memcpy(img + (off), (src), 4 * (n)); memset(mask + (off), 1, 4 * (n)); } while (0)
	W16(w.emb, m->tok_emb, v * d);
	if (!c->tied_embeddings)
		W16(w.wcls, m->wcls, v * d);
	W32(w.out_norm, m->out_norm, d);
	for (uint32_t l = 0; l < c->n_layers; l++) {
		const struct rl_layer *L = &m->layers[l];
		size_t b = l * w.layer_stride;
		W16(b + w.wqkv, L->wq, qd * d);
		W16(b + w.wqkv + 2 * qd * d, L->wk, kvd * d);
		W16(b + w.wqkv + 2 * (qd + kvd) * d, L->wv, kvd * d);
		W16(b + w.wo, L->wo, d * qd);
		W16(b + w.wgu, L->w_gate, h * d);
		W16(b + w.wgu + 2 * h * d, L->w_up, h * d);
		W16(b + w.wdown, L->w_down, d * h);
		W32(b + w.attn_norm, L->attn_norm, d);
		W32(b + w.ffn_norm, L->ffn_norm, d);
		if (c->has_qkv_bias) {
			W32(b + w.bqkv, L->bq, qd);
			W32(b + w.bqkv + 4 * qd, L->bk, kvd);
			W32(b + w.bqkv + 4 * (qd + kvd), L->bv, kvd);
		}
	}
#undef W16
#undef W32
}

static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return i;
	return n;
}

/* Checks f's image and write counts against the reference; what names the run. */
static void check_image(const struct fake *f, const uint8_t *ref, const uint8_t *mask, const char *what)
{
	size_t i = first_diff(f->img, ref, f->bytes), j = first_diff(f->writes, mask, f->bytes);
	CHECKF(i == f->bytes, "%s: image differs at byte %zu (%02x, want %02x)", what, i,
	       i < f->bytes ? f->img[i] : 0, i < f->bytes ? ref[i] : 0);
	CHECKF(j == f->bytes, "%s: byte %zu written %d times, want %d", what, j,
	       j < f->bytes ? f->writes[j] : 0, j < f->bytes ? mask[j] : 0);
	CHECKF(!f->reused_held && !f->bad_buf, "%s: %d buffers reused while held, %d bad", what,
	       f->reused_held, f->bad_buf);
	for (int b = 0; b < f->nb; b++)
		CHECKF(!f->npend[b], "%s: buffer %d still has copies pending after the stream", what, b);
}

static const struct geom geoms[] = {
	{ 3, 4096, 8192, 0 },          /* small buffers: every tensor in many chunks */
	{ 2, 4099, 8198, 1 },          /* odd size, pread fallback */
	{ 4, 1000, 400, 0 },           /* conversion room: 100 weights a chunk (96 for Q8_0) */
	{ 5, 1 << 20, 2 << 20, 0 },    /* whole tensors */
};
/* one buffer of 2 Q8_0 blocks: cut everywhere; run on fewer models (many chunks) */
static const struct geom tiny_geom = { 1, 70, 256, 0 };

/* Streams path every way and compares with rl_model_load of it. */
static void check_file(const char *path, const char *tok, int tiny)
{
	struct rl_model *m;
	struct rl_model_plan plan;
	char err[512];
	REQUIRE(rl_model_load(path, tok, &m, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
	if (rl_model_plan_open(path, tok, &plan, err, sizeof err)) {
		CHECKF(0, "%s", err);
		rl_model_destroy(m);
		return;
	}
	/* the plan says what the load says, and reads every weight once */
	CHECK(!memcmp(&plan.cfg, &m->cfg, sizeof m->cfg) && !strcmp(plan.name, m->name));
	CHECK(plan.vocab_blob_size == m->vocab_blob_size &&
	      (!plan.vocab_blob || !memcmp(plan.vocab_blob, m->vocab_blob, m->vocab_blob_size)));
	uint64_t sum = 0;
	for (size_t i = 0; i < plan.n_reads; i++)
		sum += plan.reads[i].nelem;
	CHECK(sum == plan.n_elems && plan.n_elems == rl_model_weight_elems(&m->cfg));

	struct rl_cuda_wlayout w;
	rl_cuda_stage_layout(&m->cfg, &w);
	uint8_t *ref = malloc(w.bytes), *mask = malloc(w.bytes);
	REQUIRE(ref && mask);
	/* every geometry from the file; the tiny one only where asked (it makes many chunks);
	 * last, the fp32 model in memory through the same sink */
	struct { const struct geom *g; int from_model; } runs[8];
	size_t nr = 0;
	for (size_t i = 0; i < sizeof geoms / sizeof *geoms; i++)
		runs[nr++] = (typeof(runs[0])){ &geoms[i], 0 };
	if (tiny)
		runs[nr++] = (typeof(runs[0])){ &tiny_geom, 0 };
	runs[nr++] = (typeof(runs[0])){ &geoms[0], 1 };
	for (int wdt = 0; wdt < 2; wdt++) {
		ref_image(m, wdt, ref, mask);
		for (size_t ri = 0; ri < nr; ri++) {
			const struct geom *g = runs[ri].g;
			int from_model = runs[ri].from_model;
			struct fake f;
			REQUIRE(fake_init(&f, &m->cfg, wdt, g) == 0);
			char what[160];
			snprintf(what, sizeof what, "%s %s, %d x %zu%s%s", rl_model_basename(path),
				 wdt ? "fp16" : "bf16", g->nb, g->buf_bytes, g->no_uring ? " pread" : "",
				 from_model ? " from the fp32 model" : "");
			int rc = fake_stream(&f, from_model ? NULL : &plan, m, g, err, sizeof err);
			CHECKF(rc == 0, "%s: %s", what, err);
			if (!rc) {
				check_image(&f, ref, mask, what);
				CHECKF(f.weights == plan.n_elems, "%s: %llu weights streamed", what,
				       (unsigned long long)f.weights);
				/* reads overlap the sink's work whenever there is more than one buffer */
				if (!g->no_uring && g->nb > 1 && !from_model)
					CHECKF(f.max_inflight > 0, "%s: no read in flight during a chunk", what);
			}
			fake_free(&f);
		}
	}
	free(ref);
	free(mask);
	rl_model_plan_close(&plan);
	rl_model_destroy(m);
}

/* ---------------------------------------------------------------- fixtures -------- */

/* A random model: stories260K widths (hidden 172, so q8_0 falls back to f16 for w_down),
 * GQA, optional biases / tied embeddings; with specials, hard values for the converter
 * (NaN, inf, f32 subnormals, beyond fp16's range). */
static struct rl_model *fixture(int bias, int tied, int specials)
{
	struct rl_model_config c = { .dim = 64, .hidden_dim = 172, .n_layers = 2, .n_heads = 8,
		.n_kv_heads = 4, .head_dim = 8, .vocab_size = 320, .max_ctx = 256, .rope_theta = 10000.0f,
		.rope_scale = 1.0f, .norm_eps = 1e-5f, .has_qkv_bias = bias, .tied_embeddings = tied,
		.bos_id = 1, .eos_id = 2 };
	struct rl_model *m;
	char err[256];
	if (rl_model_alloc(&c, &m, err, sizeof err))
		return NULL;
	rl_model_fill_random(m, 7);
	if (rl_model_synth_vocab(c.vocab_size, &m->vocab_blob, &m->vocab_blob_size)) {
		rl_model_destroy(m);
		return NULL;
	}
	if (specials) {
		uint32_t bits[] = { 0x7fc00000u, 0xff800000u, 0x7f800000u, 0x00000001u, 0x80400000u,
				    0x47800000u, 0xc77ff000u, 0x7f810000u /* bf16 sNaN when cut */, 0x33000000u,
				    0x38800000u, 0x3f808000u /* a bf16 tie */, 0x7f7fffffu };
		for (size_t i = 0; i < sizeof bits / sizeof *bits; i++) {
			memcpy(&m->tok_emb[i * 7], &bits[i], 4);
			memcpy(&m->layers[1].wv[i * 5], &bits[i], 4);
		}
	}
	return m;
}

/* A safetensors checkpoint of m: 2-D weights as dt (0 f32, 1 f16, 2 bf16 cut from fp32, so
 * sNaNs survive), vectors f32, biases when m has them; shards 2: index.json and two files. */
static int write_st(const struct rl_model *m, const char *dir, int dt, int shards)
{
	const struct rl_model_config *c = &m->cfg;
	size_t d = c->dim, h = c->hidden_dim, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
	struct { char name[80]; size_t r, cl; const float *p; int shard; } t[64];
	int n = 0;
#define T(nm, R, C, P, S) do { snprintf(t[n].name, 80, "%s", nm); t[n].r = R; t[n].cl = C; t[n].p = P; \
	t[n].shard = shards > 1 ? (S) : 0; n++; } while (0)
	T("model.embed_tokens.weight", c->vocab_size, d, m->tok_emb, 0);
	T("model.norm.weight", d, 0, m->out_norm, 0);
	if (!c->tied_embeddings)
		T("lm_head.weight", c->vocab_size, d, m->wcls, 1);
	for (uint32_t l = 0; l < c->n_layers; l++) {
		const struct rl_layer *L = &m->layers[l];
		char b[80];
		int s = l % 2;
#define TL(x, R, C, P) do { snprintf(b, 80, "model.layers.%u.%s", l, x); T(b, R, C, P, s); } while (0)
		TL("input_layernorm.weight", d, 0, L->attn_norm);
		TL("self_attn.q_proj.weight", qd, d, L->wq);
		TL("self_attn.k_proj.weight", kvd, d, L->wk);
		TL("self_attn.v_proj.weight", kvd, d, L->wv);
		TL("self_attn.o_proj.weight", d, qd, L->wo);
		TL("post_attention_layernorm.weight", d, 0, L->ffn_norm);
		TL("mlp.gate_proj.weight", h, d, L->w_gate);
		TL("mlp.down_proj.weight", d, h, L->w_down);
		TL("mlp.up_proj.weight", h, d, L->w_up);
		if (c->has_qkv_bias) {
			TL("self_attn.q_proj.bias", qd, 0, L->bq);
			TL("self_attn.k_proj.bias", kvd, 0, L->bk);
			TL("self_attn.v_proj.bias", kvd, 0, L->bv);
		}
#undef TL
	}
#undef T
	static const char *dts[] = { "F32", "F16", "BF16" };
	char path[600], *hdr = malloc(1 << 16);
	FILE *idx = NULL;
	if (!hdr)
		return -1;
	if (shards > 1) {
		snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
		idx = fopen(path, "w");
		fprintf(idx, "{\"metadata\": {}, \"weight_map\": {");
	}
	for (int s = 0; s < shards; s++) {
		size_t o = 0, off = 0;
		o += sprintf(hdr + o, "{\"__metadata__\":{\"format\":\"pt\"}");
		for (int i = 0; i < n; i++) {
			if (t[i].shard != s)
				continue;
			int two = dt && t[i].cl;
			size_t bytes = t[i].r * (t[i].cl ? t[i].cl : 1) * (two ? 2 : 4);
			if (t[i].cl)
				o += sprintf(hdr + o, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%zu],\"data_offsets\":[%zu,%zu]}",
					     t[i].name, dts[two ? dt : 0], t[i].r, t[i].cl, off, off + bytes);
			else
				o += sprintf(hdr + o, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
					     t[i].name, t[i].r, off, off + bytes);
			off += bytes;
			if (idx)
				fprintf(idx, "%s\"%s\": \"model-%05d-of-%05d.safetensors\"", i ? ", " : "", t[i].name, s + 1, shards);
		}
		o += sprintf(hdr + o, "}");
		if (shards > 1)
			snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
		else
			snprintf(path, sizeof path, "%s/model.safetensors", dir);
		FILE *f = fopen(path, "wb");
		uint64_t hl = o;
		fwrite(&hl, 8, 1, f);
		fwrite(hdr, 1, o, f);
		for (int i = 0; i < n; i++) {
			if (t[i].shard != s)
				continue;
			size_t k = t[i].r * (t[i].cl ? t[i].cl : 1);
			for (size_t j = 0; j < k; j++) {
				uint32_t u;
				memcpy(&u, &t[i].p[j], 4);
				uint16_t x = dt == 1 ? rl_f32_to_f16(t[i].p[j]) : (uint16_t)(u >> 16);
				if (dt && t[i].cl)
					fwrite(&x, 2, 1, f);
				else
					fwrite(&t[i].p[j], 4, 1, f);
			}
		}
		fclose(f);
	}
	if (idx) {
		fprintf(idx, "}}\n");
		fclose(idx);
	}
	free(hdr);
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	fprintf(f, "{\"hidden_size\": %u, \"intermediate_size\": %u, \"num_hidden_layers\": %u,\n"
		" \"num_attention_heads\": %u, \"num_key_value_heads\": %u, \"vocab_size\": %u,\n"
		" \"max_position_embeddings\": %u, \"rms_norm_eps\": 1e-05, \"attention_bias\": %s,\n"
		" \"tie_word_embeddings\": %s, \"bos_token_id\": 1, \"eos_token_id\": 2}\n",
		c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, c->max_ctx,
		c->has_qkv_bias ? "true" : "false", c->tied_embeddings ? "true" : "false");
	fclose(f);
	return 0;
}

/* ---------------------------------------------------------------- tests ----------- */

static void test_layout(void)
{
	/* the canonical layout is where rl_model_alloc puts every field, without gaps */
	for (int v = 0; v < 4; v++) {
		struct rl_model *m = fixture(v & 1, v >> 1, 0);
		REQUIRE(m);
		struct rl_wseg segs[RL_MODEL_MAX_SEGS(2)];
		size_t n = rl_model_layout(&m->cfg, segs);
		CHECK(n == rl_model_layout(&m->cfg, NULL) && n <= RL_MODEL_MAX_SEGS(2));
		uint64_t off = 0;
		for (size_t k = 0; k < n; k++) {
			CHECK(segs[k].off == off);
			CHECK(*rl_model_field_slot(m, segs[k].field, segs[k].layer) == (float *)m->mem + off);
			CHECK(rl_model_field_off(&m->cfg, segs[k].field, segs[k].layer) == off);
			CHECK(rl_model_layout_find(segs, n, off) == k && rl_model_layout_find(segs, n, off + segs[k].n - 1) == k);
			off += segs[k].n;
		}
		CHECK(off == rl_model_weight_elems(&m->cfg) && off * 4 == m->mem_size);
		CHECK((rl_model_field_off(&m->cfg, RL_W_BQ, 0) == UINT64_MAX) == !(v & 1));
		CHECK((rl_model_field_off(&m->cfg, RL_W_WCLS, 0) == UINT64_MAX) == (v >> 1));
		rl_model_destroy(m);
	}
}

/* Reference: fp32 as rl_model_load decodes it, then rl_cuda_host's rounding. */
static void ref_convert(void *dst, int dd, const uint8_t *src, int sd, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float f;
		uint16_t h;
		if (sd == RL_DT_F32) {
			memcpy(&f, src + 4 * i, 4);
		} else if (sd == RL_DT_F16 || sd == RL_DT_BF16) {
			memcpy(&h, src + 2 * i, 2);
			f = sd == RL_DT_F16 ? rl_f16_to_f32(h) : rl_bf16_to_f32(h);
		} else {
			const uint8_t *blk = src + i / 32 * 34;
			memcpy(&h, blk, 2);
			f = rl_f16_to_f32(h) * (float)(int8_t)blk[2 + i % 32];
		}
		if (dd == RL_DT_F32)
			memcpy((uint8_t *)dst + 4 * i, &f, 4);
		else
			((uint16_t *)dst)[i] = dd == RL_DT_BF16 ? rl_f32_to_bf16(f) : rl_f32_to_f16(f);
	}
}

static void test_convert(void)
{
	/* every f16 and bf16 bit pattern; f32 and q8_0 at random bits (so NaN payloads, infs and
	 * subnormals, and scales of every kind) plus rounding ties */
	enum { N = 65536 };
	uint8_t *src = malloc(N / 32 * 34 * 2 + 4 * N), *a = malloc(4 * N), *b = malloc(4 * N);
	REQUIRE(src && a && b);
	static const int dsts[] = { RL_DT_F32, RL_DT_F16, RL_DT_BF16 };
	for (int sd = RL_DT_F32; sd <= RL_DT_Q8_0; sd++) {
		size_t bytes;
		if (sd == RL_DT_F16 || sd == RL_DT_BF16) {
			for (uint32_t i = 0; i < N; i++)
				memcpy(src + 2 * i, &(uint16_t){ (uint16_t)i }, 2);
			bytes = 2 * N;
		} else if (sd == RL_DT_F32) {
			for (uint32_t i = 0; i < N; i++) {
				uint32_t u = (uint32_t)rnd();
				if (i % 4 == 1)
					u = (u & 0xffff0000u) | 0x8000u;          /* bf16 tie */
				if (i % 4 == 2)
					u = (u & 0xffffe000u) | 0x1000u;          /* fp16 tie */
				memcpy(src + 4 * i, &u, 4);
			}
			bytes = 4 * N;
		} else {
			for (size_t i = 0; i < N / 32 * 34; i++)
				src[i] = (uint8_t)rnd();
			bytes = N / 32 * 34;
		}
		for (size_t k = 0; k < 3; k++) {
			int dd = dsts[k];
			size_t osz = dd == RL_DT_F32 ? 4 : 2;
			memset(a, 0x5a, 4 * N);
			memset(b, 0xa5, 4 * N);
			CHECK(rl_model_convert(a, dd, src, sd, N) == 0);
			ref_convert(b, dd, src, sd, N);
			size_t i = first_diff(a, b, N * osz);
			CHECKF(i == N * osz, "dtype %d -> %d differs at byte %zu", sd, dd, i);
			/* is_copy says exactly when the bytes come out unchanged: on runs with and
			 * without infs and NaNs */
			static const size_t starts[] = { 0, 0x1000, 0x3c00, 0x7c00, 0x7f80, 0x7fc0, 0xfc00, 0xff80, 0xffc0 };
			for (size_t j = 0; j < sizeof starts / sizeof *starts; j++) {
				size_t at = starts[j], off = sd == RL_DT_Q8_0 ? at / 32 * 34 : at * (bytes / N);
				int same = sd == dd && !memcmp(a + at * osz, src + off, 64 * osz);
				CHECKF(rl_model_convert_is_copy(src + off, sd, dd, 64) == same, "is_copy %d -> %d at %zu", sd, dd, at);
			}
			/* a length that ends inside the converter's internal blocks: nothing written past it */
			size_t part = N - 544 + (sd == RL_DT_Q8_0 ? 0 : 7);
			memset(a, 0x5a, 4 * N);
			CHECK(rl_model_convert(a, dd, src, sd, part) == 0);
			CHECKF(first_diff(a, b, part * osz) == part * osz && a[part * osz] == 0x5a &&
			       a[4 * N - 1] == 0x5a, "dtype %d -> %d, %zu weights", sd, dd, part);
		}
	}
	CHECK(rl_model_convert(a, RL_DT_Q8_0, src, RL_DT_F32, 4) == -EINVAL);
	CHECK(rl_model_convert(a, RL_DT_BF16, src, RL_DT_Q8_0, 31) == -EINVAL);
	free(src);
	free(a);
	free(b);
}

static void test_stories(void)
{
	const char *bin = rl_t_model("stories260K.bin"), *gg = rl_t_model("stories260K.gguf"),
		   *tok = rl_t_model("tok512.bin");
	if (!bin || !gg || !tok)
		SKIP("stories260K.bin/.gguf or tok512.bin absent");
	check_file(bin, tok, 1);
	check_file(gg, NULL, 0);
}

static void test_gguf_dtypes(void)
{
	static const char *names[4] = { "f32.gguf", "f16.gguf", "bf16.gguf", "q8_0.gguf" };
	char err[512];
	for (int dt = 0; dt < 4; dt++) {
		/* q8_0 quantizes by max |x|: no NaNs for it; one tied model */
		struct rl_model *m = fixture(0, dt == 2, dt != 3);
		REQUIRE(m);
		REQUIRE(rl_gguf_write(m, rl_t_tmp(names[dt]), dt, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
		rl_model_destroy(m);
		check_file(rl_t_tmp(names[dt]), NULL, dt == 3);
	}
}

static void test_safetensors(void)
{
	static const char *names[3] = { "st_f32", "st_f16", "st_bf16" };
	for (int dt = 0; dt < 3; dt++) {
		struct rl_model *m = fixture(1, dt == 1, 1);     /* biases: the bqkv path */
		REQUIRE(m);
		const char *dir = rl_t_tmp(names[dt]);
		mkdir(dir, 0755);
		REQUIRE(write_st(m, dir, dt, dt == 2 ? 2 : 1) == 0);
		rl_model_destroy(m);
		check_file(dir, NULL, dt == 2);
	}
}

static int one_line(const char *s, const char *name)
{
	return s[0] && !strchr(s, '\n') && strstr(s, name);
}

static void test_truncated(void)
{
	struct rl_model *m = fixture(0, 0, 0);
	REQUIRE(m);
	char err[512];
	const char *path = rl_t_tmp("trunc.gguf");
	REQUIRE(rl_gguf_write(m, path, 3, err, sizeof err) == 0);
	rl_model_destroy(m);
	struct stat sb;
	REQUIRE(stat(path, &sb) == 0);
	struct geom g = { 3, 4096, 8192, 0 };
	for (int pread_only = 0; pread_only < 2; pread_only++) {
		/* the file shrinks between the plan and the stream: the read that hits the end fails */
		REQUIRE(truncate(path, sb.st_size) == 0);
		struct rl_model_plan plan;
		REQUIRE(rl_model_plan_open(path, NULL, &plan, err, sizeof err) == 0);
		REQUIRE(truncate(path, sb.st_size - 100) == 0);
		struct fake f;
		g.no_uring = pread_only;
		REQUIRE(fake_init(&f, &plan.cfg, 0, &g) == 0);
		err[0] = 0;
		int rc = fake_stream(&f, &plan, NULL, &g, err, sizeof err);
		CHECKF(rc == -EINVAL && one_line(err, "trunc.gguf") && strstr(err, "file shrank"),
		       "rc %d: %s", rc, err);
		for (int b = 0; b < f.nb; b++)
			CHECK(!f.npend[b]);
		fake_free(&f);
		rl_model_plan_close(&plan);
		/* and a plan of the truncated file is refused before any weight is read */
		err[0] = 0;
		CHECK(rl_model_plan_open(path, NULL, &plan, err, sizeof err) == -EINVAL && one_line(err, "trunc.gguf"));
		CHECK(plan.n_files == 0 && !plan.reads);
		rl_model_plan_close(&plan);
	}
	/* every cut of a llama2.c file is refused by the plan */
	const char *bin = rl_t_model("stories260K.bin");
	if (bin) {
		struct rl_model_plan plan;
		char cmd[1200];
		snprintf(cmd, sizeof cmd, "head -c 500000 '%s' > '%s'", bin, rl_t_tmp("cut.bin"));
		REQUIRE(system(cmd) == 0);
		CHECK(rl_model_plan_open(rl_t_tmp("cut.bin"), NULL, &plan, err, sizeof err) == -EINVAL && one_line(err, "cut.bin"));
	}
}

static void test_sink_errors(void)
{
	struct rl_model *m = fixture(1, 0, 0);
	REQUIRE(m);
	char err[512];
	const char *path = rl_t_tmp("sink.gguf");
	REQUIRE(rl_gguf_write(m, path, 1, err, sizeof err) == 0);
	struct rl_model_plan plan;
	REQUIRE(rl_model_plan_open(path, NULL, &plan, err, sizeof err) == 0);
	for (int mode = 0; mode < 3; mode++) {
		/* the sink fails a chunk (uring, pread), or the "event query" fails */
		struct geom g = { 3, 4096, 8192, mode == 1 };
		struct fake f;
		REQUIRE(fake_init(&f, &plan.cfg, 0, &g) == 0);
		if (mode < 2)
			f.fail_at = 5;
		else
			f.ready_fail_at = 7;
		int rc = fake_stream(&f, &plan, NULL, &g, err, sizeof err);
		if (mode < 2)
			CHECKF(rc == -EIO && !strcmp(err, "fake: device lost at chunk 5"), "mode %d: rc %d %s", mode, rc, err);
		else
			CHECKF(rc == -EIO && !strcmp(err, "fake: event query failed"), "mode %d: rc %d %s", mode, rc, err);
		/* nothing after the error, and every copy enqueued before it landed */
		CHECK(f.after_fail == 0);
		CHECK(f.landed == f.st.bytes_direct + f.st.bytes_converted);
		for (int b = 0; b < f.nb; b++)
			CHECK(!f.npend[b]);
		fake_free(&f);
	}
	/* the plan streams fine afterwards */
	struct geom g = { 2, 8192, 16384, 0 };
	struct fake f;
	REQUIRE(fake_init(&f, &plan.cfg, 0, &g) == 0);
	CHECKF(fake_stream(&f, &plan, NULL, &g, err, sizeof err) == 0, "%s", err);
	CHECK(f.weights == plan.n_elems);
	fake_free(&f);

	/* options the plan cannot be cut into */
	g = (struct geom){ 1, 64, 256, 0 };
	REQUIRE(fake_init(&f, &plan.cfg, 0, &g) == 0);
	struct rl_model_sink s = { .ctx = &f, .chunk = f_chunk, .buf_ready = f_ready };
	struct rl_model_stream_opts o = { .bufs = f.bufs, .n_bufs = 1, .buf_bytes = 33 };
	CHECKF(rl_model_stream(&plan, &o, &s, err, sizeof err) == 0, "%s", err);   /* f16 fits 33 bytes */
	rl_model_plan_close(&plan);
	REQUIRE(rl_gguf_write(m, path, 3, err, sizeof err) == 0);
	REQUIRE(rl_model_plan_open(path, NULL, &plan, err, sizeof err) == 0);
	err[0] = 0;
	CHECKF(rl_model_stream(&plan, &o, &s, err, sizeof err) == -EINVAL && one_line(err, "sink.gguf") &&
	       strstr(err, "Q8_0"), "%s", err);
	o.buf_bytes = 64;
	o.max_elems = 16;
	CHECK(rl_model_stream(&plan, &o, &s, err, sizeof err) == -EINVAL);
	o.n_bufs = 0;
	CHECK(rl_model_stream(&plan, &o, &s, err, sizeof err) == -EINVAL);
	fake_free(&f);
	rl_model_plan_close(&plan);
	rl_model_destroy(m);
}

static void test_cuda_dtype_option(void)
{
	struct rl_rt_params p;
	char err[256];
	rl_rt_default_params(&p);
	CHECK(p.cuda_dtype == 0);
	char *a1[] = { "ringlmd", "--cuda-dtype", "fp16" }, *a2[] = { "ringlmd", "--cuda-dtype", "bf16" },
	     *a3[] = { "ringlmd", "--cuda-dtype", "fp32" };
	CHECK(rl_rt_parse_args(&p, 3, a1, err, sizeof err) == 0 && p.cuda_dtype == 1);
	CHECK(rl_rt_parse_args(&p, 3, a2, err, sizeof err) == 0 && p.cuda_dtype == 0);
	CHECK(rl_rt_parse_args(&p, 3, a3, err, sizeof err) == -EINVAL && one_line(err, "--cuda-dtype"));

	/* --kv-type: the cpu backend's KV cache, IEEE half unless asked for fp32 */
	rl_rt_default_params(&p);
	CHECK(p.kv_f16 == 1);
	char *k1[] = { "ringlmd", "--kv-type", "f16" }, *k2[] = { "ringlmd", "--kv-type", "f32" },
	     *k3[] = { "ringlmd", "--kv-type", "q8" };
	CHECK(rl_rt_parse_args(&p, 3, k1, err, sizeof err) == 0 && p.kv_f16 == 1);
	CHECK(rl_rt_parse_args(&p, 3, k2, err, sizeof err) == 0 && p.kv_f16 == 0);
	CHECK(rl_rt_parse_args(&p, 3, k3, err, sizeof err) == -EINVAL && one_line(err, "--kv-type"));
	/* the cuda backend's cache follows --cuda-dtype: an fp32 ask is refused, not ignored */
	{
		struct rl_rt_params q;
		rl_rt_default_params(&q);
		q.backend = "cuda";
		q.model = "synthetic:tiny";
		q.kv_f16 = 0;
		struct rl_backend *be = NULL;
		struct rl_model *m = NULL;
		uint32_t nb = 0;
		CHECK(rl_rt_backend_open(&q, &be, &m, &nb, err, sizeof err) == -EINVAL && one_line(err, "--kv-type") &&
		      !be && !m);
	}

	/* the cuda backend takes fp16 as it takes bf16: without a GPU it gets as far as looking for
	 * one (-ENODEV), with one it runs (tests/gpu runs fp16 models on the emulator); an unknown
	 * dtype is refused before the device is looked for, so that runs wherever librlcuda.so was
	 * built */
	char path[4096];
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - 64);
	void *lib = NULL;
	if (n > 0) {
		path[n] = 0;
		char *slash = strrchr(path, '/');
		strcpy(slash ? slash + 1 : path, "../librlcuda.so");
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	if (!lib)
		SKIP("librlcuda.so not built or not loadable (%s)", dlerror());
	int (*create)(const struct rl_model *, const char *, const struct rl_backend_params *,
		      struct rl_backend **, char *, size_t) =
		(int (*)(const struct rl_model *, const char *, const struct rl_backend_params *,
			 struct rl_backend **, char *, size_t))dlsym(lib, "rl_backend_cuda_create");
	REQUIRE(create);
	struct rl_backend_params bp = { .n_kv_blocks = 64, .block_size = 16, .max_batch_tokens = 64,
					.max_seqs = 4, .cuda_dtype = 1 };
	struct rl_backend *be = NULL;
	err[0] = 0;
	int rc = create(NULL, "tiny", &bp, &be, err, sizeof err);
	CHECKF(rc == 0 || (rc == -ENODEV && !be && one_line(err, "no CUDA device")), "%d: %s", rc, err);
	if (!rc && be) {
		CHECK(!strcmp(be->info.name, "cuda"));
		rl_backend_destroy(be);
	}
	be = NULL;
	bp.cuda_dtype = 7;
	err[0] = 0;
	CHECKF(create(NULL, "tiny", &bp, &be, err, sizeof err) == -EINVAL && !be && one_line(err, "dtype"), "%s", err);
	/* not dlclose'd: unloading the CUDA libraries makes their static allocations look leaked */
}

int main(void)
{
	if (rl_t_tmpdir_make("upload"))
		return 1;
	RUN(test_layout);
	RUN(test_convert);
	RUN(test_stories);
	RUN(test_gguf_dtypes);
	RUN(test_safetensors);
	RUN(test_truncated);
	RUN(test_sink_errors);
	RUN(test_cuda_dtype_option);
	rl_t_tmpdir_remove();
	TEST_MAIN_END();
}
