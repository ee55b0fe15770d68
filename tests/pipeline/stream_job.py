"""A streaming query run as its own process, so a test can SIGKILL it mid-batch:
`python -m tests.pipeline.stream_job NAMESRV TOPIC OUT CHECKPOINT`. It reads the topic 5
offsets per trigger into parquet files with a checkpoint, and prints BATCH n after each
micro-batch's commit."""

from __future__ import annotations

import sys

from pipeline import local_session
from tests.pipeline.sessions import SESSION_CONF


def main() -> None:
    namesrv, topic, out, checkpoint = sys.argv[1:5]
    spark = local_session("tidemq-stream-job", **SESSION_CONF)
    stream = (spark.readStream.format("tidemq").option("namesrv", namesrv).option("topic", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "5").load())
    query = (stream.select("topic", "queue_id", "queue_offset", "body", "properties")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(processingTime="100 milliseconds").start())
    seen = -1
    while True:
        query.awaitTermination(0.2)
        progress = query.lastProgress
        if progress and progress["batchId"] != seen:
            seen = progress["batchId"]
            print(f"BATCH {seen} {progress['numInputRows']}", flush=True)


if __name__ == "__main__":
    main()
