"""Nightly reconciliation of the streaming outputs against an exact batch recompute from the raw archive.

Modules: ``events`` (archive -> typed deliveries), ``ledger`` (which deliveries the stream's watermark
excluded, from the batch log), ``diff`` (window by window, with attribution), ``ads`` (ad matches),
``advisor`` (delay distribution, recommended watermark, what-if), ``report`` (JSON, HTML, PNG, and the
report folder) and ``job`` (``run_reconciliation`` in stages, and the spark-submit ``main``). Settings
are the config's ``reconciliation`` section; locations are registry datasets.
"""
