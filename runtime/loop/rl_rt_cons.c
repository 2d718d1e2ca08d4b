/* rl_rt_cons.c — the runtime's constraints (see rl_rt_cons.h for the helper's protocol). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include "runtime/loop/rl_rt_cons.h"
#include "constrain/rl_cons.h"
#include "ipc/rl_clock.h"
#include "ipc/rl_ipc.h"
#include "ipc/rl_wire.h"
#include "tokenizer/rl_tok.h"

enum { H_FREE, H_COMPILING, H_READY };

struct handle {
	struct rl_cons *c;             /* set once READY */
	int      state;
	int      kind;
	char    *text;
	size_t   len;
	uint32_t users;                /* live sequences under it, or waiting for it */
	uint64_t last;                 /* use counter at its last start: the LRU's order */
};

struct seq {
	int      h;                    /* its handle, -1 when unconstrained */
	int      waiting;              /* its handle is being compiled */
	uint32_t state;
	uint32_t *mask;                /* [1 + max_draft][mask words]: the state's, then after each draft */
};

struct job {                           /* R -> H: compile handle h */
	uint32_t h;
	int      kind;
	const char *text;              /* the handle's own copy, untouched while it compiles */
	size_t   len;
};

struct done {                          /* H -> R: handle h compiled (c) or failed (rc, err) */
	uint32_t h;
	int      rc;
	uint32_t prewarmed;            /* masks computed ahead */
	uint64_t ns;                   /* the compile's wall time, prewarm included */
	struct rl_cons *c;
	char     err[256];
};

struct rl_rt_cons {
	struct rl_cons_vocab *v;       /* built at create; read-only after */
	struct handle h[RL_RT_CONS_HANDLES];
	uint64_t uses;
	struct seq *seq;               /* [pool_size] */
	uint32_t pool_size, max_draft, n_waiting;
	uint32_t max_states;           /* each handle's automaton cap (0: the engine's default) */
	struct rl_rt_cons_stats st;    /* R's (from the done records) */
	/* the helper and its two rings (the protocol: rl_rt_cons.h) */
	pthread_t thread;
	int      started, efd, nice;
	struct job jobs[RL_RT_CONS_HANDLES];
	struct done done[RL_RT_CONS_HANDLES];
	_Alignas(64) _Atomic uint32_t job_tail;     /* written by R */
	_Atomic uint32_t bell;                      /* R: += 1 per job and at stop; H sleeps on it */
	_Atomic int stop;
	uint32_t done_head;                         /* R's */
	_Alignas(64) _Atomic uint32_t done_tail;    /* written by H */
	uint32_t job_head;                          /* H's */
};

static const uint64_t one_u64 = 1;

/* ---- the helper thread ------------------------------------------------------------------ */

/* The first mask's failures, as the client is told them */
static int first_mask_error(const struct rl_rt_cons *k, struct rl_cons *c, long allowed, char *err, size_t errlen)
{
	if (rl_cons_error(c)) {
		snprintf(err, errlen, "the grammar needs more than %u automaton states for its first token; simplify it "
			 "(or raise ringlmd --cons-max-states)", rl_rt_cons_max_states(k));
		return rl_cons_error(c) == -E2BIG ? -EOVERFLOW : -ENOMEM;
	}
	if (allowed <= 0) {            /* the compiler prunes to live states */
		snprintf(err, errlen, "the constraint allows no token of this vocabulary to start with");
		return -EINVAL;
	}
	return 0;
}

/* Compiles one job into its done record: the handle with its first mask and the masks of the
 * states nearest its start in its cache, or the failure. */
static void compile(struct rl_rt_cons *k, const struct job *j, struct done *d)
{
	/* an object without additionalProperties takes no other keys (strict mode's reading) */
	const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS, .max_states = k->max_states };
	struct rl_cons *c = NULL;
	d->c = NULL;
	d->err[0] = 0;
	d->prewarmed = 0;
	int rc = j->kind == RL_CONS_KIND_REGEX  ? rl_cons_compile_regex(k->v, j->text, j->len, &opts, &c, d->err, sizeof d->err)
		 : j->kind == RL_CONS_KIND_GBNF ? rl_cons_compile_gbnf(k->v, j->text, j->len, &opts, &c, d->err, sizeof d->err)
						: rl_cons_compile_schema(k->v, j->text, j->len, &opts, &c, d->err, sizeof d->err);
	if (rc) {
		d->rc = rc == -E2BIG ? -EOVERFLOW : rc;   /* over the state cap: what the client is told */
		return;
	}
	uint32_t *m = malloc(rl_cons_mask_words(c) * sizeof *m);
	if (!m) {
		rl_cons_destroy(c);
		d->rc = -ENOMEM;
		return;
	}
	const long allowed = rl_cons_mask(c, rl_cons_start(c), m);
	free(m);
	if ((d->rc = first_mask_error(k, c, allowed, d->err, sizeof d->err))) {
		rl_cons_destroy(c);
		return;
	}
	d->prewarmed = rl_cons_prewarm(c, RL_RT_CONS_PREWARM_NS);
	d->c = c;
}

static void *helper(void *arg)
{
	struct rl_rt_cons *k = arg;
	/* below the step's threads: it takes their cores' spare time first (rl_rt_cons.h) */
	(void)!setpriority(PRIO_PROCESS, (id_t)gettid(), k->nice);
	for (;;) {
		const uint32_t b = atomic_load_explicit(&k->bell, memory_order_acquire);
		if (atomic_load_explicit(&k->stop, memory_order_acquire))
			break;
		if (k->job_head == atomic_load_explicit(&k->job_tail, memory_order_acquire)) {
			rl_futex_wait(&k->bell, b, 0);
			continue;
		}
		const uint32_t t = atomic_load_explicit(&k->done_tail, memory_order_relaxed);
		struct done *d = &k->done[t % RL_RT_CONS_HANDLES];
		const struct job *j = &k->jobs[k->job_head % RL_RT_CONS_HANDLES];
		d->h = j->h;
		const uint64_t t0 = rl_now_ns();
		compile(k, j, d);
		d->ns = rl_now_ns() - t0;
		k->job_head++;
		atomic_store_explicit(&k->done_tail, t + 1, memory_order_release);
		(void)!write(k->efd, &one_u64, 8);
	}
	return NULL;
}

/* ---- create, destroy -------------------------------------------------------------------- */

int rl_rt_cons_create(const void *vocab_blob, size_t vocab_bytes, uint32_t pool_size, uint32_t max_draft,
		      uint32_t max_states, int nice, struct rl_rt_cons **out)
{
	struct rl_rt_cons *k = calloc(1, sizeof *k);
	if (!k || !(k->seq = calloc(pool_size, sizeof *k->seq))) {
		free(k);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < pool_size; i++)
		k->seq[i].h = -1;
	k->pool_size = pool_size;
	k->max_draft = max_draft;
	k->max_states = max_states;
	k->nice = nice;
	k->efd = -1;
	int rc = 0;
	if (vocab_blob) {              /* a model without a usable vocabulary refuses constraints at start */
		struct rl_tok *t;
		char err[160];
		if (!rl_tok_create(vocab_blob, vocab_bytes, &t, err, sizeof err)) {
			rc = rl_cons_vocab_from_tok(t, &k->v);
			rl_tok_destroy(t);
		}
	}
	if (!rc && (k->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		rc = -errno;
	if (!rc && k->v) {
		if ((rc = -pthread_create(&k->thread, NULL, helper, k)) == 0) {
			k->started = 1;
			pthread_setname_np(k->thread, "ringlm-cons");
		}
	}
	if (rc) {
		rl_rt_cons_destroy(k);
		return rc;
	}
	*out = k;
	return 0;
}

void rl_rt_cons_destroy(struct rl_rt_cons *k)
{
	if (!k)
		return;
	if (k->started) {
		atomic_store_explicit(&k->stop, 1, memory_order_release);
		atomic_fetch_add_explicit(&k->bell, 1, memory_order_release);
		rl_futex_wake(&k->bell, 1);
		pthread_join(k->thread, NULL);
	}
	for (uint32_t t = atomic_load(&k->done_tail); k->done_head != t; k->done_head++)
		rl_cons_destroy(k->done[k->done_head % RL_RT_CONS_HANDLES].c);   /* compiled, not taken */
	if (k->efd >= 0)
		close(k->efd);
	for (uint32_t i = 0; i < k->pool_size; i++)
		free(k->seq[i].mask);
	for (int i = 0; i < RL_RT_CONS_HANDLES; i++) {
		rl_cons_destroy(k->h[i].c);
		free(k->h[i].text);
	}
	rl_cons_vocab_destroy(k->v);
	free(k->seq);
	free(k);
}

int rl_rt_cons_fd(const struct rl_rt_cons *k) { return k->efd; }
void rl_rt_cons_get_stats(const struct rl_rt_cons *k, struct rl_rt_cons_stats *st)
{
	*st = k->st;
	st->waiting = k->n_waiting;
}
uint32_t rl_rt_cons_waiting(const struct rl_rt_cons *k) { return k->n_waiting; }
int rl_rt_cons_is_waiting(const struct rl_rt_cons *k, uint32_t seq_id)
{
	return seq_id < k->pool_size && k->seq[seq_id].waiting;
}

/* ---- the runtime thread's side ---------------------------------------------------------- */

static void post(struct rl_rt_cons *k, uint32_t hi)
{
	const struct handle *e = &k->h[hi];
	const uint32_t t = atomic_load_explicit(&k->job_tail, memory_order_relaxed);
	k->jobs[t % RL_RT_CONS_HANDLES] = (struct job){ .h = hi, .kind = e->kind, .text = e->text, .len = e->len };
	atomic_store_explicit(&k->job_tail, t + 1, memory_order_release);
	atomic_fetch_add_explicit(&k->bell, 1, memory_order_release);
	rl_futex_wake(&k->bell, 1);
}

/* The handle for (kind, text): a ready or compiling one, or a new compile posted in a free
 * entry (the least recently started one no sequence uses or waits for). */
static int handle_for(struct rl_rt_cons *k, int kind, const char *text, size_t len, char *err, size_t errlen)
{
	/* a handle that ran out of states is never handed out again: its later masks could miss
	 * tokens, and a fresh compile gives the next request the whole cap */
	for (int i = 0; i < RL_RT_CONS_HANDLES; i++) {
		const struct handle *e = &k->h[i];
		if (e->state != H_FREE && (e->state == H_COMPILING || !rl_cons_error(e->c)) && e->kind == kind &&
		    e->len == len && !memcmp(e->text, text, len))
			return i;
	}
	int free_i = -1;
	for (int i = 0; i < RL_RT_CONS_HANDLES; i++) {
		const struct handle *e = &k->h[i];
		if (e->users || e->state == H_COMPILING)
			continue;
		if (e->state == H_FREE || rl_cons_error(e->c)) {   /* a failed handle is of no more use */
			free_i = i;
			break;
		}
		if (free_i < 0 || e->last < k->h[free_i].last)
			free_i = i;
	}
	if (free_i < 0) {
		snprintf(err, errlen, "more than %d different constraints in use at once", RL_RT_CONS_HANDLES);
		return -EBUSY;
	}
	struct handle *e = &k->h[free_i];
	char *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = 0;
	rl_cons_destroy(e->c);
	free(e->text);
	*e = (struct handle){ .state = H_COMPILING, .kind = kind, .text = copy, .len = len };
	post(k, (uint32_t)free_i);
	return free_i;
}

/* Sequence i, under its ready handle, at the start state with its mask (a cache hit: the
 * helper computed it). On a failure it is under no constraint. */
static int begin(struct rl_rt_cons *k, uint32_t i, char *err, size_t errlen)
{
	struct seq *s = &k->seq[i];
	struct handle *e = &k->h[s->h];
	s->state = rl_cons_start(e->c);
	const int rc = first_mask_error(k, e->c, rl_cons_mask(e->c, s->state, s->mask), err, errlen);
	if (rc) {
		e->users--;
		s->h = -1;
	}
	return rc;
}

int rl_rt_cons_start(struct rl_rt_cons *k, uint32_t seq_id, int kind, const char *text, size_t len,
		     const uint32_t **allow, char *err, size_t errlen)
{
	if (seq_id >= k->pool_size || (kind != RL_CONS_KIND_REGEX && kind != RL_CONS_KIND_JSON_SCHEMA && kind != RL_CONS_KIND_GBNF)) {
		snprintf(err, errlen, "constraint kind %d is not one ringlm knows", kind);
		return -EINVAL;
	}
	if (!k->v) {
		snprintf(err, errlen, "constraints need the model's vocabulary, and this model has none");
		return -ENOTSUP;
	}
	rl_rt_cons_forget(k, seq_id);
	struct seq *s = &k->seq[seq_id];
	/* one buffer a pool entry, kept until destroy: a step in flight may still read the masks of
	 * a sequence cancelled meanwhile (every handle has the vocabulary's mask width) */
	const size_t words = ((size_t)rl_cons_vocab_size(k->v) + 31) / 32;
	if (!s->mask && !(s->mask = malloc((1 + (size_t)k->max_draft) * words * sizeof *s->mask)))
		return -ENOMEM;
	const int hi = handle_for(k, kind, text, len, err, errlen);
	if (hi < 0)
		return hi;
	struct handle *e = &k->h[hi];
	s->h = hi;
	e->users++;
	e->last = ++k->uses;
	if (e->state == H_COMPILING) {
		s->waiting = 1;
		k->n_waiting++;
		return 1;
	}
	const int rc = begin(k, seq_id, err, errlen);
	if (!rc)
		*allow = s->mask;
	return rc;
}

int rl_rt_cons_poll(struct rl_rt_cons *k, rl_rt_cons_ready_fn *ready, void *ctx)
{
	const uint32_t tail = atomic_load_explicit(&k->done_tail, memory_order_acquire);
	int n = 0;
	for (; k->done_head != tail; k->done_head++, n++) {
		const struct done *d = &k->done[k->done_head % RL_RT_CONS_HANDLES];
		struct handle *e = &k->h[d->h];
		e->c = d->c;
		e->state = H_READY;
		k->st.compiles++;
		k->st.compile_ns += d->ns;
		k->st.prewarmed += d->prewarmed;
		for (uint32_t i = 0; i < k->pool_size && e->users; i++) {
			struct seq *s = &k->seq[i];
			if (s->h != (int)d->h || !s->waiting)
				continue;
			s->waiting = 0;
			k->n_waiting--;
			char why[256];
			int rc = d->rc;
			if (rc) {
				snprintf(why, sizeof why, "%s", d->err);
				e->users--;
				s->h = -1;
			} else {
				rc = begin(k, i, why, sizeof why);
			}
			ready(ctx, i, rc, rc ? NULL : s->mask, why);
		}
		if (!e->c) {           /* a failed compile keeps nothing */
			free(e->text);
			*e = (struct handle){ .state = H_FREE };
		}
	}
	return n;
}

int rl_rt_cons_advance(struct rl_rt_cons *k, uint32_t seq_id, uint32_t token)
{
	if (seq_id >= k->pool_size || k->seq[seq_id].h < 0 || k->seq[seq_id].waiting)
		return -EINVAL;
	struct seq *s = &k->seq[seq_id];
	struct rl_cons *c = k->h[s->h].c;
	const long next = rl_cons_advance(c, s->state, token);
	if (next < 0)
		return rl_cons_error(c) ? rl_cons_error(c) : -EINVAL;
	s->state = (uint32_t)next;
	/* an accepting state with no way on allows the end-of-generation ids alone: the next
	 * step samples one and the request ends */
	rl_cons_mask(c, s->state, s->mask);
	/* a mask computed while the grammar met its cap may lack tokens the grammar allows, or
	 * allow none: the request cannot go on under it */
	return rl_cons_error(c);
}

int rl_rt_cons_error(const struct rl_rt_cons *k, uint32_t seq_id)
{
	if (seq_id >= k->pool_size || k->seq[seq_id].h < 0 || k->seq[seq_id].waiting)
		return 0;
	return rl_cons_error(k->h[k->seq[seq_id].h].c);
}

uint32_t rl_rt_cons_max_states(const struct rl_rt_cons *k)
{
	return k->max_states ? k->max_states : 100000;
}

uint32_t rl_rt_cons_drafts(struct rl_rt_cons *k, uint32_t seq_id, uint32_t *draft, uint32_t n, uint32_t cap)
{
	if (seq_id >= k->pool_size || k->seq[seq_id].h < 0 || k->seq[seq_id].waiting)
		return n;
	struct seq *s = &k->seq[seq_id];
	struct rl_cons *c = k->h[s->h].c;
	if (rl_cons_error(c))
		return 0;              /* the sequence ends at its next token (rl_rt_cons_advance) */
	const size_t words = rl_cons_mask_words(c);
	if (cap > k->max_draft)
		cap = k->max_draft;
	uint32_t st = s->state, kept = 0;
	/* the drafts as far as the constraint allows them (a mask after each) */
	for (; kept < n && kept < cap; kept++) {
		const long next = rl_cons_advance(c, st, draft[kept]);
		if (next < 0 || rl_cons_vocab_is_eog(k->v, draft[kept]))
			break;                 /* an end is sampled, never drafted */
		st = (uint32_t)next;
		rl_cons_mask(c, st, s->mask + (kept + 1) * words);
	}
	/* then the bytes the constraint forces, cut into the vocabulary's longest tokens: drafts
	 * the model verifies like any. The cut that reaches the end of the forced bytes is left
	 * out where tokens go on past it (" named" + " " where the model writes " named" + " Lily"):
	 * the choice after the forced bytes is the model's. */
	char forced[64];
	while (kept < cap) {
		const size_t nb = rl_cons_forced(c, st, forced, sizeof forced);
		uint32_t len = 0;
		int longer = 0;
		const long id = nb ? rl_cons_vocab_longest(k->v, forced, nb, &len, &longer) : -1;
		if (id < 0 || (len == nb && longer))
			break;
		const long next = rl_cons_advance(c, st, (uint32_t)id);
		if (next < 0)
			break;
		draft[kept] = (uint32_t)id;
		st = (uint32_t)next;
		rl_cons_mask(c, st, s->mask + ++kept * words);
	}
	/* a grammar that met its cap while its drafts were walked may have left a draft's mask
	 * short, or empty (a step with an empty row fails whole): no drafts, the row of the
	 * sequence's own mask, which came before, alone */
	return rl_cons_error(c) ? 0 : kept;
}

void rl_rt_cons_forget(struct rl_rt_cons *k, uint32_t seq_id)
{
	if (!k || seq_id >= k->pool_size || k->seq[seq_id].h < 0)
		return;
	struct seq *s = &k->seq[seq_id];
	k->h[s->h].users--;
	if (s->waiting) {
		s->waiting = 0;
		k->n_waiting--;
	}
	s->h = -1;                             /* its mask buffer stays (see rl_rt_cons_start) */
}
