#!/usr/bin/env python3
"""Print kubewire's events from a Kafka topic or a JetStream stream.

Reads binary-mode (and structured-mode) CloudEvents with the CloudEvents
SDK, one line per event:

    io.kubewire.object.updated configmaps/team-a/web rv=1234 id=5f1c.../1234/updated

A Kafka tombstone (a key with no value) prints as "tombstone <key>".

    python3 consume.py --bootstrap localhost:9092 --topic k8s.core.configmaps
    python3 consume.py --nats nats://localhost:4222 --stream KUBEWIRE --count 10
"""

import argparse
import asyncio
import sys

from cloudevents.core.bindings import http, kafka


def describe(event):
    """One line for an event: type, partition key, resourceVersion, id."""
    ext = event.get_extension
    line = f"{event.get_type()} {ext('partitionkey')} rv={ext('resourceversion') or '-'} id={event.get_id()}"
    if ext("conflated") is not None:
        line += f" conflated={ext('conflated')}"
    return line


def consume_kafka(args):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap.split(","),
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=args.group is not None,
        isolation_level="read_committed",
    )
    printed = 0
    try:
        for record in consumer:
            if record.value is None:
                key = record.key.decode() if record.key else ""
                print(f"tombstone {key}", flush=True)
            else:
                message = kafka.KafkaMessage(
                    headers={k: v for k, v in record.headers},
                    key=record.key,
                    value=record.value,
                )
                print(describe(kafka.from_kafka_event(message)), flush=True)
            printed += 1
            if args.count and printed >= args.count:
                return
    finally:
        consumer.close()


async def consume_nats(args):
    import nats
    from nats.js.api import DeliverPolicy

    nc = await nats.connect(args.nats)
    try:
        js = nc.jetstream()
        subject = args.subject
        if subject is None:
            info = await js.stream_info(args.stream)
            subject = info.config.subjects[0]
        sub = await js.subscribe(subject, stream=args.stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        printed = 0
        async for msg in sub.messages:
            # kubewire's NATS binary mode is the HTTP binding's: ce- headers,
            # percent-encoded values, and the data as the body.
            message = http.HTTPMessage(headers=dict(msg.headers or {}), body=msg.data)
            print(describe(http.from_http_event(message)), flush=True)
            printed += 1
            if args.count and printed >= args.count:
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
    p.add_argument("--count", type=int, default=0, help="stop after this many events (default: follow)")
    args = p.parse_args()
    if bool(args.bootstrap) == bool(args.nats):
        p.error("give either --bootstrap and --topic, or --nats and --stream")
    if args.bootstrap and not args.topic:
        p.error("--bootstrap needs --topic")
    if args.nats and not args.stream:
        p.error("--nats needs --stream")
    try:
        if args.bootstrap:
            consume_kafka(args)
        else:
            asyncio.run(consume_nats(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
