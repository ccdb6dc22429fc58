"""The quality run: real students through the ``distill`` flow, side by side with the baselines -> RESULTS.md.

``python -m bench.quality run|tatoeba-all|report`` (:mod:`bench.quality.__main__`); the members are listed in
``bench/quality/quality.yaml``, their exported results kept in ``bench/results/quality/``.
"""
