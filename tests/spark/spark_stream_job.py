"""The streaming query of test_spark_streaming.py's driver-kill test, run as its own process (the
test SIGKILLs its whole process group: Python driver, JVM and Python workers at once).

    python spark_stream_job.py SERVICE_URL ADMIN_URL TOPIC CHECKPOINT OUT MAX_ENTRIES
"""

from __future__ import annotations

import sys
import time

from spark_helpers import new_spark, start_copy_query


def main() -> None:
    service_url, admin_url, topic, checkpoint, out, max_entries = sys.argv[1:7]
    spark = new_spark("velamq-kill-job")
    query = start_copy_query(spark, service_url, admin_url, topic, checkpoint, out, max_entries=int(max_entries))
    print("query started", flush=True)
    while query.isActive:  # until killed
        time.sleep(0.5)
    query.awaitTermination()


if __name__ == "__main__":
    main()
