"""The data quality gates around the nightly reconciliation (``gates``), and the Data Docs' vendored
assets so the site opens offline (``data_docs_assets``)."""
