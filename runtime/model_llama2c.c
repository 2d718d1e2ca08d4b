/* model_llama2c.c — loader for Karpathy's llama2.c legacy checkpoint (.bin, version 0):
 * a Config of 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
 * a negative vocab_size means a separate classifier follows), then fp32 tensors grouped by
 * kind across layers. The file carries no vocabulary: it comes from a tokenizer.bin. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "model_internal.h"

int rl_model_load_llama2c(const char *path, const char *tokenizer_path, struct rl_model **out,
			  char *err, size_t errlen)
{
	struct rl_mfile f;
	int rc = rl_mfile_open(&f, path, err, errlen);
	if (rc)
		return rc;
	struct rl_model *m = NULL;
	struct rl_tread *t = NULL;
	int32_t h[7];
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
	uint64_t need = 28;
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
	if ((rc = rl_model_alloc(&c, &m, err, errlen))) {
		char why[256];
		snprintf(why, sizeof why, "%s", err);
		rl_model_err(err, errlen, f.name, "%s", why);
		goto out;
	}
	snprintf(m->name, sizeof m->name, "%s", f.name);
	size_t nt = 3 + 9 * L + (shared ? 0 : 1), k = 0;
	if (!(t = calloc(nt, sizeof *t))) {
		rl_model_err(err, errlen, f.name, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	uint64_t off = 28;
#define ADD(ptr, n) do { t[k].off = off; t[k].nelem = (n); t[k].nbytes = (n) * 4; \
	t[k].dtype = RL_DT_F32; t[k].dst = (ptr); off += (n) * 4; k++; } while (0)
	ADD(m->tok_emb, v * d);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].attn_norm, d);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].wq, qd * d);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].wk, kvd * d);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].wv, kvd * d);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].wo, d * qd);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].ffn_norm, d);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].w_gate, hd * d);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].w_down, d * hd);
	for (uint32_t l = 0; l < L; l++) ADD(m->layers[l].w_up, hd * d);
	ADD(m->out_norm, d);
	off += sizes[11];              /* freq_cis_real/imag: RoPE tables we recompute */
	if (!shared)
		ADD(m->wcls, v * d);
#undef ADD
	if ((rc = rl_model_read_tensors(&f, t, k, err, errlen)))
		goto out;
	if (tokenizer_path)
		rc = rl_model_load_tokenizer(m, tokenizer_path, err, errlen);
out:
	free(t);
	rl_mfile_close(&f);
	if (rc) {
		rl_model_destroy(m);
		return rc;
	}
	*out = m;
	return 0;
}
