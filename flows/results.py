"""A distill run's result kept on the Prefect server, so any host can read it (the one owner of that format).

A flow's return value is persisted where the worker that ran it writes results: its own disk, unless every host
shares a result storage. A sweep whose members ran on other hosts could then not read them, and its summary
came back empty. :func:`publish_result` also stores the result as the run's ``distill-result`` markdown
artifact (a JSON block, readable in the UI too) in the server's database; :func:`read_published_result` reads it
back by flow-run id from any host that reaches the server.
"""

from __future__ import annotations

import json
import re
from typing import Any
from uuid import UUID

RESULT_KEY = "distill-result"
_JSON_BLOCK = re.compile(r"```json\n(.*)\n```", re.DOTALL)


def publish_result(result: dict[str, Any]) -> None:
    """Store ``result`` (JSON-serialisable) as this flow run's ``distill-result`` artifact."""
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(
        key=RESULT_KEY,
        markdown=f"# distill result\n\n```json\n{json.dumps(result, indent=2, sort_keys=True)}\n```\n",
        description="what this run made: its experiment, model version and promotion (read by the sweep)",
    )


def read_published_result(flow_run_id: str) -> dict[str, Any] | None:
    """The result :func:`publish_result` stored for flow run ``flow_run_id``; None when it stored none."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[RESULT_KEY]), flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(flow_run_id)])
            )
        )
    for artifact in artifacts:
        match = _JSON_BLOCK.search(str(artifact.data or ""))
        if match:
            return json.loads(match.group(1))
    return None
