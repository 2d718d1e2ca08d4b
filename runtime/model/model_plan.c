/* model_plan.c — building, checking, reading and closing a model plan (rl_model_plan.h): the
 * loaders fill one with rl_model_plan_init/_add/_own_file; rl_model_plan_load turns it into
 * an fp32 rl_model, which is how every rl_model_load works. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/model/model_internal.h"

int rl_model_plan_init(struct rl_model_plan *p, const struct rl_model_config *c, size_t max_reads,
		       int n_files, const char *name, char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	char why[256];
	if (rl_model_check_shape(c, why, sizeof why)) {
		rl_model_err(err, errlen, name, "%s", why);
		return -EINVAL;
	}
	p->reads = calloc(max_reads ? max_reads : 1, sizeof *p->reads);
	p->files = calloc(n_files ? n_files : 1, sizeof *p->files);
	if (!p->reads || !p->files) {
		free(p->reads);
		free(p->files);
		memset(p, 0, sizeof *p);
		rl_model_err(err, errlen, name, "out of memory");
		return -ENOMEM;
	}
	for (int i = 0; i < n_files; i++)
		p->files[i].fd = -1;
	p->n_files = n_files;
	p->reads_cap = max_reads;
	p->cfg = *c;
	p->n_elems = rl_model_weight_elems(c);
	return 0;
}

void rl_model_plan_own_file(struct rl_model_plan *p, int i, struct rl_mfile *f)
{
	p->files[i] = *f;
	f->fd = -1;
	f->name = NULL;
}

int rl_model_plan_add(struct rl_model_plan *p, int file, uint64_t off, uint64_t nbytes,
		      uint64_t nelem, int dtype, int field, uint32_t layer, char *err, size_t errlen)
{
	if (nelem != rl_model_field_elems(&p->cfg, field)) {
		rl_model_err(err, errlen, p->files[file].name, "internal error: bad read of field %d layer %u (%llu weights)",
			     field, layer, (unsigned long long)nelem);
		return -EINVAL;
	}
	return rl_model_plan_add_part(p, file, off, nbytes, nelem, dtype, field, layer, 0, err, errlen);
}

int rl_model_plan_add_part(struct rl_model_plan *p, int file, uint64_t off, uint64_t nbytes, uint64_t nelem,
			   int dtype, int field, uint32_t layer, uint64_t part, char *err, size_t errlen)
{
	const struct rl_mfile *f = &p->files[file];
	uint64_t elem = rl_model_field_off(&p->cfg, field, layer), want, end;
	/* the loaders check all of this with their own messages first: reaching one of these
	 * means a loader planned something inconsistent */
	if (p->n_reads == p->reads_cap || elem == UINT64_MAX || part > rl_model_field_elems(&p->cfg, field) ||
	    nelem > rl_model_field_elems(&p->cfg, field) - part) {
		rl_model_err(err, errlen, f->name, "internal error: bad read of field %d layer %u (%llu weights)",
			     field, layer, (unsigned long long)nelem);
		return -EINVAL;
	}
	if (rl_dt_size(dtype, nelem, &want) || want != nbytes ||
	    __builtin_add_overflow(off, nbytes, &end) || end > f->size) {
		rl_model_err(err, errlen, f->name, "tensor at offset %llu (%llu bytes) does not fit the file (%llu bytes)",
			     (unsigned long long)off, (unsigned long long)nbytes, (unsigned long long)f->size);
		return -EINVAL;
	}
	p->reads[p->n_reads++] = (struct rl_tread){ .off = off, .nbytes = nbytes, .nelem = nelem,
						    .elem = elem + part, .dtype = dtype, .file = file };
	return 0;
}

int rl_model_plan_check(const struct rl_model_plan *p, char *err, size_t errlen)
{
	size_t nseg = rl_model_layout(&p->cfg, NULL);
	struct rl_wseg *segs = calloc(nseg, sizeof *segs);
	uint64_t *seen = calloc(nseg, sizeof *seen);     /* weights of each segment read so far */
	int rc = 0;
	const char *name = p->n_files ? p->files[0].name : NULL;
	if (!segs || !seen) {
		rl_model_err(err, errlen, name, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	rl_model_layout(&p->cfg, segs);
	for (size_t i = 0; i < p->n_reads && !rc; i++) {
		const struct rl_tread *t = &p->reads[i];
		size_t k = rl_model_layout_find(segs, nseg, t->elem);
		/* a segment is read whole, or in parts in order (a Hugging Face expert each) */
		if (t->elem >= p->n_elems || segs[k].off + seen[k] != t->elem || t->nelem > segs[k].n - seen[k])
			rc = -EINVAL;
		else
			seen[k] += t->nelem;
	}
	for (size_t k = 0; k < nseg && !rc; k++)
		if (seen[k] != segs[k].n)
			rc = -EINVAL;
	if (rc)
		rl_model_err(err, errlen, name, "internal error: the plan does not cover every weight once");
out:
	free(segs);
	free(seen);
	return rc;
}

void rl_model_plan_close(struct rl_model_plan *p)
{
	for (int i = 0; i < p->n_files; i++)
		rl_mfile_close(&p->files[i]);
	free(p->files);
	free(p->reads);
	free(p->vocab_blob);
	memset(p, 0, sizeof *p);
}

/* The fp32 load's sink: each chunk is decoded straight into the model's memory, so a staging
 * buffer is free again as soon as chunk() returns. */
static int fp32_chunk(void *ctx, const struct rl_model_chunk *c, char *err, size_t errlen)
{
	float *base = ctx;
	int rc = rl_model_convert(base + c->elem, RL_DT_F32, c->data, c->dtype, c->nelem);
	if (rc)
		snprintf(err, errlen, "cannot decode a chunk of dtype %d", c->dtype);
	return rc;
}

static int fp32_ready(void *ctx, int buf, int wait, char *err, size_t errlen)
{
	return 1;
}

#define LOAD_BUFS 4
#define LOAD_BUF_BYTES (4u << 20)

int rl_model_plan_load(struct rl_model_plan *p, struct rl_model **out, char *err, size_t errlen)
{
	*out = NULL;
	const char *name = p->n_files ? p->files[0].name : NULL;
	struct rl_model *m;
	char why[256];
	int rc = rl_model_alloc(&p->cfg, &m, why, sizeof why);
	if (rc) {
		rl_model_err(err, errlen, name, "%s", why);
		return rc;
	}
	/* the same io_uring reader the cuda backend streams with, into plain staging buffers */
	void *bufs[LOAD_BUFS] = { NULL };
	for (int i = 0; i < LOAD_BUFS && !rc; i++)
		if (!(bufs[i] = malloc(LOAD_BUF_BYTES)))
			rc = -ENOMEM;
	if (rc) {
		rl_model_err(err, errlen, name, "out of memory");
	} else {
		struct rl_model_stream_opts o = { .bufs = bufs, .n_bufs = LOAD_BUFS, .buf_bytes = LOAD_BUF_BYTES };
		struct rl_model_sink sink = { .ctx = m->mem, .chunk = fp32_chunk, .buf_ready = fp32_ready };
		rc = rl_model_stream(p, &o, &sink, err, errlen);
	}
	for (int i = 0; i < LOAD_BUFS; i++)
		free(bufs[i]);
	if (rc) {
		rl_model_destroy(m);
		return rc;
	}
	if (p->norm_plus_one)
		rl_model_norms_add_one(m);
	memcpy(m->name, p->name, sizeof m->name);
	memcpy(m->chat_template, p->chat_template, sizeof m->chat_template);
	memcpy(m->chat_system, p->chat_system, sizeof m->chat_system);
	m->vocab_blob = p->vocab_blob;
	m->vocab_blob_size = p->vocab_blob_size;
	p->vocab_blob = NULL;
	p->vocab_blob_size = 0;
	*out = m;
	return 0;
}

int rl_model_load_planned(int (*planner)(const char *, const char *, struct rl_model_plan *, char *, size_t),
			  const char *path, const char *tokenizer_path, struct rl_model **out,
			  char *err, size_t errlen)
{
	struct rl_model_plan p;
	*out = NULL;
	int rc = planner(path, tokenizer_path, &p, err, errlen);
	if (!rc)
		rc = rl_model_plan_load(&p, out, err, errlen);
	rl_model_plan_close(&p);
	return rc;
}
