/* model_shapes.c — the named model shapes (`--model synthetic:SHAPE`, `ringlm mkmodel --shape`):
 * one table, so the cpu and cuda backends and the generator agree on what "llama3-8b" is. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include "runtime/model/rl_model_io.h"

struct shape {
	const char *name;
	uint32_t dim, hidden, layers, heads, kv, vocab, ctx;
	float theta;
	int tied;
	uint32_t head_dim;             /* 0: dim / heads */
	int qwen3;                     /* per-head q/k norms, HF (NEOX) rotation, eps 1e-6 */
	int phi3;                      /* fused qkv and gate_up, HF rotation */
	uint32_t experts, used;        /* mixture of experts; hidden is then an expert's width */
	uint32_t window;               /* Gemma 3 (rl_model_gemma3) with this sliding window */
};

/* 1b keeps Llama-3.2-1B's real 128256-token vocabulary (and its tied embeddings): the
 * classifier is a large share of a 1B model's work, so a smaller vocabulary would flatter it. */
static const struct shape shapes[] = {
	{ "tiny", 64, 172, 5, 8, 4, 512, 512, 10000.0f, 1, 0, 0, 0, 0, 0, 0 },      /* stories260K */
	{ "110m", 768, 2048, 12, 12, 12, 32000, 1024, 10000.0f, 1, 0, 0, 0, 0, 0, 0 },    /* stories110M */
	{ "1b", 2048, 8192, 16, 32, 8, 128256, 8192, 500000.0f, 1, 0, 0, 0, 0, 0, 0 },   /* Llama-3.2-1B */
	{ "llama3-8b", 4096, 14336, 32, 32, 8, 128256, 8192, 500000.0f, 0, 0, 0, 0, 0, 0, 0 },
	/* Qwen3-0.6B: 16 heads of 128 over a width of 1024 (head_dim is not dim / heads) */
	{ "qwen3-0.6b", 1024, 3072, 28, 16, 8, 151936, 40960, 1000000.0f, 1, 128, 1, 0, 0, 0, 0 },
	{ "phi3-mini", 3072, 8192, 32, 32, 32, 32064, 4096, 10000.0f, 0, 0, 0, 1, 0, 0, 0 },   /* Phi-3-mini-4k */
	/* mixture of experts: Qwen3-30B-A3B (128 experts of 768, 8 used), Mixtral-8x7B (8 of 14336, 2 used) */
	{ "qwen3-30b-a3b", 2048, 768, 48, 32, 4, 151936, 40960, 1000000.0f, 0, 128, 1, 0, 128, 8, 0 },
	{ "mixtral-8x7b", 4096, 14336, 32, 32, 8, 32000, 32768, 1000000.0f, 0, 0, 0, 0, 8, 2, 0 },
	/* Gemma-3-1B: 4 heads of 256 sharing one KV head, a 262144-token vocabulary (tied), five
	 * of six layers local with a window of 512 */
	{ "gemma3-1b", 1152, 6912, 26, 4, 1, 262144, 32768, 1000000.0f, 1, 256, 0, 0, 0, 0, 512 },
};

void rl_model_gemma3(struct rl_model_config *c)
{
	c->has_qk_norm = c->rope_halves = c->post_norms = c->ffn_gelu = 1;
	c->emb_scale = sqrtf((float)c->dim);
	c->swa_period = 6;             /* what llama.cpp and HF take when a file does not say */
	c->rope_theta_local = 10000.0f;
}

int rl_model_shape(const char *name, struct rl_model_config *cfg)
{
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		const struct shape *s = &shapes[i];
		if (strcmp(name, s->name))
			continue;
		*cfg = (struct rl_model_config){
			.dim = s->dim, .hidden_dim = s->hidden, .n_layers = s->layers, .n_heads = s->heads,
			.n_kv_heads = s->kv, .head_dim = s->head_dim ? s->head_dim : s->dim / s->heads,
			.vocab_size = s->vocab, .max_ctx = s->ctx, .rope_theta = s->theta, .rope_scale = 1.0f,
			.norm_eps = s->qwen3 ? 1e-6f : 1e-5f, .tied_embeddings = s->tied, .bos_id = 1, .eos_id = 2,
			.has_qk_norm = s->qwen3, .fused_proj = s->phi3, .rope_halves = s->qwen3 || s->phi3,
			.n_experts = s->experts, .n_experts_used = s->used,
		};
		if (s->window) {
			rl_model_gemma3(cfg);
			cfg->norm_eps = 1e-6f;
			cfg->sliding_window = s->window;
		}
		return 0;
	}
	return -ENOENT;
}
