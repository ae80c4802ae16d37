"""The side panel: model, proposal source and its options, sampling, limits, llama.cpp context settings, prompt."""
