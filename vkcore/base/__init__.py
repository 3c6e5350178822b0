"""What every layer may use and that knows nothing of Vulkan: the environment
(:mod:`~vkcore.base.config`), the cache folder's files (:mod:`~vkcore.base.cachefs`) and
per-device state tables (:mod:`~vkcore.base.per_device`)."""
