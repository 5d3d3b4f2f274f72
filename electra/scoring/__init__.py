"""Uses of a trained discriminator (or an Electric energy model) on raw text: replaced-token
detection (`detect`), pseudo-log-likelihood (`score-text`) and held-out scoring (the demo's)."""
