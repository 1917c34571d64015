#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <linux/if_ether.h>
#include <linux/filter.h>
#include <netinet/udp.h>
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
/* The lab guests' floor for a userspace stack on a packet socket with a receive ring, as
   uroce's raw backend is (UROCE_BACKEND=raw): the same exchange as udp_pingpong's
   "spin ack" (64-byte messages, each answered with an 8-byte ACK datagram first), but
   frames are read from a PACKET_RX_RING (TPACKET_V2) polled in memory, with no system call
   per receive, and written whole (Ethernet, IPv4, UDP) with one send per frame. A UDP
   socket bound to the port, with a drop-everything filter, keeps the kernel from answering
   with ICMP port unreachable. Not part of any test; root (CAP_NET_RAW).
   Build: cc -O2 -o ring_pingpong tests/lab/ring_pingpong.c; put it in RXELAB_SHARE, then
     guest 1: ring_pingpong server IFACE MYIP PORT
     guest 2: ring_pingpong client IFACE MYIP PEERIP PEERMAC PORT N
   Prints min, median and p90 of the whole round trip in microseconds, as udp_pingpong.
   MODE (environment, both sides) instead sends uroce's packets, to tell the kernel's send
   cost from uroce's own: each side answers a message (24 bytes of UDP payload, as an 8-byte
   RC SEND) with its own message and an ACK for the one it got (20 bytes, as an RC ACK),
   message first, as uroce sends a request and the ACK it held, the two sent by
     raw1  two send() calls on the packet socket
     rawm  one sendmmsg() of the two frames on the packet socket
     udp2  two sendto() calls on the UDP socket bound to PORT
     udpm  one sendmmsg() of the two datagrams on it
     gso   one sendmsg() with UDP_SEGMENT of 24 (uroce's GSO send of a request and its ACK)
   SPDX-License-Identifier: MIT OR Apache-2.0 */
enum { SLOT = 2048, SLOTS = 512, BLOCK = 16 * SLOT };
static int fd, ifindex, port;
static unsigned char *ring, mymac[6], peermac[6];
static struct in_addr myip, peerip;
static unsigned next_slot;
/* -1: the floor (no MODE); 0 raw1, 1 rawm, 2 udp2, 3 udpm, 4 gso: see the top. */
static int mode = -1, guard;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static unsigned short ip_sum(const unsigned char *p) {
    unsigned s = 0;
    for (int i = 0; i < 20; i += 2) s += (p[i] << 8) | p[i + 1];
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return ~s & 0xffff;
}

/* Frame of one UDP datagram of `len` bytes (first byte `kind`: 0 message, 1 ACK) to the
   peer, in `f` (at least 14 + 28 + len bytes). */
static void build(unsigned char *f, int len, unsigned char kind) {
    int tot = 20 + 8 + len; unsigned char *ip = f + 14, *udp = ip + 20;
    memset(f, 0, 14 + tot);
    memcpy(f, peermac, 6); memcpy(f + 6, mymac, 6); f[12] = 0x08;
    ip[0] = 0x45; ip[2] = tot >> 8; ip[3] = tot; ip[6] = 0x40; ip[8] = 64; ip[9] = 17;
    memcpy(ip + 12, &myip, 4); memcpy(ip + 16, &peerip, 4);
    unsigned short c = ip_sum(ip); ip[10] = c >> 8; ip[11] = c;
    udp[0] = udp[2] = port >> 8; udp[1] = udp[3] = port; udp[4] = (8 + len) >> 8; udp[5] = 8 + len;
    udp[8] = kind;
}

/* Sends that datagram. */
static void send_frame(int len, unsigned char kind) {
    unsigned char f[14 + 20 + 8 + 64];
    build(f, len, kind);
    if (send(fd, f, 14 + 28 + len, 0) < 0) perror("send");
}

/* Busy-polls the ring for the next frame to our port; copies its first 42 + 1 bytes. */
static void next_frame(unsigned char out[43]) {
    for (;;) {
        struct tpacket2_hdr *h = (void *)(ring + (next_slot / (BLOCK / SLOT)) * BLOCK + (next_slot % (BLOCK / SLOT)) * SLOT);
        if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) continue;
        int ok = h->tp_snaplen >= 43;
        if (ok) memcpy(out, (unsigned char *)h + h->tp_mac, 43);
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        next_slot = (next_slot + 1) % SLOTS;
        if (ok && out[23] == 17 && ((out[36] << 8) | out[37]) == port) return;
    }
}

/* The message (24 bytes, kind 0) and, when ack, an ACK (20 bytes, kind 1): as `mode` says. */
static void send_pair(int ack) {
    static unsigned char f[2][128]; int n = ack ? 2 : 1;
    if (mode <= 1) {
        build(f[0], 24, 0); if (ack) build(f[1], 20, 1);
        if (mode == 0) { for (int i = 0; i < n; i++) if (send(fd, f[i], 14 + 28 + (i ? 20 : 24), 0) < 0) perror("send"); return; }
        struct iovec iov[2] = {{f[0], 14 + 28 + 24}, {f[1], 14 + 28 + 20}}; struct mmsghdr mm[2]; memset(mm, 0, sizeof mm);
        for (int i = 0; i < 2; i++) { mm[i].msg_hdr.msg_iov = &iov[i]; mm[i].msg_hdr.msg_iovlen = 1; }
        if (sendmmsg(fd, mm, n, 0) != n) perror("sendmmsg");
        return;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = peerip};
    f[0][0] = 0; f[1][0] = 1;
    if (mode == 2) { sendto(guard, f[0], 24, 0, (void *)&a, sizeof a); if (ack) sendto(guard, f[1], 20, 0, (void *)&a, sizeof a); return; }
    struct iovec iov[2] = {{f[0], 24}, {f[1], 20}};
    if (mode == 3) { struct mmsghdr mm[2]; memset(mm, 0, sizeof mm);
        for (int i = 0; i < 2; i++) { mm[i].msg_hdr.msg_name = &a; mm[i].msg_hdr.msg_namelen = sizeof a; mm[i].msg_hdr.msg_iov = &iov[i]; mm[i].msg_hdr.msg_iovlen = 1; }
        if (sendmmsg(guard, mm, n, 0) != n) perror("sendmmsg udp");
        return;
    }
    char ctrl[CMSG_SPACE(2)] = {0};
    struct msghdr g = {.msg_name = &a, .msg_namelen = sizeof a, .msg_iov = iov, .msg_iovlen = n, .msg_control = ack ? ctrl : 0, .msg_controllen = ack ? sizeof ctrl : 0};
    if (ack) { struct cmsghdr *c = CMSG_FIRSTHDR(&g); c->cmsg_level = SOL_UDP; c->cmsg_type = UDP_SEGMENT; c->cmsg_len = CMSG_LEN(2); *(unsigned short *)CMSG_DATA(c) = 24; }
    if (sendmsg(guard, &g, 0) < 0) perror("gso");
}

int main(int argc, char **argv) {
    int server = argc > 1 && !strcmp(argv[1], "server");
    const char *m = getenv("MODE");
    if (m) {
        const char *names[] = {"raw1", "rawm", "udp2", "udpm", "gso"};
        for (int i = 0; i < 5; i++)
            if (!strcmp(m, names[i])) mode = i;
        if (mode < 0) { fprintf(stderr, "MODE must be raw1, rawm, udp2, udpm or gso\n"); return 2; }
    }
    if (server ? argc != 5 : argc != 8 || strcmp(argv[1], "client")) {
        fprintf(stderr, "usage: %s server IFACE MYIP PORT\n       %s client IFACE MYIP PEERIP PEERMAC PORT N\n", argv[0], argv[0]);
        return 2;
    }
    if (inet_pton(AF_INET, argv[3], &myip) != 1) { fprintf(stderr, "bad MYIP\n"); return 2; }
    port = atoi(argv[server ? 4 : 6]);
    if (!server && (inet_pton(AF_INET, argv[4], &peerip) != 1 ||
                    sscanf(argv[5], "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &peermac[0], &peermac[1], &peermac[2], &peermac[3], &peermac[4], &peermac[5]) != 6 ||
                    atoi(argv[7]) <= 0)) { fprintf(stderr, "bad PEERIP, PEERMAC or N\n"); return 2; }
    fd = socket(AF_PACKET, SOCK_RAW, 0);
    if (fd < 0) { perror("socket(AF_PACKET)"); return 1; }
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", argv[2]);
    if (ioctl(fd, SIOCGIFINDEX, &ifr)) { perror(argv[2]); return 1; }
    ifindex = ifr.ifr_ifindex;
    if (ioctl(fd, SIOCGIFHWADDR, &ifr)) { perror(argv[2]); return 1; }
    memcpy(mymac, ifr.ifr_hwaddr.sa_data, 6);
    /* IPv4, UDP, destination port PORT: kept whole; anything else: dropped. */
    struct sock_filter keep[] = {
        {BPF_LD | BPF_H | BPF_ABS, 0, 0, 12}, {BPF_JMP | BPF_JEQ | BPF_K, 0, 5, 0x0800},
        {BPF_LD | BPF_B | BPF_ABS, 0, 0, 23}, {BPF_JMP | BPF_JEQ | BPF_K, 0, 3, 17},
        {BPF_LD | BPF_H | BPF_ABS, 0, 0, 36}, {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, (unsigned)port},
        {BPF_RET | BPF_K, 0, 0, 0xffff}, {BPF_RET | BPF_K, 0, 0, 0}};
    struct sock_fprog kp = {8, keep};
    int v = TPACKET_V2, one = 1;
    struct tpacket_req req = {BLOCK, SLOTS * SLOT / BLOCK, SLOT, SLOTS};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &kp, sizeof kp) ||
        setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) ||
        setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req)) { perror("setsockopt"); return 1; }
    setsockopt(fd, SOL_PACKET, 23 /* PACKET_IGNORE_OUTGOING */, &one, sizeof one);
    ring = mmap(0, SLOTS * SLOT, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ring == MAP_FAILED) { perror("mmap"); return 1; }
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = ifindex};
    if (bind(fd, (void *)&sll, sizeof sll)) { perror("bind"); return 1; }
    guard = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in ga = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = myip};
    struct sock_filter drop[] = {{BPF_RET | BPF_K, 0, 0, 0}};
    struct sock_fprog dp = {1, drop};
    if (bind(guard, (void *)&ga, sizeof ga) || setsockopt(guard, SOL_SOCKET, SO_ATTACH_FILTER, &dp, sizeof dp)) { perror("guard socket"); return 1; }
    unsigned char hdr[43];
    if (server) {
        for (;;) {
            next_frame(hdr);
            if (hdr[42] == 1) continue;
            memcpy(peermac, hdr + 6, 6); memcpy(&peerip, hdr + 26, 4);
            if (mode >= 0) {
                send_pair(1);
                continue;
            }
            send_frame(8, 1);
            send_frame(64, 0);
        }
    }
    int n = atoi(argv[7]);
    double *t = malloc(n * sizeof *t);
    for (int i = 0; i < n; i++) {
        double t0 = now();
        if (mode >= 0) {
            send_pair(i > 0);
            do next_frame(hdr); while (hdr[42] == 1);
        } else {
            send_frame(64, 0);
            do next_frame(hdr); while (hdr[42] == 1);
            send_frame(8, 1);
        }
        t[i] = now() - t0;
    }
    qsort(t, n, sizeof *t, cmp);
    printf("round trip us: min %.1f median %.1f p90 %.1f\n", t[0], t[n / 2], t[n * 9 / 10]);
    return 0;
}
