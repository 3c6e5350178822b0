"""vkcore's tools: the command line, benchmarks, the cold/warm measurement, the tuner and
the probes. Never imported by ``import vkcore`` (tests/test_layers.py checks it)."""
