#!/usr/bin/env python3
"""A lossy, slow link between two test-host segments (tests/cluster).

This machine's kernel has no netem, so delay and loss come from here: a
forwarding hop that runs in a namespace of its own with one interface on
each segment and passes every Ethernet frame from one to the other (like a
bridge with two ports), holding each for --delay_ms and dropping a fraction
--loss of them on a schedule drawn from --seed (frame by frame, in the order
they arrive). TCP sees real loss: it retransmits, as across a bad link.

  hop.py --a IFACE --b IFACE [--delay_ms 2] [--loss 0.01] [--seed 1] [--stats FILE]

Frames must fit the interfaces' MTU: the hosts' TSO/GSO are turned off by
the caller (ethtool -K), or a 64 KiB segment would not fit back out. On
SIGTERM it writes the frames it forwarded and dropped to --stats and exits.
"""
import argparse
import heapq
import json
import random
import select
import signal
import socket
import sys
import time

ETH_P_ALL = 3
PACKET_OUTGOING = 4  # a frame this host sent: seen again on the way out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--delay_ms", type=float, default=2.0)
    ap.add_argument("--loss", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stats", default="")
    args = ap.parse_args()

    socks = []
    for name in (args.a, args.b):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind((name, 0))
        s.setblocking(False)
        socks.append(s)
    other = {socks[0]: socks[1], socks[1]: socks[0]}
    rng = random.Random(args.seed)
    delay = args.delay_ms / 1e3
    held = []  # (due, order, out socket, frame)
    order = 0
    counts = {"forwarded": 0, "dropped": 0, "too_big": 0}

    def stop(*_):
        if args.stats:
            with open(args.stats, "w") as f:
                json.dump(counts, f)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        now = time.monotonic()
        timeout = max(0.0, held[0][0] - now) if held else 1.0
        ready, _, _ = select.select(socks, [], [], timeout)
        now = time.monotonic()
        for s in ready:
            while True:
                try:
                    frame, addr = s.recvfrom(65536)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING:
                    continue
                if rng.random() < args.loss:
                    counts["dropped"] += 1
                    continue
                order += 1
                heapq.heappush(held, (now + delay, order, other[s], frame))
        while held and held[0][0] <= now:
            _, _, out, frame = heapq.heappop(held)
            try:
                out.send(frame)
                counts["forwarded"] += 1
            except OSError:  # larger than the MTU: offloads left on
                counts["too_big"] += 1


if __name__ == "__main__":
    main()
