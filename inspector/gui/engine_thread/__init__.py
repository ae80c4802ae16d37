"""The engine thread: the worker that runs llama.cpp off the GUI thread, the analysis worker, background sessions."""
