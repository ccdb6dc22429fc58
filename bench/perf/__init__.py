"""The regression benchmarks: ours and the reference side by side, one script per part of the pipeline.

Each runs from the repository root as ``python -m bench.perf.<name>`` (``--tiny``: a smoke run that records
nothing) and writes ``bench/results/<name>.json``; ``python -m bench.perf.report`` assembles BENCHMARKS.md.
"""
