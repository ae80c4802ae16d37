"""The Tune window: replayed what-if settings of model-free sources for the shown run."""
