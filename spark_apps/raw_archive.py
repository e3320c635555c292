"""spark-submit entry point; the app lives in stream_pipelines.apps.raw_archive."""

import sys

from stream_pipelines.apps.raw_archive import main

if __name__ == "__main__":
    sys.exit(main())
