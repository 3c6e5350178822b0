"""The softmax family: softmax and log_softmax over an axis, one pass per row or split
across workgroups (docs/softmax.md)."""
