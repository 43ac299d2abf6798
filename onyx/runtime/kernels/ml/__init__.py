"""Kernels of the ai.onnx.ml domain (trees, linear models, SVMs, preprocessing) and the
com.microsoft Tokenizer that scikit-learn text pipelines use."""
