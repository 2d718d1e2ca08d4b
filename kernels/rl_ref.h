/* rl_ref.h — the plain CPU reference forward pass (the oracle every fast path is tested against).
 *
 * One sequence, a contiguous KV cache, one token at a time, written like llama2.c and never
 * optimised: if the fast backend and this file disagree, this file is right. Weights are the
 * model's fp32 (dequantized) values; everything computed from them is float64.
 */
#ifndef RL_REF_H
#define RL_REF_H
#include <stdint.h>
#include "kernels/rl_model.h"              /* the one model struct (the data contract runtime/model/ fills); the oracle reads it as is */

struct rl_ref_state {
	uint32_t max_ctx;              /* positions the caches hold (LongRoPE picks its factors by it) */
	double *x;                     /* [dim] residual stream */
	double *xb;                    /* [dim] normed input of a sublayer */
	double *xb2;                   /* [dim] sublayer output before the residual add */
	double *q;                     /* [n_heads * head_dim] */
	double *att_out;               /* [n_heads * head_dim] attention output */
	double *hb;                    /* [hidden_dim] gate, then silu(gate) * up */
	double *hb2;                   /* [hidden_dim] up */
	double *att;                   /* [max_ctx] scores of one head */
	double *logits;                /* [vocab_size] */
	double *k_cache;               /* [n_layers, max_ctx, n_kv_heads * head_dim] */
	double *v_cache;               /* [n_layers, max_ctx, n_kv_heads * head_dim] */
	/* Mixture of experts: the last forward's smallest router margin over its layers (the
	 * last chosen expert's logit less the best unchosen one's); a margin this small is a
	 * near-tie another implementation's rounding may break the other way. INFINITY when
	 * the model has no experts. */
	double route_margin;
};

/* Allocates the state for positions [0, max_ctx). 0 or -ENOMEM. */
int  rl_ref_state_init(struct rl_ref_state *st, const struct rl_model *m, uint32_t max_ctx);
void rl_ref_state_free(struct rl_ref_state *st);
/* Runs token at position pos (all positions < pos must have been run before, in order) and
 * writes logits[vocab_size]. */
void rl_ref_forward(const struct rl_model *m, struct rl_ref_state *st, uint32_t token,
		    uint32_t pos, float *logits);

#endif
