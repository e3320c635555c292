"""spark-submit entry point of raw_archive: its life is stream_pipelines.driver.lifecycle's, its queries
are built by stream_pipelines.apps.raw_archive."""

import sys

from stream_pipelines.driver.lifecycle import run_app

if __name__ == "__main__":
    sys.exit(run_app("raw_archive"))
