"""Keeping the datasets the apps write: reading a day, compacting closed days, removing what outlived
its retention, and sweeping what no sink's log lists.

  compacted_days  where compacted days live, how one is published, which one a reader takes
  day_reader      a dataset's event day, from its compacted versions and its sink's log
  retention       how long each kind of data is kept, and its removal
  maintenance     the daily sweep of the file sinks' outputs
  compaction      the job that compacts closed days (stream_pipelines/spark_apps/compact.py)
"""
