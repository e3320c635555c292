"""The DAG definitions, one module per DAG file: wiring only, no heavy imports or I/O at parse time.

Airflow reads them through the DAG files `pipelinectl airflow-dags` writes into its DAGs folder (the
checkout's dags/ holds exactly those), each one line: ``from stream_pipelines.airflow.dags.<module>
import *``. So every DAG here is bound to a public module-level name: Airflow finds a file's DAGs among
its module's names, and a module imported once already in the process (a second DagBag, a second file)
registers nothing anew.
"""
