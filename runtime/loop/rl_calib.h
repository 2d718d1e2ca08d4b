/* rl_calib.h — the automatic budget's start-up calibration (rl_calib.c): before serving, the
 * runtime thread times a few steps of known shapes through the backend and gives them to the
 * step model as its prior (runtime/sched/rl_budget.h). */
#ifndef RL_CALIB_H
#define RL_CALIB_H
#include <stdint.h>
#include "runtime/backend/rl_backend.h"
#include "runtime/sched/rl_budget.h"

struct rl_calib_geom {
	uint32_t n_blocks, block_size;  /* the KV pool the steps may write (nothing owns it yet) */
	uint32_t max_seqs, max_tokens;  /* the step limits (the scheduler's) */
	uint32_t max_ctx;
	uint64_t target_ns;             /* the ITL target: chunks are sized around it; 0: derive it */
	uint64_t max_ns;                /* stop starting new shapes after this much wall time */
};

struct rl_calib_report {
	uint32_t steps;                 /* shapes timed */
	uint64_t ns;                    /* wall time, both runs of every shape */
	uint64_t target_ns;             /* the target in force (given, or derived)*/
};

/* Times the shapes through be (idle: nothing launched) into bud's prior. 0, or the backend's
 * -errno (the calibration stops at the failing step; what was timed stays in). */
int rl_calib_run(struct rl_budget *bud, struct rl_backend *be, const struct rl_calib_geom *g,
		 struct rl_calib_report *rep);

/* A fixed budget's warm-up: one step of a prompt chunk of the whole budget (at most 512 rows)
 * and one of eight decode rows through be, untimed, so the first request finds the weights,
 * the scratch and the step's first KV blocks faulted in, as the calibration leaves them. 0, or
 * the backend's -errno. */
int rl_calib_warm(struct rl_backend *be, const struct rl_calib_geom *g);

#endif
