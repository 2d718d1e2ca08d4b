/* rl_rt_backend.c — picks and builds the backend for a runtime: sim, cpu (over a model file or a
 * synthetic shape), or cuda (its own shared object, loaded only when asked for, so ringlmd and
 * libringlm run where the CUDA libraries are absent; it streams a model file's weights to the
 * GPU itself, so no fp32 copy of the model is made here). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/backend/rl_backend.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/model/rl_model_plan.h"
#include "runtime/loop/rl_rt_backend.h"
#include "runtime/sched/rl_spec.h"

typedef int (*cuda_create_fn)(const struct rl_model *m, const char *synthetic_shape,
			      const struct rl_backend_params *p, struct rl_backend **out,
			      char *err, size_t errlen);

/* KV blocks for a model when --kv-blocks is not given: room for max_seqs sequences of the
 * full context served (ctx), capped at 1/4 of physical memory but never below one sequence
 * of ctx (the scheduler needs that much to always finish its oldest sequence). */
static uint32_t kv_blocks_for(const struct rl_model_config *c, uint32_t ctx, uint32_t block_size,
			      uint32_t max_seqs, uint32_t elem_bytes)
{
	uint64_t per_block = (uint64_t)block_size * c->n_layers * c->n_kv_heads * c->head_dim * 2 * elem_bytes;
	uint64_t one = (ctx + block_size - 1) / block_size, want = (uint64_t)max_seqs * one;
	uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 4;
	if (want * per_block > mem)
		want = mem / per_block;
	if (want < one)
		want = one;
	return want > UINT32_MAX ? UINT32_MAX : (uint32_t)want;
}

/* The context served: --ctx, else the model's; a --ctx beyond what the model was trained on
 * is allowed (as llama.cpp's -c is) with a warning. */
static uint32_t ctx_for(const struct rl_rt_params *p, const struct rl_model_config *c)
{
	if (p->ctx && p->ctx > c->max_ctx && p->verbose)
		fprintf(stderr, "ringlmd: warning: --ctx %u is larger than the %u tokens the model was trained "
			"on; quality may drop past %u\n", p->ctx, c->max_ctx, c->max_ctx);
	return p->ctx ? p->ctx : c->max_ctx;
}

int rl_cuda_dev_path(const char *lib, char *out, size_t n)
{
	const char *slash = strrchr(lib, '/');
	const char *base = slash ? slash + 1 : lib;
	const int dir = (int)(base - lib);
	const int w = strcmp(base, RL_CUDA_LIB) ? snprintf(out, n, "%s", lib)
						: snprintf(out, n, "%.*s%s", dir, lib, RL_CUDA_DEV_LIB);
	return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

void *rl_cuda_lib_open(int dev, char *err, size_t errlen)
{
	char path[4096];
	void *h = NULL;
	const char *name = dev ? RL_CUDA_DEV_LIB : RL_CUDA_LIB;
	/* RINGLM_CUDA_LIB names another build of the backend (tests: build/cudasim's, the CPU
	 * emulator); it is used alone, so a typo is an error, not a silent fall-back */
	const char *env = getenv("RINGLM_CUDA_LIB");
	if (env && *env) {
		if (rl_cuda_dev_path(env, path, sizeof path) == 0 && (h = dlopen(dev ? path : env, RTLD_NOW | RTLD_LOCAL)))
			return h;
		snprintf(err, errlen, "RINGLM_CUDA_LIB=%s: %s cannot be loaded (%s)", env, dev ? path : env, dlerror());
		return NULL;
	}
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
	if (n > 0) {                   /* beside the binary first (build/ or PREFIX/bin's lib) */
		path[n] = 0;
		char *slash = strrchr(path, '/');
		strcpy(slash ? slash + 1 : path, name);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	if (!h)
		h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		snprintf(err, errlen, "cannot load %s (%s); build with nvcc on PATH and CUDA!=0%s", name, dlerror(),
			 dev ? " (the build tree has it; an install has only " RL_CUDA_LIB ")" : "");
	return h;
}

static int open_cuda(const struct rl_rt_params *p, const struct rl_model *m,
		     struct rl_backend_params *bp, struct rl_backend **be, char *err, size_t errlen)
{
	char why[512];
	void *h = rl_cuda_lib_open(0, why, sizeof why);
	if (!h) {
		snprintf(err, errlen, "--backend cuda: %s", why);
		return -ENOENT;
	}
	cuda_create_fn fn = (cuda_create_fn)(uintptr_t)dlsym(h, "rl_backend_cuda_create");
	if (!fn) {
		snprintf(err, errlen, "--backend cuda: librlcuda.so has no rl_backend_cuda_create");
		dlclose(h);
		return -ENOENT;
	}
	const char *syn = p->model && !strncmp(p->model, "synthetic:", 10) ? p->model + 10 : NULL;
	return fn(syn ? NULL : m, syn, bp, be, err, errlen);
}

int rl_rt_backend_open(const struct rl_rt_params *p, struct rl_backend **be, struct rl_model **model,
		       uint32_t *n_blocks, char *err, size_t errlen)
{
	const char *name = p->backend ? p->backend : (p->model ? "cpu" : "sim");
	struct rl_backend_params bp = {
		.n_kv_blocks = p->kv_blocks ? p->kv_blocks : 16384,
		.block_size = p->block_size,
		.max_batch_tokens = rl_rt_max_budget(p),
		.max_seqs = p->max_seqs,
		.max_ctx = p->ctx,
		.threads = p->threads,
		.cpu_kv_f16 = p->kv_f16,
		.runtime_cpu = p->cpu,
		.cuda_graph_buckets = p->cuda_graph_buckets,
		.cuda_dtype = p->cuda_dtype,
		.cuda_attn = p->cuda_attn,
		/* verification rows the cuda backend sizes its LM head and sampler for */
		.max_draft_rows = p->spec_k ? (rl_rt_max_budget(p) < RL_SPEC_CUDA_ROWS ? rl_rt_max_budget(p)
										     : RL_SPEC_CUDA_ROWS) : 0,
		.sim_vocab = p->sim_vocab,
		.sim_max_ctx = p->ctx,
		.sim_step_ns = p->sim_step_ns,
		.sim_token_ns = p->sim_token_ns,
	};
	*model = NULL;
	int rc;
	if (!strcmp(name, "sim")) {
		rc = rl_backend_sim_create(&bp, be, err, errlen);
		*n_blocks = bp.n_kv_blocks;
		return rc;
	}
	if (!p->model) {
		snprintf(err, errlen, "--backend %s needs --model PATH or --model synthetic:SHAPE", name);
		return -EINVAL;
	}
	if (!strcmp(name, "cuda") && !p->kv_f16) {
		snprintf(err, errlen, "--kv-type f32 is for the cpu backend; the cuda backend keeps its KV "
			 "cache in --cuda-dtype (bf16 or fp16)");
		return -EINVAL;
	}
	int synthetic = !strncmp(p->model, "synthetic:", 10);
	if (!strcmp(name, "cuda") && synthetic) {
		rc = open_cuda(p, NULL, &bp, be, err, errlen);
		*n_blocks = bp.n_kv_blocks;
		return rc;
	}
	if (!strcmp(name, "cuda")) {
		/* the backend streams the file itself; the plan here only checks it (same message as
		 * a load) and gives the shape the default KV pool is sized by */
		struct rl_model_plan plan;
		if ((rc = rl_model_plan_open(p->model, p->tokenizer, &plan, err, errlen)))
			return rc;
		bp.max_ctx = ctx_for(p, &plan.cfg);
		if (!p->kv_blocks)
			bp.n_kv_blocks = kv_blocks_for(&plan.cfg, bp.max_ctx, p->block_size, p->max_seqs, 4);
		rl_model_plan_close(&plan);
		*n_blocks = bp.n_kv_blocks;
		bp.model_path = p->model;
		bp.tokenizer_path = p->tokenizer;
		return open_cuda(p, NULL, &bp, be, err, errlen);
	}
	if (synthetic) {
		struct rl_model_config cfg;
		if (rl_model_shape(p->model + 10, &cfg)) {
			snprintf(err, errlen, "unknown synthetic shape '%s' (try tiny, 110m, 1b, llama3-8b)", p->model + 10);
			return -EINVAL;
		}
		if ((rc = rl_model_alloc(&cfg, model, err, errlen)))
			return rc;
		rl_model_fill_random(*model, 1);
		snprintf((*model)->name, sizeof (*model)->name, "synthetic:%s", p->model + 10);
	} else if ((rc = rl_model_load_stored(p->model, p->tokenizer, model, err, errlen))) {
		/* matrices as the file stores them: the cpu backend computes on those */
		return rc;
	}
	(*model)->cfg.max_ctx = bp.max_ctx = ctx_for(p, &(*model)->cfg);
	if (!p->kv_blocks)
		bp.n_kv_blocks = kv_blocks_for(&(*model)->cfg, bp.max_ctx, p->block_size, p->max_seqs,
					       p->kv_f16 ? 2 : 4);
	*n_blocks = bp.n_kv_blocks;
	return rl_backend_cpu_create(*model, &bp, be, err, errlen);
}

int rl_rt_draft_open(const struct rl_rt_params *p, const struct rl_backend_info *target, uint32_t n_blocks,
		     struct rl_backend **be, struct rl_model **model, char *err, size_t errlen)
{
	const char *name = p->backend ? p->backend : (p->model ? "cpu" : "sim");
	*be = NULL;
	*model = NULL;
	if (strcmp(name, "cpu")) {
		snprintf(err, errlen, "--spec %s: a draft model runs on the cpu backend only; use --spec ngram "
			 "(prompt lookup) with --backend %s", p->spec_model, name);
		return -ENOTSUP;
	}
	int rc = rl_model_load_stored(p->spec_model, NULL, model, err, errlen);
	if (rc)
		return rc;
	const struct rl_model *m = *model;
	/* the same ids for the same tokens: the size, and BOS/EOS where the draft names them (the
	 * two files may carry the vocabulary in different formats, or the draft none) */
	if (m->cfg.vocab_size != target->vocab_size ||
	    (m->cfg.bos_id != UINT32_MAX && m->cfg.bos_id != target->bos_id) ||
	    (m->cfg.eos_id != UINT32_MAX && m->cfg.eos_id != target->eos_id)) {
		snprintf(err, errlen, "--spec %s: its vocabulary (%u tokens, BOS %d, EOS %d) is not the model's (%u, %d, %d); "
			 "a draft model must share the served model's vocabulary", p->spec_model, m->cfg.vocab_size,
			 (int)m->cfg.bos_id, (int)m->cfg.eos_id, target->vocab_size, (int)target->bos_id, (int)target->eos_id);
		rl_model_destroy(*model);
		*model = NULL;
		return -EINVAL;
	}
	(*model)->cfg.max_ctx = target->max_ctx;   /* it drafts over the served context */
	struct rl_backend_params bp = {
		.n_kv_blocks = n_blocks, .block_size = p->block_size, .max_batch_tokens = rl_rt_max_budget(p),
		.max_seqs = p->max_seqs, .max_ctx = target->max_ctx, .threads = p->threads, .cpu_kv_f16 = p->kv_f16,
		.runtime_cpu = p->cpu,
	};
	char why[256];
	if ((rc = rl_backend_cpu_create(*model, &bp, be, why, sizeof why))) {
		snprintf(err, errlen, "--spec %s: %s", p->spec_model, why);
		rl_model_destroy(*model);
		*model = NULL;
	}
	return rc;
}
