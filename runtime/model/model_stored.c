/* model_stored.c — loading a plan with every matrix kept as the file stores it
 * (rl_model_load_stored): one anonymous block, huge pages asked for, holds each matrix's bytes
 * as they are on disk (F16, BF16, Q8_0, Q4_K ... never expanded) and each norm and bias
 * converted to fp32; the model's rl_wmat views point into it. The cpu backend runs on this,
 * so its resident memory is about the size of the file's weights. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "runtime/model/model_internal.h"

#define ALIGN 64                       /* each tensor on its own cache lines */

/* Bytes read r takes in the block: a tensor's last (or only) part ends on a cache line, so
 * the parts of one matrix lie back to back */
static uint64_t stored_bytes(const struct rl_tread *r, const struct rl_wseg *g)
{
	uint64_t b = rl_wfield_is_vector(g->field) ? r->nelem * 4 : r->nbytes;
	return r->elem + r->nelem == g->off + g->n ? (b + ALIGN - 1) / ALIGN * ALIGN : b;
}

int rl_model_plan_load_stored(struct rl_model_plan *p, struct rl_model **out, char *err, size_t errlen)
{
	const struct rl_model_config *c = &p->cfg;
	const char *name = p->n_files ? p->files[0].name : NULL;
	*out = NULL;
	size_t nseg = rl_model_layout(c, NULL);
	struct rl_wseg *segs = calloc(nseg, sizeof *segs);
	struct rl_model *m = calloc(1, sizeof *m);
	struct rl_layer *L = calloc(c->n_layers, sizeof *L);
	void *tmp = NULL;
	int rc = 0;
	if (!segs || !m || !L) {
		rl_model_err(err, errlen, name, "out of memory");
		rc = -ENOMEM;
		goto fail;
	}
	m->cfg = *c;
	m->layers = L;
	rl_model_layout(c, segs);
	/* every read is one whole tensor (one field of one layer), or the next part of the matrix
	 * the read before began (a Hugging Face checkpoint's experts), in that one's type */
	uint64_t total = 0, big_vec = 0;
	for (size_t i = 0; i < p->n_reads; i++) {
		const struct rl_tread *r = &p->reads[i], *prev = i ? r - 1 : NULL;
		const struct rl_wseg *g = &segs[rl_model_layout_find(segs, nseg, r->elem)];
		if (g->off != r->elem && (rl_wfield_is_vector(g->field) || !prev || prev->elem + prev->nelem != r->elem)) {
			rl_model_err(err, errlen, name, "internal error: read %zu is not one whole tensor", i);
			rc = -EINVAL;
			goto fail;
		}
		if (g->off != r->elem && prev->dtype != r->dtype) {
			rl_model_err(err, errlen, name, "the experts of one matrix are stored in different types (%s and %s): "
				     "not supported", rl_dt_info(prev->dtype)->name, rl_dt_info(r->dtype)->name);
			rc = -ENOTSUP;
			goto fail;
		}
		total += stored_bytes(r, g);
		if (rl_wfield_is_vector(g->field) && r->dtype != RL_DT_F32 && r->nbytes > big_vec)
			big_vec = r->nbytes;
	}
	void *mem = mmap(NULL, total ? total : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		rl_model_err(err, errlen, name, "cannot allocate %.2f GiB for the weights", total / 1073741824.0);
		rc = -ENOMEM;
		goto fail;
	}
	madvise(mem, total, MADV_HUGEPAGE);   /* weights stream every step: fewer TLB misses */
	m->mem = mem;
	m->mem_size = total ? total : 1;
	if (big_vec && !(tmp = malloc(big_vec))) {
		rl_model_err(err, errlen, name, "out of memory");
		rc = -ENOMEM;
		goto fail;
	}
	uint8_t *at = mem;
	for (size_t i = 0; i < p->n_reads && !rc; i++) {
		const struct rl_tread *r = &p->reads[i];
		const struct rl_wseg *g = &segs[rl_model_layout_find(segs, nseg, r->elem)];
		const struct rl_mfile *f = &p->files[r->file];
		if (rl_wfield_is_vector(g->field)) {
			/* norms and biases: fp32, whatever the file has */
			if (r->dtype == RL_DT_F32) {
				rc = rl_mfile_pread(f, at, r->nbytes, r->off, err, errlen);
			} else if (!(rc = rl_mfile_pread(f, tmp, r->nbytes, r->off, err, errlen)) &&
				   rl_model_convert(at, RL_DT_F32, tmp, r->dtype, r->nelem)) {
				rl_model_err(err, errlen, f->name, "cannot convert a %s vector to fp32",
					     rl_dt_info(r->dtype)->name);
				rc = -EINVAL;
			}
			*rl_model_field_slot(m, g->field, g->layer) = (float *)at;
		} else if (g->off != r->elem) {    /* the next part: right after the one before */
			rc = rl_mfile_pread(f, at, r->nbytes, r->off, err, errlen);
		} else {
			rc = rl_mfile_pread(f, at, r->nbytes, r->off, err, errlen);
			uint32_t rows = (uint32_t)rl_wdim(c, rl_wnames[g->field].rows);
			uint32_t cols = (uint32_t)rl_wdim(c, rl_wnames[g->field].cols);
			rl_wmat_init(rl_model_field_wmat(m, g->field, g->layer), at, r->dtype, rows, cols);
			if (r->dtype == RL_DT_F32)
				*rl_model_field_slot(m, g->field, g->layer) = (float *)at;
		}
		at += stored_bytes(r, g);
	}
	if (rc)
		goto fail;
	if (c->tied_embeddings) {
		m->wcls = m->tok_emb;
		m->mwcls = m->mtok_emb;
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
	free(segs);
	free(tmp);
	*out = m;
	return 0;
fail:
	free(segs);
	free(tmp);
	if (m && m->layers)
		rl_model_destroy(m);
	else {
		free(m);
		free(L);
	}
	return rc;
}

int rl_model_load_stored(const char *path, const char *tokenizer_path, struct rl_model **out,
			 char *err, size_t errlen)
{
	struct rl_model_plan p;
	*out = NULL;
	int rc = rl_model_plan_open(path, tokenizer_path, &p, err, errlen);
	if (!rc)
		rc = rl_model_plan_load_stored(&p, out, err, errlen);
	rl_model_plan_close(&p);
	return rc;
}
