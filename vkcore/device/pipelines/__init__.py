"""Compute pipelines and the persisted VkPipelineCache with its file format
(docs/caches.md)."""
