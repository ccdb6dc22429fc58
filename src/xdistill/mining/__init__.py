"""Bitext mining: k-NN search, margin scoring, BUCC evaluation and the FLORES-200 BUCC-style benchmark.

Public API:

- :func:`xdistill.mining.knn.knn_search` inner-product k-NN (faiss, exact or IVF)
- :func:`xdistill.mining.knn.retrieval_accuracy` nearest-neighbour translation accuracy, both directions
- :func:`xdistill.mining.margin.mine_embeddings` margin-based mining of two embedding matrices
- :func:`xdistill.mining.bucc.evaluate_bitext_mining` BUCC protocol on a BUCC-layout folder
- :func:`xdistill.mining.flores.build_flores_bucc` the FLORES-200 BUCC-style benchmark
- :func:`xdistill.mining.stream.mine_npy` / :func:`~xdistill.mining.stream.encode_file` out-of-core mining
"""
