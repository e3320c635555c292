"""The data quality gates around the nightly reconciliation (``gates``), the nightly job that runs them
and the reconciliation in one driver (``nightly_job``), and the Data Docs' vendored assets so the site
opens offline (``data_docs_assets``)."""
