"""A distill run's result is read back from the Prefect server, so a sweep whose members ran on other hosts
(results persisted on their own disks) still gets their experiments, versions and promotions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.slow  # every test here is over ~4 s, or shares a fixture that is


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


def test_a_members_result_unreadable_here_is_read_from_the_server(prefect_server) -> None:
    from prefect import flow
    from prefect.runtime import flow_run

    from flows.results import publish_result, read_published_result
    from flows.sweep import _member_result

    made = {"experiment": "exp-b", "model_version": "7", "promotion": {"decision": "promoted"}}

    @flow(persist_result=False)
    def member_elsewhere() -> str:
        publish_result(made)
        return flow_run.get_id()

    run_id = member_elsewhere()
    assert read_published_result(run_id) == made

    def unreadable():  # what a result persisted on another host's disk does here
        raise FileNotFoundError("/home/host-b/.prefect/storage/1f2e: no such file")

    state = SimpleNamespace(is_completed=lambda: True, result=unreadable, name="Completed", message="")

    @flow
    def sweep_like() -> dict:
        return _member_result(state, run_id)

    assert sweep_like() == made


def test_a_run_that_published_nothing_reads_as_none(prefect_server) -> None:
    from prefect import flow
    from prefect.runtime import flow_run

    from flows.results import read_published_result

    @flow
    def silent() -> str:
        return flow_run.get_id()

    assert read_published_result(silent()) is None
