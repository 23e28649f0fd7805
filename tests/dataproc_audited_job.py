"""examples/dataproc/streaming_job.py, unchanged, with each micro-batch's message ids recorded.

    spark-submit --py-files examples/dataproc/streaming_job.py \\
        tests/dataproc_audited_job.py --ids-dir DIR <streaming_job.py's arguments>

(crdb_pubsub installed where the driver and the executors run, as the guide installs it.)

The job's foreachBatch function (``crdb_pubsub.apply.foreach_batch_apply``) is wrapped: the batch
is persisted, its ``message_id`` column written to ``DIR/<batch id>.ids`` (replaced when Spark runs
the batch again, as an exactly-once sink keyed by batch id), then the job's own function applies
it. The Delta tables hide duplicates (the apply is idempotent per key and HLC), the ids do not:
``tests/test_dataproc.py`` counts lost and duplicated messages from them.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if argv[:1] != ["--ids-dir"] or len(argv) < 2:
        print("usage: dataproc_audited_job.py --ids-dir DIR <streaming_job.py arguments>", file=sys.stderr)
        return 2
    ids_dir, rest = argv[1], argv[2:]
    os.makedirs(ids_dir, exist_ok=True)

    import crdb_pubsub.apply as apply

    real = apply.foreach_batch_apply

    def audited(*args, **kwargs):
        run = real(*args, **kwargs)

        def each_batch(df, batch_id: int) -> None:
            df = df.persist()
            try:
                ids = [r.message_id for r in df.select("message_id").collect()]
                tmp = os.path.join(ids_dir, f".{batch_id}.tmp")
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write("\n".join(i or "" for i in ids))
                os.replace(tmp, os.path.join(ids_dir, f"{batch_id}.ids"))
                run(df, batch_id)
            finally:
                df.unpersist()

        return each_batch

    apply.foreach_batch_apply = audited
    import streaming_job  # from --py-files, as Dataproc ships a job's other files

    return streaming_job.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
