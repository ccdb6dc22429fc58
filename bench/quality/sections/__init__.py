"""The sections of RESULTS.md, one renderer per file; :mod:`bench.quality.report` puts them in order."""
