"""Kernel families. Each module checks arguments, picks a shader variant and grid, and
hands :class:`vkcore.commands.Dispatch` lists to the device; none calls Vulkan itself."""
