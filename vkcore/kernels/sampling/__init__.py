"""Top-k, fused softmax + top-k, and sampling of an LM's last step (docs/sampling.md)."""
