/* cli.h — the `ringlm` command-line client: one function per subcommand. Each lives in its own
 * file (clients/cli/cmd_*.c or bench/bench_*.c), all linked into build/ringlm. */
#ifndef RL_CLI_H
#define RL_CLI_H
struct ringlm;
/* One number of the runtime's stats (ringlm_stats_json's key), -1 when it has none. */
double rl_cli_stat(struct ringlm *c, const char *key);
int rl_cmd_generate(int argc, char **argv);
int rl_cmd_stats(int argc, char **argv);
int rl_cmd_top(int argc, char **argv);
int rl_cmd_reset_cache(int argc, char **argv);
int rl_cmd_mkmodel(int argc, char **argv);
int rl_cmd_tokenize(int argc, char **argv);
int rl_cmd_export_hf(int argc, char **argv);
int rl_cmd_bench_ipc(int argc, char **argv);
int rl_cmd_bench_sched(int argc, char **argv);
int rl_cmd_bench_model(int argc, char **argv);
int rl_cmd_bench_kernels(int argc, char **argv);
int rl_cmd_bench_split(int argc, char **argv);
int rl_cmd_bench_serve(int argc, char **argv);
int rl_cmd_bench_gpu(int argc, char **argv);
int rl_cmd_bench_spec(int argc, char **argv);
int rl_cmd_bench_latency(int argc, char **argv);
int rl_cmd_bench_grammar(int argc, char **argv);
int rl_cmd_bench_schemas(int argc, char **argv);
#endif
