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


def write_mad_seeds(payload):
    if payload[0] != 0x64 or payload[5:8] != b"\x00\x00\x01" or len(payload) < MAD_OFFSET + MAD_LEN:
        return
    mad = payload[MAD_OFFSET:MAD_OFFSET + MAD_LEN]
    attr = struct.unpack(">H", mad[16:18])[0]
    if attr in mads_seen:
        return
    mads_seen.add(attr)
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

print(f"{len(seen)} seeds per target written under {os.path.join(here, 'seeds')}")
print(f"{len(mads_seen)} CM attribute IDs seen for fuzz_mad")
