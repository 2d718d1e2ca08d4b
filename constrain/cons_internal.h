/* cons_internal.h — what the constrain/ files share and nothing outside uses: the DFA the
 * regex compiler hands to the mask code, and the schema-to-regex entry. */
#ifndef RL_CONS_INTERNAL_H
#define RL_CONS_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

/* A byte-level DFA: state 0 is dead (every byte leads back to it), every other state can
 * still reach an accepting one. Bytes fall into ncls classes that no transition tells apart,
 * so the table is n x ncls instead of n x 256. */
struct rl_cons_dfa {
	uint32_t n, start, ncls;
	uint8_t  cls[256];
	uint32_t *next;                /* [n * ncls] */
	uint8_t  *accept;              /* [n] */
	uint8_t  *cont;                /* [n] some byte leads to a live state */
};

/* parse flags */
#define RL_RE_INTERNAL 1u              /* the schema compiler's own syntax: (?J:...) matches its
					* body as the inside of a JSON string (quotes, backslashes and
					* control characters escaped), so a 'pattern' can sit there */

int  rl_cons_regex_dfa(const char *re, size_t len, unsigned pflags, uint32_t max_states,
		       struct rl_cons_dfa *out, char *err, size_t errlen);
void rl_cons_dfa_free(struct rl_cons_dfa *d);

/* A handle over vocabulary v that takes d over (d is zeroed; freed on failure). */
struct rl_cons_vocab;
struct rl_cons;
struct rl_cons_opts;
int  rl_cons_from_dfa(const struct rl_cons_vocab *v, struct rl_cons_dfa *d, const struct rl_cons_opts *opts,
		      struct rl_cons **out);

static inline uint32_t rl_cons_dfa_step(const struct rl_cons_dfa *d, uint32_t s, uint8_t b)
{
	return d->next[(size_t)s * d->ncls + d->cls[b]];
}
#endif
