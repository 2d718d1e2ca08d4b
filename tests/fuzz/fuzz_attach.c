/* fuzz_attach.c — libFuzzer harness for the attach handshake, both ends: the runtime's
 * decision on an attach request from a peer (rl_rt_attach_decide), and the client's checks
 * of the reply (rl_attach_rep_check) and of the segment header it then maps (rl_seg_check).
 * Properties: decisions are one of the documented errors with a one-line message; a header
 * the client accepts keeps every region it will touch inside the mapping.
 * Tests: runtime/loop (rl_validate), ipc.
 */
#include <errno.h>
#include "tests/fuzz/fuzz_common.h"
#include "ipc/rl_ipc.h"
#include "runtime/loop/rl_validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct {
		struct rl_attach_req rq;
		uint32_t uid, gid, self_uid, allow[4], flags, n_clients, max_clients;
		struct rl_attach_rep rep;
		int32_t rc, nfds;
		struct rl_seg_hdr h;
		uint64_t mapped;
	} in;
	if (size < sizeof in)
		return 0;
	memcpy(&in, data, sizeof in);

	uid_t au[2] = { in.allow[0], in.allow[1] };
	gid_t ag[2] = { in.allow[2], in.allow[3] };
	struct rl_attach_policy pol = {
		.self_uid = in.self_uid, .allow_uid = au, .n_allow_uid = in.flags % 3,
		.allow_gid = ag, .n_allow_gid = (in.flags >> 2) % 3, .draining = (in.flags >> 4) & 1,
		.n_clients = in.n_clients % 5000, .max_clients = 1 + in.max_clients % 4096,
	};
	char msg[176];
	int d = rl_rt_attach_decide(&in.rq, in.uid, in.gid, &pol, msg, sizeof msg);
	FUZZ_ASSERT(d == 0 || d == -EACCES || d == -EPROTO || d == -ESHUTDOWN || d == -EUSERS);
	FUZZ_ASSERT(memchr(msg, 0, sizeof msg) && msg[0] && !strchr(msg, '\n'));
	if (d == 0)
		FUZZ_ASSERT(in.rq.magic == RL_WIRE_MAGIC && in.rq.version == RL_WIRE_VERSION);
	if (d == 0 && !(in.rq.flags & RL_ATTACH_OBSERVE))   /* a client takes a slot; the owner keeps the last */
		FUZZ_ASSERT(!pol.draining && pol.n_clients < pol.max_clients &&
			    (in.uid == in.self_uid || pol.max_clients == 1 ||
			     (!pol.n_allow_uid && !pol.n_allow_gid) || pol.n_clients + 1 < pol.max_clients));

	int observe = (in.flags >> 5) & 1;
	int c = rl_attach_rep_check(&in.rep, in.rc > 0 ? -in.rc : in.rc, in.nfds, observe);
	FUZZ_ASSERT(c <= 0 && memchr(in.rep.msg, 0, sizeof in.rep.msg));
	if (c == 0 && observe)
		FUZZ_ASSERT(in.nfds == 1 && in.rep.seg_size == 0 && in.rep.info_size >= sizeof(struct rl_info));
	if (c == 0 && !observe)
		FUZZ_ASSERT(in.nfds == 4 && in.rep.seg_size >= sizeof(struct rl_seg_hdr));

	size_t mapped = (size_t)(in.mapped % (1ull << 32));
	if (rl_seg_check(&in.h, mapped) == 0) {
		const struct rl_seg_hdr *h = &in.h;
		FUZZ_ASSERT(h->ctl_off >= sizeof *h && h->ctl_off + sizeof(struct rl_seg_ctl) <= mapped);
		FUZZ_ASSERT(h->req_off + sizeof(struct rl_ring_hdr) + (uint64_t)h->req_cap * sizeof(struct rl_req) <= mapped);
		FUZZ_ASSERT(h->evt_off + sizeof(struct rl_ring_hdr) + (uint64_t)h->evt_cap * sizeof(struct rl_evt) <= mapped);
		FUZZ_ASSERT(h->arena_off + (uint64_t)h->arena_ids * 4 <= mapped);
		FUZZ_ASSERT(h->req_cap && !(h->req_cap & (h->req_cap - 1)) && h->evt_cap && !(h->evt_cap & (h->evt_cap - 1)));
		FUZZ_ASSERT(h->arena_ids && !(h->arena_ids & (h->arena_ids - 1)) && h->max_inflight);
	}
	return 0;
}
