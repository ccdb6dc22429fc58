"""Evaluation suite: STS17, cross-lingual/monolingual STSb, Tatoeba, bitext mining, language bias, dev.

Benchmark logic (what each score is):

- :mod:`metrics`   Spearman x 100 (ties: average ranks), paired cosine
- :mod:`sts`       STS17 official tracks (tr-en alignment, 4b apart) and stsb-multi-mt sets
- :mod:`tatoeba`   LASER Tatoeba retrieval accuracy, both directions
- :mod:`bias`      language bias: expected vs actual Spearman of all STS sets joined
- :mod:`dev`       held-out dev pairs: MSE to the teacher, retrieval accuracy
- :mod:`encoding`  the encoder wrapper that caches every sentence's embedding over one run
- :mod:`shared_encodings`  those embeddings kept by the baselines stage and reused by the later stages
- :mod:`labels`    the names of the evaluated models (teacher, untrained student, start, mUSE, student)

The evaluators, bottom to top (each imports only what is above it in this list):

- :mod:`settings`  the ``evaluate`` settings, the benchmark groups, the inputs, the scoring protocol
- :mod:`evaluator` the interface: :class:`~xdistill.evaluation.evaluator.Evaluator`, its context and result
- one evaluator per file: :mod:`sts17_evaluator`, :mod:`stsb_evaluator`, :mod:`tatoeba_evaluator`,
  :mod:`dev_pairs_evaluator`, :mod:`mining_evaluator`, :mod:`teacher_space_evaluator`
- :mod:`registry`  the evaluators in run order (checked against the settings' groups) and the loop
- :mod:`suite`     every configured benchmark for one encoder (:func:`evaluate_model`) and the PCA

Outputs and the stages:

- :mod:`report`    side-by-side metrics JSON, CSV/Markdown tables, summary and primary score
- :mod:`plots`     per-language bars, language-bias PCA
- :mod:`pipeline`  the ``baselines`` and ``evaluate`` stages

Bitext mining itself lives in :mod:`xdistill.mining` and is called from :mod:`mining_evaluator`
(:class:`~xdistill.evaluation.mining_evaluator.MiningEvaluator`).
"""
