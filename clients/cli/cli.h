/* cli.h — the `ringlm` command-line client: one function per subcommand. Each lives in its own
 * file (clients/cli/cmd_*.c or bench/bench_*.c); a subcommand not linked in reports so. */
#ifndef RL_CLI_H
#define RL_CLI_H
#define RL_WEAK __attribute__((weak))
int rl_cmd_generate(int argc, char **argv) RL_WEAK;
int rl_cmd_stats(int argc, char **argv) RL_WEAK;
int rl_cmd_top(int argc, char **argv) RL_WEAK;
int rl_cmd_mkmodel(int argc, char **argv) RL_WEAK;
int rl_cmd_bench_ipc(int argc, char **argv) RL_WEAK;
int rl_cmd_bench_sched(int argc, char **argv) RL_WEAK;
int rl_cmd_bench_model(int argc, char **argv) RL_WEAK;
int rl_cmd_bench_serve(int argc, char **argv) RL_WEAK;
int rl_cmd_bench_gpu(int argc, char **argv) RL_WEAK;
#endif
