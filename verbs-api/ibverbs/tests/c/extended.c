/* The extended verbs of uroce's libibverbs.so.1 (struct verbs_context), from a program of
 * uroce's own compiled against the system's <infiniband/verbs.h>
 * (tools/tests/cabi_debian.rs, c_extended). One process, two devices (the first two
 * of UROCE_DEVICES). The cases are those of rdma-core's pyverbs tests (test_cqex.py,
 * test_qpex.py, test_device.py), written anew:
 *
 *   - the context is extended (verbs_get_ctx), ibv_query_device_ex agrees with
 *     ibv_query_device and reports no completion timestamps, a comp_mask is EINVAL;
 *   - ibv_create_cq_ex with IBV_WC_STANDARD_FLAGS; the timestamp flags are EOPNOTSUPP
 *     (uroce has no device clock);
 *   - ibv_start_poll / ibv_next_poll / ibv_end_poll and every ibv_wc_read_* over RC
 *     SEND_WITH_IMM and RDMA WRITE completions; ENOENT on an empty CQ, and after an
 *     ENOENT from ibv_next_poll and ibv_end_poll no old entry comes back; completions
 *     not reached by a poll stay for ibv_poll_cq; a CQ ex on a completion channel;
 *   - ibv_create_qp_ex with send_ops_flags (TSO, and READ on UD, refused), ibv_qp_to_qp_ex
 *     (NULL for a QP of ibv_create_qp), and the ibv_wr_* calls over RC: a WRITE from an
 *     SGE list and a SEND_WITH_IMM of an inline buffer list in one batch (both
 *     concatenated, as the man page says; rxe does not), a READ back, both atomics,
 *     ibv_wr_abort, a batch with a bad WR posting nothing, ATOMIC WRITE; and UD
 *     SENDs with ibv_wr_set_ud_addr, whose receive reports the sender's QPN as src_qp;
 *
 * Prints "extended: ok" and exits 0, or names the failed check and exits 1.
 * MIT OR Apache-2.0, like the rest of uroce. */

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "extended"
#include "check.h"

#define BUF 65536
#define SPINS 2000000

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq_ex *cqx;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void check_device(struct ibv_context *ctx)
{
	struct ibv_device_attr attr;
	struct ibv_device_attr_ex ex;
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	struct ibv_port_attr port;

	CHECK(verbs_get_ctx(ctx) != NULL, "the context is not a verbs_context");
	CHECK(ibv_query_device(ctx, &attr) == 0, "ibv_query_device");
	memset(&ex, 0xa5, sizeof(ex));
	CHECK(ibv_query_device_ex(ctx, NULL, &ex) == 0, "ibv_query_device_ex");
	/* Every field, not the 3 padding bytes after phys_port_cnt (unspecified in C). */
	CHECK(!memcmp(&ex.orig_attr, &attr,
		      offsetof(struct ibv_device_attr, phys_port_cnt) + 1),
	      "orig_attr differs");
	CHECK(ex.phys_port_cnt_ex == 1, "phys_port_cnt_ex %u", ex.phys_port_cnt_ex);
	CHECK(ex.completion_timestamp_mask == 0 && ex.hca_core_clock == 0,
	      "a device clock is claimed");
	CHECK(ex.device_cap_flags_ex == attr.device_cap_flags, "device_cap_flags_ex");
	CHECK(ex.odp_caps.general_caps == 0 && ex.max_dm_size == 0 && ex.comp_mask == 0,
	      "the extended fields are not 0");
	CHECK(ibv_query_device_ex(ctx, &in, &ex) == EINVAL, "an input comp_mask");
	memset(&port, 0xa5, sizeof(port));
	CHECK(ibv_query_port(ctx, 1, &port) == 0, "ibv_query_port (extended op)");
	CHECK(port.state == IBV_PORT_ACTIVE && port.port_cap_flags2 == 0 &&
		      port.link_layer == IBV_LINK_LAYER_ETHERNET,
	      "port: state %d flags2 %u", port.state, port.port_cap_flags2);
	CHECK(ibv_query_port(ctx, 2, &port) == EINVAL, "port 2 exists");
}

static struct ibv_cq_ex *create_cq_ex(struct ibv_context *ctx, uint64_t wc_flags,
				      struct ibv_comp_channel *ch, void *cq_ctx)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = 64,
		.cq_context = cq_ctx,
		.channel = ch,
		.wc_flags = wc_flags,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
	};

	return ibv_create_cq_ex(ctx, &a);
}

static void open_end(struct end *e, struct ibv_device *dev)
{
	e->ctx = ibv_open_device(dev);
	CHECK(e->ctx, "ibv_open_device");
	check_device(e->ctx);
	CHECK(ibv_query_gid(e->ctx, 1, 0, &e->gid) == 0, "ibv_query_gid");
	e->pd = ibv_alloc_pd(e->ctx);
	CHECK(e->pd, "ibv_alloc_pd");
	e->ch = ibv_create_comp_channel(e->ctx);
	CHECK(e->ch, "ibv_create_comp_channel");

	/* No device clock: the timestamp flags are refused, the standard ones taken. */
	errno = 0;
	CHECK(!create_cq_ex(e->ctx, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, NULL, NULL) &&
		      errno == EOPNOTSUPP,
	      "a completion timestamp CQ");
	errno = 0;
	CHECK(!create_cq_ex(e->ctx, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, NULL,
			    NULL) &&
		      errno == EOPNOTSUPP,
	      "a wall-clock timestamp CQ");
	e->cqx = create_cq_ex(e->ctx, IBV_WC_STANDARD_FLAGS, e->ch, e);
	CHECK(e->cqx, "ibv_create_cq_ex");
	e->cq = ibv_cq_ex_to_cq(e->cqx);
	CHECK(e->cq->cqe >= 64 && e->cq->context == e->ctx && e->cq->cq_context == e,
	      "the CQ's ibv_cq part");

	e->buf = aligned_alloc(4096, BUF);
	memset(e->buf, 0, BUF);
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
				   IBV_ACCESS_MW_BIND);
	CHECK(e->mr, "ibv_reg_mr");
}

/* RESET -> INIT -> RTR -> RTS towards `peer_qpn` at `peer_gid` (RC or UC). */
static void connect_qp(struct ibv_qp *qp, uint32_t peer_qpn, union ibv_gid *peer_gid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};

	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer_qpn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *peer_gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS");
}

static void post_recv(struct ibv_qp *qp, struct end *e, uint64_t wr_id, uint32_t off,
		      uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

/* ibv_start_poll until a completion is there (ENOENT meanwhile), bounded. */
static void start_poll(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr attr = { 0 };
	int i, rc = ENOENT;

	for (i = 0; i < SPINS && rc == ENOENT; i++)
		rc = ibv_start_poll(cq, &attr);
	CHECK(rc == 0, "ibv_start_poll: %d", rc);
}

/* ibv_next_poll until a completion is there, bounded. */
static void next_poll(struct ibv_cq_ex *cq)
{
	int i, rc = ENOENT;

	for (i = 0; i < SPINS && rc == ENOENT; i++)
		rc = ibv_next_poll(cq);
	CHECK(rc == 0, "ibv_next_poll: %d", rc);
}

/* Polls `want` completions with ibv_poll_cq into wc, bounded. */
static void poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int want)
{
	int got = 0, i;

	for (i = 0; i < SPINS && got < want; i++) {
		int n = ibv_poll_cq(cq, want - got, wc + got);

		CHECK(n >= 0, "ibv_poll_cq %d", n);
		got += n;
	}
	CHECK(got == want, "%d of %d completions", got, want);
	for (i = 0; i < want; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS, "completion %d: %s", i,
		      ibv_wc_status_str(wc[i].status));
}

static void post_send(struct end *e, enum ibv_wr_opcode op, uint64_t wr_id, uint32_t off,
		      uint32_t len, uint32_t imm, struct end *peer, uint32_t roff)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(imm),
	}, *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)peer->buf + roff;
	wr.wr.rdma.rkey = peer->mr->rkey;
	CHECK(ibv_post_send(e->qp, &wr, &bad) == 0, "ibv_post_send");
}

/* The CQ ex cases over two RC QPs made by ibv_create_qp. */
static void cq_ex_cases(struct end *a, struct end *b)
{
	struct ibv_wc wc[4];
	struct ibv_poll_cq_attr attr = { 0 };
	int i;

	/* Empty: ENOENT. */
	CHECK(ibv_start_poll(b->cqx, &attr) == ENOENT, "start_poll on an empty CQ");

	/* Three SEND_WITH_IMM into b, read with the poll functions. */
	for (i = 0; i < 3; i++) {
		post_recv(b->qp, b, 10 + i, 64 * i, 64);
		memset(a->buf + 64 * i, 'a' + i, 16 + i);
		post_send(a, IBV_WR_SEND_WITH_IMM, 20 + i, 64 * i, 16 + i, 0x1000 + i, b, 0);
	}
	poll_n(a->cq, wc, 3);
	for (i = 0; i < 3; i++)
		CHECK(wc[i].wr_id == 20u + i && wc[i].opcode == IBV_WC_SEND,
		      "send completion %d", i);
	for (i = 0; i < 3; i++) {
		if (i == 0)
			start_poll(b->cqx);
		else
			next_poll(b->cqx);
		CHECK(b->cqx->status == IBV_WC_SUCCESS && b->cqx->wr_id == 10u + i,
		      "poll %d: status %d wr_id %llu", i, b->cqx->status,
		      (unsigned long long)b->cqx->wr_id);
		CHECK(ibv_wc_read_opcode(b->cqx) == IBV_WC_RECV, "opcode");
		CHECK(ibv_wc_read_byte_len(b->cqx) == 16u + i, "byte_len %u",
		      ibv_wc_read_byte_len(b->cqx));
		CHECK(ntohl(ibv_wc_read_imm_data(b->cqx)) == 0x1000u + i, "imm_data");
		CHECK(ibv_wc_read_wc_flags(b->cqx) & IBV_WC_WITH_IMM, "wc_flags");
		CHECK(ibv_wc_read_qp_num(b->cqx) == b->qp->qp_num, "qp_num");
		CHECK(ibv_wc_read_vendor_err(b->cqx) == 0, "vendor_err");
		CHECK(ibv_wc_read_slid(b->cqx) == 0 && ibv_wc_read_dlid_path_bits(b->cqx) == 0,
		      "RoCE has no LIDs");
		(void)ibv_wc_read_sl(b->cqx);
		(void)ibv_wc_read_src_qp(b->cqx);
		CHECK(!memcmp(b->buf + 64 * i, a->buf + 64 * i, 16 + i), "received bytes");
	}
	/* Past the last: ENOENT, and after ibv_end_poll no old entry comes back. */
	CHECK(ibv_next_poll(b->cqx) == ENOENT, "next_poll past the last");
	ibv_end_poll(b->cqx);
	CHECK(ibv_start_poll(b->cqx, &attr) == ENOENT, "an old entry handed out again");
	CHECK(ibv_poll_cq(b->cq, 4, wc) == 0, "ibv_poll_cq after the poll");

	/* RDMA WRITE with immediate: IBV_WC_RECV_RDMA_WITH_IMM; a poll ended early leaves
	 * the next completion to ibv_poll_cq. */
	post_recv(b->qp, b, 30, 0, 0);
	post_recv(b->qp, b, 31, 0, 0);
	memset(a->buf + 4096, 'w', 100);
	post_send(a, IBV_WR_RDMA_WRITE_WITH_IMM, 40, 4096, 100, 0xabcd, b, 8192);
	post_send(a, IBV_WR_RDMA_WRITE_WITH_IMM, 41, 4096, 50, 0xabce, b, 8192 + 100);
	start_poll(a->cqx);
	CHECK(a->cqx->wr_id == 40 && ibv_wc_read_opcode(a->cqx) == IBV_WC_RDMA_WRITE,
	      "write completion");
	next_poll(a->cqx);
	CHECK(a->cqx->wr_id == 41, "second write completion");
	ibv_end_poll(a->cqx);
	start_poll(b->cqx);
	CHECK(b->cqx->wr_id == 30 && ibv_wc_read_opcode(b->cqx) == IBV_WC_RECV_RDMA_WITH_IMM &&
		      ntohl(ibv_wc_read_imm_data(b->cqx)) == 0xabcd &&
		      ibv_wc_read_byte_len(b->cqx) == 100,
	      "write-with-imm receive: opcode %d byte_len %u", ibv_wc_read_opcode(b->cqx),
	      ibv_wc_read_byte_len(b->cqx));
	ibv_end_poll(b->cqx);
	poll_n(b->cq, wc, 1);
	CHECK(wc[0].wr_id == 31 && ntohl(wc[0].imm_data) == 0xabce && wc[0].byte_len == 50,
	      "the completion the poll did not reach");
	CHECK(!memcmp(b->buf + 8192, a->buf + 4096, 100), "written bytes");

	/* The CQ ex on its completion channel. */
	{
		struct pollfd p = { .fd = b->ch->fd, .events = POLLIN };
		struct ibv_cq *cq;
		void *cq_ctx;

		CHECK(ibv_req_notify_cq(b->cq, 0) == 0, "ibv_req_notify_cq");
		post_recv(b->qp, b, 50, 0, 64);
		post_send(a, IBV_WR_SEND, 51, 0, 8, 0, b, 0);
		CHECK(poll(&p, 1, 10000) == 1, "no completion event within 10 s");
		CHECK(ibv_get_cq_event(b->ch, &cq, &cq_ctx) == 0, "ibv_get_cq_event");
		CHECK(cq == b->cq && cq_ctx == b, "the event's CQ or context");
		ibv_ack_cq_events(cq, 1);
		start_poll(b->cqx);
		CHECK(b->cqx->wr_id == 50 && !(ibv_wc_read_wc_flags(b->cqx) & IBV_WC_WITH_IMM),
		      "the event's completion");
		ibv_end_poll(b->cqx);
		poll_n(a->cq, wc, 1);
	}
}

static struct ibv_qp *create_qp_ex(struct end *e, enum ibv_qp_type type, uint64_t ops)
{
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4,
			 .max_recv_sge = 4, .max_inline_data = 64 },
		.qp_type = type,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e->pd,
		.send_ops_flags = ops,
	};

	return ibv_create_qp_ex(e->ctx, &qa);
}

#define RC_OPS                                                                 \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM |            \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |      \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_SEND |             \
	 IBV_QP_EX_WITH_ATOMIC_WRITE)

/* The ibv_wr_* cases over RC QPs of ibv_create_qp_ex (on the ends' CQs, empty now). */
static void qp_ex_cases(struct end *a, struct end *b)
{
	struct ibv_qp *qa, *qb;
	struct ibv_qp_ex *x;
	struct ibv_wc wc[4];
	uint64_t *remote = (uint64_t *)(b->buf + 16384), *local = (uint64_t *)(a->buf + 16384);

	CHECK(ibv_qp_to_qp_ex(a->qp) == NULL, "qp_ex of a QP of ibv_create_qp");
	errno = 0;
	CHECK(!create_qp_ex(a, IBV_QPT_RC, IBV_QP_EX_WITH_TSO) && errno == EOPNOTSUPP, "TSO");
	errno = 0;
	CHECK(!create_qp_ex(a, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_READ) && errno == EOPNOTSUPP,
	      "a READ on UD");
	qa = create_qp_ex(a, IBV_QPT_RC, RC_OPS);
	qb = create_qp_ex(b, IBV_QPT_RC, RC_OPS);
	CHECK(qa && qb, "ibv_create_qp_ex");
	connect_qp(qa, qb->qp_num, &b->gid);
	connect_qp(qb, qa->qp_num, &a->gid);
	x = ibv_qp_to_qp_ex(qa);
	CHECK(x && &x->qp_base == qa, "ibv_qp_to_qp_ex");

	/* One batch: a WRITE of two SGEs, then a SEND_WITH_IMM of two inline buffers. */
	{
		struct ibv_sge list[2] = { { (uintptr_t)a->buf, 3, a->mr->lkey },
					   { (uintptr_t)a->buf + 100, 5, a->mr->lkey } };
		struct ibv_data_buf bufs[2] = { { (void *)"inl", 3 }, { (void *)"ine!", 4 } };

		memcpy(a->buf, "abc", 3);
		memcpy(a->buf + 100, "defgh", 5);
		post_recv(qb, b, 60, 0, 64);
		ibv_wr_start(x);
		x->wr_id = 61;
		x->wr_flags = 0;
		ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 1000);
		ibv_wr_set_sge_list(x, 2, list);
		x->wr_id = 62;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send_imm(x, htonl(0x77));
		ibv_wr_set_inline_data_list(x, 2, bufs);
		CHECK(ibv_wr_complete(x) == 0, "ibv_wr_complete");
		poll_n(a->cq, wc, 1);
		CHECK(wc[0].wr_id == 62 && wc[0].opcode == IBV_WC_SEND, "the signaled WR alone");
		poll_n(b->cq, wc, 1);
		CHECK(wc[0].wr_id == 60 && wc[0].byte_len == 7 && ntohl(wc[0].imm_data) == 0x77,
		      "inline list: %u bytes", wc[0].byte_len);
		CHECK(!memcmp(b->buf, "inline!", 7), "the inline buffers concatenated");
		CHECK(!memcmp(b->buf + 1000, "abcdefgh", 8), "the SGE list concatenated");
	}
	/* A READ back, then both atomics. */
	{
		*remote = 40;
		ibv_wr_start(x);
		x->wr_id = 70;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_read(x, b->mr->rkey, (uintptr_t)b->buf + 1000);
		ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 2000, 8);
		x->wr_id = 71;
		ibv_wr_atomic_fetch_add(x, b->mr->rkey, (uintptr_t)remote, 2);
		ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)local, 8);
		x->wr_id = 72;
		ibv_wr_atomic_cmp_swp(x, b->mr->rkey, (uintptr_t)remote, 42, 99);
		ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)(local + 1), 8);
		CHECK(ibv_wr_complete(x) == 0, "ibv_wr_complete");
		poll_n(a->cq, wc, 3);
		CHECK(wc[0].wr_id == 70 && wc[1].wr_id == 71 && wc[2].wr_id == 72 &&
			      wc[1].opcode == IBV_WC_FETCH_ADD && wc[2].opcode == IBV_WC_COMP_SWAP,
		      "READ and atomic completions");
		CHECK(!memcmp(a->buf + 2000, "abcdefgh", 8), "READ");
		CHECK(local[0] == 40 && local[1] == 42 && *remote == 99,
		      "atomics: fetched %llu, compared %llu, now %llu",
		      (unsigned long long)local[0], (unsigned long long)local[1],
		      (unsigned long long)*remote);
	}
	/* Aborted, a bad WR: nothing of those batches is posted. */
	{
		struct ibv_sge five[5];
		int i;

		for (i = 0; i < 5; i++)
			five[i] = (struct ibv_sge){ (uintptr_t)a->buf, 1, a->mr->lkey };
		post_recv(qb, b, 80, 0, 64);
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_start(x);
		x->wr_id = 81;
		ibv_wr_send(x);
		ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 1);
		ibv_wr_abort(x);
		ibv_wr_start(x);
		x->wr_id = 82;
		ibv_wr_send(x);
		ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 2);
		x->wr_id = 83;
		ibv_wr_send(x);
		ibv_wr_set_sge_list(x, 5, five);
		CHECK(ibv_wr_complete(x) == EINVAL, "5 SGEs on a QP of 4");
		ibv_wr_start(x);
		x->wr_id = 85;
		ibv_wr_send(x);
		ibv_wr_set_inline_data(x, "x", 1);
		CHECK(ibv_wr_complete(x) == 0, "ibv_wr_complete");
		poll_n(a->cq, wc, 1);
		CHECK(wc[0].wr_id == 85, "completion of WR %llu: an earlier batch was posted",
		      (unsigned long long)wc[0].wr_id);
		poll_n(b->cq, wc, 1);
		CHECK(wc[0].wr_id == 80 && wc[0].byte_len == 1, "one receive, of WR 85");
	}
	/* ATOMIC WRITE (IBA 1.5): 8 bytes by pointer, stored in one atomic store. */
	{
		uint64_t eight = 0x0102030405060708ull;

		*remote = 0;
		ibv_wr_start(x);
		x->wr_id = 90;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_atomic_write(x, b->mr->rkey, (uintptr_t)remote, &eight);
		CHECK(ibv_wr_complete(x) == 0, "ibv_wr_complete of an ATOMIC WRITE");
		poll_n(a->cq, wc, 1);
		CHECK(wc[0].wr_id == 90 && wc[0].status == IBV_WC_SUCCESS &&
			      wc[0].opcode == IBV_WC_ATOMIC_WRITE,
		      "ATOMIC WRITE completion: status %d opcode %d", wc[0].status, wc[0].opcode);
		CHECK(*remote == eight, "ATOMIC WRITE stored %llx", (unsigned long long)*remote);
	}
	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
}

/* UD SENDs with ibv_wr_set_ud_addr; the receive (40 bytes of GRH first) read by the
 * poll functions reports the sender's QPN. */
static void ud_cases(struct end *a, struct end *b)
{
	struct ibv_qp *qa = create_qp_ex(a, IBV_QPT_UD, IBV_QP_EX_WITH_SEND),
		      *qb = create_qp_ex(b, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
	struct ibv_qp *qps[2] = { qa, qb };
	struct ibv_ah_attr ah_attr = { .is_global = 1, .port_num = 1 };
	struct ibv_qp_ex *x;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	int i;

	CHECK(qa && qb, "UD ibv_create_qp_ex");
	for (i = 0; i < 2; i++) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					  .qkey = 0x1111 };

		CHECK(ibv_modify_qp(qps[i], &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
							 IBV_QP_PORT | IBV_QP_QKEY) == 0,
		      "UD INIT");
		at.qp_state = IBV_QPS_RTR;
		CHECK(ibv_modify_qp(qps[i], &at, IBV_QP_STATE) == 0, "UD RTR");
		at.qp_state = IBV_QPS_RTS;
		CHECK(ibv_modify_qp(qps[i], &at, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS");
	}
	ah_attr.grh.dgid = b->gid;
	ah_attr.grh.hop_limit = 64;
	ah = ibv_create_ah(a->pd, &ah_attr);
	CHECK(ah, "ibv_create_ah");
	post_recv(qb, b, 90, 0, 40 + 64);
	x = ibv_qp_to_qp_ex(qa);
	CHECK(x, "UD ibv_qp_to_qp_ex");
	memcpy(a->buf + 3000, "datagram", 8);
	ibv_wr_start(x);
	x->wr_id = 91;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, ah, qb->qp_num, 0x1111);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 3000, 8);
	CHECK(ibv_wr_complete(x) == 0, "UD ibv_wr_complete");
	poll_n(a->cq, &wc, 1);
	CHECK(wc.wr_id == 91, "UD send completion");
	start_poll(b->cqx);
	CHECK(b->cqx->wr_id == 90 && ibv_wc_read_byte_len(b->cqx) == 40 + 8 &&
		      ibv_wc_read_src_qp(b->cqx) == qa->qp_num &&
		      ibv_wc_read_qp_num(b->cqx) == qb->qp_num &&
		      (ibv_wc_read_wc_flags(b->cqx) & IBV_WC_GRH),
	      "UD receive: byte_len %u src_qp %u", ibv_wc_read_byte_len(b->cqx),
	      ibv_wc_read_src_qp(b->cqx));
	ibv_end_poll(b->cqx);
	CHECK(!memcmp(b->buf + 40, "datagram", 8), "UD bytes");
	CHECK(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
}

int main(void)
{
	struct ibv_device **list;
	struct end a, b;
	struct end *ends[2] = { &a, &b };
	int n, i;

	list = ibv_get_device_list(&n);
	CHECK(list && n >= 2, "need two devices, have %d", n);
	open_end(&a, list[0]);
	open_end(&b, list[1]);
	ibv_free_device_list(list);

	for (i = 0; i < 2; i++) {
		struct end *e = ends[i];
		struct ibv_qp_init_attr qa = {
			.send_cq = e->cq,
			.recv_cq = e->cq,
			.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4,
				 .max_recv_sge = 4, .max_inline_data = 64 },
			.qp_type = IBV_QPT_RC,
		};

		e->qp = ibv_create_qp(e->pd, &qa);
		CHECK(e->qp, "ibv_create_qp");
	}
	connect_qp(a.qp, b.qp->qp_num, &b.gid);
	connect_qp(b.qp, a.qp->qp_num, &a.gid);
	cq_ex_cases(&a, &b);
	qp_ex_cases(&a, &b);
	ud_cases(&a, &b);

	for (i = 0; i < 2; i++) {
		struct end *e = ends[i];

		CHECK(ibv_destroy_qp(e->qp) == 0, "ibv_destroy_qp");
		CHECK(ibv_destroy_cq(e->cq) == 0, "ibv_destroy_cq of a CQ ex");
		CHECK(ibv_destroy_comp_channel(e->ch) == 0, "ibv_destroy_comp_channel");
		CHECK(ibv_dereg_mr(e->mr) == 0, "ibv_dereg_mr");
		CHECK(ibv_dealloc_pd(e->pd) == 0, "ibv_dealloc_pd");
		CHECK(ibv_close_device(e->ctx) == 0, "ibv_close_device");
		free(e->buf);
	}
	printf("extended: ok\n");
	return 0;
}
