"""Subprocess helper for tests/caches/test_pipeline_cache.py.

    python tests/support/pipeline_cache_worker.py hammer ROOT ITERATIONS
        open a device on cache root ROOT, create pipelines, run a kernel, force a save and
        close, ITERATIONS times; fail (exit 1) if a load ever saw a damaged file.
    python tests/support/pipeline_cache_worker.py probe ROOT
        one device on ROOT: run a kernel, print what the pipeline cache did as JSON, close.

Both run under the validation layer and fail on any message it reports.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import vkcore
from vkcore import reference


def _run_kernel(dev: vkcore.Device, cols: int) -> None:
    x = np.linspace(-3.0, 5.0, 4 * cols, dtype=np.float32).reshape(4, cols)
    got = vkcore.softmax(x, device=dev)
    if not np.allclose(got, reference.softmax(x), atol=1e-6):
        raise SystemExit("softmax result differs from the reference")


def hammer(root: str, iterations: int) -> int:
    statuses: dict[str, int] = {}
    for i in range(iterations):
        dev = vkcore.Device(validation=True, cache_dir=root)
        try:
            status = dev.pipeline_cache.load_status
            statuses[status] = statuses.get(status, 0) + 1
            if status not in ("loaded", "missing"):
                print(f"iteration {i}: {status}", file=sys.stderr)
                return 1
            _run_kernel(dev, 64 + 32 * (i % 3))
            dev.pipeline_cache.save(force=True)
            messages = dev.validation_messages
        finally:
            dev.close()
        if messages:
            print(f"validation messages: {messages}", file=sys.stderr)
            return 1
    print(json.dumps(statuses))
    return 0


def probe(root: str) -> int:
    dev = vkcore.Device(validation=True, cache_dir=root)
    try:
        _run_kernel(dev, 128)
        cache = dev.pipeline_cache
        report = {
            "driver_info": dev.info.driver_info,
            "file_name": cache.path.name if cache.path else None,
            "stats": cache.stats(),
            "pipelines": dev.pipeline_stats(),
        }
        messages = dev.validation_messages
    finally:
        dev.close()
    report["saved_header_only"] = cache.saved_header_only
    report["validation_messages"] = messages
    print(json.dumps(report))
    return 1 if messages else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "hammer":
        return hammer(argv[1], int(argv[2]) if len(argv) > 2 else 10)
    if len(argv) == 2 and argv[0] == "probe":
        return probe(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
