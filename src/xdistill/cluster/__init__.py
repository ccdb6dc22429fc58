"""Corpus-scale work on a Dask cluster: sharded teacher embedding and sharded k-NN mining.

- :mod:`xdistill.cluster.settings`: where the scheduler is (a local cluster by default) and the client.
- :mod:`xdistill.cluster.embed`: teacher embedding of a corpus, one shard a task, resumable.
- :mod:`xdistill.cluster.knn`: k-NN search with the corpus side sharded across workers (exact or IVF-PQ).
- :mod:`xdistill.cluster.mine`: encoding on the workers and margin mining from the merged k-NN lists.
"""
