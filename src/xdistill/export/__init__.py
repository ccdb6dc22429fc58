"""``xdistill export``: a student as ONNX fp32, ONNX dynamic int8 and fp16 safetensors, in one folder.

The folder is an ordinary sentence-transformers folder (tokenizer, configs, Pooling/Dense/Normalize)
plus, per requested format:

- ``fp16``: ``model.safetensors`` in float16 (half the disk; loaded back as float32 on CPU);
- ``onnx``: ``onnx/model.onnx``, the transformer as an fp32 ONNX graph;
- ``onnx-int8``: ``onnx/model_qint8_avx512_vnni.onnx``, its dynamic int8 quantisation.

The ONNX file names are sentence-transformers' (``backend="onnx"`` finds them where optimum is
installable); here :func:`xdistill.export.runtime.load_student` runs them with onnxruntime.
``export.json`` records what was written, each backend's size on disk and the minimum cosine of
its embeddings to the PyTorch fp32 student's on a fixed multilingual sample (the export fails when
the fp32 ONNX graph falls below :data:`~xdistill.export.writer.ONNX_FP32_MIN_COSINE`).

Modules: :mod:`~xdistill.export.writer` (:func:`export_student`), :mod:`~xdistill.export.runtime`
(loading a folder with a backend), :mod:`~xdistill.export.files` (the folder's layout, shared by both),
:mod:`~xdistill.export.onnx` (the ONNX graph and its quantisation).
"""
