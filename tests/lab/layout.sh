#!/bin/bash
# layout.sh FILE.pcap [HOST_IP]: one line per distinct header "shape" of the RoCEv2 frames in
# FILE, split by sender (uroce = HOST_IP, default 10.99.0.1 / fd99::1; rxe = everything else):
# IP DSCP/ECN, DF, TTL/hop limit, whether IPv4 ID is 0, UDP checksum zero?, BTH SE/M/PadCnt/
# TVer/P_Key/Resv/AckReq, and the extended headers present, per opcode. Used to compare what
# uroce sends with what rxe sends for the same operation.
f=$1 host=${2:-10.99.0.1}
tshark -r "$f" -Y 'udp.dstport==4791' -T fields -E separator='|' \
  -e ip.src -e ipv6.src -e ip.dsfield -e ipv6.tclass -e ip.flags.df -e ip.ttl -e ipv6.hlim -e ip.id \
  -e udp.checksum -e infiniband.bth.opcode -e infiniband.bth.se -e infiniband.bth.m \
  -e infiniband.bth.padcnt -e infiniband.bth.tver -e infiniband.bth.p_key -e infiniband.bth.reserved7 \
  -e infiniband.bth.a -e infiniband.reth -e infiniband.aeth -e infiniband.deth -e infiniband.atomiceth \
  -e infiniband.atomicacketh -e infiniband.grh -e infiniband.deth.q_key 2>/dev/null |
awk -F'|' -v host="$host" '{
  src = $1 != "" ? $1 : $2
  who = (src == host || src == "fd99::1") ? "uroce" : "rxe"
  ipid = ($8 == "") ? "-" : ($8 == "0x0000" ? "id0" : "id!=0")
  csum = ($9 == "0x0000") ? "csum0" : "csum"
  ext = ""
  if ($18 != "") ext = ext "RETH,"; if ($19 != "") ext = ext "AETH,"; if ($20 != "") ext = ext "DETH(qkey " $24 "),"
  if ($21 != "") ext = ext "AtomicETH,"; if ($22 != "") ext = ext "AtomicAckETH,"
  key = sprintf("op=%-3s tos=%s%s df=%s ttl=%s%s %s %s se=%s m=%s pad=%s tver=%s pkey=%s resv=%s a=%s %s",
     $10, $3, $4, $5, $6, $7, ipid, csum, $11, $12, ($13 == "" ? "0" : ($13 > 0 ? "n" : "0")), $14, $15, $16, $17, ext)
  n[who "|" key]++
} END { for (k in n) { split(k, a, "|"); printf "%-5s %5d  %s\n", a[1], n[k], a[2] } }' | sort -k3,3 -k1,1
