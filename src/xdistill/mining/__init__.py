"""Bitext mining: k-NN search, margin scoring, BUCC evaluation and the FLORES-200 BUCC-style benchmark."""
