"""Watching the apps run.

metrics           each driver's Prometheus exporter
metrics_targets   where Prometheus finds the drivers, from the control store's running records
monitoring_rules  the alert rules and Prometheus configs of monitoring/, rendered for other ports
watchdog          the liveness watchdog: is an app that is alive actually working?
"""
