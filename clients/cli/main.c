/* main.c — `ringlm` subcommand dispatch. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "clients/cli/cli.h"

struct cmd { const char *name; int (*fn)(int, char **); const char *help; };

static const struct cmd cmds[] = {
	{ "generate", rl_cmd_generate, "stream a generation (--socket NAME | --model PATH)" },
	{ "stats", rl_cmd_stats, "print the runtime's stats (--json)" },
	{ "top", rl_cmd_top, "show the runtime's stats live" },
	{ "reset-cache", rl_cmd_reset_cache, "empty the runtime's prefix cache" },
	{ "mkmodel", rl_cmd_mkmodel, "write a random-weight Llama GGUF" },
	{ "tokenize", rl_cmd_tokenize, "token ids of a text, or the text of ids (--model PATH)" },
	{ "export-hf", rl_cmd_export_hf, "write a GGUF's tokenizer and chat template as a Hugging Face folder" },
};
static const struct cmd benches[] = {
	{ "ipc", rl_cmd_bench_ipc, "ring vs runtime vs Unix socket round trips" },
	{ "sched", rl_cmd_bench_sched, "host time of one scheduling step" },
	{ "model", rl_cmd_bench_model, "CPU backend prefill/decode tokens/s" },
	{ "kernels", rl_cmd_bench_kernels, "CPU decode kernels in cache, memory stream, b8/b1 bound" },
	{ "split", rl_cmd_bench_split, "CPU prefill kernels at 1 and 2 threads (split, private)" },
	{ "serve", rl_cmd_bench_serve, "multi-process serving load, sweeps, plots" },
	{ "gpu", rl_cmd_bench_gpu, "CUDA backend step times, roofline, graphs" },
	{ "spec", rl_cmd_bench_spec, "speculative decoding vs plain decoding, one stream" },
	{ "latency", rl_cmd_bench_latency, "latency tails (to p99.99) beside the machine's floors" },
	{ "grammar", rl_cmd_bench_grammar, "structured output: constraint compile ms, token mask us" },
	{ "schemas", rl_cmd_bench_schemas, "JSON Schema corpus: compiled/refused, soundness, answers to validate" },
};

static void usage(void)
{
	fprintf(stderr, "usage: ringlm COMMAND [options]   (ringlm COMMAND --help for its options)\n");
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
		fprintf(stderr, "  %-14s %s\n", cmds[i].name, cmds[i].help);
	for (size_t i = 0; i < sizeof benches / sizeof *benches; i++)
		fprintf(stderr, "  bench %-8s %s\n", benches[i].name, benches[i].help);
}

static int dispatch(const struct cmd *t, size_t n, const char *what, int argc, char **argv)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(argv[0], t[i].name))
			continue;
		/* `ringlm CMD --help`: whatever the command prints as its usage goes to stdout and
		 * asking for it is not an error */
		for (int k = 1; k < argc; k++)
			if (!strcmp(argv[k], "--help") || !strcmp(argv[k], "-h")) {
				fflush(stderr);
				dup2(STDOUT_FILENO, STDERR_FILENO);
				int rc = t[i].fn(2, (char *[]){ argv[0], "--help", NULL });
				return rc == 2 ? 0 : rc;
			}
		return t[i].fn(argc, argv);
	}
	fprintf(stderr, "ringlm: unknown command '%s%s'; run 'ringlm --help' for the list\n", what, argv[0]);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "bench")) {
		if (argc < 3) {
			usage();
			return 2;
		}
		return dispatch(benches, sizeof benches / sizeof *benches, "bench ", argc - 2, argv + 2);
	}
	return dispatch(cmds, sizeof cmds / sizeof *cmds, "", argc - 1, argv + 1);
}
