"""spark-submit entry point of ad_matching: its life is stream_pipelines.driver.lifecycle's, its queries
are built by stream_pipelines.apps.ad_matching."""

import sys

from stream_pipelines.driver.lifecycle import run_app

if __name__ == "__main__":
    sys.exit(run_app("ad_matching"))
