"""The ``xdistill`` command line: one small module per DVC stage or tool, loaded lazily."""
