"""The pipeline's Spark Structured Streaming job (SP-6): events -> windowed totals -> a topic and Parquet.

    events topic --velamq source--> parse JSON --watermark 10 s--> per 1-minute window and page:
    count, amount, distinct users --+--velamq sink--> results topic (key = page, value = JSON)
                                    +--parquet sink--> OUT_DIR

Nothing in it is velamq-specific but the connector's format name: the same job runs on a Spark
cluster and against an Apache Pulsar cluster by changing the two URLs (SP-5). Run it on its own:

    spark-submit examples/pipeline/pipeline_job.py --service-url pulsar://broker:6650 \
        --admin-url http://broker:8080 --events events --results totals \
        --out /data/totals --checkpoints /data/checkpoints

(with velamq installed on the driver and executors, which registers the `velamq` format).
Against a secured cluster, add the Pulsar connector's auth and TLS options, passed to both sources
and sinks: `--service-url pulsar+ssl://broker:6651 --admin-url https://broker:8443
--auth-plugin org.apache.pulsar.client.impl.auth.AuthenticationToken --auth-params file:///etc/app.token
--tls-trust-certs-file-path /etc/ca.pem`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

EVENT_SCHEMA = "user string, page string, amount double"
END_PAGE = "__end__"


def windowed_totals(spark: SparkSession, service_url: str, admin_url: str, events_topic: str,
                    security: Mapping[str, str] | None = None) -> DataFrame:
    events = (spark.readStream.format("velamq").options(**(security or {}))
              .option("service.url", service_url).option("admin.url", admin_url)
              .option("topic", events_topic).option("startingOffsets", "earliest")
              .load())
    parsed = events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"), "eventTime")
    return (parsed.select("e.*", "eventTime")
            .withWatermark("eventTime", "10 seconds")
            .groupBy(F.window("eventTime", "1 minute"), "page")
            .agg(F.count("*").alias("events"), F.round(F.sum("amount"), 2).alias("amount"),
                 F.approx_count_distinct("user", rsd=0.01).alias("users"),
                 F.max((F.col("page") == END_PAGE).cast("int")).alias("marker"))
            # The end marker only moves the watermark. Filtering on an aggregate keeps Spark from
            # pushing the filter below the watermark, where the marker would never be seen.
            .where(F.col("marker") == 0)
            .select(F.col("window.start").alias("windowStart"), F.col("window.end").alias("windowEnd"),
                    "page", "events", "amount", "users"))


def start(spark: SparkSession, service_url: str, admin_url: str, events_topic: str, results_topic: str,
          out_dir: str, checkpoint_dir: str, trigger_s: float = 2.0,
          security: Mapping[str, str] | None = None) -> list[Any]:
    """Start the two queries (one per sink, each with its own checkpoint) and return them.
    `security`: the connector's auth/TLS options (authPluginClassName, authParams, ...)."""
    totals = windowed_totals(spark, service_url, admin_url, events_topic, security)
    trigger = f"{trigger_s} seconds"
    to_topic = (totals.select(F.col("page").alias("key"), F.to_json(F.struct("*")).alias("value"),
                              F.col("windowEnd").alias("eventTime"))
                .writeStream.format("velamq").options(**(security or {}))
                .option("service.url", service_url).option("admin.url", admin_url).option("topic", results_topic)
                .option("checkpointLocation", f"{checkpoint_dir}/to-topic")
                .outputMode("append").trigger(processingTime=trigger).queryName("totals-to-topic").start())
    to_parquet = (totals.writeStream.format("parquet").option("path", out_dir)
                  .option("checkpointLocation", f"{checkpoint_dir}/to-parquet")
                  .outputMode("append").trigger(processingTime=trigger).queryName("totals-to-parquet").start())
    return [to_topic, to_parquet]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--service-url", default="pulsar://localhost:6650")
    parser.add_argument("--admin-url", default="http://localhost:8080")
    parser.add_argument("--events", default="pipeline-events")
    parser.add_argument("--results", default="pipeline-totals")
    parser.add_argument("--out", default="pipeline-out/totals")
    parser.add_argument("--checkpoints", default="pipeline-out/checkpoints")
    parser.add_argument("--auth-plugin", help="token, basic, tls or the Java class name")
    parser.add_argument("--auth-params", help="the plugin's parameters (token:..., file:///path, ...)")
    parser.add_argument("--tls-trust-certs-file-path", help="CA certificates for pulsar+ssl:// and https://")
    args = parser.parse_args()
    security = {name: value for name, value in (
        ("authPluginClassName", args.auth_plugin), ("authParams", args.auth_params),
        ("tlsTrustCertsFilePath", args.tls_trust_certs_file_path)) if value}
    spark = SparkSession.builder.appName("velamq-pipeline").getOrCreate()
    start(spark, args.service_url, args.admin_url, args.events, args.results, args.out, args.checkpoints,
          security=security)
    spark.streams.awaitAnyTermination()


if __name__ == "__main__":
    main()
