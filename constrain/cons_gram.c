/* cons_gram.c — rule sets with recursion (GBNF grammars, recursive JSON Schemas): a pushdown
 * matcher whose terminals are the regex compiler's byte DFAs, determinised lazily into the
 * same table the mask code walks.
 *
 * Build. Each rule's body is parsed into a regex tree where (?&NAME) is a reference. Rules
 * that cannot reach themselves are inlined wherever they are referenced, so only recursion is
 * left to the parser; when none is left the whole set is one DFA (the regex path). Otherwise
 * each remaining rule is lowered into alternatives of elements: T (a maximal run of the tree
 * without references: one terminal DFA), R (a rule) and END; alternation and repetition around
 * references become rules of their own (x* as S ::= x S | "", x{m,n} as nested optionals).
 * Refused by name: left recursion (a rule reaching itself before a byte is read: the
 * expansion would not end; llama.cpp refuses it too) and rules that derive no finite string.
 *
 * Match. A stack is a chain of hash-consed nodes (pos, ds, parent): the top node is inside
 * terminal T at pos in its DFA state ds; the nodes below are return positions (the element to
 * take next when the rule above ends). Returning into an END is skipped when pushing (a tail
 * call), so right recursion does not grow the stack. A configuration is the sorted set of the
 * stacks a prefix can leave (the empty stack, node 0, means a whole match): its id is the
 * handle's state, and its transitions are computed on first use and stored in the table, so a
 * trie walk over a configuration costs what a DFA walk does once its row is known. Nodes hold
 * grammar positions, never input positions, so the same nesting reached twice is the same
 * configuration: masks cached by state stay exact and are reused across siblings.
 * Library code: 0/-errno, never exits. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "constrain/cons_internal.h"
#include "constrain/rl_cons.h"

#define MAX_TREE     (1u << 21)        /* regex tree nodes after inlining */
#define MAX_STACKS   65536u            /* stacks in one configuration */
#define NOT_ENTERED  UINT32_MAX        /* a return node: its element is not begun */
#define INF          (UINT32_MAX / 4)

/* ---- rule sets -------------------------------------------------------------------------- */
int rl_cons_rules_add(struct rl_cons_rules *r, const char *name, const char *body, size_t len)
{
	if (r->n == r->cap) {
		size_t nc = r->cap ? r->cap * 2 : 16;
		char **nn = realloc(r->name, nc * sizeof *nn);
		if (nn)
			r->name = nn;
		char **nb = realloc(r->body, nc * sizeof *nb);
		if (nb)
			r->body = nb;
		size_t *nl = realloc(r->len, nc * sizeof *nl);
		if (nl)
			r->len = nl;
		if (!nn || !nb || !nl)
			return -ENOMEM;
		r->cap = nc;
	}
	char *n = strdup(name), *b = malloc(len + 1);
	if (!n || !b) {
		free(n);
		free(b);
		return -ENOMEM;
	}
	memcpy(b, body, len);
	b[len] = 0;
	r->name[r->n] = n;
	r->body[r->n] = b;
	r->len[r->n++] = len;
	return 0;
}

void rl_cons_rules_free(struct rl_cons_rules *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->name[i]);
		free(r->body[i]);
	}
	free(r->name);
	free(r->body);
	free(r->len);
	memset(r, 0, sizeof *r);
}

/* ---- the program ------------------------------------------------------------------------ */
enum { E_END, E_T, E_R };
struct gelem { uint32_t kind, arg, origin; };   /* origin: the user's rule (for messages) */
struct term { struct rl_cons_dfa d; uint32_t *dist; };
struct snode { uint32_t pos, ds, parent, dist; };

struct rl_cons_gram {
	struct gelem *el;              /* every alternative's elements, each ending in E_END */
	uint32_t nel;
	uint32_t *alt, *ralt, nrule;   /* rule r's alternatives start at alt[ralt[r] .. ralt[r + 1]) */
	struct term *t;
	uint32_t nt;
	uint32_t *suf;                 /* [nel] fewest bytes from a position to its alternative's end */
	uint8_t  cls[256];             /* bytes no terminal tells apart share a class */
	uint32_t ncls;
	/* stack nodes, hash-consed; node 0 is the empty stack */
	struct snode *node;
	uint32_t nnode, capnode;
	struct rl_idtab nhash;         /* the nodes by (pos, ds, parent) */
	/* configurations: sorted node ids, back to back; config 0 is the empty set (dead) */
	uint32_t *pool;
	size_t npool, cappool;
	size_t *coff;                  /* [ncfg + 1] */
	uint32_t *cdist, ncfg, capcfg;
	struct rl_idtab chash;         /* the configurations by their stacks */
	uint32_t max_states;
	int error;
	/* scratch of one step */
	uint32_t *out, nout, capout;
	uint64_t *work, *seen;
	uint32_t nwork, capwork, seencap, nseen;
	uint32_t *seen_at;             /* slots written in seen, to clear them */
};


static void term_free(struct term *t)
{
	rl_cons_dfa_free(&t->d);
	free(t->dist);
}

void rl_cons_gram_free(struct rl_cons_gram *g)
{
	if (!g)
		return;
	for (uint32_t i = 0; i < g->nt; i++)
		term_free(&g->t[i]);
	free(g->t);
	free(g->el);
	free(g->alt);
	free(g->ralt);
	free(g->suf);
	free(g->node);
	free(g->nhash.slot);
	free(g->pool);
	free(g->coff);
	free(g->cdist);
	free(g->chash.slot);
	free(g->out);
	free(g->work);
	free(g->seen);
	free(g->seen_at);
	free(g);
}

int rl_cons_gram_error(const struct rl_cons_gram *g) { return g->error; }

/* ---- lowering rules into the program ---------------------------------------------------- */
struct lalt { struct gelem *e; uint32_t n, cap; };
struct lrule { struct lalt *alt; uint32_t nalt, origin; };
struct lower {
	const struct rl_cons_rules *rules;
	struct rl_re_node **tree;      /* expanded bodies: references to recursive rules only */
	int32_t *pr;                   /* user rule -> program rule, -1 not yet */
	uint32_t *queue, nq;
	struct lrule *r;
	uint32_t nr, capr;
	struct term *t;
	uint32_t nt, capt;
	uint32_t max_states, budget;
	char *err;
	size_t errlen;
	int rc;
};

static int lfail(struct lower *L, int rc, const char *fmt, ...)
{
	if (!L->rc && L->err && L->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(L->err, L->errlen, fmt, ap);
		va_end(ap);
	}
	if (!L->rc)
		L->rc = rc;
	return L->rc;
}

static int has_ref(const struct rl_re_node *x)
{
	if (x->kind == N_REF)
		return 1;
	for (size_t i = 0; i < x->nkid; i++)
		if (has_ref(x->kid[i]))
			return 1;
	return 0;
}
static int only_empty(const struct rl_re_node *x)
{
	if (x->kind == N_EMPTY)
		return 1;
	if (x->kind != N_CAT && x->kind != N_ALT)
		return 0;
	for (size_t i = 0; i < x->nkid; i++)
		if (!only_empty(x->kid[i]))
			return 0;
	return x->kind == N_CAT || x->nkid;
}

/* a deep copy, counted against the inlining budget */
static struct rl_re_node *tree_copy(struct lower *L, const struct rl_re_node *x)
{
	if (!L->budget--) {
		lfail(L, -E2BIG, "the grammar is too large once its non-recursive rules are inlined (over %u pieces)", MAX_TREE);
		return NULL;
	}
	struct rl_re_node *y = calloc(1, sizeof *y);
	if (!y)
		return NULL;
	*y = *x;
	y->r = NULL;
	y->kid = NULL;
	y->nkid = 0;
	if (x->nr && !(y->r = malloc(x->nr * sizeof *y->r))) {
		free(y);
		return NULL;
	}
	if (x->nr)
		memcpy(y->r, x->r, x->nr * sizeof *y->r);
	if (x->nkid && !(y->kid = calloc(x->nkid, sizeof *y->kid))) {
		rl_cons_tree_free(y);
		return NULL;
	}
	for (size_t i = 0; i < x->nkid; i++) {
		if (!(y->kid[i] = tree_copy(L, x->kid[i]))) {
			rl_cons_tree_free(y);
			return NULL;
		}
		y->nkid++;
	}
	return y;
}

/* x with every reference to a rule that is not recursive replaced by that rule's expansion */
static int inline_refs(struct lower *L, struct rl_re_node **px, const uint8_t *rec, struct rl_re_node **done)
{
	struct rl_re_node *x = *px;
	if (x->kind == N_REF && !rec[x->min]) {
		struct rl_re_node *y = tree_copy(L, done[x->min]);
		if (!y)
			return L->rc ? L->rc : lfail(L, -ENOMEM, "out of memory");
		rl_cons_tree_free(x);
		*px = y;
		return 0;
	}
	for (size_t i = 0; i < x->nkid; i++)
		if (inline_refs(L, &x->kid[i], rec, done))
			return L->rc;
	return 0;
}

static int new_rule(struct lower *L, uint32_t nalt, uint32_t origin)
{
	if (RL_GROW(L->r, L->capr, L->nr + 1, 64))
		return lfail(L, -ENOMEM, "out of memory");
	struct lrule *r = &L->r[L->nr];
	r->alt = calloc(nalt ? nalt : 1, sizeof *r->alt);
	if (!r->alt)
		return lfail(L, -ENOMEM, "out of memory");
	r->nalt = nalt;
	r->origin = origin;
	return (int)L->nr++;
}

static int emit(struct lower *L, uint32_t rule, uint32_t alt, uint32_t kind, uint32_t arg, uint32_t origin)
{
	struct lalt *a = &L->r[rule].alt[alt];
	if (RL_GROW(a->e, a->cap, a->n + 1, 8))
		return lfail(L, -ENOMEM, "out of memory");
	a->e[a->n++] = (struct gelem){ kind, arg, origin };
	return 0;
}

/* the fewest bytes from each DFA state to an accepting one */
static uint32_t *dfa_dist(const struct rl_cons_dfa *d)
{
	uint32_t *dist = malloc((d->n ? d->n : 1) * sizeof *dist);
	if (!dist)
		return NULL;
	for (uint32_t s = 0; s < d->n; s++)
		dist[s] = d->accept[s] && s ? 0 : INF;
	for (int changed = 1; changed;) {
		changed = 0;
		for (uint32_t s = 1; s < d->n; s++)
			for (uint32_t c = 0; c < d->ncls; c++) {
				uint32_t t = d->next[(size_t)s * d->ncls + c];
				if (t && dist[t] + 1 < dist[s]) {
					dist[s] = dist[t] + 1;
					changed = 1;
				}
			}
	}
	return dist;
}

static int add_term(struct lower *L, const struct rl_re_node *x, uint32_t origin)
{
	if (RL_GROW(L->t, L->capt, L->nt + 1, 64))
		return lfail(L, -ENOMEM, "out of memory");
	struct term *t = &L->t[L->nt];
	memset(t, 0, sizeof *t);
	char e[200];
	int rc = rl_cons_tree_dfa(x, L->max_states, &t->d, e, sizeof e);
	if (rc == -ENOENT)
		return lfail(L, -EINVAL, "rule '%s': a part of it matches no string", L->rules->name[origin]);
	if (rc)
		return lfail(L, rc, "rule '%s': %s", L->rules->name[origin], e);
	if (!(t->dist = dfa_dist(&t->d))) {
		rl_cons_dfa_free(&t->d);
		return lfail(L, -ENOMEM, "out of memory");
	}
	return (int)L->nt++;
}

static int prog_rule(struct lower *L, uint32_t user)
{
	if (L->pr[user] >= 0)
		return L->pr[user];
	int q = new_rule(L, 0, user);
	if (q < 0)
		return q;
	L->pr[user] = q;
	L->queue[L->nq++] = user;
	return q;
}

static int lower(struct lower *L, struct rl_re_node *x, uint32_t rule, uint32_t alt, uint32_t origin);

/* x lowered as the one alternative of a new rule, or the rule x refers to */
static int rule_of(struct lower *L, struct rl_re_node *x, uint32_t origin)
{
	if (x->kind == N_REF)
		return prog_rule(L, (uint32_t)x->min);
	int q = new_rule(L, 1, origin);
	if (q < 0 || lower(L, x, (uint32_t)q, 0, origin))
		return L->rc ? L->rc : q;
	return q;
}

static int lower(struct lower *L, struct rl_re_node *x, uint32_t rule, uint32_t alt, uint32_t origin)
{
	if (L->rc)
		return L->rc;
	if (!has_ref(x)) {
		if (only_empty(x))
			return 0;
		int t = add_term(L, x, origin);
		return t < 0 ? t : emit(L, rule, alt, E_T, (uint32_t)t, origin);
	}
	switch (x->kind) {
	case N_REF: {
		int q = prog_rule(L, (uint32_t)x->min);
		return q < 0 ? q : emit(L, rule, alt, E_R, (uint32_t)q, origin);
	}
	case N_CAT:
		for (size_t i = 0; i < x->nkid && !L->rc;) {
			if (has_ref(x->kid[i])) {
				lower(L, x->kid[i], rule, alt, origin);
				i++;
				continue;
			}
			size_t j = i;
			while (j < x->nkid && !has_ref(x->kid[j]))
				j++;
			struct rl_re_node run = { .kind = N_CAT, .kid = x->kid + i, .nkid = j - i };
			lower(L, &run, rule, alt, origin);   /* borrows the kids */
			i = j;
		}
		return L->rc;
	case N_ALT: {
		if (x->nkid == 1)
			return lower(L, x->kid[0], rule, alt, origin);
		int q = new_rule(L, (uint32_t)x->nkid, origin);
		for (size_t i = 0; q >= 0 && i < x->nkid && !L->rc; i++)
			lower(L, x->kid[i], (uint32_t)q, (uint32_t)i, origin);
		return L->rc ? L->rc : emit(L, rule, alt, E_R, (uint32_t)q, origin);
	}
	case N_REP: {
		int k = rule_of(L, x->kid[0], origin);
		if (k < 0)
			return k;
		for (int i = 0; i < x->min; i++)
			if (emit(L, rule, alt, E_R, (uint32_t)k, origin))
				return L->rc;
		if (x->max == x->min)
			return 0;
		int q;
		if (x->max < 0) {               /* S ::= K S | "" */
			if ((q = new_rule(L, 2, origin)) < 0 || emit(L, (uint32_t)q, 0, E_R, (uint32_t)k, origin) ||
			    emit(L, (uint32_t)q, 0, E_R, (uint32_t)q, origin))
				return L->rc;
		} else {                        /* O1 ::= K O2 | "", ..., On ::= K | "" */
			q = -1;
			for (int i = x->max - x->min; i > 0; i--) {
				int o = new_rule(L, 2, origin);
				if (o < 0 || emit(L, (uint32_t)o, 0, E_R, (uint32_t)k, origin) ||
				    (q >= 0 && emit(L, (uint32_t)o, 0, E_R, (uint32_t)q, origin)))
					return L->rc;
				q = o;
			}
		}
		return emit(L, rule, alt, E_R, (uint32_t)q, origin);
	}
	}
	return lfail(L, -EINVAL, "rule '%s': an expression this engine cannot lower", L->rules->name[origin]);
}

/* a user rule's alternatives: its body's top-level alternation */
static int lower_rule(struct lower *L, uint32_t user)
{
	struct rl_re_node *x = L->tree[user];
	uint32_t q = (uint32_t)L->pr[user];
	size_t n = x->kind == N_ALT ? x->nkid : 1;
	struct lalt *a = calloc(n, sizeof *a);
	if (!a)
		return lfail(L, -ENOMEM, "out of memory");
	free(L->r[q].alt);
	L->r[q].alt = a;
	L->r[q].nalt = (uint32_t)n;
	for (size_t i = 0; i < n && !L->rc; i++)
		lower(L, x->kind == N_ALT ? x->kid[i] : x, q, (uint32_t)i, user);
	return L->rc;
}

/* byte classes that every terminal respects: the common refinement of their partitions */
static int refine_classes(struct rl_cons_gram *g)
{
	uint16_t *map = malloc(256 * 256 * sizeof *map);
	if (!map)
		return -ENOMEM;
	memset(g->cls, 0, sizeof g->cls);
	g->ncls = 1;
	for (uint32_t i = 0; i < g->nt; i++) {
		const struct rl_cons_dfa *d = &g->t[i].d;
		uint32_t n = 0;
		uint8_t nc[256];
		memset(map, 0xff, 256 * 256 * sizeof *map);
		for (int b = 0; b < 256; b++) {
			uint32_t key = (uint32_t)g->cls[b] << 8 | d->cls[b];
			if (map[key] == 0xffff)
				map[key] = (uint16_t)n++;
			nc[b] = (uint8_t)map[key];
		}
		memcpy(g->cls, nc, sizeof nc);
		g->ncls = n;
	}
	free(map);
	return 0;
}

static const char *rule_name(const struct lower *L, const struct rl_cons_gram *g, uint32_t r)
{
	return L->rules->name[g->el[g->alt[g->ralt[r]]].origin];
}

/* the program's fewest-bytes tables, then the refusals that need them */
static int analyse(struct lower *L, struct rl_cons_gram *g)
{
	uint32_t *rmin = malloc(g->nrule * sizeof *rmin);
	uint8_t *color = calloc(g->nrule, 1);
	uint32_t *stack = malloc((g->nrule + 1) * 2 * sizeof *stack);
	g->suf = malloc(g->nel * sizeof *g->suf);
	if (!rmin || !color || !stack || !g->suf) {
		free(rmin);
		free(color);
		free(stack);
		return lfail(L, -ENOMEM, "out of memory");
	}
	for (uint32_t r = 0; r < g->nrule; r++)
		rmin[r] = INF;
#define ELMIN(e) ((e).kind == E_T ? g->t[(e).arg].dist[g->t[(e).arg].d.start] : (e).kind == E_R ? rmin[(e).arg] : 0)
	for (int changed = 1; changed;) {
		changed = 0;
		for (uint32_t r = 0; r < g->nrule; r++)
			for (uint32_t a = g->ralt[r]; a < g->ralt[r + 1]; a++) {
				uint32_t sum = 0;
				for (uint32_t p = g->alt[a]; g->el[p].kind != E_END; p++) {
					sum += ELMIN(g->el[p]);
					if (sum > INF)
						sum = INF;
				}
				if (sum < rmin[r]) {
					rmin[r] = sum;
					changed = 1;
				}
			}
	}
	for (uint32_t r = 0; r < g->nrule && !L->rc; r++)
		if (rmin[r] >= INF)
			lfail(L, -EINVAL, "rule '%s' derives no finite string (its recursion never ends)", rule_name(L, g, r));
	for (uint32_t a = 0; a < g->ralt[g->nrule] && !L->rc; a++) {
		uint32_t p = g->alt[a], e = p;
		while (g->el[e].kind != E_END)
			e++;
		g->suf[e] = 0;
		for (uint32_t q = e; q-- > p;) {
			uint32_t s = g->suf[q + 1] + ELMIN(g->el[q]);
			g->suf[q] = s > INF ? INF : s;
		}
	}
	/* left recursion: a rule that calls itself at a position every element before is nullable;
	 * depth-first over those calls (color 1 on the path, 2 done) */
	for (uint32_t root = 0; root < g->nrule && !L->rc; root++) {
		if (color[root])
			continue;
		uint32_t sp = 0;
		stack[sp++] = root;
		stack[sp++] = g->ralt[root] < g->ralt[root + 1] ? g->alt[g->ralt[root]] : UINT32_MAX;
		color[root] = 1;
		/* each frame: the rule and the next position to look at (alternatives in turn) */
		uint32_t *altno = calloc(g->nrule, sizeof *altno);
		if (!altno) {
			lfail(L, -ENOMEM, "out of memory");
			break;
		}
		while (sp && !L->rc) {
			uint32_t r = stack[sp - 2], p = stack[sp - 1];
			if (p == UINT32_MAX) {          /* every alternative looked at */
				color[r] = 2;
				sp -= 2;
				continue;
			}
			const struct gelem *e = &g->el[p];
			uint32_t nextp = p + 1;
			if (e->kind == E_END || ELMIN(*e) > 0)
				nextp = UINT32_MAX;     /* this alternative's nullable prefix ends here */
			if (nextp == UINT32_MAX) {
				uint32_t an = ++altno[r];
				nextp = g->ralt[r] + an < g->ralt[r + 1] ? g->alt[g->ralt[r] + an] : UINT32_MAX;
			}
			stack[sp - 1] = nextp;
			if (e->kind == E_R) {
				uint32_t q = e->arg;
				if (color[q] == 1) {
					lfail(L, -EINVAL, "rule '%s' is left-recursive (it reaches itself before reading a byte); "
					      "write the recursion after something it reads, as llama.cpp also requires", rule_name(L, g, q));
					break;
				}
				if (!color[q]) {
					color[q] = 1;
					stack[sp++] = q;
					stack[sp++] = g->ralt[q] < g->ralt[q + 1] ? g->alt[g->ralt[q]] : UINT32_MAX;
				}
			}
		}
		free(altno);
	}
#undef ELMIN
	free(rmin);
	free(color);
	free(stack);
	return L->rc;
}

/* the rules x names, marked and pushed when new */
static void mark_refs(const struct rl_re_node *x, uint8_t *mark, uint32_t *stk, uint32_t *sp)
{
	if (x->kind == N_REF && !mark[x->min]) {
		mark[x->min] = 1;
		stk[(*sp)++] = (uint32_t)x->min;
	}
	for (size_t k = 0; k < x->nkid; k++)
		mark_refs(x->kid[k], mark, stk, sp);
}
/* every non-recursive rule x names is expanded */
static int refs_done(const struct rl_re_node *x, const uint8_t *rec, struct rl_re_node *const *done)
{
	if (x->kind == N_REF && !rec[x->min] && !done[x->min])
		return 0;
	for (size_t k = 0; k < x->nkid; k++)
		if (!refs_done(x->kid[k], rec, done))
			return 0;
	return 1;
}

int rl_cons_gram_build(const struct rl_cons_rules *rules, unsigned pflags, uint32_t max_states, struct rl_cons_gram **out,
		       struct rl_cons_dfa *d, char *err, size_t errlen)
{
	*out = NULL;
	memset(d, 0, sizeof *d);
	if (err && errlen)
		err[0] = 0;
	const size_t n = rules->n;
	if (!n) {
		snprintf(err, errlen, "the grammar has no rules");
		return -EINVAL;
	}
	struct lower L = { .rules = rules, .max_states = max_states ? max_states : 100000, .budget = MAX_TREE,
			   .err = err, .errlen = errlen };
	struct rl_re_node **tree = calloc(n, sizeof *tree), **done = calloc(n, sizeof *done);
	uint8_t *rec = calloc(n, 1), *mark = calloc(n, 1);
	uint32_t *stk = malloc((n + 1) * sizeof *stk);
	L.pr = malloc(n * sizeof *L.pr);
	L.queue = malloc(n * sizeof *L.queue);
	struct rl_cons_gram *g = calloc(1, sizeof *g);
	if (!tree || !done || !rec || !mark || !stk || !L.pr || !L.queue || !g) {
		lfail(&L, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		L.pr[i] = -1;
	for (size_t i = 0; i < n && !L.rc; i++) {
		char e[240];
		int rc = rl_cons_regex_tree(rules->body[i], rules->len[i], (pflags & ~RL_GRAM_KEEP) | RL_RE_RULES,
					    (const char *const *)rules->name, n, &tree[i], e, sizeof e);
		if (rc && n > 1)
			lfail(&L, rc, "rule '%s': %s", rules->name[i], rc == -ENOMEM ? "out of memory" : e);
		else if (rc)
			lfail(&L, rc, "%s", rc == -ENOMEM ? "out of memory" : e);
	}
	/* recursive rules: those that reach themselves (a search from each) */
	for (size_t i = 0; i < n && !L.rc; i++) {
		memset(mark, 0, n);
		uint32_t sp = 0;
		stk[sp++] = (uint32_t)i;
		while (sp && !mark[i])
			mark_refs(tree[stk[--sp]], mark, stk, &sp);
		rec[i] = mark[i] || (pflags & RL_GRAM_KEEP);   /* kept: as a recursive rule is */
	}
	/* expansions: non-recursive rules first, each once the rules it names are done (repeated
	 * passes; the rules that do not recurse form no cycle), then the recursive ones */
	for (int progress = 1; progress && !L.rc;) {
		progress = 0;
		for (size_t i = 0; i < n && !L.rc; i++) {
			if (done[i] || rec[i] || !refs_done(tree[i], rec, done))
				continue;
			if (inline_refs(&L, &tree[i], rec, done))
				break;
			done[i] = tree[i];
			progress = 1;
		}
	}
	for (size_t i = 0; i < n && !L.rc; i++)
		if (rec[i])
			inline_refs(&L, &tree[i], rec, done);
	if (L.rc)
		goto out;
	L.tree = tree;
	if (!has_ref(tree[0])) {               /* regular: one DFA, the regex path */
		int rc = rl_cons_tree_dfa(tree[0], L.max_states, d, err, errlen);
		if (rc == -ENOENT) {
			snprintf(err, errlen, "the grammar matches no string");
			rc = -EINVAL;
		}
		L.rc = rc;
		goto out;
	}
	prog_rule(&L, 0);
	for (uint32_t qi = 0; qi < L.nq && !L.rc; qi++)
		lower_rule(&L, L.queue[qi]);
	if (L.rc)
		goto out;
	/* flatten */
	uint32_t nalt = 0, nel = 0;
	for (uint32_t r = 0; r < L.nr; r++)
		for (uint32_t a = 0; a < L.r[r].nalt; a++, nalt++)
			nel += L.r[r].alt[a].n + 1;
	g->el = malloc(nel * sizeof *g->el);
	g->alt = malloc((nalt ? nalt : 1) * sizeof *g->alt);
	g->ralt = malloc((L.nr + 1) * sizeof *g->ralt);
	if (!g->el || !g->alt || !g->ralt) {
		lfail(&L, -ENOMEM, "out of memory");
		goto out;
	}
	nalt = nel = 0;
	for (uint32_t r = 0; r < L.nr; r++) {
		g->ralt[r] = nalt;
		for (uint32_t a = 0; a < L.r[r].nalt; a++) {
			g->alt[nalt++] = nel;
			const struct lalt *x = &L.r[r].alt[a];
			if (x->n)
				memcpy(g->el + nel, x->e, x->n * sizeof *x->e);
			nel += x->n;
			g->el[nel++] = (struct gelem){ E_END, 0, L.r[r].origin };
		}
	}
	g->ralt[L.nr] = nalt;
	g->nrule = L.nr;
	g->nel = nel;
	g->t = L.t;
	g->nt = L.nt;
	L.t = NULL;
	L.nt = 0;
	g->max_states = L.max_states;
	if (refine_classes(g))
		lfail(&L, -ENOMEM, "out of memory");
	else if (!analyse(&L, g)) {
		*out = g;
		g = NULL;
	}
out:
	for (uint32_t i = 0; i < L.nt; i++)
		term_free(&L.t[i]);
	free(L.t);
	for (uint32_t r = 0; r < L.nr; r++) {
		for (uint32_t a = 0; a < L.r[r].nalt; a++)
			free(L.r[r].alt[a].e);
		free(L.r[r].alt);
	}
	free(L.r);
	for (size_t i = 0; tree && i < n; i++)
		rl_cons_tree_free(tree[i]);
	free(tree);
	free(done);
	free(rec);
	free(mark);
	free(stk);
	free(L.pr);
	free(L.queue);
	rl_cons_gram_free(g);
	return L.rc;
}

/* ---- matching --------------------------------------------------------------------------- */
static uint32_t sat(uint64_t x) { return x > INF ? INF : (uint32_t)x; }

static uint64_t node_hash3(uint32_t pos, uint32_t ds, uint32_t parent)
{
	return rl_hash_mix(((uint64_t)pos << 32 | ds) ^ ((uint64_t)parent * 0x9E3779B97F4A7C15ull));
}
static uint64_t node_hash(const void *ctx, uint32_t id)
{
	const struct snode *x = &((const struct rl_cons_gram *)ctx)->node[id];
	return node_hash3(x->pos, x->ds, x->parent);
}

/* the node (pos, ds, parent), found or added; UINT32_MAX without memory */
static uint32_t node_get(struct rl_cons_gram *g, uint32_t pos, uint32_t ds, uint32_t parent)
{
	uint32_t i = rl_idtab_at(&g->nhash, node_hash3(pos, ds, parent));
	for (; g->nhash.slot[i]; i = rl_idtab_next(&g->nhash, i)) {
		const struct snode *x = &g->node[g->nhash.slot[i] - 1];
		if (x->pos == pos && x->ds == ds && x->parent == parent)
			return g->nhash.slot[i] - 1;
	}
	if (RL_GROW(g->node, g->capnode, g->nnode + 1, 64))
		return UINT32_MAX;
	uint32_t id = g->nnode++;
	uint64_t below = g->node[parent].dist;
	g->node[id] = (struct snode){ pos, ds, parent,
		ds == NOT_ENTERED ? sat(g->suf[pos] + below)
				  : sat((uint64_t)g->t[g->el[pos].arg].dist[ds] + g->suf[pos + 1] + below) };
	return rl_idtab_put(&g->nhash, i, id, 1, g->nnode, node_hash, g) ? UINT32_MAX : id;
}

static int out_add(struct rl_cons_gram *g, uint32_t id)
{
	if (id == UINT32_MAX)
		return -ENOMEM;
	if (g->nout == g->capout) {
		if (g->capout >= MAX_STACKS)
			return -E2BIG;
		if (RL_GROW(g->out, g->capout, g->nout + 1, 64))
			return -ENOMEM;
	}
	g->out[g->nout++] = id;
	return 0;
}

/* (pos, parent) onto the work list unless this step has had it */
static int work_add(struct rl_cons_gram *g, uint32_t pos, uint32_t parent)
{
	uint64_t key = ((uint64_t)pos << 32 | parent) + 1;
	if (g->nseen * 2 >= g->seencap) {
		if (g->seencap >= 4 * MAX_STACKS)
			return -E2BIG;
		uint32_t nc = g->seencap ? g->seencap * 2 : 256;
		uint64_t *ns = calloc(nc, sizeof *ns);
		uint32_t *na = malloc(nc * sizeof *na);
		if (!ns || !na) {
			free(ns);
			free(na);
			return -ENOMEM;
		}
		uint32_t k = 0;
		for (uint32_t q = 0; q < g->nseen; q++) {
			uint64_t v = g->seen[g->seen_at[q]];
			uint32_t j = (uint32_t)rl_hash_mix(v) & (nc - 1);
			while (ns[j])
				j = (j + 1) & (nc - 1);
			ns[j] = v;
			na[k++] = j;
		}
		free(g->seen);
		free(g->seen_at);
		g->seen = ns;
		g->seen_at = na;
		g->seencap = nc;
	}
	uint32_t j = (uint32_t)rl_hash_mix(key) & (g->seencap - 1);
	for (; g->seen[j]; j = (j + 1) & (g->seencap - 1))
		if (g->seen[j] == key)
			return 0;
	g->seen[j] = key;
	g->seen_at[g->nseen++] = j;
	if (RL_GROW(g->work, g->capwork, g->nwork + 1, 64))
		return -ENOMEM;
	g->work[g->nwork++] = key - 1;
	return 0;
}

/* every stack that (pos, parent) leads to before the next byte, into out */
static int expand(struct rl_cons_gram *g)
{
	int rc = 0;
	while (g->nwork && !rc) {
		uint64_t w = g->work[--g->nwork];
		uint32_t pos = (uint32_t)(w >> 32), parent = (uint32_t)w;
		const struct gelem e = g->el[pos];
		if (e.kind == E_END) {
			if (!parent)
				rc = out_add(g, 0);
			else
				rc = work_add(g, g->node[parent].pos, g->node[parent].parent);
		} else if (e.kind == E_T) {
			const struct rl_cons_dfa *d = &g->t[e.arg].d;
			if (d->cont[d->start])
				rc = out_add(g, node_get(g, pos, d->start, parent));
			if (!rc && d->accept[d->start])
				rc = work_add(g, pos + 1, parent);
		} else {
			uint32_t ret = parent;
			if (g->el[pos + 1].kind != E_END && (ret = node_get(g, pos + 1, NOT_ENTERED, parent)) == UINT32_MAX)
				return -ENOMEM;
			for (uint32_t a = g->ralt[e.arg]; a < g->ralt[e.arg + 1] && !rc; a++)
				rc = work_add(g, g->alt[a], ret);
		}
	}
	return rc;
}

static uint64_t cfg_hash_id(const void *ctx, uint32_t id)
{
	const struct rl_cons_gram *g = ctx;
	return rl_hash_ids(g->pool + g->coff[id], (uint32_t)(g->coff[id + 1] - g->coff[id]));
}

/* room in d for one more state (rows of RL_GRAM_UNKNOWN) */
static int table_grow(struct rl_cons_gram *g, struct rl_cons_dfa *d)
{
	if (g->ncfg < g->capcfg)
		return 0;
	uint32_t nc = g->capcfg ? g->capcfg * 2 : 256;
	uint32_t *nx = realloc(d->next, (size_t)nc * g->ncls * sizeof *nx);
	if (nx)
		d->next = nx;
	uint8_t *na = realloc(d->accept, nc), *nn = NULL;
	if (na)
		d->accept = na;
	if (na && (nn = realloc(d->cont, nc)))
		d->cont = nn;
	size_t *no = realloc(g->coff, ((size_t)nc + 1) * sizeof *no);
	if (no)
		g->coff = no;
	uint32_t *nd = realloc(g->cdist, nc * sizeof *nd);
	if (nd)
		g->cdist = nd;
	if (!nx || !na || !nn || !no || !nd)
		return -ENOMEM;
	g->capcfg = nc;
	return 0;
}

/* the configuration of out (sorted here), found or added; its id, or -errno */
static int64_t cfg_get(struct rl_cons_gram *g, struct rl_cons_dfa *d)
{
	uint32_t *s = g->out, k = 0;
	if (g->nout) {                         /* sort, unique (insertion sort: sets are small) */
		for (uint32_t i = 1; i < g->nout; i++) {
			uint32_t v = s[i], j = i;
			while (j && s[j - 1] > v) {
				s[j] = s[j - 1];
				j--;
			}
			s[j] = v;
		}
		k = 1;
		for (uint32_t i = 1; i < g->nout; i++)
			if (s[i] != s[k - 1])
				s[k++] = s[i];
	}
	uint32_t i = rl_idtab_at(&g->chash, rl_hash_ids(s, k));
	for (; g->chash.slot[i]; i = rl_idtab_next(&g->chash, i)) {
		uint32_t id = g->chash.slot[i] - 1;
		size_t o = g->coff[id];
		if (g->coff[id + 1] - o == k && (!k || !memcmp(g->pool + o, s, k * sizeof *s)))
			return id;
	}
	if (g->ncfg >= g->max_states)
		return -E2BIG;
	if (table_grow(g, d))
		return -ENOMEM;
	if (RL_GROW(g->pool, g->cappool, g->npool + k, 64))
		return -ENOMEM;
	if (k)
		memcpy(g->pool + g->npool, s, k * sizeof *s);
	uint32_t id = g->ncfg++, dist = INF;
	g->npool += k;
	g->coff[id + 1] = g->npool;
	for (uint32_t q = 0; q < k; q++)
		if (g->node[s[q]].dist < dist)
			dist = g->node[s[q]].dist;
	g->cdist[id] = id ? dist : UINT32_MAX;
	d->accept[id] = k && s[0] == 0;
	d->cont[id] = k && s[k - 1] != 0;
	for (uint32_t c = 0; c < g->ncls; c++)
		d->next[(size_t)id * g->ncls + c] = id ? RL_GRAM_UNKNOWN : 0;
	d->n = g->ncfg;
	return rl_idtab_put(&g->chash, i, id, 0, g->ncfg, cfg_hash_id, g) ? -ENOMEM : id;
}

static void step_reset(struct rl_cons_gram *g)
{
	for (uint32_t q = 0; q < g->nseen; q++)
		g->seen[g->seen_at[q]] = 0;
	g->nseen = 0;
	g->nout = 0;
	g->nwork = 0;
}

int rl_cons_gram_init(struct rl_cons_gram *g, struct rl_cons_dfa *d)
{
	memset(d, 0, sizeof *d);
	memcpy(d->cls, g->cls, sizeof d->cls);
	d->ncls = g->ncls;
	g->capnode = 1024;
	g->node = malloc(g->capnode * sizeof *g->node);
	rl_idtab_init(&g->nhash, 4096);
	rl_idtab_init(&g->chash, 4096);
	g->coff = NULL;
	if (!g->node || !g->nhash.slot || !g->chash.slot || table_grow(g, d))
		return -ENOMEM;
	g->node[0] = (struct snode){ 0, 0, 0, 0 };
	g->nnode = 1;
	g->coff[0] = 0;
	step_reset(g);
	int64_t dead = cfg_get(g, d);          /* the empty set first: state 0 */
	for (uint32_t a = g->ralt[0]; dead == 0 && a < g->ralt[1]; a++)
		if (work_add(g, g->alt[a], 0))
			return -ENOMEM;
	int rc = dead == 0 ? expand(g) : -ENOMEM;
	int64_t s = rc ? rc : cfg_get(g, d);
	step_reset(g);
	if (s <= 0)
		return s < 0 ? (int)s : -EINVAL;
	d->start = (uint32_t)s;
	return 0;
}

uint32_t rl_cons_gram_fill(struct rl_cons_gram *g, struct rl_cons_dfa *d, uint32_t s, uint8_t byte)
{
	if (g->error || !s || s >= g->ncfg)
		return RL_CONS_DEAD;
	int rc = 0;
	for (size_t q = g->coff[s]; q < g->coff[s + 1] && !rc; q++) {
		const struct snode x = g->node[g->pool[q]];
		if (!g->pool[q])
			continue;                  /* the finished stack takes no byte */
		const struct rl_cons_dfa *t = &g->t[g->el[x.pos].arg].d;
		uint32_t ts = rl_cons_dfa_step(t, x.ds, byte);
		if (!ts)
			continue;
		if (t->cont[ts])
			rc = out_add(g, node_get(g, x.pos, ts, x.parent));
		if (!rc && t->accept[ts] && !(rc = work_add(g, x.pos + 1, x.parent)))
			rc = expand(g);
	}
	int64_t id = rc ? rc : cfg_get(g, d);
	step_reset(g);
	if (id < 0) {
		g->error = (int)id;
		return RL_CONS_DEAD;
	}
	d->next[(size_t)s * g->ncls + g->cls[byte]] = (uint32_t)id;
	return (uint32_t)id;
}

uint32_t rl_cons_gram_dist(const struct rl_cons_gram *g, uint32_t s)
{
	return s && s < g->ncfg && g->cdist[s] < INF ? g->cdist[s] : UINT32_MAX;
}
