"""A Spark driver for the cluster tests, run as its own process: one availableNow query into a parquet sink.

    python -m tests.spark.cluster_driver MASTER_URL STREAM KINESIS DYNAMODB APP CHECKPOINT OUT LIMIT

AWS settings reach the executors through ``spark.executorEnv.*`` only (the workers have none).
Exits 0 once the query has read what the stream held and stopped by itself.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import kinsumer.spark

_EXECUTOR_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "PYTHONPATH",
    "KINSUMER_TEST_CALL_LOG",
)


def main(master: str, stream: str, kinesis: str, dynamodb: str, app: str, checkpoint: str, out: str, limit: str) -> int:
    builder = (
        SparkSession.builder.master(master)
        .appName(f"kinsumer-cluster-test-{app}")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for name in _EXECUTOR_ENV:
        if name in os.environ:
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kinsumer.spark.register(spark)
    try:
        frame = (
            spark.readStream.format("kinsumer")
            .option("streamName", stream)
            .option("endpointUrl", kinesis)
            .option("dynamodbEndpointUrl", dynamodb)
            .option("applicationName", app)
            .option("maxRecordsPerShard", limit)
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
