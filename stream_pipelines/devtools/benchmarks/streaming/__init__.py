"""Streaming benchmark: sustained throughput of both apps, a naive baseline, state rows against delay.

One run starts a private broker and one Spark session, then measures:

State rows against watermark delay. A fixed stream (``--state-keys`` sensors, one reading per sensor
per second, all on time) is written to JSON-lines files of ``--state-batch-seconds`` of event time
each and replayed through the app's sliding-window aggregation (``sliding_window_averages`` after the
app's parse and watermark) with each delay (1, 2, 5 and 10 minutes), one file per micro-batch
(``source.kind=files``, available-now). Files rather than Kafka because they make every batch exactly
the same span of event time, so the runs are deterministic and independent of the machine's speed.
State rows are the stateful operator's ``numRowsTotal`` after each batch; the steady state is the
median over the batches after the state has filled (event time past start + delay + one slide),
over two slides, so that every phase of the slide is sampled equally. The model is
keys x ceil((window + delay) / slide). Spark evicts with the watermark of the previous batch, so a
key holds the windows whose start lies in (t_prev - delay - window, t_now]: on average
(window + delay + batch span) / slide of them, reported as ``expected_mean_rows``.

Sustained throughput. Each app's own queries (``build_sinks``: every sink, as deployed, without the
metrics exporter) run with their configured processing-time trigger while a background thread
produces generator records (event time = now) at a target rate. After a rate change a step waits
until every query has finished a batch that started after it (two after a restart: the cold batch
and the one catching up), then looks at the batches that start within ``--measure-seconds``. It
passes when, for every query of the app, the p95 of ``triggerExecution`` is within the trigger
interval and the backlog does not grow. The backlog is the broker's latest offsets minus the query's
end offsets, sampled as each batch is seen; it "grows" when its least-squares trend over the window
adds up to more than one trigger's worth of input. Rates are chosen by a secant search on the p95
batch duration (aiming at 90% of the trigger), kept inside the bracket of the highest passing and
lowest failing rate, until the bracket is within 15%, the per-search time budget
(``--search-seconds``) runs out, or two passing steps in a row got under 85% of the rate asked of
the producer (it runs in this process, on the same cores as Spark: asking more would measure it, and
the table says the bound is the generator's). After a failed step the queries restart from fresh
checkpoints at the latest offsets, so the next step never inherits the failed step's backlog. The
sustained rate is the highest passing input rate measured on the broker: a lower bound, good to the
bracket.
``--knee`` gives the tuned queries alone the budget to bracket it (up to 14 steps, 30 minutes per
app): the table then names the knee (the highest passing rate and the failing rate above it), or says
that the search stopped first and the figure is a lower bound, with the goal beside the sensor app's.
``maxOffsetsPerTrigger`` is lifted during these runs: in steady state it only binds when
rate x trigger exceeds it, and then the benchmark would measure the cap, not the pipeline.

Naive baseline. The same queries from the same pure transforms, as a tutorial would write them
(a tutorial does not rewrite the transforms) and with the settings a tutorial leaves alone: 200
shuffle partitions and the HDFS-backed state store. Its search starts at the tuned variant's
sustained rate, so both are measured at that same rate; the report gives the ratio of sustained
rates (tuned / naive; a lower bound when the naive variant passed no step) and, at the shared rate,
the ratio of rows processed per second of batch time.

The producer, the broker and Spark share the machine's cores, as they would on any single host.
The generator is not free (about a sixth of a core per 2,000 records/s here); every step records the
CPU this process (the load) took, and a step whose producer fell behind its target is judged at the
rate the broker actually received. Results: a table on stdout, JSON in data/bench/streaming.json and
a plot next to it (streaming.png).
"""
