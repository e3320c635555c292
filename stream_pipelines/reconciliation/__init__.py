"""Nightly reconciliation of the streaming outputs against an exact batch recompute from the raw archive.

Modules: ``settings`` (tolerances, horizon, locations), ``events`` (archive -> typed deliveries),
``ledger`` (which deliveries the stream's watermark excluded, from the batch log), ``diff`` (window by
window, with attribution), ``advisor`` (delay distribution, recommended watermark, what-if),
``report`` (JSON, HTML, PNG) and ``job`` (``run_reconciliation`` and the spark-submit ``main``).
"""
