#!/usr/bin/env python3
"""Writes the fuzz seed corpora in fuzz/seeds/ from the rxe reference captures.

usage: fuzz/make-seeds.py [CAPTURE_DIR]   (default ../shared/rxe-lab/captures)

One seed per distinct (capture, BTH opcode, AETH syndrome class) so every opcode and ACK kind
rxe produced is represented, without thousands of near-identical files:
  seeds/fuzz_frame/        whole Ethernet frames
  seeds/fuzz_roundtrip/    UDP payloads (BTH .. ICRC)
  seeds/fuzz_udp_payload/  the fuzz_udp_payload input format: 1 byte family (4 or 6),
                           source and destination address (4 or 16 bytes each),
                           IPv4 identification (2 bytes, big-endian; IPv6: absent),
                           UDP source port (2 bytes), then the UDP payload
  seeds/fuzz_mad/          one 256-byte CM MAD per attribute ID the captures hold (UD SEND
                           Only to QP1), the same MAD with the attribute IDs of MRA and REJ
                           patched in, and the 36-byte RDMA CM header of a REQ
  seeds/fuzz_cm/           scripts in the format of fuzz/fuzz_targets/cm_harness.rs, one per
                           exchange of cm/tests (named after it), and one that injects every
                           captured CM MAD into a listening agent
"""
import hashlib
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
capdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "shared", "rxe-lab", "captures")


def frames(path):
    data = open(path, "rb").read()
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    off = 24
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        yield data[off:off + caplen]
        off += caplen


def write(target, blob):
    d = os.path.join(here, "seeds", target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(blob).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)


MAD_OFFSET = 12 + 8  # BTH + DETH of a UD SEND Only
MAD_LEN = 256
CMA_OFFSET = 24 + 140  # common MAD header + a REQ's fixed part
mads_seen = set()
captured_mads = {}  # attribute ID -> the first 256-byte MAD with it


def write_mad_seeds(payload):
    if payload[0] != 0x64 or payload[5:8] != b"\x00\x00\x01" or len(payload) < MAD_OFFSET + MAD_LEN:
        return
    mad = payload[MAD_OFFSET:MAD_OFFSET + MAD_LEN]
    attr = struct.unpack(">H", mad[16:18])[0]
    if attr in mads_seen:
        return
    mads_seen.add(attr)
    captured_mads[attr] = mad
    write("fuzz_mad", mad)
    if attr == 0x0010:
        write("fuzz_mad", mad[CMA_OFFSET:CMA_OFFSET + 36])
    if attr == 0x0014:  # an RTU's bytes read as an MRA and as a REJ
        for other in (0x0011, 0x0012):
            write("fuzz_mad", mad[:16] + struct.pack(">H", other) + mad[18:])


seen = set()
for cap in sorted(os.listdir(capdir)):
    if not cap.endswith(".pcap"):
        continue
    for fr in frames(os.path.join(capdir, cap)):
        et = struct.unpack(">H", fr[12:14])[0]
        p = 14
        if et == 0x8100:
            et = struct.unpack(">H", fr[16:18])[0]
            p = 18
        if et == 0x0800:
            ihl = (fr[p] & 15) * 4
            if fr[p + 9] != 17:
                continue
            src, dst, ident = fr[p + 12:p + 16], fr[p + 16:p + 20], fr[p + 4:p + 6]
            fam = b"\x04"
            u = p + ihl
            end = p + struct.unpack(">H", fr[p + 2:p + 4])[0]
        elif et == 0x86DD:
            if fr[p + 6] != 17:
                continue
            src, dst, ident = fr[p + 8:p + 24], fr[p + 24:p + 40], b""
            fam = b"\x06"
            u = p + 40
            end = u + struct.unpack(">H", fr[p + 4:p + 6])[0]
        else:
            continue
        if struct.unpack(">H", fr[u + 2:u + 4])[0] != 4791:
            continue
        payload = fr[u + 8:end]
        write_mad_seeds(payload)
        opcode = payload[0]
        aeth = payload[12] >> 5 if len(payload) > 16 else None
        key = (cap, opcode, aeth)
        if key in seen:
            continue
        seen.add(key)
        write("fuzz_frame", fr)
        write("fuzz_roundtrip", payload)
        write("fuzz_udp_payload", fam + src + dst + ident + fr[u:u + 2] + payload)


# ---- fuzz_cm: scripts of cm_harness.rs ---------------------------------------------------
# The operation numbers of cm_harness.rs's `op` module; a record is (op << 1 | side, fields).
(LISTEN, UNLISTEN, CONNECT, ACCEPT, REJECT, READY_TO_USE, SEND_MRA, ESTABLISH, DISCONNECT,
 SIDR_REQUEST, SIDR_REPLY, DESTROY, QP_ATTR, DELIVER, DROP, DUPLICATE, REORDER, INJECT,
 INJECT_PATCHED, ADVANCE, DELIVER_ALL) = range(21)
A, B = 0, 1
CM_CONFIG = bytes([15, 20, 18, 15])  # the CM's defaults: retries, response, lifetime, ACK delay
INIT, RTR, RTS = 0, 1, 2


def rec(op, side=A, *fields):
    return bytes([op << 1 | side, *fields])


def connect(side=A, route=0, flags=0b01100, qpn=0x11):
    # service route, MTU 2048 (Mtu::ALL[3]), QPN, PSN, depths 4/2, retries 5/6, ACK timeout 0
    # (the kernel's), traffic class 0x20, flow label 0x12 << 12, 12 bytes of private data
    return rec(CONNECT, side, route, flags, qpn, 0x10, 4, 2, 5, 6, 0, 0x20, 0x12, 12)


def accept(side=B, h=0):
    return rec(ACCEPT, side, h, 0x22, 0x20, 3, 1, 4, 0, 15, 7)


def advance(mantissa, exponent):  # (mantissa + 1) << exponent ns
    return rec(ADVANCE, A, mantissa, exponent)


def qp_attrs(side, h):
    return b"".join(rec(QP_ATTR, side, h, t) for t in (INIT, RTR, RTS))


ALL = rec(DELIVER_ALL)
SECONDS_10 = advance(9, 30)
HOURS = advance(255, 39)

cm_seeds = {
    "rc_connect_disconnect": [
        rec(LISTEN, B, 0), connect(), ALL, accept(), ALL, rec(READY_TO_USE, A, 0, 3), ALL,
        qp_attrs(A, 0), qp_attrs(B, 0), rec(DISCONNECT, A, 0, 0), ALL,
        rec(DISCONNECT, B, 0, 3), ALL, HOURS,
    ],
    "uc_established_by_data_before_rtu": [
        rec(LISTEN, B, 0), connect(flags=0b01101), ALL, accept(), rec(ESTABLISH, B, 0),
        ALL, rec(READY_TO_USE, A, 0, 0), ALL, qp_attrs(A, 0), qp_attrs(B, 0),
        rec(DISCONNECT, A, 0, 0), rec(DISCONNECT, B, 0, 0), ALL, HOURS,
    ],
    "mra_for_req_and_rep": [
        rec(LISTEN, B, 0), connect(), ALL, rec(SEND_MRA, B, 0, 10), ALL, SECONDS_10, ALL,
        accept(), ALL, rec(SEND_MRA, A, 0, 12), ALL, rec(READY_TO_USE, A, 0, 0), ALL,
        qp_attrs(A, 0),
    ],
    "delayed_mra_answers_the_repeated_req": [
        rec(LISTEN, B, 0), connect(), ALL, rec(SEND_MRA, B, 0, 0x80 | 24), SECONDS_10, ALL,
        ALL, accept(), ALL, rec(READY_TO_USE, A, 0, 0), ALL,
    ],
    "consumer_reject": [
        rec(LISTEN, B, 0), connect(), ALL, rec(REJECT, B, 0, 28, 0, 9), ALL,
        rec(ACCEPT, B, 0), HOURS,
    ],
    "no_listener_rej_8": [connect(route=3), ALL, rec(UNLISTEN, B, 0), HOURS],
    "req_lost_until_unreachable": [
        rec(LISTEN, B, 0), connect(),
        *[rec(DROP, A, 0) + SECONDS_10 for _ in range(17)], ALL, HOURS,
    ],
    "rep_lost_req_repeated": [
        rec(LISTEN, B, 0), connect(), ALL, accept(), rec(DROP, A, 0), SECONDS_10, ALL, ALL,
        rec(READY_TO_USE, A, 0, 0), ALL, rec(DISCONNECT, B, 0, 0), rec(DROP, A, 0),
        SECONDS_10, ALL, HOURS,
    ],
    "rtu_lost_rep_until_timeout_rej": [
        rec(LISTEN, B, 0), connect(), ALL, accept(),
        *[rec(DELIVER, A, 0) + rec(DROP, A, 0) + SECONDS_10 for _ in range(17)], ALL, HOURS,
    ],
    "duplicates_and_reordering": [
        rec(LISTEN, B, 0), connect(), rec(DUPLICATE, A, 0), ALL, accept(),
        rec(DUPLICATE, A, 0), rec(REORDER, A, 0, 1), ALL, rec(READY_TO_USE, A, 0, 0),
        rec(DUPLICATE, A, 0), ALL, rec(DISCONNECT, A, 0, 0), rec(DUPLICATE, A, 0), ALL,
        rec(DISCONNECT, B, 0, 0), rec(DUPLICATE, A, 0), ALL, HOURS, ALL,
    ],
    "sidr_reply_and_repeat": [
        rec(LISTEN, B, 2), rec(SIDR_REQUEST, A, 2, 40), ALL,
        rec(SIDR_REPLY, B, 0, 0, 0x77, 0x12, 4), ALL, rec(INJECT_PATCHED, B, 0, 0, 0), ALL,
        rec(SIDR_REQUEST, A, 3, 0), ALL, rec(SIDR_REQUEST, A, 2, 0), rec(DROP, A, 0), HOURS,
    ],
    "destroy_midway_and_stale_handles": [
        rec(LISTEN, B, 0), connect(), ALL, accept(), rec(DESTROY, A, 0), ALL,
        rec(DESTROY, B, 0), connect(), ALL, accept(B, 1), ALL, rec(READY_TO_USE, A, 1, 0),
        ALL, rec(DESTROY, A, 1), ALL, rec(DESTROY, B, 1), ALL, rec(ACCEPT, B, 0),
        rec(DISCONNECT, A, 0, 0), qp_attrs(A, 1), HOURS,
    ],
    "stale_connection_req_from_a_connected_qp": [
        rec(LISTEN, B, 0), connect(), ALL, accept(), ALL, rec(READY_TO_USE, A, 0, 0), ALL,
        # A's REQ (the first MAD logged) with another local comm ID: same QPN, same GUID.
        rec(INJECT_PATCHED, B, 0, 0, 2, 24, 0x5a, 25, 0xa5), ALL, ALL, HOURS,
    ],
}
captured = [m for _, m in sorted(captured_mads.items())]
cm_seeds["captured_mads_into_a_listener"] = [
    rec(LISTEN, B, 1), rec(LISTEN, B, 2),
    *[rec(INJECT, B, 2) + m for m in captured], ALL, accept(), ALL, qp_attrs(B, 0),
    *[rec(INJECT, A, 1) + m for m in captured], ALL, HOURS,
]
cm_dir = os.path.join(here, "seeds", "fuzz_cm")
os.makedirs(cm_dir, exist_ok=True)
for name, records in cm_seeds.items():
    with open(os.path.join(cm_dir, name), "wb") as f:
        f.write(CM_CONFIG + b"".join(records))

print(f"{len(seen)} seeds per target written under {os.path.join(here, 'seeds')}")
print(f"{len(mads_seen)} CM attribute IDs seen for fuzz_mad")
print(f"{len(cm_seeds)} scripts for fuzz_cm")
