#!/usr/bin/env python3
"""Summary of a lab guest's kernel trace (tests/lab/guest_trace.sh): time in each system
call per task (count, total and mean microseconds), run time per task, and the medians of
two intervals: from a packet's arrival (napi_gro_receive_entry) to the next send system call
(sendmsg, sendmmsg, sendto: the turnaround of a ping-pong side, user space included), and
from a send system call to the next arrival (the network and the peer).

Usage: trace_summary.py TRACE. Not part of any test. SPDX-License-Identifier: MIT OR Apache-2.0
"""
import bisect
import collections
import re
import sys

SENDS = {"44", "46", "307"}  # sendto, sendmsg, sendmmsg (x86_64)
LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[\d+\]\s+\S+\s+([\d.]+):\s+(\w+):\s*(.*)$")


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0


def main(path):
    events = []
    for line in open(path, errors="replace"):
        m = LINE.match(line)
        if m:
            events.append((float(m.group(3)) * 1e6, m.group(1), int(m.group(2)), m.group(4), m.group(5)))
    if not events:
        sys.exit(f"{path}: no trace events")
    print(f"span {events[-1][0] - events[0][0]:.0f} us, {len(events)} events")
    entered, calls = {}, collections.defaultdict(lambda: [0, 0.0])
    for t, comm, pid, name, rest in events:
        if name == "sys_enter":
            entered[pid] = (rest.split()[1], t)
        elif name == "sys_exit" and pid in entered:
            nr, t0 = entered.pop(pid)
            c = calls[(comm, nr)]
            c[0] += 1
            c[1] += t - t0
    print("system calls (task, number: count, total us, mean us):")
    for (comm, nr), (n, total) in sorted(calls.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {comm:<18} NR {nr:>3}  {n:>7}  {total:>10.0f}  {total / n:>8.1f}")
    run, last = collections.defaultdict(float), events[0][0]
    for t, comm, pid, name, rest in events:
        if name == "sched_switch":
            prev = re.search(r"prev_comm=(\S+)", rest)
            if prev:
                run[prev.group(1)] += t - last
            last = t
    print("run time by task (us):", {k: round(v) for k, v in sorted(run.items(), key=lambda kv: -kv[1])[:8]})
    rx = [e[0] for e in events if e[3] == "napi_gro_receive_entry"]
    tx = [e[0] for e in events if e[3] == "sys_enter" and e[4].split()[1] in SENDS]
    turn = [tx[i] - r for r in rx if (i := bisect.bisect_left(tx, r)) < len(tx)]
    wire = [rx[i] - s for s in tx if (i := bisect.bisect_left(rx, s)) < len(rx)]
    print(f"packets received {len(rx)}, send calls {len(tx)}")
    print(f"arrival -> next send call: median {median(turn):.0f} us")
    print(f"send call -> next arrival: median {median(wire):.0f} us")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
