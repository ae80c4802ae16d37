"""The llama.cpp runtime adapter (llama-cpp-python's low-level API) and model files."""

from inspector.llama.model_file import ModelFileError, ModelInfo, bundled_model_path, check_gguf

__all__ = ["ModelFileError", "ModelInfo", "bundled_model_path", "check_gguf"]
