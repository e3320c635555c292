"""spark-submit entry point; the job lives in stream_pipelines.quality.nightly_job."""

import sys

from stream_pipelines.quality.nightly_job import main

if __name__ == "__main__":
    sys.exit(main())
