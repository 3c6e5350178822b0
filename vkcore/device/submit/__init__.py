"""Submission: what goes into a command buffer (dispatches, copies, barriers), the one
submission path with its fence and timestamps, and the staging transfers built on it."""
