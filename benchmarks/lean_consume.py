"""The broker's CPU per delivered message at saturation (the dispatch side, issue 22), with lean
consumers that cost almost nothing, beside the publish side measured the same way.

Each consumer is a plain socket of this process: SUBSCRIBE (Exclusive, from the earliest
position) to a subscription of its own, FLOW permits in large grants (--window in flight), the
MESSAGE frames counted by their first bytes, and one cumulative ACK per read (the last message's
id is decoded). Two paths:

- catch-up: the topic is filled first (lean_publish's generator, not timed), then every
  subscription reads it from the start (the read path: write cache, entry logs);
- keep-up: the subscriptions exist first, then the generator publishes while they consume (the
  tail path); the broker's CPU then covers both sides, and the publish-only figure of the same
  setting (measured in the same run) is subtracted to give the dispatch share.

Broker CPU (all threads, /proc/PID/stat) per delivered message is printed for unbatched entries
and for batches of --batch messages, with 1 and 10 subscriptions, median of --runs.

    .venv/bin/python benchmarks/lean_consume.py
    .venv/bin/python benchmarks/lean_consume.py --messages 100000 --subscriptions 1,10 --batch 100
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import sys
import time
import uuid
from dataclasses import dataclass

import lean_publish as lean
from _machine import facts_and_load, machine_facts

from velamq.cli._perf_frames import command_bytes, connect_command, scan_frames
from velamq.protocol import encode_command, pb

T = pb.BaseCommand
_MESSAGE_PREFIX = bytes((0x08, T.MESSAGE))


class Consumer:
    """One subscription on a connection of its own: permits out, messages counted, cumulative acks."""

    def __init__(self, sock: socket.socket, expected_entries: int, window: int, batch: int) -> None:
        self.sock = sock
        self.expected = expected_entries
        self.window = window  # permits are messages; a batch entry takes `batch` of them
        self.batch = batch
        self.received = 0
        self.since_flow = 0
        self._buf = bytearray()
        self.out = memoryview(b"")

    @property
    def done(self) -> bool:
        return self.received >= self.expected

    def on_data(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        offset, count, last = scan_frames(buf, _MESSAGE_PREFIX, self._other)
        replies = []
        if last >= 0:
            command = pb.BaseCommand.FromString(command_bytes(buf, last))
            ack = pb.BaseCommand(type=T.ACK)
            ack.ack.consumer_id = 1
            ack.ack.ack_type = pb.CommandAck.Cumulative
            ack.ack.message_id.add().CopyFrom(command.message.message_id)
            replies.append(encode_command(ack))
        del buf[:offset]
        self.received += count
        self.since_flow += count * self.batch
        if self.since_flow >= self.window // 2:
            replies.append(_flow(self.since_flow))
            self.since_flow = 0
        if replies:
            self.out = memoryview(bytes(self.out) + b"".join(replies))

    def _other(self, body: bytes) -> None:
        command = pb.BaseCommand.FromString(body)
        if command.type == T.PING:
            self.sock.sendall(encode_command(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong())))
        elif command.type != T.ACK_RESPONSE:
            raise RuntimeError(f"unexpected reply: {command}")


def _flow(permits: int) -> bytes:
    flow = pb.BaseCommand(type=T.FLOW)
    flow.flow.consumer_id = 1
    flow.flow.messagePermits = permits
    return encode_command(flow)


def subscribe(port: int, topic: str, subscription: str, expected: int, window: int, batch: int) -> Consumer:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect_command("lean-consume"))
    if lean._read_command(sock).type != T.CONNECTED:
        raise RuntimeError("CONNECT refused")
    command = pb.BaseCommand(type=T.SUBSCRIBE)
    sub = command.subscribe
    sub.topic, sub.subscription, sub.subType = topic, subscription, pb.CommandSubscribe.Exclusive
    sub.consumer_id, sub.request_id = 1, 1
    sub.initialPosition = pb.CommandSubscribe.Earliest
    sock.sendall(encode_command(command))
    reply = lean._read_command(sock)
    if reply.type != T.SUCCESS:
        raise RuntimeError(f"SUBSCRIBE answered {reply}")
    consumer = Consumer(sock, expected, window, batch)
    consumer.out = memoryview(_flow(window))
    return consumer


def drive_all(producers: list[lean.Stream], consumers: list[Consumer], timeout_s: float = 300.0) -> float:
    """Publish and consume until every send is acknowledged and every consumer has everything."""
    sel = selectors.DefaultSelector()
    everyone: list[lean.Stream | Consumer] = [*producers, *consumers]
    for s in everyone:
        s.sock.setblocking(False)
        sel.register(s.sock, selectors.EVENT_READ, s)
    t0 = time.perf_counter()
    while not all(s.done for s in everyone):
        for s in everyone:
            if isinstance(s, lean.Stream):
                s.refill()
            while s.out:
                try:
                    s.out = s.out[s.sock.send(s.out):]
                except BlockingIOError:
                    break
            sel.modify(s.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if s.out else 0), s)
        for key, mask in sel.select(1.0):
            s = key.data
            if mask & selectors.EVENT_READ:
                try:
                    data = s.sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    raise RuntimeError("the broker closed a connection")
                if isinstance(s, Consumer):
                    s.on_data(data)
                else:
                    n = s.count_replies(data)
                    s.in_flight -= n
                    s.acked += n
        if time.perf_counter() - t0 > timeout_s:
            raise RuntimeError(f"timed out: {[c.received for c in consumers]} of {consumers[0].expected}")
    sel.close()
    return time.perf_counter() - t0


def _producer(port: int, topic: str, args: argparse.Namespace, entries: int) -> lean.Stream:
    sock, name = lean.velamq_connect("127.0.0.1", port, topic, 1)
    frames = lean.velamq_frames(1, entries, args.size, args.batch, name)
    return lean.Stream(sock, frames, args.publish_window, 1000, lean.ReceiptCounter(sock.sendall))


@dataclass
class Result:
    delivered: int
    seconds: float
    cpu_s: float

    @property
    def us(self) -> float:
        return self.cpu_s / self.delivered * 1e6


def one_run(port: int, pid: int, args: argparse.Namespace, subs: int, mode: str) -> Result:
    topic = f"persistent://public/default/lean-c-{uuid.uuid4().hex[:10]}"
    entries = (args.messages if args.batch == 1 else args.batched_messages) // args.batch
    if mode == "catch-up":
        drive_all([_producer(port, topic, args, entries)], [])
    consumers = [subscribe(port, topic, f"s{i}", entries, args.window, args.batch) for i in range(subs)]
    producers = [_producer(port, topic, args, entries)] if mode != "catch-up" else []
    if mode == "publish-only":
        for c in consumers:
            c.sock.close()
        consumers = []
    before = sum(lean.thread_cpu_s(pid).values())
    seconds = drive_all(producers, consumers)
    cpu = sum(lean.thread_cpu_s(pid).values()) - before
    for s in [*producers, *consumers]:
        s.sock.close()
    delivered = entries * args.batch * (subs if mode != "publish-only" else 1)
    return Result(delivered, seconds, cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000, help="messages published per run, unbatched")
    ap.add_argument("--batched-messages", type=int, default=2_000_000, help="messages published per run, batched")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", default="1,100", help="messages per entry, one row each")
    ap.add_argument("--subscriptions", default="1,10")
    ap.add_argument("--window", type=int, default=5000, help="messages permitted per consumer")
    ap.add_argument("--publish-window", type=int, default=5000, help="sends in flight (keep-up)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--broker-conf", help="a broker.conf of overrides for every broker")
    ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    rows = []
    for batch in [int(b) for b in args.batch.split(",")]:
        args.batch = batch
        for subs in [int(s) for s in args.subscriptions.split(",")]:
            for mode in ("catch-up", "keep-up", "publish-only"):
                if mode == "publish-only" and subs != 1:
                    continue
                results = []
                for _ in range(args.runs):
                    with lean.velamq_broker(args.tree, "fsync", args.broker_conf) as (port, _admin, pid):
                        results.append(one_run(port, pid, args, subs, mode))
                r = sorted(results, key=lambda x: x.us)[len(results) // 2]
                rows.append((batch, subs, mode, r))
                print(f"  batch {batch} subs {subs} {mode}: {r.delivered / r.seconds:,.0f} msg/s, {r.us:.2f} µs",
                      file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(facts_and_load(machine_facts(["protobuf"]), load_before, load_after))
    print(f"- {args.messages:,} messages (batched: {args.batched_messages:,}) of {args.size} bytes published per "
          f"run, --sync-policy fsync, window {args.window} messages per consumer, median of {args.runs}\n")
    print("| msgs/entry | subscriptions | path | delivered msg/s | broker CPU µs per delivered msg |")
    print("|---|---|---|---|---|")
    publish_only = {b: r for b, s, m, r in rows if m == "publish-only"}
    for batch, subs, mode, r in rows:
        figure = f"{r.us:.2f}"
        if mode == "keep-up" and batch in publish_only:
            p = publish_only[batch]
            dispatch = (r.cpu_s / r.delivered * subs - p.cpu_s / p.delivered) / subs * 1e6
            figure += f" (dispatch alone: {dispatch:.2f})"
        label = "publish only (µs per published msg)" if mode == "publish-only" else mode
        print(f"| {batch} | {subs if mode != 'publish-only' else 0} | {label} | {r.delivered / r.seconds:,.0f} "
              f"| {figure} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
