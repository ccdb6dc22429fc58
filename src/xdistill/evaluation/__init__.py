"""Evaluation suite: STS17, cross-lingual/monolingual STSb, Tatoeba, bitext mining, language bias, dev.

- :mod:`metrics`   Spearman x 100 (ties: average ranks), paired cosine
- :mod:`sts`       STS17 official tracks (tr-en alignment, 4b apart) and stsb-multi-mt sets
- :mod:`tatoeba`   LASER Tatoeba retrieval accuracy, both directions
- :mod:`bias`      language bias: expected vs actual Spearman of all STS sets joined
- :mod:`dev`       held-out dev pairs: MSE to the teacher, retrieval accuracy
- :mod:`suite`     every configured benchmark for one encoder (:func:`evaluate_model`)
- :mod:`report`    side-by-side metrics JSON, CSV/Markdown tables, summary and primary score
- :mod:`plots`     per-language bars, language-bias PCA
- :mod:`pipeline`  the ``baselines`` and ``evaluate`` stages
Bitext mining itself lives in :mod:`xdistill.mining` and is called from :mod:`benchmarks`
(:class:`~xdistill.evaluation.benchmarks.MiningEvaluator`).
"""
