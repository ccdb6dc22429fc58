"""Raw corpora and parallel training data.

- :mod:`xdistill.data.corpora`   the ``corpora`` stage: stage the configured datasets into ``data/raw``
  from an offline mirror or by download, checksum-verified (:mod:`xdistill.data.catalog`).
- :mod:`xdistill.data.formats`   streaming readers for every parallel format (TED2020, OPUS, Moses,
  Tatoeba, WMT, Multi30k, generic sentence-transformers TSV, MUSE/FreeDict dictionaries) with
  malformed-row accounting.
- :mod:`xdistill.data.clean`     the cleaning chain, each step counted.
- :mod:`xdistill.data.decontaminate`  the sentences of every evaluation set (never trained on).
- :mod:`xdistill.data.parallel`  the ``parallel`` stage: sources -> clean -> dev split -> weighted
  sampling -> ``data/parallel/{train,dev}.tsv.gz`` and the data report.
- :mod:`xdistill.data.normalize` ``normalize_text``, shared with evaluation, mining and the teacher store.
"""
