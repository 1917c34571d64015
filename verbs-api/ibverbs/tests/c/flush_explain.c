/* A libibverbs program of uroce's own (tools/tests/cabi_debian.rs, c_flush_explain): the
 * flushed completions (IBTA vol. 1 §10.3.1, C10-42) that uroce's UROCE_EXPLAIN lines
 * speak of, and those they leave out. One process, two devices (the first two of
 * UROCE_DEVICES), two RC QP pairs:
 *
 *   - b's three receives, flushed when the program moves b to ERR itself (a teardown, as
 *     rdma_disconnect does): nothing to explain;
 *   - c's WRITE to a wrong R_Key (a remote access error), then its three SENDs and two
 *     receives, flushed because of it: the error, and the flushes once.
 *
 * Prints the QP numbers ("qpn b 0x..., c 0x...") and "flush_explain: ok", exit 0; or
 * names the failed check and exits 1. The test reads the explanations on stderr.
 * MIT OR Apache-2.0, like the rest of uroce. */

#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "flush_explain"
#include "check.h"

#define BUF 4096

struct end {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void open_end(struct end *e, struct ibv_context *ctx)
{
	CHECK(ibv_query_gid(ctx, 1, 0, &e->gid) == 0, "ibv_query_gid");
	e->pd = ibv_alloc_pd(ctx);
	CHECK(e->pd, "ibv_alloc_pd");
	e->cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(e->cq, "ibv_create_cq");
	e->buf = calloc(1, BUF);
	CHECK(e->buf, "calloc");
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(e->mr, "ibv_reg_mr");
	struct ibv_qp_init_attr qa = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	e->qp = ibv_create_qp(e->pd, &qa);
	CHECK(e->qp, "ibv_create_qp");
}

static void to_rts(struct end *e, struct end *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};

	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS");
}

static void post_recvs(struct end *e, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { (uintptr_t)e->buf, 64, e->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad;

		CHECK(ibv_post_recv(e->qp, &wr, &bad) == 0, "ibv_post_recv");
	}
}

/* Polls e's CQ until n completions came (10 s at most) and returns how many of them had
 * `status`. */
static int poll_n(struct end *e, int n, enum ibv_wc_status status)
{
	struct timespec t0, t;
	int got = 0, with = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < n) {
		struct ibv_wc wc;
		int k = ibv_poll_cq(e->cq, 1, &wc);

		CHECK(k >= 0, "ibv_poll_cq");
		if (k == 1) {
			got++;
			with += wc.status == status;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 10, "%d of %d completions in 10 s", got, n);
	}
	return with;
}

int main(void)
{
	struct ibv_device **devs = ibv_get_device_list(NULL);
	struct end a, b, c, d;

	CHECK(devs && devs[0] && devs[1], "two devices");
	struct ibv_context *x = ibv_open_device(devs[0]);
	struct ibv_context *y = ibv_open_device(devs[1]);

	CHECK(x && y, "ibv_open_device");
	open_end(&a, x);
	open_end(&b, y);
	open_end(&c, x);
	open_end(&d, y);
	to_rts(&a, &b);
	to_rts(&b, &a);
	to_rts(&c, &d);
	to_rts(&d, &c);
	printf("qpn b 0x%06x, c 0x%06x\n", b.qp->qp_num, c.qp->qp_num);
	fflush(stdout);

	/* The program's own teardown. */
	post_recvs(&b, 3);
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };

	CHECK(ibv_modify_qp(b.qp, &err, IBV_QP_STATE) == 0, "b to ERR");
	CHECK(poll_n(&b, 3, IBV_WC_WR_FLUSH_ERR) == 3, "b's receives not all flushed");

	/* A failure, and what it flushes. */
	post_recvs(&c, 2);
	post_recvs(&d, 3);
	struct ibv_sge sge = { (uintptr_t)c.buf, 64, c.mr->lkey };
	struct ibv_send_wr w[4];
	struct ibv_send_wr *bad;

	memset(w, 0, sizeof(w));
	for (int i = 0; i < 4; i++) {
		w[i].wr_id = i + 1;
		w[i].sg_list = &sge;
		w[i].num_sge = 1;
		w[i].opcode = i == 0 ? IBV_WR_RDMA_WRITE : IBV_WR_SEND;
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].next = i < 3 ? &w[i + 1] : NULL;
	}
	w[0].wr.rdma.remote_addr = (uintptr_t)d.buf;
	w[0].wr.rdma.rkey = d.mr->rkey ^ 0x5a5a5a5a;
	CHECK(ibv_post_send(c.qp, w, &bad) == 0, "ibv_post_send");
	/* Six completions: the WRITE's error, then five flushes (or SENDs that made it). */
	CHECK(poll_n(&c, 6, IBV_WC_REM_ACCESS_ERR) == 1, "no remote access error");

	printf("flush_explain: ok\n");
	return 0;
}
