/* libringlm_internal.h — the client handle behind the opaque `struct ringlm`, shared by the
 * two halves of libringlm: libringlm.c (attach, submit, poll, wait, cancel) and tokenize.c
 * (ringlm_tokenize/_detokenize over the vocabulary in the info segment). Not installed. */
#ifndef RL_LIBRINGLM_INTERNAL_H
#define RL_LIBRINGLM_INTERNAL_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "clients/ringlm.h"
#include "ipc/rl_ipc.h"

struct rl_rt;
struct rl_tok;

struct ringlm {
	int      sock, seg_fd, info_fd, rt_efd, cl_efd;
	uint8_t *seg;
	size_t   seg_size;
	const struct rl_info *info;
	size_t   info_size;
	struct rl_seg_hdr hdr;         /* private copy of the geometry */
	struct rl_seg_ctl *ctl;
	struct rl_ring_prod req;
	struct rl_ring_cons evt;
	uint32_t *arena, arena_mask;
	uint32_t arena_head, arena_tail;
	uint32_t *arena_end;           /* [req_cap] arena_head after request slot i */
	/* The request ids are the one state that submit/cancel (the submitting thread) and
	 * poll/wait (the waiting thread) share, so one thread may submit while another waits:
	 * ids_lock guards the free list and id_live. id_tag is written before the submit is
	 * published and read after its events arrive, so the rings order it (req release ->
	 * runtime acquire ... runtime event release -> poll acquire); that chain runs through
	 * the runtime's own mapping of the segment (often another process), which ThreadSanitizer
	 * cannot follow, so the slots are relaxed atomics: free on x86, and visibly race-free. */
	atomic_flag ids_lock;
	uint32_t *free_ids, n_free;    /* request id free list */
	_Atomic uint64_t *id_tag;      /* [max_inflight] */
	uint8_t  *id_live;
	_Atomic uint8_t *id_lp;        /* [max_inflight] rl_req.logprobs of the live request (as id_tag) */
	_Atomic uint8_t *id_plp;       /* [max_inflight] its rl_req.prompt_logprobs */
	const struct rl_lp *lp;        /* [evt_cap] the segment's log-probability slab */
	int      spin_us;
	_Atomic int dead;              /* set once by whichever side notices the runtime gone */
	int      observer;             /* RL_ATTACH_OBSERVE: info segment only, no rings */
	struct rl_rt *embedded;
	pthread_t thread;
	struct rl_tok *tok;            /* tokenizer, built lazily from the info segment (tokenize.c) */
};

/* A checked constraint (constraint.c): its kind and text, sent with each request naming it. */
struct ringlm_constraint {
	int      kind;                 /* RINGLM_CONSTRAINT_* (= enum rl_cons_kind) */
	uint32_t len;
	char     text[];
};

/* Records a one-line, function-specific message for ringlm_last_error() and returns err. */
int rl_client_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
