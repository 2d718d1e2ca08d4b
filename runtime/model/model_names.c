/* model_names.c — the one table of weight names and shapes: for every field of the canonical
 * layout (enum rl_wfield), its GGUF name, its Hugging Face safetensors name and its shape in
 * config units. The GGUF and safetensors loaders, the GGUF writer and the layout
 * (rl_model_field_elems) all read it, so a name or a shape is written down once. */
#include <stdio.h>
#include "runtime/model/model_internal.h"

const struct rl_wname rl_wnames[RL_W_NFIELDS] = {
	/*                  rows (out)     cols (in)     per layer  GGUF                   Hugging Face */
	[RL_W_TOK_EMB]   = { RL_WD_VOCAB,  RL_WD_DIM,    0, "token_embd.weight",  "model.embed_tokens.weight" },
	[RL_W_ATTN_NORM] = { RL_WD_DIM,    RL_WD_NONE,   1, "attn_norm.weight",   "input_layernorm.weight" },
	[RL_W_WQ]        = { RL_WD_QD,     RL_WD_DIM,    1, "attn_q.weight",      "self_attn.q_proj.weight" },
	[RL_W_WK]        = { RL_WD_KVD,    RL_WD_DIM,    1, "attn_k.weight",      "self_attn.k_proj.weight" },
	[RL_W_WV]        = { RL_WD_KVD,    RL_WD_DIM,    1, "attn_v.weight",      "self_attn.v_proj.weight" },
	[RL_W_BQ]        = { RL_WD_QD,     RL_WD_NONE,   1, "attn_q.bias",        "self_attn.q_proj.bias" },
	[RL_W_BK]        = { RL_WD_KVD,    RL_WD_NONE,   1, "attn_k.bias",        "self_attn.k_proj.bias" },
	[RL_W_BV]        = { RL_WD_KVD,    RL_WD_NONE,   1, "attn_v.bias",        "self_attn.v_proj.bias" },
	[RL_W_WO]        = { RL_WD_DIM,    RL_WD_QD,     1, "attn_output.weight", "self_attn.o_proj.weight" },
	[RL_W_FFN_NORM]  = { RL_WD_DIM,    RL_WD_NONE,   1, "ffn_norm.weight",    "post_attention_layernorm.weight" },
	[RL_W_GATE]      = { RL_WD_HIDDEN, RL_WD_DIM,    1, "ffn_gate.weight",    "mlp.gate_proj.weight" },
	[RL_W_DOWN]      = { RL_WD_DIM,    RL_WD_HIDDEN, 1, "ffn_down.weight",    "mlp.down_proj.weight" },
	[RL_W_UP]        = { RL_WD_HIDDEN, RL_WD_DIM,    1, "ffn_up.weight",      "mlp.up_proj.weight" },
	[RL_W_OUT_NORM]  = { RL_WD_DIM,    RL_WD_NONE,   0, "output_norm.weight", "model.norm.weight" },
	[RL_W_WCLS]      = { RL_WD_VOCAB,  RL_WD_DIM,    0, "output.weight",      "lm_head.weight" },
	[RL_W_QNORM]     = { RL_WD_HD,     RL_WD_NONE,   1, "attn_q_norm.weight", "self_attn.q_norm.weight" },
	[RL_W_KNORM]     = { RL_WD_HD,     RL_WD_NONE,   1, "attn_k_norm.weight", "self_attn.k_norm.weight" },
	/* Gemma 3's norms of the sublayer outputs (there HF's post_attention_layernorm is this
	 * first one, and ffn_norm is its pre_feedforward_layernorm: rl_wnames_walk) */
	[RL_W_ATTN_POST_NORM] = { RL_WD_DIM, RL_WD_NONE, 1, "post_attention_norm.weight", "post_attention_layernorm.weight" },
	[RL_W_FFN_POST_NORM]  = { RL_WD_DIM, RL_WD_NONE, 1, "post_ffw_norm.weight",       "post_feedforward_layernorm.weight" },
	/* mixture of experts: GGUF stacks the experts in one [experts, rows, cols] tensor; Hugging
	 * Face checkpoints keep each expert apart (rl_wname_expert); Mixtral names its router
	 * block_sparse_moe.gate (rl_wnames_walk) */
	[RL_W_ROUTER]    = { RL_WD_EXP,        RL_WD_DIM,    1, "ffn_gate_inp.weight",  "mlp.gate.weight" },
	[RL_W_GATE_EXPS] = { RL_WD_EXP_HIDDEN, RL_WD_DIM,    1, "ffn_gate_exps.weight", "" },
	[RL_W_UP_EXPS]   = { RL_WD_EXP_HIDDEN, RL_WD_DIM,    1, "ffn_up_exps.weight",   "" },
	[RL_W_DOWN_EXPS] = { RL_WD_EXP_DIM,    RL_WD_HIDDEN, 1, "ffn_down_exps.weight", "" },
};

uint64_t rl_wdim(const struct rl_model_config *c, int dim)
{
	switch (dim) {
	case RL_WD_DIM:    return c->dim;
	case RL_WD_HIDDEN: return c->hidden_dim;
	case RL_WD_QD:     return (uint64_t)c->n_heads * c->head_dim;
	case RL_WD_KVD:    return (uint64_t)c->n_kv_heads * c->head_dim;
	case RL_WD_VOCAB:  return c->vocab_size;
	case RL_WD_HD:     return c->head_dim;
	case RL_WD_EXP:    return c->n_experts;
	case RL_WD_EXP_HIDDEN: return (uint64_t)c->n_experts * c->hidden_dim;
	case RL_WD_EXP_DIM: return (uint64_t)c->n_experts * c->dim;
	}
	return 1;                      /* RL_WD_NONE: a vector's missing dimension */
}

int rl_wname_format(int field, uint32_t layer, int hf, char *buf, size_t n)
{
	const struct rl_wname *w = &rl_wnames[field];
	const char *s = hf ? w->hf : w->gguf;
	int k = !w->per_layer ? snprintf(buf, n, "%s", s)
		: snprintf(buf, n, hf ? "model.layers.%u.%s" : "blk.%u.%s", layer, s);
	return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

int rl_wname_expert(const struct rl_model_config *c, int f, uint32_t layer, uint32_t e, char *buf, size_t n)
{
	const int qwen = c->has_qk_norm;
	const char *part = f == RL_W_GATE_EXPS ? (qwen ? "gate_proj" : "w1") : f == RL_W_UP_EXPS ? (qwen ? "up_proj" : "w3")
			 : qwen ? "down_proj" : "w2";
	int k = snprintf(buf, n, qwen ? "model.layers.%u.mlp.experts.%u.%s.weight"
				     : "model.layers.%u.block_sparse_moe.experts.%u.%s.weight", layer, e, part);
	return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

int rl_wname_fused(const struct rl_model_config *c, int f, uint32_t layer, int hf, char *buf, size_t n,
		   struct rl_wfused *out)
{
	const uint64_t qd = (uint64_t)c->n_heads * c->head_dim, kvd = (uint64_t)c->n_kv_heads * c->head_dim;
	const uint64_t h = c->hidden_dim;
	if (!c->fused_proj)
		return 0;
	switch (f) {
	case RL_W_WQ: *out = (struct rl_wfused){ qd + 2 * kvd, 0 }; break;
	case RL_W_WK: *out = (struct rl_wfused){ qd + 2 * kvd, qd }; break;
	case RL_W_WV: *out = (struct rl_wfused){ qd + 2 * kvd, qd + kvd }; break;
	case RL_W_GATE: *out = (struct rl_wfused){ 2 * h, 0 }; break;
	case RL_W_UP: *out = (struct rl_wfused){ 2 * h, h }; break;
	default: return 0;
	}
	const int qkv = f == RL_W_WQ || f == RL_W_WK || f == RL_W_WV;
	if (hf)
		snprintf(buf, n, qkv ? "model.layers.%u.self_attn.qkv_proj.weight" : "model.layers.%u.mlp.gate_up_proj.weight", layer);
	else
		snprintf(buf, n, qkv ? "blk.%u.attn_qkv.weight" : "blk.%u.ffn_up.weight", layer);
	return 1;
}

int rl_wnames_walk(const struct rl_model_config *c, int hf, rl_wname_fn *fn, void *ctx)
{
	for (int64_t pass = -1; pass < (int64_t)c->n_layers; pass++)  /* globals, then layer by layer */
		for (int f = 0; f < RL_W_NFIELDS; f++) {
			const struct rl_wname *w = &rl_wnames[f];
			const uint32_t l = pass < 0 ? 0 : (uint32_t)pass;
			if (w->per_layer != (pass >= 0) || rl_model_field_off(c, f, l) == UINT64_MAX)
				continue;
			char name[96];
			struct rl_wfused fu;
			const int fused = rl_wname_fused(c, f, l, hf, name, sizeof name, &fu);
			if (fused)
				;
			else if (hf && c->post_norms && f == RL_W_FFN_NORM)   /* Gemma's name for it */
				snprintf(name, sizeof name, "model.layers.%u.pre_feedforward_layernorm.weight", l);
			else if (hf && f == RL_W_ROUTER && !c->has_qk_norm)   /* Mixtral's */
				snprintf(name, sizeof name, "model.layers.%u.block_sparse_moe.gate.weight", l);
			else
				rl_wname_format(f, l, hf, name, sizeof name);
			const uint64_t rows = rl_wdim(c, w->rows), cols = w->cols == RL_WD_NONE ? 0 : rl_wdim(c, w->cols);
			int rc = fn(ctx, name, f, l, rows, cols, fused ? &fu : NULL);
			if (rc)
				return rc;
		}
	return 0;
}
