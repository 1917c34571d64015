/* A libibverbs program of uroce's own, compiled against the system's <infiniband/verbs.h>
 * and run on uroce's libibverbs.so.1 (tools/tests/cabi_debian.rs, c_walkthrough). One
 * process, two devices (the first two of UROCE_DEVICES), one RC QP on each:
 *
 *   - a QP created and moved RESET -> INIT -> RTR -> RTS, a wrong attribute mask refused;
 *   - the port and GID queries perftest relies on (through the header's inline wrappers);
 *   - a chain SEND + SEND_WITH_IMM + RDMA WRITE + an unknown opcode: bad_wr is the last;
 *   - the receiver's SRQ, refilled, and its completion channel's event loop (poll() on
 *     the channel fd, ibv_get_cq_event, ibv_ack_cq_events, ibv_req_notify_cq), and
 *     EAGAIN from ibv_get_cq_event once the fd is non-blocking;
 *   - the SRQ limit armed, and its asynchronous event through the context's async_fd;
 *   - the received bytes in the receiver's own registered buffer (zero copy), the
 *     immediate data in network order, an RDMA READ back;
 *   - memory windows (rdma-core's pyverbs MWTest): a type 1 window bound by ibv_bind_mw
 *     and written through its R_Key, the region refused deregistration while bound
 *     (EBUSY), a type 2 window bound by an IBV_WR_BIND_MW WR and invalidated by the peer's
 *     SEND_WITH_INV (IBV_WC_WITH_INV and the R_Key in the receive WC), after which its key
 *     is a remote access error; a window of type 3 refused;
 *   - SGE lists over the QP's limit, destroying objects still in use (EBUSY).
 *
 * Prints "walkthrough: ok" and exits 0, or names the failed check and exits 1.
 * MIT OR Apache-2.0, like the rest of uroce. */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "walkthrough"
#include "check.h"

#define BUF 65536
#define WRITE_AT 32768

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void open_end(struct end *e, struct ibv_device *dev, int with_srq)
{
	struct ibv_port_attr port;
	struct ibv_gid_entry entry;

	e->ctx = ibv_open_device(dev);
	CHECK(e->ctx, "ibv_open_device");
	CHECK(ibv_query_port(e->ctx, 1, &port) == 0, "ibv_query_port");
	CHECK(port.state == IBV_PORT_ACTIVE, "port state %d", port.state);
	CHECK(port.link_layer == IBV_LINK_LAYER_ETHERNET, "link layer %d", port.link_layer);
	CHECK(port.gid_tbl_len >= 1, "gid_tbl_len %d", port.gid_tbl_len);
	CHECK(ibv_query_port(e->ctx, 2, &port) == EINVAL, "port 2 exists");
	CHECK(ibv_query_gid(e->ctx, 1, 0, &e->gid) == 0, "ibv_query_gid");
	CHECK(ibv_query_gid_ex(e->ctx, 1, 0, &entry, 0) == 0, "ibv_query_gid_ex");
	CHECK(entry.gid_type == IBV_GID_TYPE_ROCE_V2, "gid type %u", entry.gid_type);
	CHECK(!memcmp(&entry.gid, &e->gid, 16), "the two GID queries differ");

	e->pd = ibv_alloc_pd(e->ctx);
	CHECK(e->pd, "ibv_alloc_pd");
	e->ch = ibv_create_comp_channel(e->ctx);
	CHECK(e->ch && e->ch->fd >= 0, "ibv_create_comp_channel");
	e->cq = ibv_create_cq(e->ctx, 64, e, e->ch, 0);
	CHECK(e->cq && e->cq->cqe >= 64, "ibv_create_cq");
	e->srq = NULL;
	if (with_srq) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };

		e->srq = ibv_create_srq(e->pd, &sa);
		CHECK(e->srq, "ibv_create_srq");
	}
	e->buf = aligned_alloc(4096, BUF);
	memset(e->buf, 0, BUF);
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ);
	CHECK(e->mr && e->mr->addr == e->buf, "ibv_reg_mr");

	struct ibv_qp_init_attr qa = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.srq = e->srq,
		.cap = { .max_send_wr = 16, .max_recv_wr = with_srq ? 0 : 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	e->qp = ibv_create_qp(e->pd, &qa);
	CHECK(e->qp, "ibv_create_qp");
	CHECK(e->qp->state == IBV_QPS_RESET, "new QP in state %d", e->qp->state);
}

static void connect_end(struct end *e, struct end *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};

	/* RESET -> INIT needs the port: refused, and nothing changes. */
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					     IBV_QP_ACCESS_FLAGS) == EINVAL,
	      "INIT without IBV_QP_PORT accepted");
	CHECK(e->qp->state == IBV_QPS_RESET, "a refused modify changed the state");
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS");
	CHECK(e->qp->state == IBV_QPS_RTS, "state %d after RTS", e->qp->state);

	struct ibv_qp_init_attr init;

	CHECK(ibv_query_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_CAP, &init) == 0, "ibv_query_qp");
	CHECK(a.qp_state == IBV_QPS_RTS && a.dest_qp_num == peer->qp->qp_num,
	      "query_qp: state %d dest %u", a.qp_state, a.dest_qp_num);
	CHECK(init.send_cq == e->cq && init.srq == e->srq, "query_qp init_attr");
}

/* Posts receive WR number i (64 bytes at 64 * i) to the SRQ. */
static void post_srq(struct end *e, int i)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + 64 * i, 64, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	CHECK(ibv_post_srq_recv(e->srq, &wr, &bad) == 0, "ibv_post_srq_recv %d", i);
}

/* Waits (poll() on the channel fd, then the event and its ack) for completions on e's CQ
 * until `want` are in `wc`. */
static void wait_events(struct end *e, struct ibv_wc *wc, int want)
{
	int got = 0;

	while (got < want) {
		struct pollfd p = { .fd = e->ch->fd, .events = POLLIN };
		struct ibv_cq *cq;
		void *cq_ctx;
		int n;

		/* Drain first: the CQ is armed only after it was found empty. */
		n = ibv_poll_cq(e->cq, want - got, wc + got);
		CHECK(n >= 0, "ibv_poll_cq %d", n);
		got += n;
		if (got >= want)
			break;
		CHECK(ibv_req_notify_cq(e->cq, 0) == 0, "ibv_req_notify_cq");
		n = ibv_poll_cq(e->cq, want - got, wc + got);
		CHECK(n >= 0, "ibv_poll_cq %d", n);
		got += n;
		if (got >= want)
			break;
		CHECK(poll(&p, 1, 10000) == 1, "no completion event within 10 s");
		CHECK(ibv_get_cq_event(e->ch, &cq, &cq_ctx) == 0, "ibv_get_cq_event");
		CHECK(cq == e->cq && cq_ctx == e, "the event's CQ or context");
		ibv_ack_cq_events(cq, 1);
	}
}

static void poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int want)
{
	int got = 0;
	long spins = 0;

	while (got < want) {
		int n = ibv_poll_cq(cq, want - got, wc + got);

		CHECK(n >= 0, "ibv_poll_cq %d", n);
		got += n;
		CHECK(++spins < 200000000L, "no completion");
	}
}

int main(void)
{
	struct ibv_device **list;
	struct end a, b;
	struct ibv_wc wc[4];
	int n, i;

	list = ibv_get_device_list(&n);
	CHECK(list && n >= 2, "need two devices, have %d", n);
	open_end(&a, list[0], 0);
	open_end(&b, list[1], 1);
	ibv_free_device_list(list);
	connect_end(&a, &b);
	connect_end(&b, &a);

	/* b's QP receives from its SRQ: ibv_post_recv on it is refused. */
	{
		struct ibv_sge sge = { (uintptr_t)b.buf, 64, b.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

		CHECK(ibv_post_recv(b.qp, &wr, &bad) == EINVAL && bad == &wr,
		      "post_recv to a QP with an SRQ");
	}
	for (i = 0; i < 4; i++)
		post_srq(&b, i);
	/* Arm the SRQ limit: below 3 WRs, an IBV_EVENT_SRQ_LIMIT_REACHED async event. */
	{
		struct ibv_srq_attr sa = { .srq_limit = 3 };

		CHECK(ibv_modify_srq(b.srq, &sa, IBV_SRQ_LIMIT) == 0, "arm the SRQ limit");
		CHECK(ibv_modify_srq(b.srq, &sa, 1 << 5) == EINVAL, "an unknown SRQ mask bit");
	}

	/* A non-blocking channel fd: no event waits, so EAGAIN instead of blocking. */
	{
		int flags = fcntl(b.ch->fd, F_GETFL);
		struct ibv_cq *cq;
		void *cq_ctx;

		CHECK(fcntl(b.ch->fd, F_SETFL, flags | O_NONBLOCK) == 0, "F_SETFL");
		errno = 0;
		CHECK(ibv_get_cq_event(b.ch, &cq, &cq_ctx) == -1 && errno == EAGAIN,
		      "a non-blocking ibv_get_cq_event with no event");
		CHECK(fcntl(b.ch->fd, F_SETFL, flags) == 0, "F_SETFL");
	}

	/* Over the QP's SGE limit (1): refused, bad_wr the WR. */
	{
		struct ibv_sge two[2] = { { (uintptr_t)a.buf, 4, a.mr->lkey },
					  { (uintptr_t)a.buf + 4, 4, a.mr->lkey } };
		struct ibv_send_wr wr = { .wr_id = 9, .sg_list = two, .num_sge = 2,
					  .opcode = IBV_WR_SEND }, *bad = NULL;

		CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &wr, "2 SGEs posted");
	}

	/* SEND, SEND_WITH_IMM, RDMA WRITE, then an opcode uroce has not (TSO). */
	strcpy(a.buf, "hello");
	strcpy(a.buf + 64, "with immediate");
	strcpy(a.buf + 128, "written straight into b's buffer");
	struct ibv_sge s0 = { (uintptr_t)a.buf, 5, a.mr->lkey };
	struct ibv_sge s1 = { (uintptr_t)a.buf + 64, 14, a.mr->lkey };
	struct ibv_sge s2 = { (uintptr_t)a.buf + 128, 33, a.mr->lkey };
	struct ibv_send_wr w3 = { .wr_id = 4, .sg_list = &s0, .num_sge = 1,
				  .opcode = IBV_WR_TSO, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr w2 = { .wr_id = 3, .next = &w3, .sg_list = &s2, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr w1 = { .wr_id = 2, .next = &w2, .sg_list = &s1, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0xcafe0123) };
	struct ibv_send_wr w0 = { .wr_id = 1, .next = &w1, .sg_list = &s0, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;

	w2.wr.rdma.remote_addr = (uintptr_t)b.buf + WRITE_AT;
	w2.wr.rdma.rkey = b.mr->rkey;
	CHECK(ibv_post_send(a.qp, &w0, &bad) == EINVAL && bad == &w3,
	      "bad_wr is not the TSO WR");

	/* The receiver: two receive completions through its channel's event loop. */
	wait_events(&b, wc, 2);
	CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV &&
		      wc[0].byte_len == 5 && wc[0].wr_id == 100,
	      "first receive: %s, opcode %d, %u bytes, wr_id %lu",
	      ibv_wc_status_str(wc[0].status), wc[0].opcode, wc[0].byte_len,
	      (unsigned long)wc[0].wr_id);
	CHECK(!memcmp(b.buf, "hello", 5), "the SEND's bytes are not in b's own buffer");
	CHECK(wc[1].status == IBV_WC_SUCCESS && (wc[1].wc_flags & IBV_WC_WITH_IMM) &&
		      ntohl(wc[1].imm_data) == 0xcafe0123 && wc[1].wr_id == 101,
	      "second receive: flags %#x imm %#x", wc[1].wc_flags, ntohl(wc[1].imm_data));
	CHECK(!memcmp(b.buf + 64, "with immediate", 14), "the SEND_WITH_IMM's bytes");
	CHECK(wc[1].qp_num == b.qp->qp_num, "wc.qp_num");
	/* Two of four WRs taken: the limit's event, through the context's async_fd (after
	 * the port's IBV_EVENT_PORT_ACTIVE of the device's opening). */
	for (i = 0;; i++) {
		struct pollfd p = { .fd = b.ctx->async_fd, .events = POLLIN };
		struct ibv_async_event ev;

		CHECK(i < 2, "no IBV_EVENT_SRQ_LIMIT_REACHED");
		CHECK(poll(&p, 1, 10000) == 1, "no async event within 10 s");
		CHECK(ibv_get_async_event(b.ctx, &ev) == 0, "ibv_get_async_event");
		ibv_ack_async_event(&ev);
		if (ev.event_type == IBV_EVENT_PORT_ACTIVE) {
			CHECK(ev.element.port_num == 1, "port %d active", ev.element.port_num);
			continue;
		}
		CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == b.srq,
		      "async event %s (%d)", ibv_event_type_str(ev.event_type), ev.event_type);
		break;
	}
	post_srq(&b, 0);
	post_srq(&b, 1);

	/* The sender: three successful completions, in order; the WRITE's bytes arrived. */
	poll_n(a.cq, wc, 3);
	for (i = 0; i < 3; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)i + 1,
		      "send completion %d: %s", i, ibv_wc_status_str(wc[i].status));
	CHECK(wc[2].opcode == IBV_WC_RDMA_WRITE, "opcode %d", wc[2].opcode);
	CHECK(!strcmp(b.buf + WRITE_AT, "written straight into b's buffer"), "the WRITE's bytes");

	/* An RDMA READ of those bytes back into a's buffer. */
	{
		struct ibv_sge sge = { (uintptr_t)a.buf + 1024, 33, a.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 5, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED }, *bad2;

		wr.wr.rdma.remote_addr = (uintptr_t)b.buf + WRITE_AT;
		wr.wr.rdma.rkey = b.mr->rkey;
		CHECK(ibv_post_send(a.qp, &wr, &bad2) == 0, "RDMA READ");
		poll_n(a.cq, wc, 1);
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RDMA_READ &&
			      wc[0].byte_len == 33,
		      "READ: %s", ibv_wc_status_str(wc[0].status));
		CHECK(!strcmp(a.buf + 1024, "written straight into b's buffer"), "READ's bytes");
	}

	/* Memory windows, over a second region of b's buffer that allows binding. */
	{
		struct ibv_mr *wmr = ibv_reg_mr(b.pd, b.buf + 40960, 4096,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
		struct ibv_mw *mw1 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_1);
		struct ibv_mw *mw2 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
		struct ibv_mw_bind mb = { .wr_id = 20, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_sge sge = { (uintptr_t)a.buf + 2048, 16, a.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 21, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad2;
		uint32_t old, rkey2;

		CHECK(wmr, "ibv_reg_mr with IBV_ACCESS_MW_BIND");
		CHECK(mw1 && mw1->type == IBV_MW_TYPE_1 && mw1->pd == b.pd, "ibv_alloc_mw type 1");
		CHECK(mw2 && mw2->type == IBV_MW_TYPE_2, "ibv_alloc_mw type 2");
		errno = 0;
		CHECK(!ibv_alloc_mw(b.pd, 3) && errno == EINVAL, "a window of type 3");
		/* Type 1: ibv_bind_mw; the new key is in mw1->rkey at once. */
		old = mw1->rkey;
		mb.bind_info.mr = wmr;
		mb.bind_info.addr = (uintptr_t)b.buf + 40960;
		mb.bind_info.length = 1024;
		mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
		CHECK(ibv_bind_mw(b.qp, mw1, &mb) == 0, "ibv_bind_mw");
		CHECK(mw1->rkey == ibv_inc_rkey(old), "rkey %#x after the bind", mw1->rkey);
		poll_n(b.cq, wc, 1);
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_BIND_MW &&
			      wc[0].wr_id == 20,
		      "bind: %s, opcode %d", ibv_wc_status_str(wc[0].status), wc[0].opcode);
		CHECK(ibv_dereg_mr(wmr) == EBUSY, "a region with a bound window deregistered");
		strcpy(a.buf + 2048, "through window 1");
		wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 40960 + 100;
		wr.wr.rdma.rkey = mw1->rkey;
		CHECK(ibv_post_send(a.qp, &wr, &bad2) == 0, "WRITE through window 1");
		poll_n(a.cq, wc, 1);
		CHECK(wc[0].status == IBV_WC_SUCCESS, "WRITE through window 1: %s",
		      ibv_wc_status_str(wc[0].status));
		CHECK(!memcmp(b.buf + 40960 + 100, "through window 1", 16), "the window's bytes");

		/* Type 2: a bind WR with the consumer's key byte. */
		{
			struct ibv_send_wr bw = { .wr_id = 22, .opcode = IBV_WR_BIND_MW,
						  .send_flags = IBV_SEND_SIGNALED }, *bad3;

			rkey2 = ibv_inc_rkey(mw2->rkey);
			bw.bind_mw.mw = mw2;
			bw.bind_mw.rkey = rkey2;
			bw.bind_mw.bind_info = mb.bind_info;
			bw.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE |
							       IBV_ACCESS_REMOTE_READ;
			CHECK(ibv_post_send(b.qp, &bw, &bad3) == 0, "IBV_WR_BIND_MW");
			poll_n(b.cq, wc, 1);
			CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_BIND_MW &&
				      wc[0].wr_id == 22,
			      "type 2 bind: %s", ibv_wc_status_str(wc[0].status));
		}
		/* The peer invalidates it with SEND_WITH_INV (b receives from its SRQ). */
		{
			struct ibv_send_wr iw = { .wr_id = 23, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND_WITH_INV,
						  .send_flags = IBV_SEND_SIGNALED,
						  .invalidate_rkey = rkey2 }, *bad3;

			CHECK(ibv_post_send(a.qp, &iw, &bad3) == 0, "SEND_WITH_INV");
			poll_n(a.cq, wc, 1);
			CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_SEND,
			      "SEND_WITH_INV: %s", ibv_wc_status_str(wc[0].status));
			poll_n(b.cq, wc, 1);
			CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV &&
				      (wc[0].wc_flags & IBV_WC_WITH_INV) &&
				      wc[0].invalidated_rkey == rkey2,
			      "receive of SEND_WITH_INV: %s, flags %#x, rkey %#x",
			      ibv_wc_status_str(wc[0].status), wc[0].wc_flags,
			      wc[0].invalidated_rkey);
			post_srq(&b, 2);
		}
		/* Deallocated, window 1 lets the region go. */
		CHECK(ibv_dealloc_mw(mw1) == 0, "ibv_dealloc_mw of a bound type 1 window");
		CHECK(ibv_dereg_mr(wmr) == 0, "ibv_dereg_mr once no window is bound");
		/* The invalidated key: a remote access error (the QPs go to ERR: last). */
		wr.wr.rdma.rkey = rkey2;
		CHECK(ibv_post_send(a.qp, &wr, &bad2) == 0, "WRITE through the invalidated key");
		poll_n(a.cq, wc, 1);
		CHECK(wc[0].status == IBV_WC_REM_ACCESS_ERR, "WRITE with an invalidated key: %s",
		      ibv_wc_status_str(wc[0].status));
		/* uroce's code of the cause (`uroce explain 1`): the peer NAKed it with Remote
		 * Access Error. */
		CHECK(wc[0].vendor_err == 1, "vendor_err of the refused WRITE: %u, not 1",
		      wc[0].vendor_err);
		CHECK(ibv_dealloc_mw(mw2) == 0, "ibv_dealloc_mw type 2");
	}

	/* ibv_resize_cq and ibv_rereg_mr (the cases of pyverbs' test_cq.py and test_mr.py). */
	{
		struct ibv_cq *rcq = ibv_create_cq(a.ctx, 4, NULL, NULL, 0);
		char *mem = calloc(1, 8192);
		struct ibv_mr *m;
		uint32_t l, r;

		CHECK(rcq && mem, "ibv_create_cq for the resize");
		CHECK(ibv_resize_cq(rcq, 32) == 0 && rcq->cqe == 32, "resize up: cqe %d", rcq->cqe);
		CHECK(ibv_resize_cq(rcq, 2) == 0 && rcq->cqe == 2, "resize down: cqe %d", rcq->cqe);
		CHECK(ibv_resize_cq(rcq, 0) == EINVAL && rcq->cqe == 2, "resize to 0");
		CHECK(ibv_destroy_cq(rcq) == 0, "destroy the resized CQ");

		m = ibv_reg_mr(a.pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
		CHECK(m, "ibv_reg_mr for the rereg");
		l = m->lkey;
		r = m->rkey;
		CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0 &&
			      m->lkey != l && m->rkey != r && m->addr == mem,
		      "rereg access: new keys, same memory");
		CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, mem + 4096, 4096,
				   0) == 0 && m->addr == mem + 4096 && m->length == 4096,
		      "rereg translation");
		l = m->lkey;
		errno = 0;
		CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) ==
				      IBV_REREG_MR_ERR_INPUT && errno == EINVAL &&
			      m->addr == mem + 4096 && m->lkey == l,
		      "rereg to a NULL address is refused and changes nothing");
		CHECK(ibv_rereg_mr(m, 1 << 5, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
			      errno == EINVAL, "an unknown rereg flag");
		CHECK(ibv_rereg_mr(m, 0, NULL, NULL, 0, IBV_ACCESS_REMOTE_READ) ==
			      IBV_REREG_MR_ERR_INPUT, "access without CHANGE_ACCESS");
		CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, b.pd, NULL, 0, 0) ==
				      IBV_REREG_MR_ERR_INPUT && errno == EINVAL && m->pd == a.pd,
		      "rereg onto a PD of another device");
		CHECK(ibv_dereg_mr(m) == 0, "ibv_dereg_mr after rereg");
		free(mem);
	}

	/* Objects still in use cannot be destroyed. */
	CHECK(ibv_destroy_srq(b.srq) == EBUSY, "SRQ in use destroyed");
	CHECK(ibv_destroy_cq(b.cq) == EBUSY, "CQ in use destroyed");
	CHECK(ibv_destroy_comp_channel(b.ch) == EBUSY, "channel in use destroyed");
	CHECK(ibv_dealloc_pd(b.pd) == EBUSY, "PD in use deallocated");

	/* Teardown, in the order libibverbs wants. */
	struct end *ends[2] = { &a, &b };

	for (i = 0; i < 2; i++) {
		struct end *e = ends[i];

		CHECK(ibv_destroy_qp(e->qp) == 0, "ibv_destroy_qp");
		if (e->srq)
			CHECK(ibv_destroy_srq(e->srq) == 0, "ibv_destroy_srq");
		CHECK(ibv_dereg_mr(e->mr) == 0, "ibv_dereg_mr");
		CHECK(ibv_destroy_cq(e->cq) == 0, "ibv_destroy_cq");
		CHECK(ibv_destroy_comp_channel(e->ch) == 0, "ibv_destroy_comp_channel");
		CHECK(ibv_dealloc_pd(e->pd) == 0, "ibv_dealloc_pd");
		CHECK(ibv_close_device(e->ctx) == 0, "ibv_close_device");
		free(e->buf);
	}
	printf("walkthrough: ok\n");
	return 0;
}
