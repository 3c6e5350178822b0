"""Attention on the online softmax: one kernel over key splits for decoding and tiles
for prefill, merged in a fixed order, and the KV cache it reads (docs/attention.md)."""
