"""The results: the tuned-against-naive comparison, the knee, the table and the plot."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.core import registry
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.devtools.benchmarks.common import (
    machine_info,
)

if TYPE_CHECKING:
    pass
from stream_pipelines.devtools.benchmarks.streaming.search import Search, generator_bound
from stream_pipelines.devtools.benchmarks.streaming.settings import (
    APPS,
    GOAL_SUSTAINED,
    NAIVE,
    PARTITIONS,
    SENSOR_COUNT,
    TUNED,
    USER_COUNT,
    Profile,
)


def compare(searches: dict[str, Search]) -> dict[str, Any] | None:
    if NAIVE not in searches:
        return None
    tuned, naive = searches[TUNED], searches[NAIVE]
    best, naive_best = tuned.sustained, naive.sustained
    comparison: dict[str, Any] = {"sustained_ratio": None, "sustained_ratio_is_lower_bound": False}
    if best is not None and naive_best is not None:
        comparison["sustained_ratio"] = best.input_rate / naive_best.input_rate
    elif best is not None and naive.lowest_failure is not None:
        # The naive variant sustains less than the lowest rate it was tried at.
        comparison["sustained_ratio"] = best.input_rate / naive.lowest_failure.input_rate
        comparison["sustained_ratio_is_lower_bound"] = True
    # The shared rate: the naive search's first step ran at the tuned variant's best (or, if the
    # tuned variant passed nothing, at the rate both started at).
    reference = best or (tuned.steps[0] if tuned.steps else None)
    if reference is not None and naive.steps:
        first = naive.steps[0]
        tuned_rate, naive_rate = reference.rows_per_busy_s, first.rows_per_busy_s
        comparison["shared_rate"] = {
            "tuned_input_rate": reference.input_rate,
            "naive_input_rate": first.input_rate,
            "tuned_passed": reference.passed,
            "naive_passed": first.passed,
            "tuned_p95_s": reference.p95_s,
            "naive_p95_s": first.p95_s,
            "naive_window_s": first.window_s,
            "tuned_rows_per_busy_s": tuned_rate,
            "naive_rows_per_busy_s": naive_rate,
            "rows_per_busy_s_ratio": tuned_rate / naive_rate if tuned_rate and naive_rate else None,
        }
    return comparison


def knee(search: Search) -> dict[str, Any]:
    """The highest passing rate, and whether a failing rate above it brackets it (the knee) or the
    search stopped first (a lower bound only)."""
    best = search.sustained
    above = [
        step
        for step in search.steps
        if not step.passed and (best is None or step.input_rate > best.input_rate)
    ]
    failure = min(above, key=lambda step: step.input_rate, default=None)
    return {
        "rate": best.input_rate if best else None,
        "p95_s": best.p95_s if best else None,
        "load_generator_cores": best.load_generator_cores if best else None,
        "fails_at": failure.input_rate if failure else None,
        "bracketed": best is not None and failure is not None,
        "bracket": failure.input_rate / best.input_rate - 1 if best and failure else None,
        "generator_bound": failure is None and generator_bound(search.steps),
        "asked_up_to": max((step.target_rate for step in search.steps), default=None),
        "goal": GOAL_SUSTAINED.get(search.app),
    }


def knee_line(app: str, search: dict[str, Any]) -> str:
    found = search["knee"]
    goal = f"   goal >= {found['goal']:,.0f}/s" if found["goal"] else ""
    if found["rate"] is None:
        failed = shown(found["fails_at"], ",.0f")
        return f"{app}: no rate passed (lowest tried failed at {failed}/s){goal}"
    load = shown(found["load_generator_cores"], ".2f", " cores")
    if found["bracketed"]:
        return (
            f"{app} knee: sustains {found['rate']:,.0f}/s (p95 {shown(found['p95_s'], '.1f')}s), fails at "
            f"{found['fails_at']:,.0f}/s, a bracket of {found['bracket']:.0%}; the load generator took {load}"
            f"{goal}"
        )
    if found.get("generator_bound"):
        return (
            f"{app}: at least {found['rate']:,.0f}/s (p95 {shown(found['p95_s'], '.1f')}s); the load "
            f"generator sent no faster though asked up to {found['asked_up_to']:,.0f}/s (it took {load}), so "
            f"this is a lower bound set by the generator, not the knee{goal}"
        )
    return (
        f"{app}: at least {found['rate']:,.0f}/s; no higher rate failed within {search['seconds']:.0f}s, so "
        f"this is a lower bound, not the knee{goal}"
    )


def search_summary(search: Search) -> dict[str, Any]:
    best, failure = search.sustained, search.lowest_failure
    return {
        "trigger_s": search.trigger_s,
        "knee": knee(search),
        "sustained_rate": best.input_rate if best else None,
        "sustained_p95_s": best.p95_s if best else None,
        "lowest_failing_rate": failure.input_rate if failure else None,
        "seconds": search.seconds,
        "load_average_before": search.load_average_before,
        "load_average_after": search.load_average_after,
        "steps": [{**asdict(step), "rows_per_busy_s": step.rows_per_busy_s} for step in search.steps],
    }


def build_results(
    config: PipelineConfig,
    variants: dict[str, PipelineConfig],
    args: argparse.Namespace,
    profile: Profile,
    state: dict[str, Any] | None,
    searches: dict[str, dict[str, Search]],
) -> dict[str, Any]:
    throughput = {
        app: {
            **{variant: search_summary(search) for variant, search in by_variant.items()},
            "comparison": compare(by_variant),
        }
        for app, by_variant in searches.items()
    }
    return {
        "benchmark": "streaming",
        "machine": machine_info(),
        "settings": {
            "profile": asdict(profile),
            "env": config.env,
            "apps": list(args.apps),
            "spark_master": config.spark.master,
            "driver_memory": config.spark.driver_memory,
            "triggers": {app: str(registry.app(app).trigger_interval(config)) for app in APPS},
            "variants": {
                name: {
                    "shuffle_partitions": variant.spark.shuffle_partitions,
                    "state_store": variant.spark.state_store,
                    "changelog_checkpointing": variant.spark.changelog_checkpointing,
                }
                for name, variant in variants.items()
            },
            "configured_max_offsets_per_trigger": config.kafka.max_offsets_per_trigger,
            "partitions": PARTITIONS,
            "sensor_count": SENSOR_COUNT,
            "user_count": USER_COUNT,
            "state_keys": args.state_keys,
            "overrides": list(args.overrides),
        },
        "method": {
            "rate": "input records/s measured on the broker over the step's window (all input topics)",
            "pass": "every query: p95 triggerExecution <= trigger and backlog trend over the window "
            "<= one trigger of input",
            "sustained_rate": "highest passing rate; lowest_failing_rate bounds it from above",
            "sustained_ratio": "tuned sustained / naive sustained (lower bound if the naive passed no step)",
            "rows_per_busy_s_ratio": "at the shared rate: rows / summed triggerExecution, tuned over naive",
            "state_rows": "median numRowsTotal over the steady batches; ratio = median / model",
            "max_offsets_per_trigger": "lifted (null) for the throughput runs",
        },
        "state_vs_delay": state,
        "throughput": throughput,
    }


def shown(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def format_table(results: dict[str, Any]) -> str:
    machine, settings = results["machine"], results["settings"]
    load = " / ".join(f"{value:.2f}" for value in results["load_average"]["before"]) or "unknown"
    load_after = " / ".join(f"{value:.2f}" for value in results["load_average"]["after"]) or "unknown"
    lines = [
        f"Streaming benchmark ({settings['profile']['name']}, {results['seconds'] / 60:.1f} min): "
        f"Spark {machine['pyspark']} {settings['spark_master']}, Kafka {machine['kafka']}; "
        f"{machine['usable_cpus']} CPUs ({machine['cpu_model']}); load average before {load}, "
        f"after {load_after}",
    ]
    state = results["state_vs_delay"]
    if state:
        lines += [
            "",
            f"State rows vs watermark delay: {state['keys']} sensors, sliding {state['window_s'] / 60:g} min "
            f"every {state['slide_s'] / 60:g} min, {state['batch_event_seconds']}s of event time per batch, "
            f"{state['state_store']} store; median of {state['steady_batches_per_delay']} steady batches",
            f"{'delay':>7}{'model':>8}{'measured':>10}{'ratio':>7}{'mean':>8}{'ratio':>7}{'min':>6}{'max':>6}"
            f"{'expected mean':>15}",
        ]
        for delay in state["delays"]:
            lines.append(
                f"{delay['delay_minutes']:>5g} m{delay['model_rows']:>8}{delay['measured_median']:>10g}"
                f"{delay['ratio']:>7.2f}{delay['measured_mean']:>8.1f}{delay['mean_ratio']:>7.2f}"
                f"{delay['measured_min']:>6}{delay['measured_max']:>6}{delay['expected_mean_rows']:>15.1f}"
            )
        lines.append(
            "model = keys x ceil((window + delay) / slide); expected mean = keys x (window + delay + batch "
            "span) / slide"
        )
    throughput = results["throughput"]
    if throughput:
        variants = settings["variants"]
        searched = [
            variant for variant in (TUNED, NAIVE) if any(variant in entry for entry in throughput.values())
        ]
        lines += [
            "",
            "Sustained throughput (input records/s; p95 batch <= trigger, backlog not growing): "
            + "; ".join(
                f"{variant} = {variants[variant]['shuffle_partitions']} shuffle partitions, "
                f"{variants[variant]['state_store']}"
                for variant in searched
            ),
            f"{'app':<20}{'variant':<8}{'trigger':>8}{'sustained':>11}{'p95 s':>7}{'fails at':>10}"
            f"{'steps':>6}{'load after':>12}",
        ]
        for app, entry in throughput.items():
            for variant in searched:
                search = entry[variant]
                load_now = search["load_average_after"][0] if search["load_average_after"] else None
                sustained = shown(search["sustained_rate"], ",.0f")
                failing = shown(search["lowest_failing_rate"], ",.0f")
                lines.append(
                    f"{app:<20}{variant:<8}{search['trigger_s']:>7g}s{sustained:>11}"
                    f"{shown(search['sustained_p95_s'], '.1f'):>7}{failing:>10}"
                    f"{len(search['steps']):>6}{shown(load_now, '.2f'):>12}"
                )
        lines.append("")
        for app, entry in throughput.items():
            lines.append(knee_line(app, entry[TUNED]))
            comparison = entry["comparison"]
            if comparison is None:
                continue
            bound = ">" if comparison["sustained_ratio_is_lower_bound"] else ""
            line = (
                f"{app}: sustained tuned / naive = {bound}{shown(comparison['sustained_ratio'], '.2f', 'x')}"
            )
            shared = comparison.get("shared_rate")
            if shared:
                naive_p95 = shown(shared["naive_p95_s"], ".1f", "s")
                if not shared["naive_passed"] and shared["naive_p95_s"] is None:
                    naive_p95 = f"none finished in {shared['naive_window_s']:.0f}s"
                line += (
                    f"; at {shared['tuned_input_rate']:,.0f}/s p95 tuned "
                    f"{shown(shared['tuned_p95_s'], '.1f', 's')}, naive {naive_p95}; rows per busy second "
                    f"tuned / naive {shown(shared['rows_per_busy_s_ratio'], '.2f', 'x')}"
                )
            lines.append(line)
        lines.append("Every step's queries, batch counts and reasons are in the JSON.")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> Path:
    # The object API with no pyplot: no global backend or figure state to set or leak.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.5), layout="constrained")
    left, right = figure.subplots(1, 2)
    state = results["state_vs_delay"]
    if state:
        delays = [d["delay_minutes"] for d in state["delays"]]
        left.plot(
            delays, [d["model_rows"] for d in state["delays"]], "o--", label="model: keys x ceil((w+d)/s)"
        )
        left.plot(
            delays,
            [d["expected_mean_rows"] for d in state["delays"]],
            ":",
            label="expected mean (w+d+batch)/s",
        )
        medians = [d["measured_median"] for d in state["delays"]]
        errors = [
            [m - d["measured_min"] for m, d in zip(medians, state["delays"], strict=True)],
            [d["measured_max"] - m for m, d in zip(medians, state["delays"], strict=True)],
        ]
        left.errorbar(delays, medians, yerr=errors, fmt="s-", capsize=4, label="measured median (min-max)")
        left.plot(
            delays,
            [d["measured_mean"] for d in state["delays"]],
            "x",
            color="black",
            zorder=3,
            label="measured mean",
        )
        left.set_xlabel("watermark delay (minutes)")
        left.set_ylabel("state rows (numRowsTotal)")
        left.set_title(f"Sliding-window state, {state['keys']} keys")
        left.set_xticks(delays)
        left.legend(fontsize="small")
        left.grid(alpha=0.3)
    throughput = results["throughput"]
    if throughput:
        apps = list(throughput)
        searched = [variant for variant in (TUNED, NAIVE) if all(variant in throughput[app] for app in apps)]
        width = 0.76 / len(searched)
        for index, variant in enumerate(searched):
            offset = (index - (len(searched) - 1) / 2) * width
            heights = [throughput[app][variant]["sustained_rate"] or 0 for app in apps]
            bars = right.bar([i + offset for i in range(len(apps))], heights, width, label=variant)
            for bar, app in zip(bars, apps, strict=True):
                entry = throughput[app][variant]
                if entry["sustained_rate"]:
                    label = f"{entry['sustained_rate']:,.0f}"
                elif entry["lowest_failing_rate"]:
                    label = f"< {entry['lowest_failing_rate']:,.0f}"
                else:
                    label = "n/a"
                right.annotate(
                    label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom"
                )
        entries = [throughput[app][variant] for app in apps for variant in searched]
        highest = max(entry["sustained_rate"] or entry["lowest_failing_rate"] or 0 for entry in entries)
        # Headroom for the labels; a chart of nothing but "< x" bars is scaled to the x.
        right.set_ylim(0, max(highest, 1.0) * 1.15)
        right.set_xticks(range(len(apps)), apps)
        right.set_ylabel("sustained input records/s")
        right.set_title("Sustained throughput (p95 batch <= trigger)")
        right.legend()
        right.grid(axis="y", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path
