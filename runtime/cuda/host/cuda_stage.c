/* cuda_stage.c — the device weight layout and the chunk-to-copies logic of the cuda backend's
 * weight upload (see cuda_stage.h); no CUDA calls, so it is tested everywhere. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda/host/cuda_stage.h"

static size_t take(size_t *p, size_t n, size_t size)
{
	size_t r = *p;
	*p += (n * size + 255) & ~(size_t)255;   /* 256-byte aligned, as cudaMalloc's pieces */
	return r;
}

void rl_cuda_stage_layout(const struct rl_model_config *c, struct rl_cuda_wlayout *w)
{
	size_t d = c->dim, v = c->vocab_size, hid = c->hidden_dim, qd = (size_t)c->n_heads * c->head_dim,
	       kvd = (size_t)c->n_kv_heads * c->head_dim, p = 0;
	w->emb = take(&p, v * d, 2);
	w->wcls = c->tied_embeddings ? w->emb : take(&p, v * d, 2);
	w->out_norm = take(&p, d, 4);
	w->inv_freq = take(&p, c->head_dim / 2, 4);
	size_t l0 = p;
	w->wqkv = take(&p, (qd + 2 * kvd) * d, 2);
	w->wo = take(&p, d * qd, 2);
	w->wgu = take(&p, 2 * hid * d, 2);
	w->wdown = take(&p, d * hid, 2);
	w->attn_norm = take(&p, d, 4);
	w->ffn_norm = take(&p, d, 4);
	w->bqkv = c->has_qkv_bias ? take(&p, qd + 2 * kvd, 4) : SIZE_MAX;
	w->qknorm = c->has_qk_norm ? take(&p, 2 * (size_t)c->head_dim, 4) : SIZE_MAX;
	w->layer_stride = p - l0;
	w->bytes = l0 + w->layer_stride * c->n_layers;
}

size_t rl_cuda_stage_dest(const struct rl_model_config *c, const struct rl_cuda_wlayout *w,
			  int field, uint32_t layer, uint64_t i)
{
	size_t d = c->dim, qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim,
	       L = w->layer_stride * layer;
	switch (field) {
	case RL_W_TOK_EMB:   return w->emb + 2 * i;
	case RL_W_WCLS:      return w->wcls + 2 * i;
	case RL_W_OUT_NORM:  return w->out_norm + 4 * i;
	case RL_W_ATTN_NORM: return L + w->attn_norm + 4 * i;
	case RL_W_FFN_NORM:  return L + w->ffn_norm + 4 * i;
	case RL_W_WQ:        return L + w->wqkv + 2 * i;
	case RL_W_WK:        return L + w->wqkv + 2 * (qd * d + i);
	case RL_W_WV:        return L + w->wqkv + 2 * ((qd + kvd) * d + i);
	case RL_W_BQ:        return L + w->bqkv + 4 * i;
	case RL_W_BK:        return L + w->bqkv + 4 * (qd + i);
	case RL_W_BV:        return L + w->bqkv + 4 * (qd + kvd + i);
	case RL_W_WO:        return L + w->wo + 2 * i;
	case RL_W_GATE:      return L + w->wgu + 2 * i;
	case RL_W_UP:        return L + w->wgu + 2 * ((size_t)c->hidden_dim * d + i);
	case RL_W_DOWN:      return L + w->wdown + 2 * i;
	case RL_W_QNORM:     return L + w->qknorm + 4 * i;
	case RL_W_KNORM:     return L + w->qknorm + 4 * ((size_t)c->head_dim + i);
	}
	return SIZE_MAX;
}

int rl_cuda_stage_init(struct rl_cuda_stager *s, const struct rl_model_config *c, enum rl_cuda_dtype wdt)
{
	memset(s, 0, sizeof *s);
	if (wdt != RL_CUDA_BF16 && wdt != RL_CUDA_FP16)
		return -EINVAL;
	s->cfg = *c;
	s->wdt = wdt == RL_CUDA_FP16 ? RL_DT_F16 : RL_DT_BF16;
	rl_cuda_stage_layout(c, &s->wl);
	s->n_segs = rl_model_layout(c, NULL);
	if (!(s->segs = calloc(s->n_segs, sizeof *s->segs)))
		return -ENOMEM;
	rl_model_layout(c, s->segs);
	return 0;
}

void rl_cuda_stage_free(struct rl_cuda_stager *s)
{
	free(s->segs);
	s->segs = NULL;
}

int rl_cuda_stage_chunk(struct rl_cuda_stager *s, const struct rl_model_chunk *c, char *err, size_t errlen)
{
	const struct rl_wseg *last = &s->segs[s->n_segs - 1];
	uint64_t e = c->elem, end = c->elem + c->nelem;
	const struct rl_dt_info *di = rl_dt_info(c->dtype);
	uint32_t bb = di ? di->blk_bytes : 4, be = di ? di->blk_elems : 1;
	size_t co = 0;
	int rc;
	if (end < e || end > last->off + last->n || c->nelem % be || c->buf < 0 ||
	    (uint64_t)c->nelem / be * bb != c->nbytes) {
		snprintf(err, errlen, "cuda backend: weight chunk [%llu, +%llu) does not fit the model",
			 (unsigned long long)c->elem, (unsigned long long)c->nelem);
		return -EINVAL;
	}
	uint8_t *room = s->conv ? s->conv[c->buf] : NULL;
	while (e < end) {
		/* one run per field the chunk touches (in practice a chunk is inside one tensor) */
		const struct rl_wseg *g = &s->segs[rl_model_layout_find(s->segs, s->n_segs, e)];
		uint64_t n = (end < g->off + g->n ? end : g->off + g->n) - e;
		if ((e - c->elem) % be) {
			snprintf(err, errlen, "cuda backend: a weight block spans two weights at element %llu",
				 (unsigned long long)e);
			return -EINVAL;
		}
		const uint8_t *src = (const uint8_t *)c->data + (e - c->elem) / be * bb;
		int vec = rl_wfield_is_vector(g->field), od = vec ? RL_DT_F32 : s->wdt;
		size_t osz = vec ? 4 : 2, dst = rl_cuda_stage_dest(&s->cfg, &s->wl, g->field, g->layer, e - g->off);
		if (rl_model_convert_is_copy(src, c->dtype, od, n)) {
			if ((rc = s->copy(s->ctx, dst, src, n * osz, err, errlen)))
				return rc;
			s->bytes_direct += n * osz;
		} else {
			co = (co + osz - 1) / osz * osz;
			if (!room || co + n * osz > s->conv_bytes) {
				snprintf(err, errlen, "cuda backend: a chunk of %llu weights needs more than %zu bytes of conversion room",
					 (unsigned long long)c->nelem, s->conv_bytes);
				return -ENOSPC;
			}
			if ((rc = rl_model_convert(room + co, od, src, c->dtype, n))) {
				snprintf(err, errlen, "cuda backend: cannot convert %d weights to %d", c->dtype, od);
				return rc;
			}
			if ((rc = s->copy(s->ctx, dst, room + co, n * osz, err, errlen)))
				return rc;
			co += n * osz;
			s->bytes_converted += n * osz;
		}
		e += n;
	}
	return s->seal(s->ctx, c->buf, err, errlen);
}
