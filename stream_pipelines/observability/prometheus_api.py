"""Prometheus' HTTP API as the pipeline page asks it (its counts, its graphs): one GET, and the ``result``
of the answer, or which of two things went wrong: Prometheus did not answer, or it refused."""

from __future__ import annotations

import http.client
import json
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any


class PrometheusUnreachable(OSError):
    """Prometheus did not answer, or not within the time it was given; the message is the reason."""


class PrometheusRefused(ValueError):
    """Prometheus answered, but refused the query or answered something else; the message says what."""


def result(base_url: str, path: str, parameters: Mapping[str, Any], timeout_s: float) -> Any:
    """``data.result`` of Prometheus' answer to ``GET <base_url><path>?<parameters>``."""
    url = f"{base_url.rstrip('/')}{path}?{urllib.parse.urlencode(parameters)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read()
    except (OSError, ValueError, http.client.HTTPException) as error:
        raise PrometheusUnreachable(str(getattr(error, "reason", error)) or type(error).__name__) from error
    try:
        answer = json.loads(body)
    except ValueError as error:
        raise PrometheusRefused(f"not JSON ({error})") from error
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise PrometheusRefused(str(answer.get("error", "no result") if isinstance(answer, dict) else answer))
    try:
        return answer["data"]["result"]
    except (KeyError, TypeError) as error:
        raise PrometheusRefused(f"no result in its answer ({error!r})") from error
