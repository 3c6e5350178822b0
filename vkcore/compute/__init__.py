"""The public compute API: :class:`~vkcore.compute.tensor.Tensor` (device data),
:class:`~vkcore.compute.program.Program` (a shader with its arguments) and
:class:`~vkcore.compute.sequence.Sequence` (recorded work, replayed). Built on the device
layer's public names; the kernels are built on this (docs/programs.md, docs/sequences.md).
"""
