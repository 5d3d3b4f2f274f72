"""The networks: what architecture families share (this package's modules: the `Family` record
and its registry, attention paths, FLOP conventions, CPU kernels, fine-tuning heads by kind) and
one folder per family (`electra/model/<family>/`). Modules here know nothing of training."""
