"""Reads a whole stream with async-kinesis; run by the bench in its own environment.

Usage: python peer_async_kinesis.py ENDPOINT STREAM RECORDS. Prints one JSON line:
{"records": N, "seconds": S}, the clock running from entering the consumer to the last record.
Fetches at most 4 times a second per shard, like kinsumer's default ``throttle_delay``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from kinesis import Consumer, StringProcessor  # type: ignore[import-not-found]


async def read(endpoint: str, stream: str, total: int) -> dict[str, float]:
    started = time.perf_counter()
    count = sink = 0
    async with Consumer(
        stream_name=stream,
        endpoint_url=endpoint,
        region_name="us-east-1",
        iterator_type="TRIM_HORIZON",
        processor=StringProcessor(),
        shard_fetch_rate=4,
    ) as consumer:
        deadline = started + 600
        while count < total and time.perf_counter() < deadline:
            async for item in consumer:  # ends when its queue is idle for idle_timeout: go on
                sink += len(item)
                count += 1
                if count >= total:
                    break
    return {"records": count, "seconds": time.perf_counter() - started}


def main() -> None:
    endpoint, stream, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    print(json.dumps(asyncio.run(read(endpoint, stream, total))))


if __name__ == "__main__":
    main()
