"""spark-submit entry point; the job lives in stream_pipelines.reconciliation.job."""

import sys

from stream_pipelines.reconciliation.job import main

if __name__ == "__main__":
    sys.exit(main())
