"""Research probes: one-off measurements, each answering one question about the recipe (README.md here).

Each runs from the repository root as ``python -m bench.probes.<name> ...`` and writes one JSON under
``bench/results/diagnostics/``; none is part of ``make bench`` or of the quality run.
"""
