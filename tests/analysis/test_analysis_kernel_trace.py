"""The injected sitecustomize kernel trace, run in real Python processes (CPU: torch records CPU ops)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.analysis import KernelTraceDiff, kernel_trace_diff, kernel_trace_env, read_kernel_trace
from bisector.analysis.hook._gpu_bisect_kernel_counts import DRAIN_ENV
from bisector.analysis.kernel_trace import HOOK_DIR

GOOD_PROGRAM = """
import torch
x = torch.ones(4, 8)
w = torch.ones(3, 8)
for _ in range(2):
    y = torch.relu(x @ w.T)
print("metric:", float(y.sum()))
"""
BAD_PROGRAM = GOOD_PROGRAM.replace("range(2)", "range(3)").replace("torch.relu", "torch.nn.functional.gelu")


def start(code: str, trace: Path, cwd: Path, extra_path: str = "", drain_s: str = "") -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", DRAIN_ENV)}
    if extra_path:
        base["PYTHONPATH"] = extra_path
    if drain_s:
        base[DRAIN_ENV] = drain_s
    env = {**base, **kernel_trace_env(trace, base)}
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out


def test_the_environment_puts_the_hook_first_and_keeps_the_existing_path(tmp_path: Path) -> None:
    env = kernel_trace_env(tmp_path / "k.jsonl", {"PYTHONPATH": "/opt/lib"})

    assert env == {"PYTHONPATH": f"{HOOK_DIR}{os.pathsep}/opt/lib", "BISECT_KERNEL_TRACE": str(tmp_path / "k.jsonl")}
    assert kernel_trace_env(tmp_path / "k.jsonl", {})["PYTHONPATH"] == str(HOOK_DIR)
    assert (HOOK_DIR / "sitecustomize.py").is_file()


def test_two_unmodified_torch_programs_are_traced_and_diffed(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    good_trace, bad_trace = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good, bad = start(GOOD_PROGRAM, good_trace, tmp_path), start(BAD_PROGRAM, bad_trace, tmp_path)

    assert finish(good) == "metric: 96.0\n"
    assert finish(bad).startswith("metric: ")
    before = read_kernel_trace(good_trace)
    assert (before.processes, before.devices, before.errors) == (1, ("cpu",), ())
    assert before.counts["aten::mm"] == 2
    assert before.counts["aten::relu"] == 2
    diff = kernel_trace_diff(good_trace, bad_trace)
    assert [(r.name, r.before, r.after) for r in diff.only_after] == [("aten::gelu", 0, 3)]
    assert ("aten::relu", 2, 0) in [(r.name, r.before, r.after) for r in diff.only_before]
    assert ("aten::mm", 2, 3) in [(r.name, r.before, r.after) for r in diff.count_changed]
    assert KernelTraceDiff.from_findings(diff.to_findings()) == diff


def test_a_program_without_torch_runs_as_if_the_hook_were_not_there(tmp_path: Path) -> None:
    trace = tmp_path / "k.jsonl"
    # The chained sitecustomize (a virtualenv's, a distribution's) still runs.
    chained = tmp_path / "chained"
    chained.mkdir()
    (chained / "sitecustomize.py").write_text("import builtins\nbuiltins.CHAINED = True\n")

    out = finish(
        start("import sys, builtins; print(builtins.CHAINED, 'torch' in sys.modules)", trace, tmp_path, str(chained))
    )

    assert out == "True False\n"
    assert not trace.exists()
    assert read_kernel_trace(trace).processes == 0


def test_a_broken_torch_never_breaks_the_program(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("VALUE = 7\n")
    trace = tmp_path / "k.jsonl"

    out = finish(start("import torch; print(torch.VALUE)", trace, tmp_path, str(fake)))

    assert out == "7\n"
    assert "profiler did not start" in read_kernel_trace(trace).errors[0]


DRAINED_PROGRAM = """
import time
import torch
x = torch.zeros(4)
for i in range({adds}):
    x.add_(1)
    if i % 50 == 0:
        time.sleep(0.01)  # signals land here too (the sleep resumes after the handler)
print(int(x[0]))
"""


def test_a_long_run_is_counted_in_drains_that_miss_nothing(tmp_path: Path) -> None:
    # The profiler holds every event until stopped; a minutes-long run is counted in periods instead.
    pytest.importorskip("torch")
    trace = tmp_path / "k.jsonl"
    adds = 3000
    process = start(DRAINED_PROGRAM.format(adds=adds), trace, tmp_path, drain_s="0.05")

    assert finish(process) == f"{adds}\n"
    (record,) = [json.loads(line) for line in trace.read_text().splitlines()]
    assert record["kernels"]["aten::add_"] == adds
    assert record["drains"] >= 2
    assert read_kernel_trace(trace).counts["aten::add_"] == adds


SIGNAL_TAKEN = "import signal\nsignal.signal(signal.SIGRTMIN + 3, lambda *_: print('theirs'))\n{body}"
OFF_MAIN_THREAD = "import threading\ndef body():\n{indented}\nt = threading.Thread(target=body)\nt.start()\nt.join()\n"
CPU_OFF_MAIN = "torch was first imported off the main thread: CPU ops not traced"
SHOW_HANDLER = "import signal\nprint('handler', signal.getsignal(signal.SIGRTMIN + 3))\n"


@pytest.mark.parametrize("wrapper", [SIGNAL_TAKEN, OFF_MAIN_THREAD], ids=["signal-taken", "torch-off-main-thread"])
def test_where_drains_cannot_run_the_trace_is_whole_or_says_why(tmp_path: Path, wrapper: str) -> None:
    # The program owns the signal the drains would use: its handler stays and one profiler counts to the end.
    # torch first imported off the main thread: the CPU profiler would see that thread's ops only.
    pytest.importorskip("torch")
    trace = tmp_path / "k.jsonl"
    adds = 300
    body = DRAINED_PROGRAM.format(adds=adds)
    indented = "\n".join("    " + line for line in body.strip().splitlines())
    process = start(wrapper.format(body=body, indented=indented) + SHOW_HANDLER, trace, tmp_path, drain_s="0.05")

    out = finish(process).splitlines()
    assert out[0] == str(adds)
    (record,) = [json.loads(line) for line in trace.read_text().splitlines()]
    assert "theirs" not in out
    if wrapper is SIGNAL_TAKEN:
        assert (record["kernels"]["aten::add_"], record["drains"]) == (adds, 0)
        assert "lambda" in out[-1], "the program's own handler was replaced"
    else:  # CPU ops are recorded on the profiler's own thread only: said, not counted as nothing
        assert record == {"pid": record["pid"], "argv": ["-c"], "error": CPU_OFF_MAIN}


def test_records_of_several_processes_are_summed(tmp_path: Path) -> None:
    trace = tmp_path / "k.jsonl"
    trace.write_text(
        '{"pid": 1, "device": "cuda", "kernels": {"sm90_gemm": 3, "rmsnorm": 1}}\n'
        "not json\n"
        '{"pid": 2, "device": "cuda", "kernels": {"sm90_gemm": 2}}\n'
        '{"pid": 3, "error": "profiler did not finish: OSError()"}\n'
    )

    read = read_kernel_trace(trace)

    assert (read.counts, read.processes, read.devices) == ({"sm90_gemm": 5, "rmsnorm": 1}, 2, ("cuda",))
    assert read.errors == ("profiler did not finish: OSError()",)


FAKE_CUDA_TORCH = {
    "torch/__init__.py": "from torch import cuda, profiler\nfrom torch import autograd\n",
    "torch/autograd.py": "",
    "torch/cuda.py": (
        "EVENTS = []\ndef is_available():\n    return True\ndef _lazy_init():\n    EVENTS.append('cuda initialised')\n"
    ),
    "torch/profiler.py": (
        "from torch import cuda\n"
        "class ProfilerActivity:\n    CUDA = 'cuda'\n"
        "class _Event:\n"
        "    def __init__(self, kind, name):\n        self.kind, self.label = kind, name\n"
        "    def device_type(self):\n        return self.kind\n"
        "    def name(self):\n        return self.label\n"
        "class _Results:\n"
        "    def events(self):\n"
        "        return [_Event('DeviceType.CUDA', 'sm90_xmma_gemm')] * 2 + [_Event('DeviceType.CPU', 'aten::mm')]\n"
        "class _Kineto:\n    kineto_results = _Results()\n"
        "class profile:\n"
        "    def __init__(self, activities):\n        cuda.EVENTS.append('profiler made')\n"
        "    def start(self):\n        pass\n"
        "    def stop(self):\n        self.profiler = _Kineto()\n"
    ),
}


def fake_cuda_torch(tmp_path: Path) -> Path:
    """A folder holding a torch package whose CUDA is available and whose profiler reports two kernels."""
    fake = tmp_path / "fake"
    for name, text in FAKE_CUDA_TORCH.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    return fake


def test_with_cuda_the_profiler_starts_only_once_the_program_initialises_cuda(tmp_path: Path) -> None:
    # CUPTI initialises CUDA: starting it at import would break programs that fork before they touch CUDA.
    fake = fake_cuda_torch(tmp_path)
    trace = tmp_path / "k.jsonl"
    program = "import torch; print(list(torch.cuda.EVENTS)); torch.cuda._lazy_init(); print(torch.cuda.EVENTS)"

    out = finish(start(program, trace, tmp_path, str(fake)))

    assert out == "[]\n['cuda initialised', 'profiler made']\n"
    assert read_kernel_trace(trace).counts == {"sm90_xmma_gemm": 2}
    assert read_kernel_trace(trace).devices == ("cuda",)


def test_cuda_first_used_off_the_main_thread_is_profiled_and_drained_on_a_thread_of_its_own(tmp_path: Path) -> None:
    # Kineto stops a profiler only on the thread that started it, and CUPTI sees every thread's kernels.
    fake = fake_cuda_torch(tmp_path)
    trace = tmp_path / "k.jsonl"
    program = (
        "import threading, time, torch\n"
        "t = threading.Thread(target=torch.cuda._lazy_init)\nt.start()\nt.join()\n"
        "time.sleep(0.5)\nprint(torch.cuda.EVENTS.count('profiler made'))\n"
    )

    out = finish(start(program, trace, tmp_path, str(fake), drain_s="0.05"))

    (record,) = [json.loads(line) for line in trace.read_text().splitlines()]
    sessions = record["drains"] + 1
    assert record["drains"] >= 2
    assert int(out) >= sessions - 1  # each drain starts a new profiler (the last may start after the print)
    assert record["kernels"] == {"sm90_xmma_gemm": 2 * sessions}
