/* rl_model.h — a loaded Llama-family decoder: config, weights, tokenizer vocabulary.
 *
 * Every loader (GGUF, safetensors + config.json, llama2.c .bin) produces this one struct, with
 * weights converted to fp32 row-major [out][in] (y = W x, as in llama2.c), or (the "stored"
 * load the cpu backend runs on) matrices kept as the file stores them, as struct rl_wmat.
 * The cuda backend streams the file itself. This header is the data contract only: kernels/ and the
 * backends read the struct; runtime/model/ fills it. RoPE pairing is a config field because the
 * formats differ: llama2.c and GGUF "llama" rotate adjacent pairs (2i, 2i+1), Hugging Face
 * safetensors rotate halves (i, i + head_dim/2). Beside the data, one inline: the RoPE frequency
 * of a pair, so that every backend rotates by the same numbers.
 */
#ifndef RL_MODEL_H
#define RL_MODEL_H
#include <stdint.h>
#include <stddef.h>
#include <math.h>

/* Most RoPE frequency factors a config carries (head_dim up to 512 with factors). */
#define RL_ROPE_MAX_FREQS 256

/* Element types of stored weights: floats and the GGML block formats of llama.cpp's
 * quantized files (the table of names, ids, geometry and decoders: runtime/model/model_dtype.c). */
enum rl_dt { RL_DT_F32, RL_DT_F16, RL_DT_BF16, RL_DT_Q8_0, RL_DT_Q4_0, RL_DT_Q4_1, RL_DT_Q5_0,
	     RL_DT_Q5_1, RL_DT_Q2_K, RL_DT_Q3_K, RL_DT_Q4_K, RL_DT_Q5_K, RL_DT_Q6_K, RL_DT_IQ4_NL,
	     RL_DT_IQ4_XS, RL_DT_COUNT };

/* A weight matrix [rows, cols] (y = W x) as stored: row r is row_bytes bytes at
 * data + r * row_bytes, cols weights in whole blocks of blk_elems weights / blk_bytes bytes. */
struct rl_wmat {
	const void *data;
	int32_t  dtype;                /* enum rl_dt */
	uint32_t rows, cols;
	uint32_t blk_elems, blk_bytes; /* floats: 1 and 4 or 2 */
	size_t   row_bytes;
	void   (*decode)(float *y, const uint8_t *blk);   /* one block to fp32 (as ggml); NULL for floats */
	/* Rows [0, packed_rows) are in 16-row groups interleaved for the cpu kernels
	 * (rl_cpu_wmat_pack, kernels/cpu_ops.h owns the layout); the rest, or all when 0, as above. */
	uint32_t packed_rows;
};

#define RL_MAX_EXPERTS_USED 16       /* experts a token may take (Mixtral 2, Qwen3-MoE 8) */

struct rl_model_config {
	uint32_t dim;                  /* model width */
	uint32_t hidden_dim;           /* SwiGLU inner width */
	uint32_t n_layers;
	uint32_t n_heads;              /* query heads */
	uint32_t n_kv_heads;           /* key/value heads (GQA: n_heads % n_kv_heads == 0) */
	uint32_t head_dim;             /* dim / n_heads unless the file says otherwise */
	uint32_t vocab_size;
	uint32_t max_ctx;              /* trained context length */
	float    rope_theta;           /* 10000 for Llama 2, 500000 for Llama 3 */
	float    rope_scale;           /* linear position scaling factor, 1 = none */
	uint32_t rope_dims;            /* dims of a head RoPE rotates, the first ones (Phi-4-mini: 96 of */
	                               /* 128); 0: all (rl_rope_dims) */
	float    norm_eps;             /* RMSNorm epsilon */
	int      rope_halves;          /* 1: rotate (i, i+hd/2) (HF); 0: adjacent pairs */
	int      tied_embeddings;      /* classifier shares tok_emb */
	int      has_qkv_bias;         /* Qwen2-style biases on q/k/v */
	int      has_qk_norm;          /* Qwen3-style RMSNorm of each q and k head before RoPE */
	int      fused_proj;           /* the file fuses q/k/v into one matrix and gate/up into one (Phi-3) */
	uint32_t n_experts;            /* mixture of experts: experts per layer (0: a dense feed-forward); */
	uint32_t n_experts_used;       /* each row takes the top n_experts_used by router softmax, renormalised; */
	                               /* hidden_dim is then each expert's width */
	/* Gemma 3 (all off for the other families): */
	float    emb_scale;            /* token embeddings are multiplied by this (sqrt(dim)); 0: by 1 */
	int      post_norms;           /* each sublayer's output is RMS-normed before the residual add */
	int      ffn_gelu;             /* gate activation GELU (tanh approximation) instead of SiLU */
	float    attn_scale;           /* softmax scale of q.k; 0: 1/sqrt(head_dim) */
	uint32_t sliding_window;       /* local layers see the last this many positions, 0: none */
	uint32_t swa_period;           /* with a window, layer l is global iff l % swa_period == swa_period - 1 */
	                               /* (0: every layer local), as llama.cpp's sliding_window_pattern */
	float    rope_theta_local;     /* RoPE base of the local layers, which rope_scale does not scale */
	uint32_t bos_id, eos_id;       /* UINT32_MAX when none */
	/* Per-pair frequency divisors (Llama 3's rope scaling: GGUF's rope_freqs.weight, or
	 * computed from config.json's rope_scaling "llama3"); 0 pairs = none. */
	uint32_t n_rope_freqs;         /* 0 or rl_rope_dims / 2 */
	float    rope_freqs[RL_ROPE_MAX_FREQS];
	/* LongRoPE (Phi-3 128k): rope_freqs are the factors for contexts up to rope_orig_ctx,
	 * these for longer ones (rl_rope_factors); rope_orig_ctx 0: no second set */
	uint32_t rope_orig_ctx;
	float    rope_attn_factor;     /* LongRoPE's: the rotated dims of q and k scaled by it (0: 1) */
	float    rope_freqs_long[RL_ROPE_MAX_FREQS];
};

/* The dims of a head that RoPE rotates: the first rl_rope_dims(c), pairs (i, i + dims/2) or
 * (2i, 2i+1) among them; the rest pass unrotated. */
static inline uint32_t rl_rope_dims(const struct rl_model_config *c)
{
	return c->rope_dims ? c->rope_dims : c->head_dim;
}

/* The RoPE factors for serving contexts of ctx positions: LongRoPE's long set past its
 * original context (as llama.cpp picks by its context size, HF by the sequence's), else the
 * model's one set; NULL when it has none. */
static inline const float *rl_rope_factors(const struct rl_model_config *c, uint32_t ctx)
{
	if (!c->n_rope_freqs)
		return NULL;
	return c->rope_orig_ctx && ctx > c->rope_orig_ctx ? c->rope_freqs_long : c->rope_freqs;
}

/* The one definition of RoPE pair i's angular frequency (radians per scaled position) that
 * the fast backends use, serving contexts of ctx positions: theta^(-2i/dims), divided by the
 * pair's factor when the model has them (rl_rope_factors). Position p is rotated by
 * p / rope_scale * rl_rope_inv_freq(c, ctx, i). */
static inline float rl_rope_inv_freq(const struct rl_model_config *c, uint32_t ctx, uint32_t i)
{
	float f = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)rl_rope_dims(c));
	const float *fac = rl_rope_factors(c, ctx);
	return fac ? f / fac[i] : f;
}

/* The sliding window of layer l: the positions a query there sees (its own and the
 * window - 1 before it), or 0 for a global layer, which sees them all. */
static inline uint32_t rl_layer_window(const struct rl_model_config *c, uint32_t l)
{
	if (!c->sliding_window || (c->swa_period && l % c->swa_period == c->swa_period - 1))
		return 0;
	return c->sliding_window;
}

/* A local layer's RoPE pair frequency: its own base, no frequency factors (Gemma 3 has none;
 * llama.cpp's freq_base_swa); positions there are not scaled either. */
static inline float rl_rope_inv_freq_local(const struct rl_model_config *c, uint32_t i)
{
	return 1.0f / powf(c->rope_theta_local, (float)(2 * i) / (float)rl_rope_dims(c));
}

/* The softmax scale of q.k. */
static inline float rl_attn_scale(const struct rl_model_config *c)
{
	return c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)c->head_dim);
}

struct rl_layer {
	float *attn_norm;              /* [dim] */
	float *wq;                     /* [n_heads*head_dim, dim] */
	float *wk;                     /* [n_kv_heads*head_dim, dim] */
	float *wv;                     /* [n_kv_heads*head_dim, dim] */
	float *bq, *bk, *bv;           /* biases or NULL */
	float *q_norm, *k_norm;        /* [head_dim] per-head RMSNorm weights (Qwen3), or NULL */
	float *wo;                     /* [dim, n_heads*head_dim] */
	float *attn_post_norm;         /* [dim] the attention output's norm (post_norms), or NULL */
	float *ffn_norm;               /* [dim] */
	float *ffn_post_norm;          /* [dim] the feed-forward output's norm (post_norms), or NULL */
	float *w_gate;                 /* [hidden_dim, dim]  (llama2.c w1) */
	float *w_down;                 /* [dim, hidden_dim]  (llama2.c w2) */
	float *w_up;                   /* [hidden_dim, dim]  (llama2.c w3) */
	/* mixture of experts (n_experts > 0) instead of w_gate/w_down/w_up: */
	float *router;                 /* [n_experts, dim] */
	float *gate_exps, *up_exps;    /* [n_experts * hidden_dim, dim]: expert e's rows from e * hidden_dim */
	float *down_exps;              /* [n_experts * dim, hidden_dim]: expert e's rows from e * dim */
	/* The same matrices as stored: fp32 views of the arrays above after rl_model_alloc, the
	 * file's own bytes after rl_model_load_stored (where the float pointers above are NULL
	 * unless the file's type is F32). */
	struct rl_wmat mq, mk, mv, mo, mgate, mdown, mup;
	struct rl_wmat mrouter, mgate_exps, mup_exps, mdown_exps;
};

struct rl_model {
	struct rl_model_config cfg;
	char   name[64];
	char   chat_template[16];      /* chat template family (rl_chat_name: "llama3", "chatml", ...; tokenizer/rl_chat.h), "" */
	char   chat_system[192];       /* its default system turn (rl_chat_default_system), "" */
	float *tok_emb;                /* [vocab_size, dim] */
	struct rl_layer *layers;       /* [n_layers] */
	float *out_norm;               /* [dim] */
	float *wcls;                   /* [vocab_size, dim]; == tok_emb when tied */
	struct rl_wmat mtok_emb, mwcls;   /* as the layers' mq ...; mwcls == mtok_emb when tied */
	/* Tokenizer vocabulary: llama2.c tokenizer.bin layout (int32 max_token_length, then per
	 * token: float score, int32 len, len bytes) for SentencePiece vocabularies, or the
	 * byte-level BPE blob of tokenizer/rl_bpe.h ("RLB1"); NULL when the model file has none. */
	void    *vocab_blob;
	uint32_t vocab_blob_size;
	void    *mem;                  /* owned storage for all of the above */
	size_t   mem_size;
};


/* Building, loading, writing and naming models is the model module's job:
 * runtime/model/rl_model_io.h. */

#endif
