/* constraint.c — ringlm_constraint_create / _destroy: a constraint's text checked by the same
 * compiler the runtime runs (constrain/), over no vocabulary, so what the engine refuses is
 * refused in the client's call with its one-line reason; the runtime compiles it again over
 * the model's vocabulary when a request names it (and keeps it for the next). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "clients/libringlm_internal.h"
#include "constrain/rl_cons.h"
#include "ipc/rl_wire.h"

_Static_assert(RINGLM_CONSTRAINT_REGEX == RL_CONS_KIND_REGEX && RINGLM_CONSTRAINT_JSON_SCHEMA == RL_CONS_KIND_JSON_SCHEMA &&
	       RINGLM_CONSTRAINT_GBNF == RL_CONS_KIND_GBNF, "ringlm.h constraint kinds differ from the wire");

int ringlm_constraint_create(int kind, const char *text, size_t len, struct ringlm_constraint **out)
{
	if (!out || !text || (kind != RINGLM_CONSTRAINT_REGEX && kind != RINGLM_CONSTRAINT_JSON_SCHEMA &&
			      kind != RINGLM_CONSTRAINT_GBNF))
		return rl_client_fail(-EINVAL, "ringlm_constraint_create: %s", !out || !text ? "text or out is NULL" :
				      "kind must be RINGLM_CONSTRAINT_REGEX, RINGLM_CONSTRAINT_JSON_SCHEMA or RINGLM_CONSTRAINT_GBNF");
	if (!len)
		return rl_client_fail(-EINVAL, "ringlm_constraint_create: empty text");
	if (len > RL_MAX_CONS_BYTES)
		return rl_client_fail(-E2BIG, "ringlm_constraint_create: text of %zu bytes over the limit of %d",
				      len, RL_MAX_CONS_BYTES);
	struct rl_cons_vocab *v;
	int rc = rl_cons_vocab_create(0, NULL, NULL, NULL, NULL, 0, &v);
	if (rc)
		return rl_client_fail(rc, "ringlm_constraint_create: out of memory");
	const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS };
	struct rl_cons *c = NULL;
	char err[256];
	rc = kind == RINGLM_CONSTRAINT_REGEX  ? rl_cons_compile_regex(v, text, len, &opts, &c, err, sizeof err)
	   : kind == RINGLM_CONSTRAINT_GBNF   ? rl_cons_compile_gbnf(v, text, len, &opts, &c, err, sizeof err)
					      : rl_cons_compile_schema(v, text, len, &opts, &c, err, sizeof err);
	rl_cons_destroy(c);
	rl_cons_vocab_destroy(v);
	if (rc)
		return rl_client_fail(rc, "ringlm_constraint_create: %s", err);
	struct ringlm_constraint *k = malloc(sizeof *k + len);
	if (!k)
		return rl_client_fail(-ENOMEM, "ringlm_constraint_create: out of memory");
	k->kind = kind;
	k->len = (uint32_t)len;
	memcpy(k->text, text, len);
	*out = k;
	return 0;
}

void ringlm_constraint_destroy(struct ringlm_constraint *k)
{
	free(k);
}
