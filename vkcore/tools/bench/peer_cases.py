"""One tiny workload, four figures, for vkcore and each of its peers, all timed one way.

vkcore is compared with the other Python Vulkan compute packages (Kompute's ``kp``,
wgpu-py, vkdispatch) on the call path of program_cases.py: a kernel ``y = a * x`` on 256
float32 values in workgroups of 64, ``a`` and ``n`` passed as push constants (wgpu's
"immediates"), called four ways:

- ``numpy``: a numpy x in, a numpy y out, per call;
- ``device``: the buffers already on the device, one dispatch and its wait, per call;
- ``record16``: 16 dispatches (16 outputs, one input) recorded, submitted once and
  waited for, the recording included, per 16;
- ``replay16``: the same 16 recorded once, then only resubmitted and waited for, per 16.

Each figure is the median of ``calls`` timed calls after ``warmup`` untimed ones; the
outputs are zeroed before a figure and checked exactly against numpy after it, so a call
that does nothing cannot pass.

The file runs as a script in the measured package's own environment, started by
vkcore.tools.bench.peers; it imports only the standard library, numpy and the one package
it measures, because kp 0.9.0 needs numpy < 2 and the peers therefore live in a virtual
environment of their own (``make peers``). It writes its figures, or why there are none,
as JSON.

usage: python -P peer_cases.py PACKAGE OUT.json [--calls N] [--warmup N]
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

N = 256
LOCAL = 64
GROUPS = N // LOCAL
A = 2.0
CALLS = 16  # dispatches of the recorded figures
WARMUP = 20
TIMED = 200
FIGURES = ("numpy", "device", "record16", "replay16")
WORKLOAD = {
    "kernel": "y[i] = a * x[i]",
    "n": N,
    "dtype": "float32",
    "local_size_x": LOCAL,
    "workgroups": GROUPS,
    "push_constants": {"a": A, "n": N},
    "recorded_calls": CALLS,
    "unit": "us",
    "per": {"numpy": "call", "device": "call", "record16": "16 calls", "replay16": "16 calls"},
}

# The kernel of vkcore's own call-path rows (program_cases.TINY; a test holds them equal):
# vkcore and kp run this very GLSL, vkdispatch generates its own, wgpu takes WGSL.
GLSL = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float a; uint n; } pc;
void main() { uint i = gl_GlobalInvocationID.x; if (i < pc.n) y[i] = pc.a * x[i]; }
"""

WGSL = """
struct P { a: f32, n: u32 };
var<immediate> pc: P;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < pc.n) { y[i] = pc.a * x[i]; }
}
"""


def inputs() -> tuple[np.ndarray, np.ndarray]:
    """x, and the y every figure must produce (numpy's float32 product)."""
    x = np.random.default_rng(1234).standard_normal(N).astype(np.float32)
    return x, np.float32(A) * x


def push_words() -> np.ndarray:
    """The push constants ``{float a; uint n;}`` as two 32-bit words."""
    words = np.zeros(2, np.uint32)
    words.view(np.float32)[0] = A
    words[1] = N
    return words


def time_calls(call: Callable[[], Any], warmup: int, calls: int) -> tuple[float, Any]:
    """The median wall time of one ``call()`` in microseconds, and its last result. The
    garbage collector is held off while timing: a collection inside one call would be
    charged to whichever package allocated last."""
    for _ in range(warmup):
        call()
    gc.collect()
    gc.disable()
    clock = time.perf_counter
    samples = []
    try:
        for _ in range(calls):
            start = clock()
            last = call()
            samples.append(clock() - start)
    finally:
        gc.enable()
    return statistics.median(samples) * 1e6, last


def check(name: str, got: Any, want: np.ndarray) -> None:
    """Exactly numpy's values: every package runs the same float32 product."""
    got = np.asarray(got, dtype=np.float32).reshape(-1)
    if got.shape != want.shape or not np.array_equal(got, want):
        wrong = int(np.sum(got != want)) if got.shape == want.shape else got.size
        raise AssertionError(f"{name}: {wrong} of {want.size} values differ from numpy's")


def compile_glsl() -> bytes:
    """SPIR-V of GLSL for kp, which takes no GLSL (glslangValidator, as vkcore uses)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, spv = os.path.join(tmp, "scale.comp"), os.path.join(tmp, "scale.spv")
        with open(src, "w") as f:
            f.write(GLSL)
        subprocess.run(
            ["glslangValidator", "-V", src, "-o", spv], check=True, stdout=subprocess.DEVNULL
        )
        with open(spv, "rb") as f:
            return f.read()


class Case:
    """One package's four kinds of call. ``numpy_call`` returns y; the others leave their
    results on the device, where ``outputs`` reads them back for the check."""

    info: dict[str, Any]

    def reset(self) -> None:
        """Zero every output, so that the check after a figure sees that figure's work."""
        raise NotImplementedError

    def numpy_call(self) -> np.ndarray:
        raise NotImplementedError

    def device_call(self) -> None:
        raise NotImplementedError

    def record16(self) -> None:
        raise NotImplementedError

    def replay16(self) -> Callable[[], None] | None:
        """Record the 16 once; the call that replays them (None: the package cannot)."""
        raise NotImplementedError

    def outputs(self, figure: str) -> list[np.ndarray]:
        """The device figure's y, or the 16 outputs of a recorded figure."""
        raise NotImplementedError

    def calls(self) -> dict[str, Callable[[], Any] | None]:
        """The four figures' calls; the replay is recorded here, before any reset, since
        recording vkcore's sequence also submits it."""
        return {
            "numpy": self.numpy_call,
            "device": self.device_call,
            "record16": self.record16,
            "replay16": self.replay16(),
        }


class VkcoreCase(Case):
    """program_cases.py's Program kind: a Program call with numpy x and y, with Tensors,
    16 of them recorded into a ``vkcore.sequence`` (released each time), its ``run()``."""

    def __init__(self) -> None:
        import vkcore

        self.vkcore = vkcore
        self.dev = vkcore.Device()
        self.x, _ = inputs()
        self.y = np.zeros_like(self.x)
        self.xt = vkcore.asarray(self.x, device=self.dev)
        self.outs = [vkcore.Tensor.empty((N,), np.float32, self.dev) for _ in range(CALLS)]
        self.prog = vkcore.Program(GLSL, device=self.dev)
        info = self.dev.info
        self.info = {
            "device": info.name,
            "driver": f"{info.driver_name} {info.driver_info}".strip(),
            "vulkan": info.to_dict()["api_version_string"],
            "validation": os.environ.get("VKCORE_VALIDATION", ""),
        }

    def reset(self) -> None:
        self.y[:] = 0
        for out in self.outs:
            out.write(np.zeros(N, np.float32))

    def numpy_call(self) -> np.ndarray:
        self.prog(self.x, self.y, groups=GROUPS, a=A, n=N)
        return self.y

    def device_call(self, out: Any = None) -> None:
        out = self.outs[0] if out is None else out
        self.prog(self.xt, out, groups=GROUPS, a=A, n=N)

    def record(self) -> Any:
        with self.vkcore.sequence(device=self.dev) as seq:
            for out in self.outs:
                self.device_call(out)
        return seq

    def record16(self) -> None:
        self.record().release()

    def replay16(self) -> Callable[[], None]:
        return self.record().run

    def outputs(self, figure: str) -> list[np.ndarray]:
        return [t.numpy() for t in (self.outs[:1] if figure == "device" else self.outs)]


class KpCase(Case):
    """Kompute: one homogeneous list of push constants (floats here), so the float list's
    second slot carries the bits of the uint n; sequences record operations."""

    def __init__(self) -> None:
        import kp

        self.kp = kp
        self.x, _ = inputs()
        zeros = np.zeros(N, np.float32)
        self.mgr = kp.Manager()
        spirv = compile_glsl()
        push = [float(v) for v in push_words().view(np.float32)]
        self.tx, self.ty = self.mgr.tensor(self.x), self.mgr.tensor(zeros)
        self.ys = [self.mgr.tensor(zeros) for _ in range(CALLS)]

        def algorithm(y: Any) -> Any:
            return self.mgr.algorithm([self.tx, y], spirv, (GROUPS, 1, 1), [], push)

        self.algo = algorithm(self.ty)
        self.algos = [algorithm(y) for y in self.ys]
        self.mgr.sequence().eval(kp.OpTensorSyncDevice([self.tx, self.ty, *self.ys]))
        self.seq, self.seq16 = self.mgr.sequence(), self.mgr.sequence()
        self.info = {"device": self.mgr.get_device_properties()["device_name"]}

    def reset(self) -> None:
        for t in [self.ty, *self.ys]:
            t.data()[:] = 0.0
        self.mgr.sequence().eval(self.kp.OpTensorSyncDevice([self.ty, *self.ys]))

    def numpy_call(self) -> np.ndarray:
        kp = self.kp
        self.tx.data()[:] = self.x
        self.seq.clear()
        self.seq.record(kp.OpTensorSyncDevice([self.tx])).record(kp.OpAlgoDispatch(self.algo))
        self.seq.record(kp.OpTensorSyncLocal([self.ty])).eval()
        return self.ty.data().copy()

    def device_call(self) -> None:
        self.seq.eval(self.kp.OpAlgoDispatch(self.algo))

    def record_into(self, seq: Any) -> Any:
        seq.clear()
        for algo in self.algos:
            seq.record(self.kp.OpAlgoDispatch(algo))
        return seq

    def record16(self) -> None:
        self.record_into(self.seq16).eval()

    def replay16(self) -> Callable[[], None]:
        return self.record_into(self.mgr.sequence()).eval

    def outputs(self, figure: str) -> list[np.ndarray]:
        tensors = [self.ty] if figure == "device" else self.ys
        self.mgr.sequence().eval(self.kp.OpTensorSyncLocal(tensors))
        return [t.data().copy() for t in tensors]


class VkdispatchCase(Case):
    """vkdispatch: a shader written in its Python codegen (push constants from ``Var``),
    command graphs for the recorded figures. lavapipe is a CPU device, which vkdispatch
    skips unless asked."""

    def __init__(self) -> None:
        import vkdispatch as vd
        import vkdispatch.codegen as vc
        from vkdispatch.codegen.abbreviations import Buff, Var, f32, u32

        self.vd = vd
        context = vd.make_context(use_cpu=True)
        ids = getattr(context, "device_ids", None) or [0]
        self.info = {"device": vd.get_devices()[ids[0]].device_name}

        def scale(x, y, a, n):  # its types are set below
            i = vc.global_invocation_id().x
            with vc.if_block(i < n):
                y[i] = a * x[i]

        # vkdispatch reads the parameters' types from their annotations, which this
        # module's ``from __future__ import annotations`` would leave as strings.
        scale.__annotations__ = {"x": Buff[f32], "y": Buff[f32], "a": Var[f32], "n": Var[u32]}
        # NO_EXEC_BOUNDS: the kernel tests i < n itself, as the others do.
        shader = vd.shader(
            workgroups=GROUPS, local_size=(LOCAL, 1, 1), flags=vc.ShaderFlags.NO_EXEC_BOUNDS
        )
        self.scale = shader(scale)
        self.x, _ = inputs()
        self.bx = vd.asbuffer(self.x)
        self.by = vd.Buffer((N,), vd.float32)
        self.ys = [vd.Buffer((N,), vd.float32) for _ in range(CALLS)]
        self.graph = vd.CommandGraph()

    def reset(self) -> None:
        for b in [self.by, *self.ys]:
            b.write(np.zeros(N, np.float32))
        self.vd.queue_wait_idle()

    def numpy_call(self) -> np.ndarray:
        self.bx.write(self.x)
        self.scale(self.bx, self.by, A, N)
        return self.by.read(0)

    def device_call(self) -> None:
        self.scale(self.bx, self.by, A, N)
        self.vd.queue_wait_idle()

    def record_into(self, graph: Any) -> Any:
        graph.reset()
        for y in self.ys:
            self.scale(self.bx, y, A, N, graph=graph)
        return graph

    def record16(self) -> None:
        self.record_into(self.graph).submit()
        self.vd.queue_wait_idle()

    def replay16(self) -> Callable[[], None]:
        graph = self.record_into(self.vd.CommandGraph())

        def replay() -> None:
            graph.submit()
            self.vd.queue_wait_idle()

        return replay

    def outputs(self, figure: str) -> list[np.ndarray]:
        return [b.read(0) for b in ([self.by] if figure == "device" else self.ys)]


class WgpuCase(Case):
    """wgpu-py on wgpu-native's Vulkan backend: push constants are WebGPU "immediates";
    a command buffer is single-use and bundles are render-only, so there is no replay."""

    def __init__(self) -> None:
        import wgpu

        self.wgpu = wgpu
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        native = ".".join(map(str, wgpu.backends.wgpu_native.lib_version_info))
        self.info = {
            "device": adapter.info["device"],
            "api": f"{adapter.info['backend_type']} via wgpu-native {native}",
            "notes": "replay16 n/a: a GPUCommandBuffer is single-use and WebGPU has no "
            "compute bundles",
        }
        self.dev = adapter.request_device_sync(
            required_features=["immediates"], required_limits={"max-immediate-size": 8}
        )
        self.pipeline, layout = self.make_pipeline()
        usage = wgpu.BufferUsage
        self.bx = self.dev.create_buffer(size=4 * N, usage=usage.STORAGE | usage.COPY_DST)
        out_usage = usage.STORAGE | usage.COPY_SRC | usage.COPY_DST
        self.by = self.dev.create_buffer(size=4 * N, usage=out_usage)
        self.ys = [self.dev.create_buffer(size=4 * N, usage=out_usage) for _ in range(CALLS)]

        def bind(y: Any) -> Any:
            entries = [
                {"binding": 0, "resource": {"buffer": self.bx}},
                {"binding": 1, "resource": {"buffer": y}},
            ]
            return self.dev.create_bind_group(layout=layout, entries=entries)

        self.group, self.groups = bind(self.by), [bind(y) for y in self.ys]
        self.x, _ = inputs()
        self.push = push_words()
        self.dev.queue.write_buffer(self.bx, 0, self.x)

    def make_pipeline(self) -> tuple[Any, Any]:
        wgpu, stage = self.wgpu, self.wgpu.ShaderStage.COMPUTE
        kinds = (wgpu.BufferBindingType.read_only_storage, wgpu.BufferBindingType.storage)
        layout = self.dev.create_bind_group_layout(
            entries=[
                {"binding": b, "visibility": stage, "buffer": {"type": kind}}
                for b, kind in enumerate(kinds)
            ]
        )
        pipeline = self.dev.create_compute_pipeline(
            layout=self.dev.create_pipeline_layout(bind_group_layouts=[layout], immediate_size=8),
            compute={"module": self.dev.create_shader_module(code=WGSL), "entry_point": "main"},
        )
        return pipeline, layout

    def wait(self) -> None:
        # queue.on_submitted_work_done_sync() fails in wgpu-py 0.32.0 (its callback's
        # signature), so the device is polled until its work is done.
        self.dev._poll_wait()

    def reset(self) -> None:
        for b in [self.by, *self.ys]:
            self.dev.queue.write_buffer(b, 0, np.zeros(N, np.float32))
        self.wait()

    def encode(self, groups: list[Any]) -> Any:
        encoder = self.dev.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(self.pipeline)
        for group in groups:
            compute.set_bind_group(0, group)
            compute.set_immediates(0, self.push, 0, 8)
            compute.dispatch_workgroups(GROUPS)
        compute.end()
        return encoder.finish()

    def numpy_call(self) -> np.ndarray:
        self.dev.queue.write_buffer(self.bx, 0, self.x)
        self.dev.queue.submit([self.encode([self.group])])
        return np.frombuffer(self.dev.queue.read_buffer(self.by), np.float32)

    def device_call(self) -> None:
        self.dev.queue.submit([self.encode([self.group])])
        self.wait()

    def record16(self) -> None:
        self.dev.queue.submit([self.encode(self.groups)])
        self.wait()

    def replay16(self) -> None:
        return None

    def outputs(self, figure: str) -> list[np.ndarray]:
        buffers = [self.by] if figure == "device" else self.ys
        return [np.frombuffer(self.dev.queue.read_buffer(b), np.float32) for b in buffers]


CASES: dict[str, type[Case]] = {
    "vkcore": VkcoreCase,
    "kp": KpCase,
    "vkdispatch": VkdispatchCase,
    "wgpu": WgpuCase,
}


def measure(case: Case, calls: int, warmup: int) -> dict[str, float | None]:
    """Each figure's median in microseconds (None where the package cannot make it),
    every figure's outputs checked."""
    _, want = inputs()
    figures: dict[str, float | None] = {}
    for figure, call in case.calls().items():
        if call is None:
            figures[figure] = None
            continue
        case.reset()
        figures[figure], last = time_calls(call, warmup, calls)
        results = [last] if figure == "numpy" else case.outputs(figure)
        for k, got in enumerate(results):
            check(f"{figure}[{k}]", got, want)
    return figures


def figures_of(package: str, calls: int, warmup: int) -> dict[str, Any]:
    """The JSON record of one package: its figures, or whether it is installed and why it
    failed (the comparison goes on without it)."""
    started = time.perf_counter()
    doc: dict[str, Any] = {"package": package, "ok": False, "installed": True}
    try:
        doc["version"] = importlib.metadata.version(package)
        case = CASES[package]()
        doc.update(info=case.info, us=measure(case, calls, warmup), ok=True)
    except importlib.metadata.PackageNotFoundError:
        doc.update(installed=False, error=f"{package} is not installed")
    except ModuleNotFoundError as exc:
        doc.update(installed=exc.name != package, error=f"ModuleNotFoundError: {exc}")
    except Exception as exc:  # noqa: BLE001 - the record says why; the others still run
        lines = str(exc).strip().splitlines() or [""]
        doc.update(error=f"{type(exc).__name__}: {lines[0]}", traceback=traceback.format_exc())
    doc["seconds"] = time.perf_counter() - started
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one package's four figures, as JSON")
    parser.add_argument("package", choices=sorted(CASES))
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--calls", type=int, default=TIMED, help="timed calls per figure")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed calls before")
    args = parser.parse_args(argv)
    doc = figures_of(args.package, max(args.calls, 1), max(args.warmup, 0))
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
