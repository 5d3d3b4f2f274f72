"""Frozen-feature linear probes (`electra probe`): what a model's final states tell a linear
classifier about a labelled task, beside the same architecture's random weights, with no weight of
the encoder trained."""
