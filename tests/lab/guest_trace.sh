#!/bin/sh
# Kernel events of a lab guest for SECS seconds, into /tmp/trace.txt (the guest's tracefs:
# system calls, packets received by the driver and sent, interrupts, context switches).
# Not part of any test. Put it in RXELAB_SHARE, start a workload, then
#   tests/../rxe-lab/guest.sh 1 "/mnt/host/guest_trace.sh 1"
#   tests/../rxe-lab/guest.sh 1 "cat /tmp/trace.txt" > trace.txt
#   python3 tests/lab/trace_summary.py trace.txt
# Tracing slows the guest (each event costs some microseconds there): compare traces with
# each other, not with untraced runs. SPDX-License-Identifier: MIT OR Apache-2.0
set -e
SECS=${1:-1}
T=/sys/kernel/tracing
[ -e $T/trace ] || mount -t tracefs nodev $T
EVENTS="net/napi_gro_receive_entry net/net_dev_xmit raw_syscalls/sys_enter raw_syscalls/sys_exit sched/sched_switch irq/irq_handler_entry"
echo 0 > $T/tracing_on
echo > $T/trace
echo 8192 > $T/buffer_size_kb
for e in $EVENTS; do echo 1 > $T/events/$e/enable; done
echo 1 > $T/tracing_on
sleep "$SECS"
echo 0 > $T/tracing_on
for e in $EVENTS; do echo 0 > $T/events/$e/enable; done
cat $T/trace > /tmp/trace.txt
wc -l /tmp/trace.txt
