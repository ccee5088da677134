#!/usr/bin/env python3
"""Print kubewire's events from a Kafka topic, a JetStream stream or a file.

Reads binary-mode (and structured-mode) CloudEvents with the CloudEvents
SDK, one line per event:

    io.kubewire.object.updated configmaps/team-a/web rv=1234 id=5f1c.../1234/updated

A Kafka tombstone (a key with no value) prints as "tombstone <key>". With
--state it applies the consumer's rule of docs/events.md instead (view.py)
and prints the objects it ends with, as JSON.

    python3 consume.py --bootstrap localhost:9092 --topic k8s.core.configmaps
    python3 consume.py --nats nats://localhost:4222 --stream KUBEWIRE --count 10
    python3 consume.py --file ../../testdata/consumer-vectors/01-clean.jsonl --state

A record that is not a kubewire event is skipped with one line on stderr;
with --state, so is one that breaks the contract (a resourceversion that
is not a decimal unsigned integer, say).
Anything else that goes wrong (no broker at the address, no such topic,
stream or file) ends it with one line on stderr and exit status 1.
"""

import argparse
import asyncio
import json
import logging
import sys

from cloudevents.core.bindings import http, kafka
from cloudevents.core.exceptions import BaseCloudEventException
from cloudevents.core.formats.json import JSONFormat

from view import PREFIX, View


class Failure(Exception):
    """Ends the program with its message, one line on stderr."""


class NotAnEvent(Exception):
    """A record that is not a kubewire event: it is skipped."""


def kubewire_event(decode):
    """Returns decode()'s CloudEvent if it is kubewire's; raises NotAnEvent
    if it is not a CloudEvent, or is one of another producer."""
    try:
        event = decode()
    except (ValueError, TypeError, KeyError, BaseCloudEventException) as e:
        raise NotAnEvent(f"not a CloudEvent: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if not event.get_type().startswith(PREFIX) or not event.get_extension("partitionkey"):
        raise NotAnEvent(f"a CloudEvent of type {event.get_type()!r} from {event.get_source()!r}, not kubewire's")
    return event


def describe(event):
    """One line for an event: type, partition key, resourceVersion, id."""
    ext = event.get_extension
    line = f"{event.get_type()} {ext('partitionkey')} rv={ext('resourceversion') or '-'} id={event.get_id()}"
    if ext("conflated") is not None:
        line += f" conflated={ext('conflated')}"
    return line


class Output:
    """Where records go: printed one line each, or, with --state, applied to
    a View whose objects are printed at the end."""

    def __init__(self, state, count):
        self.view = View() if state else None
        self.count, self.handled = count, 0

    def event(self, partition, where, decode):
        """Handles one record read at where; returns True once --count
        events and tombstones were handled."""
        try:
            event = kubewire_event(decode)
            if self.view is None:
                print(describe(event), flush=True)
            elif why := self.view.apply(partition, event):
                raise NotAnEvent(why)
        except NotAnEvent as e:
            print(f"consume.py: skipping the record at {where}: {e}", file=sys.stderr, flush=True)
            return False
        return self._handled()

    def tombstone(self, partition, key):
        if self.view is None:
            print(f"tombstone {key}", flush=True)
        else:
            self.view.tombstone(partition, key)
        return self._handled()

    def _handled(self):
        self.handled += 1
        return bool(self.count) and self.handled >= self.count

    def close(self):
        if self.view is not None:
            print(json.dumps(self.view.state(), indent=2), flush=True)


def consume_file(args, out):
    """Structured-mode CloudEvents, one per line (a consumer vector, or
    `kubewire tail -o json`), as one partition."""
    try:
        f = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
    except OSError as e:
        raise Failure(f"cannot read {args.file}: {e.strerror}") from None
    with f:
        for n, line in enumerate(f, 1):
            if line.strip() and out.event("file", f"{args.file}:{n}", lambda: JSONFormat().read(None, line.encode())):
                return


def consume_kafka(args, out):
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    try:
        consumer = KafkaConsumer(
            bootstrap_servers=args.bootstrap.split(","),
            group_id=args.group,
            auto_offset_reset="earliest",
            enable_auto_commit=args.group is not None,
            isolation_level="read_committed",
            bootstrap_timeout_ms=int(args.timeout * 1000),
        )
    except KafkaError as e:
        raise Failure(f"no Kafka broker answered at {args.bootstrap} within {args.timeout:g}s ({e})") from None
    try:
        # Subscribing to a missing topic waits for it forever, or creates
        # it where the broker auto-creates topics: check first.
        if args.topic not in consumer.topics():
            raise Failure(
                f"topic {args.topic!r} not found at {args.bootstrap}; kubewire's Kafka sink writes "
                "k8s.<group>.<resource> by default, e.g. k8s.core.configmaps"
            )
        consumer.subscribe([args.topic])
        for r in consumer:
            partition = f"{r.topic}/{r.partition}"
            if r.value is None:
                done = out.tombstone(partition, r.key.decode(errors="replace") if r.key else "")
            else:
                message = kafka.KafkaMessage(headers=dict(r.headers), key=r.key, value=r.value)
                done = out.event(partition, f"{partition}@{r.offset}", lambda: kafka.from_kafka_event(message))
            if done:
                return
    finally:
        consumer.close()


async def consume_nats(args, out):
    import nats
    import nats.errors
    import nats.js.errors

    errors = []

    async def on_error(e):  # nats-py logs each failed attempt with a traceback otherwise
        errors.append(e)

    try:
        nc = await asyncio.wait_for(nats.connect(args.nats, error_cb=on_error), args.timeout)
    except (OSError, asyncio.TimeoutError, nats.errors.Error) as e:
        raise Failure(f"cannot connect to NATS at {args.nats} within {args.timeout:g}s ({errors[-1] if errors else e})") from None
    try:
        js = nc.jetstream()
        try:
            info = await js.stream_info(args.stream)
        except nats.js.errors.NotFoundError:
            raise Failure(
                f"stream {args.stream!r} not found at {args.nats}; it is the one the NATS sink's "
                "jetstream.stream.name names"
            ) from None
        except (nats.errors.Error, asyncio.TimeoutError) as e:
            raise Failure(f"JetStream at {args.nats}: {e or type(e).__name__}") from None
        subject = args.subject or info.config.subjects[0]
        from nats.js.api import DeliverPolicy

        sub = await js.subscribe(subject, stream=args.stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        async for msg in sub.messages:
            # kubewire's NATS binary mode is the HTTP binding's: ce- headers,
            # percent-encoded values, and the data as the body.
            message = http.HTTPMessage(headers=dict(msg.headers or {}), body=msg.data)
            where = f"{args.stream}@{msg.metadata.sequence.stream}"
            if out.event(args.stream, where, lambda: http.from_http_event(message)):
                return
    finally:
        await nc.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", help="Kafka bootstrap servers, host:port[,host:port]")
    p.add_argument("--topic", help="the topic kubewire's Kafka sink writes")
    p.add_argument("--group", help="a consumer group, to commit offsets (default: none, read from the beginning)")
    p.add_argument("--nats", help="NATS server URL")
    p.add_argument("--stream", help="the JetStream stream kubewire's NATS sink writes")
    p.add_argument("--subject", help="subject filter (default: the stream's first subject)")
    p.add_argument("--file", help="structured-mode CloudEvents, one per line (- for stdin)")
    p.add_argument("--state", action="store_true", help="apply the consumer's rule and print the objects at the end")
    p.add_argument("--count", type=int, default=0, help="stop after this many events (default: follow)")
    p.add_argument("--timeout", type=float, default=10, help="seconds to wait for the broker at start (default 10)")
    args = p.parse_args()
    if [bool(args.bootstrap), bool(args.nats), bool(args.file)].count(True) != 1:
        p.error("give one of --bootstrap and --topic, --nats and --stream, or --file")
    if args.bootstrap and not args.topic:
        p.error("--bootstrap needs --topic")
    if args.nats and not args.stream:
        p.error("--nats needs --stream")
    # The clients log their retries; this reports what ends them.
    for name in ("kafka", "nats"):
        logging.getLogger(name).addHandler(logging.NullHandler())
    out = Output(args.state, args.count)
    try:
        if args.file:
            consume_file(args, out)
        elif args.bootstrap:
            consume_kafka(args, out)
        else:
            asyncio.run(consume_nats(args, out))
    except Failure as e:
        print(f"consume.py: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
