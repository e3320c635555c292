"""Example Alertmanager webhook receiver: logs every alert it is sent as one JSON line.

Stands in for the on-call pager and the ticket system on a laptop. The request path names the
receiver (``/on-call``, ``/ticket``), as monitoring/alertmanager.yml sets it up.

    python monitoring/webhook_receiver.py                      # 127.0.0.1:9095, lines to stdout
    python monitoring/webhook_receiver.py --output data/alerts.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO


def alert_lines(receiver: str, notification: dict[str, Any]) -> list[str]:
    """One compact JSON line per alert of an Alertmanager notification (webhook payload version 4)."""
    received_at = datetime.now(UTC).isoformat()
    lines = []
    for alert in notification.get("alerts", []):
        labels = alert.get("labels", {})
        annotations = alert.get("annotations", {})
        record = {
            "received_at": received_at,
            "receiver": receiver,
            "status": alert.get("status"),
            "alertname": labels.get("alertname"),
            "severity": labels.get("severity"),
            "labels": labels,
            "summary": annotations.get("summary"),
            "description": annotations.get("description"),
            "runbook_url": annotations.get("runbook_url"),
            "pipeline_page": annotations.get("pipeline_page"),
            "starts_at": alert.get("startsAt"),
            "ends_at": alert.get("endsAt"),
            "fingerprint": alert.get("fingerprint"),
            # One notification's alerts share it (and received_at): how notifications are counted.
            "group_key": notification.get("groupKey"),
        }
        lines.append(json.dumps(record, sort_keys=True))
    return lines


def make_handler(output: TextIO) -> type[BaseHTTPRequestHandler]:
    class AlertHandler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                notification = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self.send_error(400, "body is not JSON")
                return
            receiver = self.path.strip("/") or "default"
            for line in alert_lines(receiver, notification):
                output.write(line + "\n")
            output.flush()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            # The JSON lines are the log; access lines would only interleave with them.
            pass

    return AlertHandler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9095)
    parser.add_argument("--output", help="append the JSON lines to this file instead of stdout")
    args = parser.parse_args(argv)

    output = open(args.output, "a") if args.output else sys.stdout  # noqa: SIM115 (lives as long as the server)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(output))
    print(
        f"webhook receiver listening on http://{args.host}:{server.server_port}", file=sys.stderr, flush=True
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if output is not sys.stdout:
            output.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
