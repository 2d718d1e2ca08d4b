/* cmd_mkmodel.c — `ringlm mkmodel`: writes a random-weight Llama GGUF of a named or custom
 * shape (tests and benchmarks at real shapes without downloading checkpoints). The vocabulary
 * is a given tokenizer.bin or a synthetic SentencePiece-style one, so the model tokenizes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include "clients/cli/cli.h"
#include "tokenizer/rl_chat.h"
#include "runtime/model/rl_model_io.h"

struct shape {
	const char *name;
	uint32_t dim, hidden, layers, heads, kv, vocab, ctx;
	float theta;
	int tied;
};

static void usage(void)
{
	fprintf(stderr,
		"usage: ringlm mkmodel --shape tiny|110m|1b|llama3-8b|qwen3-0.6b|phi3-mini|qwen3-30b-a3b|\n"
		"         mixtral-8x7b|gemma3-1b|custom\n"
		"         [--arch llama|qwen3|phi3|gemma3] [--window W] (gemma3: local layers' sliding window)\n"
		"         [--dim D --hidden H --layers L --heads N --kv-heads K --head-dim HD --vocab V --ctx C]\n"
		"         [--experts E --experts-used U] (a mixture of experts: H is then an expert's width)\n"
		"         [--rope-dims R] (RoPE on the first R dims of a head only, as Phi-4-mini's 96 of 128)\n"
		"         [--theta T] --dtype TYPE\n"
		"         [--seed S] [--rope-scaling llama3|longrope] [--chat-template llama3|chatml|mistral|phi3|gemma]\n"
		"         --out FILE.gguf [--tokenizer tokenizer.bin]\n"
		"TYPE: f32, f16, bf16, q8_0, q4_k (the random weights, rounded: with the same --seed\n"
		"and shape, a q4_k file is a 4-bit draft of the f16 one), or q4_0, q4_1, q5_0, q5_1,\n"
		"q2_k, q3_k, q5_k, q6_k, iq4_nl, iq4_xs (seeded random blocks of that format)\n"
		"--rope-scaling llama3: Llama 3.1's (factor 8, low 1, high 4, original context 8192),\n"
		"written as rope_freqs.weight as llama.cpp's converter does; longrope (phi3): Phi-3\n"
		"128k's kind, short factors up to a quarter of --ctx and long ones past it\n"
		"--arch qwen3: per-head q/k norms and HF rotation, written as llama.cpp's qwen3; --arch\n"
		"phi3: fused qkv and gate_up, HF rotation, written as llama.cpp's phi3 (the qwen3-* and\n"
		"phi3-* shapes imply theirs); --arch gemma3: Gemma 3 (q/k norms, post-norms, GELU,\n"
		"embeddings times sqrt(dim), every sixth layer global, the others local with window W,\n"
		"default 512, and RoPE base 10000), written as llama.cpp's gemma3\n");
}

static int parse_u32(const char *opt, const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || !*s || v > UINT32_MAX || s[0] == '-') {
		fprintf(stderr, "ringlm mkmodel: %s wants a number, got '%s'\n", opt, s);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static double mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	double kb = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

int rl_cmd_mkmodel(int argc, char **argv)
{
	const char *shape = NULL, *out = NULL, *tok = NULL, *dt = "f32";
	int rope_llama3 = 0;
	const char *chat = NULL;
	uint64_t seed = 1;
	struct shape s = { "custom", 0, 0, 0, 0, 0, 0, 2048, 10000.0f, 0 };
	uint32_t custom[12] = {0};
	int have[12] = {0}, qwen3 = -1, phi3 = -1, gemma3 = -1;
	static const char *copts[12] = { "--dim", "--hidden", "--layers", "--heads", "--kv-heads", "--vocab", "--ctx",
					 "--head-dim", "--experts", "--experts-used", "--window", "--rope-dims" };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage();
			return 0;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "ringlm mkmodel: %s needs a value\n", a);
			return 2;
		}
		const char *v = argv[++i];
		int k;
		for (k = 0; k < 12 && strcmp(a, copts[k]); k++)
			;
		if (k < 12) {
			if (parse_u32(a, v, &custom[k]))
				return 2;
			have[k] = 1;
		} else if (!strcmp(a, "--arch")) {
			if (strcmp(v, "llama") && strcmp(v, "qwen3") && strcmp(v, "phi3") && strcmp(v, "gemma3")) {
				fprintf(stderr, "ringlm mkmodel: --arch takes llama, qwen3, phi3 or gemma3, not '%s'\n", v);
				return 2;
			}
			qwen3 = !strcmp(v, "qwen3");
			phi3 = !strcmp(v, "phi3");
			gemma3 = !strcmp(v, "gemma3");
		} else if (!strcmp(a, "--shape")) {
			shape = v;
		} else if (!strcmp(a, "--dtype")) {
			dt = v;
		} else if (!strcmp(a, "--seed")) {
			char *end;
			seed = strtoull(v, &end, 0);
			if (*end || !*v) {
				fprintf(stderr, "ringlm mkmodel: --seed wants a number, got '%s'\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--out")) {
			out = v;
		} else if (!strcmp(a, "--tokenizer")) {
			tok = v;
		} else if (!strcmp(a, "--chat-template")) {
			if (rl_chat_from_name(v) == RL_CHAT_NONE) {
				fprintf(stderr, "ringlm mkmodel: --chat-template takes llama3, chatml, mistral, phi3 or gemma, not '%s'\n", v);
				return 2;
			}
			chat = v;
		} else if (!strcmp(a, "--rope-scaling")) {
			if (strcmp(v, "llama3") && strcmp(v, "longrope")) {
				fprintf(stderr, "ringlm mkmodel: --rope-scaling takes llama3 or longrope, not '%s'\n", v);
				return 2;
			}
			rope_llama3 = !strcmp(v, "llama3") ? 1 : 2;
		} else if (!strcmp(a, "--theta")) {
			s.theta = strtof(v, NULL);
		} else {
			fprintf(stderr, "ringlm mkmodel: unknown option %s\n", a);
			usage();
			return 2;
		}
	}
	if (!shape || !out) {
		usage();
		return 2;
	}
	int dtype = rl_dt_from_name(dt);
	if (dtype < 0) {
		char names[256];
		rl_dt_names(names, sizeof names);
		fprintf(stderr, "ringlm mkmodel: --dtype must be one of %s, not '%s'\n", names, dt);
		return 2;
	}
	struct rl_model_config sc = { 0 };
	if (strcmp(shape, "custom")) {
		if (rl_model_shape(shape, &sc)) {
			fprintf(stderr, "ringlm mkmodel: unknown shape '%s'\n", shape);
			return 2;
		}
		float theta = s.theta;
		s = (struct shape){ shape, sc.dim, sc.hidden_dim, sc.n_layers, sc.n_heads, sc.n_kv_heads,
				    sc.vocab_size, sc.max_ctx, sc.rope_theta, sc.tied_embeddings };
		if (theta != 10000.0f)
			s.theta = theta;
	}
	/* options override a named shape; a custom one needs its sizes */
	uint32_t *f[7] = { &s.dim, &s.hidden, &s.layers, &s.heads, &s.kv, &s.vocab, &s.ctx };
	for (int k = 0; k < 7; k++) {
		if (have[k])
			*f[k] = custom[k];
		else if (!strcmp(shape, "custom") && k != 4 && k != 6) {
			fprintf(stderr, "ringlm mkmodel: --shape custom needs %s\n", copts[k]);
			return 2;
		}
	}
	if (!s.kv)
		s.kv = s.heads;
	if (qwen3 < 0) {               /* the shape's family unless --arch says otherwise */
		gemma3 = sc.post_norms;
		qwen3 = sc.has_qk_norm && !gemma3;
		phi3 = sc.fused_proj;
	}
	uint32_t hd = have[7] ? custom[7] : !have[0] && !have[3] && sc.head_dim ? sc.head_dim : s.heads ? s.dim / s.heads : 0;
	struct rl_model_config c = {
		.dim = s.dim, .hidden_dim = s.hidden, .n_layers = s.layers, .n_heads = s.heads,
		.n_kv_heads = s.kv, .head_dim = hd, .vocab_size = s.vocab,
		.max_ctx = s.ctx, .rope_theta = s.theta, .rope_scale = 1.0f, .norm_eps = qwen3 ? 1e-6f : 1e-5f,
		.tied_embeddings = s.tied, .bos_id = 1, .eos_id = 2, .has_qk_norm = qwen3, .fused_proj = phi3,
		.rope_halves = qwen3 || phi3, .n_experts = have[8] ? custom[8] : sc.n_experts,
		.n_experts_used = have[9] ? custom[9] : sc.n_experts_used,
	};
	if (gemma3) {
		rl_model_gemma3(&c);
		c.norm_eps = 1e-6f;
		c.tied_embeddings = 1;         /* as every Gemma 3 */
		c.sliding_window = have[10] ? custom[10] : sc.sliding_window ? sc.sliding_window : 512;
	} else if (have[10]) {
		fprintf(stderr, "ringlm mkmodel: --window is for --arch gemma3\n");
		return 2;
	}
	if (have[11] && (!custom[11] || custom[11] % 2 || custom[11] > c.head_dim)) {
		fprintf(stderr, "ringlm mkmodel: --rope-dims wants an even count of at most head_dim (%u)\n", c.head_dim);
		return 2;
	}
	c.rope_dims = have[11] && custom[11] < c.head_dim ? custom[11] : 0;
	if (!s.heads || (!have[7] && !sc.head_dim && s.dim % s.heads)) {
		fprintf(stderr, "ringlm mkmodel: dim %u is not a multiple of heads %u (or give --head-dim)\n", s.dim, s.heads);
		return 2;
	}
	if (rope_llama3 == 2 && (!c.fused_proj || rl_rope_longrope_synth(&c, c.max_ctx / 4))) {
		fprintf(stderr, "ringlm mkmodel: --rope-scaling longrope is for --arch phi3 with head_dim <= %u\n",
			2 * RL_ROPE_MAX_FREQS);
		return 2;
	}
	if (rope_llama3 == 1 && rl_rope_llama3_freqs(&c, 8.0f, 1.0f, 4.0f, 8192.0f)) {
		fprintf(stderr, "ringlm mkmodel: --rope-scaling llama3 needs head_dim <= %u (has %u)\n",
			2 * RL_ROPE_MAX_FREQS, c.head_dim);
		return 2;
	}
	/* refuse before spending minutes: the file and the fp32 copy in memory must fit */
	const struct rl_dt_info *di = rl_dt_info(dtype);
	double bytes = 4.0 * (double)rl_model_weight_elems(&c), file = bytes / 4 * di->blk_bytes / di->blk_elems;
	char err[512];
	if (rl_model_check_space(out, (uint64_t)file, err, sizeof err)) {
		fprintf(stderr, "ringlm mkmodel: %s\n", err);
		return 1;
	}
	double avail = mem_available();
	if (avail > 0 && bytes > avail) {
		fprintf(stderr, "ringlm mkmodel: generating needs %.1f GiB of memory for fp32 weights, %.1f GiB available\n",
			bytes / 1073741824.0, avail / 1073741824.0);
		return 1;
	}
	struct rl_model *m;
	int rc = rl_model_alloc(&c, &m, err, sizeof err);
	if (rc) {
		fprintf(stderr, "ringlm mkmodel: %s\n", err);
		return 1;
	}
	/* llama.cpp applies Phi-3's vocabulary fix-ups to any model whose name says phi3, and they
	 * need tokens (<|endoftext|>) a random vocabulary does not have */
	snprintf(m->name, sizeof m->name, "ringlm-random-%s", c.fused_proj ? "fused-qkv" : s.name);
	if (chat)
		snprintf(m->chat_template, sizeof m->chat_template, "%s", chat);
	rl_model_fill_random(m, seed);
	if (tok) {
		rc = rl_model_load_tokenizer(m, tok, err, sizeof err);
	} else if ((rc = rl_model_synth_vocab(c.vocab_size, &m->vocab_blob, &m->vocab_blob_size))) {
		snprintf(err, sizeof err, "cannot synthesize a vocabulary of %u tokens (259 or more needed)", c.vocab_size);
	}
	if (!rc && c.post_norms && rl_model_vocab_no_prefix(&m->vocab_blob, &m->vocab_blob_size))
		rc = -ENOMEM;          /* Gemma's vocabulary puts no " " before the text */
	if (!rc)
		rc = rl_gguf_write(m, out, dtype, err, sizeof err);
	rl_model_destroy(m);
	if (rc) {
		fprintf(stderr, "ringlm mkmodel: %s\n", err);
		return 1;
	}
	printf("%s: %s dim %u hidden %u layers %u heads %u/%u vocab %u ctx %u %s, %.1f MiB\n", out, s.name,
	       c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.max_ctx, dt,
	       file / 1048576.0);
	return 0;
}
