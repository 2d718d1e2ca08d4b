/* model_llama2c.c — loader for Karpathy's llama2.c legacy checkpoint (.bin, version 0):
 * a Config of 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
 * a negative vocab_size means a separate classifier follows), then fp32 tensors grouped by
 * kind across layers. The file carries no vocabulary: it comes from a tokenizer.bin.
 * Planning (rl_model_plan.h) does every check; loading reads the plan into fp32. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/model/model_internal.h"

int rl_model_plan_llama2c(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
			  char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	struct rl_mfile f;
	int rc = rl_mfile_open(&f, path, err, errlen);
	if (rc)
		return rc;
	int32_t h[RL_LLAMA2C_HDR_BYTES / 4];
	if ((rc = rl_mfile_pread(&f, h, sizeof h, 0, err, errlen)))
		goto out;
	int shared = h[5] > 0;
	int64_t vocab = h[5] < 0 ? -(int64_t)h[5] : h[5];
	if (h[0] <= 0 || h[1] <= 0 || h[2] <= 0 || h[3] <= 0 || h[4] <= 0 || vocab <= 0 || h[6] <= 0 ||
	    h[0] % h[3] || h[3] % h[4] || (h[0] / h[3]) % 2) {
		rl_model_err(err, errlen, f.name, "bad llama2.c header (dim %d hidden %d layers %d heads %d kv_heads %d vocab %d seq_len %d)",
			     h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
		rc = -EINVAL;
		goto out;
	}
	struct rl_model_config c = {
		.dim = h[0], .hidden_dim = h[1], .n_layers = h[2], .n_heads = h[3], .n_kv_heads = h[4],
		.head_dim = h[0] / h[3], .vocab_size = (uint32_t)vocab, .max_ctx = h[6],
		.rope_theta = 10000.0f, .rope_scale = 1.0f, .norm_eps = 1e-5f, .rope_halves = 0,
		.tied_embeddings = shared, .bos_id = 1, .eos_id = 2,
	};
	/* sizes in floats; every operand is < 2^31, and the products stay far below 2^64 */
	uint64_t d = c.dim, hd = c.hidden_dim, L = c.n_layers, v = vocab, hs = c.head_dim,
		 qd = (uint64_t)c.n_heads * hs, kvd = (uint64_t)c.n_kv_heads * hs;
	uint64_t sizes[] = {
		v * d, L * d, L * d * qd, L * d * kvd, L * d * kvd, L * qd * d, L * d,
		L * d * hd, L * hd * d, L * d * hd, d, (uint64_t)c.max_ctx * hs / 2 * 2,
		shared ? 0 : v * d };
	uint64_t need = RL_LLAMA2C_HDR_BYTES;
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
		if (__builtin_mul_overflow(sizes[i], 4, &sizes[i]) ||
		    __builtin_add_overflow(need, sizes[i], &need)) {
			need = UINT64_MAX;
			break;
		}
	if (need != f.size) {
		rl_model_err(err, errlen, f.name, "file size %llu does not match the header's shape (dim %d hidden %d layers %d heads %d/%d vocab %d seq_len %d need %llu)",
			     (unsigned long long)f.size, h[0], h[1], h[2], h[3], h[4], h[5], h[6],
			     (unsigned long long)need);
		rc = -EINVAL;
		goto out;
	}
	if ((rc = rl_model_plan_init(p, &c, 3 + 9 * L + (shared ? 0 : 1), 1, f.name, err, errlen)))
		goto out;
	snprintf(p->name, sizeof p->name, "%s", f.name);
	rl_model_plan_own_file(p, 0, &f);
	/* the file groups tensors by kind across layers: one read per layer keeps each read one
	 * contiguous run of the canonical layout */
	uint64_t off = RL_LLAMA2C_HDR_BYTES;
#define ADD(field, layer, n) do { if ((rc = rl_model_plan_add(p, 0, off, (n) * 4, (n), RL_DT_F32, \
	(field), (layer), err, errlen))) { goto out; } off += (n) * 4; } while (0)
#define FIELD(field, layer) ADD(field, layer, rl_model_field_elems(&c, field))
#define EACH(field) for (uint32_t l = 0; l < L; l++) FIELD(field, l)
	FIELD(RL_W_TOK_EMB, 0);
	EACH(RL_W_ATTN_NORM);
	EACH(RL_W_WQ);
	EACH(RL_W_WK);
	EACH(RL_W_WV);
	EACH(RL_W_WO);
	EACH(RL_W_FFN_NORM);
	EACH(RL_W_GATE);
	EACH(RL_W_DOWN);
	EACH(RL_W_UP);
	FIELD(RL_W_OUT_NORM, 0);
	off += sizes[11];              /* freq_cis_real/imag: RoPE tables we recompute */
	if (!shared)
		FIELD(RL_W_WCLS, 0);
#undef EACH
#undef FIELD
#undef ADD
	if ((rc = rl_model_plan_check(p, err, errlen)))
		goto out;
	if (tokenizer_path)
		rc = rl_model_read_tokenizer(tokenizer_path, c.vocab_size, &p->vocab_blob,
					     &p->vocab_blob_size, err, errlen);
out:
	rl_mfile_close(&f);
	if (rc)
		rl_model_plan_close(p);
	return rc;
}

int rl_model_load_llama2c(const char *path, const char *tokenizer_path, struct rl_model **out,
			  char *err, size_t errlen)
{
	return rl_model_load_planned(rl_model_plan_llama2c, path, tokenizer_path, out, err, errlen);
}
