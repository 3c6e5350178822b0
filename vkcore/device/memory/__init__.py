"""Device memory: buffers and their mappings, numpy memory imported as buffers, the
buffers a sequence holds, and the per-device pools (docs/devices.md)."""
