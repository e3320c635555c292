# Front door for people and CI. Every target that needs the environment builds it first (idempotent).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(BIN)/python
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: help setup lock demo chaos game-day test test-soak test-deps up down status standalone-start standalone-stop standalone-status hdfs-start hdfs-stop hdfs-status yarn-start yarn-stop yarn-status test-fast lint format broker-start broker-stop broker-status bench-ingest bench-streaming bench-metrics bench-reconcile bench-startup bench-batch-cost bench-stack bench-recovery bench-overhead bench-soak clean

help:  ## list the targets
	@grep -E '^[A-Za-z0-9_.-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

setup:  ## build .venv from the lock file and resolve the pinned JVM artifacts (idempotent)
	@infra/scripts/setup.sh

lock:  ## recompile requirements.lock from requirements.in
	$(BIN)/uv pip compile --quiet --python-version 3.11 --generate-hashes requirements.in -o requirements.lock

demo: setup  ## the main job on the embedded local default: broker, events, apps, summary
	$(BIN)/pipelinectl demo

chaos: setup  ## fault injection on a private stack: 20 random faults, then exactly-once checks (CHAOS_ARGS=--faults 20 --seed 7)
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/python -m stream_pipelines.devtools.chaos $(CHAOS_ARGS)

game-day: setup test-deps  ## each paging alert's condition caused for real on a private stack with Prometheus and Alertmanager as shipped; prints what reached on-call (about an hour; GAME_DAY_ARGS=--scenes broker-outage,crash-loop)
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/python -m stream_pipelines.devtools.game_day $(GAME_DAY_ARGS)

test-deps:  ## servers the tests start that come from Debian: prometheus and promtool, alertmanager, chromium, openssl, postgresql
	@infra/scripts/install_test_servers.sh

# One process: on two cores, two workers were no faster (docs/development.md#where-ci-time-goes).
# TEST_WORKERS=2 runs the tests that start servers in order on one worker and the unit tier beside them
# on the other; on a bigger machine, TEST_WORKERS=4 TEST_GROUPING= spreads the modules.
TEST_WORKERS ?= 1
TEST_GROUPING ?= --servers-on-one-worker
test: setup test-deps  ## the test suite but the soak tier (real broker, real Spark, real Prometheus); TEST_WORKERS=N TEST_GROUPING= on a bigger machine
	$(BIN)/python -m pytest -q -m "not soak" $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(TEST_GROUPING)) $(PYTEST_ARGS)

test-soak: setup test-deps  ## the soak tier: minutes of faults on a whole stack (the chaos smoke, about ten minutes); run it before landing a change to supervision or the stack
	$(BIN)/python -m pytest -q -m soak $(PYTEST_ARGS)

test-fast: setup  ## the unit tier only: no JVM, no broker, no Airflow (about three minutes)
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

lint: setup  ## ruff over everything
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: setup  ## ruff format, then ruff check --fix, over everything
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

yarn-start: setup  ## a single-node YARN (ResourceManager + NodeManager) over its own HDFS on 127.0.0.1 (prints HADOOP_CONF_DIR)
	$(BIN)/python -m stream_pipelines.devtools.yarn start

yarn-stop:  ## stop the local YARN and its HDFS
	$(BIN)/python -m stream_pipelines.devtools.yarn stop

yarn-status:  ## whether the local YARN runs, and its addresses
	$(BIN)/python -m stream_pipelines.devtools.yarn status

broker-start: setup  ## start the local KRaft broker and create the topics
	$(BIN)/pipelinectl broker start

broker-stop:  ## stop the local broker
	$(BIN)/pipelinectl broker stop

broker-status:  ## whether the local broker runs, and its address
	$(BIN)/pipelinectl broker status

up: setup  ## local stack: broker, Airflow (UI on :8080), streaming DAGs unpaused, generator, Prometheus
	-@infra/scripts/install_test_servers.sh
	$(BIN)/pipelinectl up

down:  ## stop everything `make up` started, children included
	$(BIN)/pipelinectl down

status:  ## what runs, and each app's state (running, stopped, paused, crash-looping)
	$(BIN)/pipelinectl status

standalone-start: setup  ## a Spark standalone master + worker on localhost (then --set spark.master=spark://127.0.0.1:7077)
	$(BIN)/python -m stream_pipelines.devtools.standalone start

standalone-stop:  ## stop the Spark standalone master and worker
	$(BIN)/python -m stream_pipelines.devtools.standalone stop

standalone-status:  ## whether the Spark standalone master and worker run
	$(BIN)/python -m stream_pipelines.devtools.standalone status

hdfs-start: setup  ## a single-node HDFS on 127.0.0.1 (prints fs.defaultFS; then --set paths.data_root=hdfs://127.0.0.1:<port>/pipeline)
	$(BIN)/python -m stream_pipelines.devtools.hdfs start

hdfs-stop:  ## stop the local HDFS
	$(BIN)/python -m stream_pipelines.devtools.hdfs stop

hdfs-status:  ## whether the local HDFS runs, and its fs.defaultFS
	$(BIN)/python -m stream_pipelines.devtools.hdfs status

bench-ingest: setup  ## ingest benchmark: Kafka->noop, ->parse, ->archive vs kafka-consumer-perf-test
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.ingest $(BENCH_ARGS)

bench-streaming: setup  ## both apps: sustained rate, tuned vs naive, state rows vs watermark delay (BENCH_ARGS=--quick, or --knee)
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.streaming $(BENCH_ARGS)

bench-metrics: setup  ## sensor app throughput with the Prometheus exporter on and off, same run
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.metrics_overhead $(BENCH_ARGS)

bench-startup: setup  ## each app alone: spark-submit to first committed batch, split into phases (BENCH_ARGS=--repeats 3)
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.startup $(BENCH_ARGS)

bench-batch-cost: setup  ## each app's queries: per-batch time (durationMs parts) and CPU at ~1, 50, 500 and 5,000 rows
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.batch_cost $(BENCH_ARGS)

bench-stack: setup  ## the `make up` stack on a private data root: CPU per component, kill -9 to next batch under Airflow, freshness
	-@infra/scripts/install_test_servers.sh
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.stack_cost $(BENCH_ARGS)

bench-recovery: setup  ## chaos faults (query failure, frozen JVM, kill -9) on raw_archive, before and after in-driver recovery and the frozen-JVM check (BENCH_ARGS=--versus cluster: a driver's kill on the worker against a container kill in YARN)
	-@infra/scripts/install_test_servers.sh
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.recovery $(BENCH_ARGS)

bench-overhead: setup  ## each app as deployed vs its queries as a bare PySpark script: cold start and CPU per trigger, ratio
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.overhead $(BENCH_ARGS)

bench-soak: setup  ## the `make up` stack for an hour at a 1 s trigger, sampled per slice: what grows with run time, projected to 90 and 365 days
	-@infra/scripts/install_test_servers.sh
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.soak $(BENCH_ARGS)

bench-reconcile: setup  ## nightly reconciliation over one day of 10M generated raw events: rows/s, peak memory
	$(BIN)/python -m stream_pipelines.devtools.benchmarks.reconcile $(BENCH_ARGS)

clean:  ## stop the local stack, then remove local data (broker log, checkpoints, outputs, Airflow's database); keeps .venv and the JVM cache
	-$(BIN)/pipelinectl down
	rm -rf data
