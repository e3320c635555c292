"""spark-submit entry point; the app lives in stream_pipelines.apps.ad_matching."""

import sys

from stream_pipelines.apps.ad_matching import main

if __name__ == "__main__":
    sys.exit(main())
