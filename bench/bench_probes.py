"""How long the probes take.

    python bench/bench_probes.py [--runs N]

1. All probes but dist (env, gpu, net, versions, configs), run concurrently through
   probes.registry.run_all, each run in a fresh process (the probes cache nothing, so every run is
   cold): median and worst wall time (target <= 1 s every run), per probe, and the whole
   `triage probe` process for the same probes.
2. The dist mini-test on 2 gloo ranks (`python -m probes.dist --nproc 2`, fresh process) against the
   floor: a bare script doing init_process_group + one all_reduce on 2 ranks through
   torch.multiprocessing.spawn, run alternately in the same session (target <= 1.5x the floor).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FAST = ["env", "gpu", "net", "versions", "configs"]
FLOOR_SCRIPT = """
import datetime, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def work(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    assert tensor.item() == world
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(2, int(sys.argv[1])), nprocs=2)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr.decode()[-2000:]}")
    return elapsed


# One cold run of the fast probes in this fresh process: total wall time, then each probe's.
COLD_RUN = """
import json, sys, time
start = time.perf_counter()
from triage.core.facts import ProbeOptions
from probes.registry import run_all
results = run_all(sys.argv[1:], ProbeOptions(timeout_s=60))
print(json.dumps({"wall": time.perf_counter() - start, "probes": {r.name: r.duration_s for r in results},
                  "versions": next(r.summary for r in results if r.name == "versions"),
                  "torch_imported": "torch" in sys.modules}))
"""


def fast_probes(runs: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    samples: list[float] = []
    per_probe: dict[str, list[float]] = {name: [] for name in FAST}
    for _ in range(runs):  # every run is cold: a fresh process, and the probes keep nothing between runs
        done = subprocess.run(
            [sys.executable, "-c", COLD_RUN, *FAST],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        data = json.loads(done.stdout.strip().splitlines()[-1])
        samples.append(data["wall"])
        for name, value in data["probes"].items():
            per_probe[name].append(value)
    cli = [wall([sys.executable, "-m", "triage", "probe", *FAST], env) for _ in range(runs)]
    worst = max(samples)
    print("1. all probes but dist, concurrently (probes.registry.run_all), each run in a fresh process")
    print(
        f"   median {statistics.median(samples):.3f}s, worst {worst:.3f}s over {runs} runs "
        f"(target <= 1.000s every run) {'OK' if worst <= 1.0 else 'OVER'}"
    )
    for name, values in per_probe.items():
        print(f"     {name:<9} median {statistics.median(values):.3f}s, worst {max(values):.3f}s")
    print(f"   versions said: {data['versions']} (torch imported in the process: {data['torch_imported']})")
    print(
        f"   whole `triage probe {' '.join(FAST)}` process: median {statistics.median(cli):.3f}s, "
        f"worst {max(cli):.3f}s"
    )


def dist_versus_floor(runs: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    with tempfile.TemporaryDirectory() as tmp:
        floor_script = Path(tmp) / "floor.py"
        floor_script.write_text(FLOOR_SCRIPT)
        ours, floor = [], []
        for _ in range(runs):  # alternate, so both see the same machine state
            floor.append(wall([sys.executable, str(floor_script), str(free_port())], env))
            ours.append(wall([sys.executable, "-m", "probes.dist", "--backend", "gloo", "--nproc", "2"], env))
    floor_median, ours_median = statistics.median(floor), statistics.median(ours)
    ratio = ours_median / floor_median
    print("2. dist mini-test, 2 gloo ranks, whole process (python -m probes.dist --nproc 2)")
    print(
        f"   floor (init + one all_reduce via torch.multiprocessing.spawn): median {floor_median:.3f}s "
        f"[{', '.join(f'{s:.2f}' for s in floor)}]"
    )
    print(
        f"   mini-test (init, barrier, checked all_reduce, 4-size sweep, inventory): median {ours_median:.3f}s "
        f"[{', '.join(f'{s:.2f}' for s in ours)}]"
    )
    print(f"   ratio {ratio:.2f}x (target <= 1.50x) {'OK' if ratio <= 1.5 else 'OVER'}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="repetitions per measurement (default 5)")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    fast_probes(max(1, args.runs * 2))
    dist_versus_floor(max(1, args.runs))


if __name__ == "__main__":
    main()
