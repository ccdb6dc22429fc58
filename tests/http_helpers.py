"""The HTTP status a service answers, for the tests of the services' authentication."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request


def http_status(
    url: str,
    method: str = "GET",
    auth: tuple[str, str] | None = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> int:
    """The HTTP status ``url`` answers (anonymous unless ``auth``: HTTP basic, ``user:password``)."""
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
