"""The project's measurements, run from the repository root as modules (``python -m bench.<part>.<script>``).

- :mod:`bench.perf`: the regression benchmarks, ours and the reference side by side -> BENCHMARKS.md;
- :mod:`bench.quality`: the quality run (real students through the ``distill`` flow) -> RESULTS.md;
- :mod:`bench.probes`: research probes, each answering one question (bench/probes/README.md).

Every part writes its results under ``bench/results/`` (:data:`bench.paths.RESULTS_DIR`).
"""
