#!/usr/bin/env python3
"""Bytes received on the wire in this network namespace, sampled every 50 ms.

Run inside a node's namespace (ip netns exec ...): /proc/net/dev and /proc/net/snmp are per
namespace. Writes one line per sample to OUT, "UNIX_SECONDS RX_BYTES TX_BYTES RETRANS_SEGS"
(every interface but lo, summed; TCP segments retransmitted), until SIGTERM.
replication_lfn.sh starts one per destination node around each gfrep command and reads the
lines back to time the first data byte, the time to 90 % of the route and the tail.
"""
import signal
import sys
import time


def counters():
    rx = tx = 0
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, data = line.split(":", 1)
            if name.strip() != "lo":
                fields = data.split()
                rx += int(fields[0])
                tx += int(fields[8])
    retrans = 0
    with open("/proc/net/snmp") as f:
        tcp = [line.split() for line in f if line.startswith("Tcp:")]
        retrans = int(tcp[1][tcp[0].index("RetransSegs")])
    return f"{rx} {tx} {retrans}"


def main():
    out = open(sys.argv[1], "w")
    signal.signal(signal.SIGTERM, lambda *_: (out.close(), sys.exit(0)))
    period = 0.05
    next_t = time.time()
    while True:
        out.write(f"{time.time():.4f} {counters()}\n")
        next_t += period
        time.sleep(max(0.0, next_t - time.time()))


if __name__ == "__main__":
    main()
