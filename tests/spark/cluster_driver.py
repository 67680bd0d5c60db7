"""A Spark driver for the cluster tests, run as its own process: one availableNow query into a parquet sink.

    python -m tests.spark.cluster_driver MASTER_URL STREAM KINESIS DYNAMODB APP CHECKPOINT OUT LIMIT [OPTIONS]

OPTIONS: more source options, as a JSON object.

AWS settings reach the executors through ``spark.executorEnv.*`` only (the workers have none).
Exits 0 once the query has read what the stream held and stopped by itself.
"""

from __future__ import annotations

import json
import pathlib
import sys

from demo.spark_cluster import SparkCluster

_EXECUTOR_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "PYTHONPATH",
    "KINSUMER_TEST_CALL_LOG",
)


def main(
    master: str, stream: str, kinesis: str, dynamodb: str, app: str, checkpoint: str, out: str, limit: str,
    options: str = "{}",
) -> int:  # fmt: skip
    cluster = SparkCluster(master, "", [], pathlib.Path())  # joins a running cluster
    spark = cluster.session(f"kinsumer-cluster-test-{app}", {"spark.sql.shuffle.partitions": "2"}, _EXECUTOR_ENV)
    try:
        frame = (
            spark.readStream.format("kinsumer")
            .option("streamName", stream)
            .option("endpointUrl", kinesis)
            .option("dynamodbEndpointUrl", dynamodb)
            .option("applicationName", app)
            .option("maxRecordsPerShard", limit)
            .options(**json.loads(options))
            .load()
        )
        query = (
            frame.writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
