"""spark-submit's entry points, one file per driver, shipped inside the package so that an installed
wheel has them wherever it lives: the three apps (each runs ``driver.lifecycle.run_app``), the nightly
reconciliation (``reconciliation.job``) and the compaction (``tables.compaction``). Nothing imports
them; spark-submit runs them by path (``core.registry.entry_point``)."""
