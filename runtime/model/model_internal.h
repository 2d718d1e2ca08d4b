/* model_internal.h — plumbing shared by the model loaders and the GGUF writer (not a public
 * header): an opened model file, building a plan (rl_model_plan.h; its reads go through
 * model_stream.c), half-precision conversions, one-line error formatting, and the check of a
 * llama2.c-layout vocabulary blob. */
#ifndef RL_MODEL_INTERNAL_H
#define RL_MODEL_INTERNAL_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>
#include "kernels/rl_half.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/model/rl_model_plan.h"

__attribute__((format(printf, 4, 5)))
void rl_model_err(char *err, size_t errlen, const char *name, const char *fmt, ...);
const char *rl_model_basename(const char *path);

int  rl_mfile_open(struct rl_mfile *f, const char *path, char *err, size_t errlen);
void rl_mfile_close(struct rl_mfile *f);
/* Reads exactly len bytes at off; a file that ends early is -EINVAL ("truncated"). */
int  rl_mfile_pread(const struct rl_mfile *f, void *buf, size_t len, uint64_t off,
		    char *err, size_t errlen);
/* Bytes that nelem elements of dtype occupy on disk; -EINVAL when nelem does not fit the
 * dtype's block size or the product overflows. */
int  rl_dt_size(int dtype, uint64_t nelem, uint64_t *nbytes);
/* Bytes and weights of one block of dtype (1 weight for floats): the unit a read may be
 * split at. Both from the table in model_dtype.c. */
void rl_dt_block(int dtype, uint32_t *bytes, uint32_t *elems);


/* Checks a llama2.c tokenizer.bin blob: sane max_token_length, exactly n_vocab entries with
 * lengths within it and non-NaN scores, nothing after. */
int  rl_model_vocab_check(const void *blob, size_t size, uint32_t n_vocab, const char *name,
			  char *err, size_t errlen);

/* ---- the weight-name table (model_names.c) ---- */
/* Shapes in config units. A matrix is [rows = outputs][cols = inputs] (y = W x); a vector
 * (norm, bias) has cols RL_WD_NONE. GGUF lists dimensions innermost first: [cols, rows],
 * or [rows] for a vector. */
/* RL_WD_EXP: experts; RL_WD_EXP_HIDDEN, RL_WD_EXP_DIM: experts x hidden, experts x dim (stacked) */
enum rl_wdim { RL_WD_NONE, RL_WD_DIM, RL_WD_HIDDEN, RL_WD_QD, RL_WD_KVD, RL_WD_VOCAB, RL_WD_HD, RL_WD_EXP,
	       RL_WD_EXP_HIDDEN, RL_WD_EXP_DIM };
struct rl_wname {
	uint8_t rows, cols;            /* enum rl_wdim */
	uint8_t per_layer;             /* 1: "blk.L." / "model.layers.L." precedes the name */
	const char *gguf, *hf;
};
extern const struct rl_wname rl_wnames[RL_W_NFIELDS];   /* indexed by enum rl_wfield */
/* The size of one dimension for c (RL_WD_NONE: 1). */
uint64_t rl_wdim(const struct rl_model_config *c, int dim);
/* The tensor name of (field, layer) in GGUF (hf 0) or Hugging Face (hf 1) naming. */
/* The Hugging Face name of expert e's part of a stacked expert field (GGUF stacks them in one
 * tensor): Mixtral's block_sparse_moe.experts.E.w1/w3/w2, or Qwen3-MoE's (c has q/k norms)
 * mlp.experts.E.gate_proj/up_proj/down_proj. */
int rl_wname_expert(const struct rl_model_config *c, int field, uint32_t layer, uint32_t e, char *buf, size_t n);
int rl_wname_format(int field, uint32_t layer, int hf, char *buf, size_t n);
/* A field stored as rows [row0, row0 + rows) of a fused matrix of `total` rows (Phi-3's qkv
 * and gate_up). */
struct rl_wfused {
	uint64_t total, row0;
};
/* Whether field f of layer lives in a fused matrix for c (c->fused_proj: q, k, v rows of
 * attn_qkv / qkv_proj; gate, then up, rows of ffn_up / gate_up_proj): 1 with the matrix's
 * name (GGUF hf 0, Hugging Face hf 1) and where the field's rows lie; else 0. */
int rl_wname_fused(const struct rl_model_config *c, int f, uint32_t layer, int hf, char *buf, size_t n,
		   struct rl_wfused *out);
/* The planners' walk: every field the shape c has (biases only where the architecture has
 * them, no wcls when tied), globals first, then layer by layer, each as fn(ctx, its name in
 * GGUF (hf 0) or Hugging Face (hf 1) naming, field, layer, rows, cols; cols 0 for a vector;
 * fused: where a field kept in a fused matrix lies, name then being the matrix's, or NULL).
 * Stops at and returns fn's first non-zero result. */
typedef int rl_wname_fn(void *ctx, const char *name, int field, uint32_t layer, uint64_t rows, uint64_t cols,
			const struct rl_wfused *fused);
int rl_wnames_walk(const struct rl_model_config *c, int hf, rl_wname_fn *fn, void *ctx);

/* Adds one to every norm weight of m (a plan's norm_plus_one: Hugging Face Gemma stores w for
 * a norm that scales by 1 + w; GGUF, and every backend, hold 1 + w). */
void rl_model_norms_add_one(struct rl_model *m);

/* rl_model_alloc's shape check without allocating: 0, or -EINVAL and why (no file name). */
int  rl_model_check_shape(const struct rl_model_config *c, char *err, size_t errlen);
/* Canonical element offset of field (enum rl_wfield) of layer; UINT64_MAX for a field the
 * shape does not have (biases without has_qkv_bias, wcls when tied). */
uint64_t rl_model_field_off(const struct rl_model_config *c, int field, uint32_t layer);
/* Elements of one field. */
uint64_t rl_model_field_elems(const struct rl_model_config *c, int field);
/* The rl_model pointer that holds (field, layer). */
float  **rl_model_field_slot(struct rl_model *m, int field, uint32_t layer);
/* The stored view of a matrix field of layer; NULL for a vector field. */
struct rl_wmat *rl_model_field_wmat(struct rl_model *m, int field, uint32_t layer);

/* Plan building, for the loaders. init: zeroes p, checks c's shape (-EINVAL, the reason
 * prefixed with name), and sizes the read list and file table. own_file moves an open file
 * into slot i (f is left closed). add appends the read of (field, layer), checking nelem is
 * that field's size and the bytes lie inside the file. */
int  rl_model_plan_init(struct rl_model_plan *p, const struct rl_model_config *c, size_t max_reads,
			int n_files, const char *name, char *err, size_t errlen);
void rl_model_plan_own_file(struct rl_model_plan *p, int i, struct rl_mfile *f);
int  rl_model_plan_add(struct rl_model_plan *p, int file, uint64_t off, uint64_t nbytes,
		       uint64_t nelem, int dtype, int field, uint32_t layer, char *err, size_t errlen);
/* As add, for nelem weights at element `part` of the field: a field read in parts (Hugging
 * Face keeps each expert of a stacked matrix apart), each part in order, whole rows. */
int  rl_model_plan_add_part(struct rl_model_plan *p, int file, uint64_t off, uint64_t nbytes, uint64_t nelem,
			    int dtype, int field, uint32_t layer, uint64_t part, char *err, size_t errlen);
/* Checks a finished plan reads every segment of the layout exactly once, whole or in
 * consecutive parts (a loader bug otherwise: -EINVAL). */
int  rl_model_plan_check(const struct rl_model_plan *p, char *err, size_t errlen);
/* rl_model_load_X: planner, then rl_model_plan_load. */
int  rl_model_load_planned(int (*planner)(const char *, const char *, struct rl_model_plan *, char *, size_t),
			   const char *path, const char *tokenizer_path, struct rl_model **out,
			   char *err, size_t errlen);
/* Reads a llama2.c tokenizer.bin and checks it has exactly n_vocab tokens. */
int  rl_model_read_tokenizer(const char *path, uint32_t n_vocab, void **blob, uint32_t *size,
			     char *err, size_t errlen);

/* Per-format planners (rl_model_plan_open dispatches by magic) and their fp32 loads. */
/* llama2.c checkpoint header: 7 int32 (dim, hidden, layers, heads, kv_heads, vocab, seq_len) */
#define RL_LLAMA2C_HDR_BYTES 28
int rl_model_plan_llama2c(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
			  char *err, size_t errlen);
int rl_model_plan_gguf(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
		       char *err, size_t errlen);
int rl_model_plan_safetensors(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
			      char *err, size_t errlen);
int rl_model_load_llama2c(const char *path, const char *tokenizer_path, struct rl_model **out,
			  char *err, size_t errlen);
int rl_model_load_gguf(const char *path, const char *tokenizer_path, struct rl_model **out,
		       char *err, size_t errlen);
int rl_model_load_safetensors(const char *path, const char *tokenizer_path, struct rl_model **out,
			      char *err, size_t errlen);

static inline uint32_t rl_rd32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rl_rd64(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
#endif
