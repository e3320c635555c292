"""spark-submit entry point; the job lives in stream_pipelines.tables.compaction."""

import sys

from stream_pipelines.tables.compaction import main

if __name__ == "__main__":
    sys.exit(main())
