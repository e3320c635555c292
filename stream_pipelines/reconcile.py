"""The nightly reconciliation's front door (the code lives in stream_pipelines.reconciliation)."""

from stream_pipelines.reconciliation.job import (
    ReconciliationResult,
    UnexplainedDifferences,
    main,
    run_reconciliation,
    submit_command,
)

__all__ = ["ReconciliationResult", "UnexplainedDifferences", "main", "run_reconciliation", "submit_command"]
