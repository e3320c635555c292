"""A reviewer's sign-off of day D's final compliance figures, asked for in the Airflow UI.

Runs once for each final reconciliation report (the reconciliation_final_reported asset, D as its
partition key), or by hand with the ``date`` param. The reviewer answers in Required Actions (Browse ->
Required Actions): Approve or Reject, with a comment; only the Airflow users named in
PIPELINE_COMPLIANCE_REVIEWERS can answer. The decision, who made it, when and the comment go into D's
record, its report and beside its compliance rows; a decision on a report other than the one that now
stands is refused. A rejection leaves D unsigned. Nothing signs by itself: the request waits until
answered.

Wiring only: the tasks are stream_pipelines.airflow.day_states.sign_off_request and .record_sign_off.
"""

from __future__ import annotations

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import DAG, Param, PartitionedAssetTimetable, get_current_context, task

from stream_pipelines.airflow import day_states, nightly
from stream_pipelines.airflow.dag_defaults import DEFAULT_ARGS

with DAG(
    dag_id="compliance_sign_off",
    description="A reviewer approves or rejects day D's final reconciliation report",
    schedule=PartitionedAssetTimetable(assets=day_states.FINAL_REPORTED),
    catchup=False,
    default_args=DEFAULT_ARGS,
    tags=["reconciliation", "compliance"],
    params={
        "date": Param(None, type=["null", "string"], format="date", description="event day D to sign off")
    },
) as dag:

    @task
    def shown() -> dict:
        context = get_current_context()
        day = nightly.event_day(context["params"].get("date"), context["dag_run"].partition_key)
        return day_states.sign_off_request(day)

    request = shown()
    decision = HITLOperator(
        task_id="sign_off",
        subject="Sign off the compliance figures of {{ ti.xcom_pull(task_ids='shown')['day'] }}",
        body=(
            "Final reconciliation of event day **{{ ti.xcom_pull(task_ids='shown')['day'] }}**: "
            "{{ ti.xcom_pull(task_ids='shown')['summary'] }}.\n\n"
            "Report: [{{ ti.xcom_pull(task_ids='shown')['report_url'] }}]"
            "({{ ti.xcom_pull(task_ids='shown')['report_url'] }})\n\n"
            "You sign report `{{ ti.xcom_pull(task_ids='shown')['report_digest'] }}`; a decision on it is "
            "refused if a rerun has replaced it."
        ),
        options=["Approve", "Reject"],
        multiple=False,
        assigned_users=day_states.reviewers(),
        params={"comment": Param("", type="string", description="what you checked, or why you reject")},
    )

    @task
    def record(shown: dict, response: dict | None) -> dict:
        return day_states.record_sign_off(shown, response)

    request >> decision
    record(request, decision.output)
