#!/usr/bin/env bash
# The GPU check, in one command on a machine with an NVIDIA GPU; it builds nothing there:
#
#   bash submit/build-cuda.sh --gpu-check     # on any Linux machine: target/gpu-check/gpu_check
#   bash tests/gpu/check.sh [TORCH_PYTHON]    # on the GPU machine, from the repository root
#
# It runs rust/train's gpu_check example and tests/gpu/torch_peer.py (PyTorch, from
# TORCH_PYTHON, default /opt/torch/.venv/bin/python; only PyTorch is needed) and prints:
# - exactness: every built-in model under every optimizer rule, cuda against cpu: the step
#   losses within 1e-4 relative, and the parameters (see gpu_check's `same_training`);
# - the CUDA wheel through Python, when target/wheels-cuda holds one (or GPU_CHECK_WHEEL names
#   it): tests/gpu/wheel_check.py, with PyTorch's Python (which has pyarrow and numpy);
# - one trainer's step (DataParallel::step) and the Trainer with its input pipeline, for the
#   MLP, Wide&Deep, DeepFM and DCN at batch 256 and 4096, beside PyTorch on the same GPU, and
#   the Trainer's loop taken apart: its training thread's time waiting for a prepared batch
#   and stepping, to tell a Trainer held up by its input from one whose step runs slower;
# - the embedding models' step at 4096 with their tables the other way (on a GPU the engine
#   keeps them on the device; this runs them in main memory, as before), to show what that
#   placement is worth;
# - the MLP's and Wide&Deep's step at 4096 with the variables' update the other way (on a GPU
#   it runs on the device; this runs it on the host, as before);
# - Wide&Deep's step at 4096 with tables 100 times larger (26 million rows, 1.7 GB a buffer),
#   whose cost should be the rows a step touches, not the tables' size, and where its time goes;
# - the step at 256 and 4096 rows with cudarc's events on every device buffer and without
#   (the engine's choice), twice in turn;
# - Wide&Deep's step under Nsight Systems (where nsys is installed), with and without the
#   events: the host's driver calls by kind, count and time;
# - where a step's time goes at batch 4096 (the batch's copy, the lookup, forward, backward,
#   the gradients' copy to host memory, against the whole step), and what the Trainer's
#   prefetch thread takes off it (the batch's copy and the plan of its ids), and the host's
#   share of that alone, in the CPU's layout and in the GPU's;
# - a job of 2 trainer processes each on the GPU, in one ring (same parameters at the end);
# - the ring's all-reduce alone against PyTorch's gloo, 2, 4 and 8 processes on the one host,
#   1, 16 and 64 MiB (tests/gpu/gloo_peer.py; bus bandwidth): as configured by default (local
#   sockets), and over TCP on loopback as between hosts, sealed and in the clear; then TCP with
#   4 parallel rings (spark.sparktrain.collective.streams=4) at 16 and 64 MiB, to tell whether
#   one ring, the default, leaves a machine of many cores idle;
# - the MLP at 4096 on one CPU thread against PyTorch's.
# Every figure goes to $OUT/gpu-check.jsonl (OUT defaults to target/gpu-check) and a table
# comparing them ends the output. Each command has a time-out; a failed one is reported and the
# rest still run; the exit code is 1 when any failed. GPU_CHECK_DEVICE=cpu runs the same on
# the CPU (a dry run of the script where there is no GPU; PyTorch from .venv-torch serves;
# GPU_CHECK_BIN names another gpu_check binary, such as a CPU build's).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${GPU_CHECK_BIN:-target/gpu-check/gpu_check}
torch=${1:-${TORCH_PYTHON:-/opt/torch/.venv/bin/python}}
out=${OUT:-target/gpu-check}
device=${GPU_CHECK_DEVICE:-cuda}
mkdir -p "$out"
results="$out/gpu-check.jsonl"
: >"$results"
failed=0
if [ ! -x "$bin" ]; then
    echo "$bin is missing: run bash submit/build-cuda.sh --gpu-check first" >&2
    exit 2
fi

# Runs a command with a time-out, keeping its RESULT lines.
run() {
    local seconds=$1
    shift
    echo "--- $*"
    if ! timeout "$seconds" "$@" > >(tee -a "$out/gpu-check.log" | sed -n 's/^RESULT //p' >>"$results"); then
        echo "FAILED (or over ${seconds} s): $*"
        failed=1
    fi
}

original_library_path=${LD_LIBRARY_PATH-}
if [ "$device" = cuda ]; then
    # The binary opens cuBLAS, cuBLASLt and cuRAND at run time: PyTorch's CUDA packages (and a
    # toolkit in /usr/local/cuda) serve, where the loader does not already find them.
    site=$("$torch" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" 2>/dev/null)
    for lib in /usr/local/cuda/lib64 "$site"/nvidia/*/lib; do
        [ -d "$lib" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$lib"
    done
    export LD_LIBRARY_PATH
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader || failed=1
    "$torch" -c "import torch; print('PyTorch', torch.__version__, torch.cuda.get_device_name(0))" || failed=1
fi
steps=${GPU_CHECK_STEPS:-200}

run 300 "$bin" exact cpu "$device" 10
# The CUDA wheel through Python, where one is built (bash submit/build-cuda.sh): installed
# apart, and left to find CUDA's libraries itself, as a user's `pip install` is.
wheel=${GPU_CHECK_WHEEL:-$(ls target/wheels-cuda/sparktrain-*.whl 2>/dev/null | head -n 1)}
if [ -n "$wheel" ] && [ "$device" = cuda ]; then
    site_dir=$(mktemp -d)
    if timeout 120 "$torch" -m pip install -q --no-deps --no-index --target "$site_dir" "$wheel"; then
        run 300 env LD_LIBRARY_PATH="$original_library_path" PYTHONPATH="$site_dir" \
            "$torch" tests/gpu/wheel_check.py
    else
        echo "FAILED: pip could not install $wheel"
        failed=1
    fi
fi
for rows in 256 4096; do
    run 300 "$bin" step "$device" "$rows" "$steps"
    run 300 "$torch" tests/gpu/torch_peer.py "$device" "$rows" "$steps" mlp,wide_deep,deepfm,dcn
    run 300 "$bin" trainer "$device" "$rows" $((steps / 2))
    run 300 "$bin" loop "$device" "$rows" $((steps / 2))
done
other=memory
[ "$device" = cpu ] && other=device
run 300 env GPU_CHECK_TABLES=$other "$bin" step "$device" 4096 "$steps" wide_deep,deepfm,dcn
other_update=host
[ "$device" = cpu ] && other_update=device
run 300 env GPU_CHECK_TABLES=device GPU_CHECK_UPDATE=$other_update "$bin" step "$device" 4096 "$steps" mlp,wide_deep
[ "$device" = cpu ] || run 300 env GPU_CHECK_BUCKETS=1000000 "$bin" step "$device" 4096 "$steps" wide_deep
[ "$device" = cpu ] || run 120 env GPU_CHECK_BUCKETS=1000000 "$bin" phases "$device" 4096 $((steps / 4)) wide_deep
run 300 "$bin" phases "$device" 4096 $((steps / 4))
# The step with cudarc's pair of events on every device buffer (cudarc's default, which the
# engine turns off) and without, twice in turn, for what those driver calls cost the host.
if [ "$device" = cuda ]; then
    for turn in 1 2; do
        for events in tracked untracked; do
            for rows in 256 4096; do
                run 120 env GPU_CHECK_EVENTS=$events "$bin" step "$device" "$rows" "$steps" mlp,wide_deep,dcn
            done
        done
    done
fi
# The host's driver calls in Wide&Deep's step, by kind (count and time), with cudarc's
# events and without, where Nsight Systems is installed (the CUDA toolkit's nsys).
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)
if [ "$device" = cuda ] && [ -n "$nsys" ]; then
    # A profiler that cannot run here (a sandbox's kernel, say) leaves the check's result alone.
    for events in tracked untracked; do
        echo "--- nsys: Wide&Deep's step, events $events"
        if timeout 180 env GPU_CHECK_EVENTS=$events "$nsys" profile -t cuda --stats=false -f true \
            -o "$out/step-$events" "$bin" step "$device" 4096 30 wide_deep >>"$out/gpu-check.log" 2>&1 \
            && timeout 120 "$nsys" stats -r cuda_api_sum -f csv -o "$out/step-$events" \
                "$out/step-$events.nsys-rep" >>"$out/gpu-check.log" 2>&1; then
            echo "the driver calls of 30 steps (and the warm-up), events $events, by total time:"
            head -n 16 "$out/step-${events}_cuda_api_sum.csv"
        else
            echo "nsys could not profile here (its output is in $out/gpu-check.log)"
        fi
    done
elif [ "$device" = cuda ]; then
    echo "no nsys here: the step's driver calls are not counted"
fi
run 300 "$bin" input 4096 $((steps / 2))
run 120 "$bin" prepare 4096 200 wide_deep,deepfm
run 300 "$bin" job "$device" 2 50
ranks=${GPU_CHECK_RANKS:-2,4,8}
run 300 "$bin" allreduce "$ranks" 1,16,64
run 300 "$bin" allreduce "$ranks" 16,64 sealed-x4,clear-x4
run 300 "$torch" tests/gpu/gloo_peer.py "$ranks" 1,16,64
run 120 env RAYON_NUM_THREADS=1 "$bin" step cpu 4096 30 mlp
run 120 "$torch" tests/gpu/torch_peer.py cpu 4096 30 mlp

"$torch" - "$results" "$device" <<'EOF'
import json, sys

rows = [json.loads(line) for line in open(sys.argv[1])]
device = sys.argv[2]
get = lambda **k: next((r["examples_per_sec"] for r in rows if all(r.get(a) == b for a, b in k.items())), None)
fmt = lambda v: "-" if v is None else f"{v / 1e3:,.1f}k"
ratio = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}x"
print(f"\nrates after the start: the Trainer's from its eleventh step on, the step's after its warm-up steps")
print(f"{'model':<10} {'batch':>6} {'step':>10} {'Trainer':>10} {'PyTorch':>10} {'step/PyTorch':>13} {'Trainer/step':>13}")
for size in (256, 4096):
    for model in ("mlp", "wide_deep", "deepfm", "dcn"):
        step = get(mode="step", model=model, rows=size, device=device)
        trainer = get(mode="trainer", model=model, rows=size, device=device)
        peer = get(mode="torch", model=model, rows=size, device=device)
        print(f"{model:<10} {size:>6} {fmt(step):>10} {fmt(trainer):>10} {fmt(peer):>10} {ratio(step, peer):>13} {ratio(trainer, step):>13}")
loops = [r for r in rows if r["mode"] == "loop"]
if loops:
    print("\nthe Trainer's loop on its training thread, ms a step: waiting for the next prepared batch; stepping"
          " (beside the bare step's ms); examples/s of the loop and of the Trainer")
    for r in loops:
        bare = next((b for b in rows if b["mode"] == "step" and b["model"] == r["model"] and b["rows"] == r["rows"]
                     and b["device"] == r["device"] and "step_ms" in b), None)
        trainer = get(mode="trainer", model=r["model"], rows=r["rows"], device=r["device"])
        print(f"{r['model']:<10} {r['rows']:>6} wait {r['wait_ms']:8.3f} step {r['step_ms']:8.3f}"
              f" (bare {bare['step_ms'] if bare else float('nan'):8.3f})"
              f" loop {fmt(r['examples_per_sec']):>10} Trainer {fmt(trainer):>10}")
placed = [r for r in rows if r["mode"] == "step" and r["rows"] == 4096 and r["device"] == device and "update" in r]
if placed:
    print(f"\nthe step at 4096 rows by where the tables and the variables' update were (a model without tables says memory)")
    seen = set()
    for r in placed:
        key = (r["model"], r["tables"], r["update"])
        if key not in seen:
            seen.add(key)
            print(f"{r['model']:<10} tables: {r['tables']:<7} update: {r['update']:<7} {fmt(r['examples_per_sec']):>10}")
large = [r for r in rows if r["mode"] == "step" and r.get("table_rows", 0) > 1_000_000]
for r in large:
    small = next((s for s in rows if s["mode"] == "step" and s["model"] == r["model"] and s["rows"] == r["rows"]
                  and s["device"] == r["device"] and s.get("table_rows") == 260_000 and s["tables"] == r["tables"]
                  and s["update"] == r["update"]), None)
    print(f"\n{r['model']} at {r['rows']} rows with tables of {r['table_rows']:,} rows: {r['step_ms']:.3f} ms a step,"
          f" against {small['step_ms'] if small else float('nan'):.3f} ms with 260,000")
# The pairs' runs: from the first with the events on (every step line before it had them off).
first = next((i for i, r in enumerate(rows) if r.get("events") == "tracked"), len(rows))
paired = [r for r in rows[first:] if r["mode"] == "step" and r.get("events") in ("tracked", "untracked")]
if paired:
    print("\nthe step with cudarc's events on every buffer (tracked, its default) and without (the engine's),"
          " examples/s of each run in turn, and untracked / tracked of their means")
    for size in sorted({r["rows"] for r in paired}):
        for model in dict.fromkeys(r["model"] for r in paired):
            runs = {e: [r["examples_per_sec"] for r in paired if r["rows"] == size and r["model"] == model
                        and r["events"] == e] for e in ("tracked", "untracked")}
            if all(runs.values()):
                mean = lambda v: sum(v) / len(v)
                print(f"{model:<10} {size:>6} tracked {' '.join(fmt(v) for v in runs['tracked'])}"
                      f"  untracked {' '.join(fmt(v) for v in runs['untracked'])}"
                      f"  {mean(runs['untracked']) / mean(runs['tracked']):.2f}x")
cpu = get(mode="step", model="mlp", device="cpu", rows=4096, steps=30)
cpu_peer = get(mode="torch", model="mlp", device="cpu", rows=4096, steps=30)
print(f"\nMLP at 4096 on one CPU thread: {fmt(cpu)} against PyTorch's {fmt(cpu_peer)}: {ratio(cpu, cpu_peer)}")
feeds = [r for r in rows if r["mode"] == "input"]
if feeds:
    print("the input pipeline alone at 4096 rows (what it can feed the Trainer at most): "
          + ", ".join(f"{r['model']} {fmt(r['examples_per_sec'])}" for r in feeds))
phases = [r for r in rows if r["mode"] == "phases"]
if phases:
    parts = ("upload", "lookup", "forward", "backward", "grads_to_host")
    print(f"\nwhere a step's time goes at 4096 rows, ms: " + ", ".join(parts) + ", the rest of the step (the update; with it on the host, the parameters back), the whole step (without the upload);"
          " then what the Trainer's prefetch thread does ahead (the upload and the ids' plan) and the step left to the training thread."
          " grads_to_host is the copy a step makes with a ring or with its update on the host: a trainer alone with its tables and"
          " update on the device no longer makes it, and the rest of its step is understated by that column")
    for r in phases:
        ms = [r[f"{p}_ms"] for p in parts]
        rest = r["step_ms"] - sum(ms[1:])  # the step's own part: the batch is already on the device
        tables = f" (tables of {r['table_rows']:,} rows)" if r.get("table_rows", 0) > 1_000_000 else ""
        print(f"{r['model']:<10} " + " ".join(f"{v:8.3f}" for v in ms) + f" {rest:8.3f} {r['step_ms']:8.3f}"
              + f" | {r['prepare_ms']:8.3f} {r['prepared_step_ms']:8.3f}{tables}")
prepares = [r for r in rows if r["mode"] == "prepare"]
if prepares:
    print("the host's share of preparing a batch of 4096 rows, median ms (CPU layout; GPU layout): "
          + ", ".join(f"{r['model']} {r['cpu_layout_ms']:.3f}; {r['gpu_layout_ms']:.3f}" for r in prepares))
reduces = [r for r in rows if r["mode"] == "allreduce"]
if reduces:
    print("\nall-reduce over loopback, float32 sums, bus bandwidth GB/s (median call on rank 0)")
    print("(local: the default between ranks on one host, unix-domain sockets; sealed, clear: TCP as between hosts)")
    print(f"{'ranks':>5} {'MiB':>5} {'local':>8} {'sealed':>8} {'clear':>8} {'gloo':>8} {'local/gloo':>11} {'sealed/gloo':>12} {'clear/gloo':>11}")
    for n in sorted({r["ranks"] for r in reduces}):
        for size in sorted({r["bytes"] for r in reduces}):
            bw = {r["contender"]: r["busbw_gbs"] for r in reduces if r["ranks"] == n and r["bytes"] == size}
            cell = lambda c: "-" if c not in bw else f"{bw[c]:.2f}"
            over = lambda c: "-" if c not in bw or "gloo" not in bw else f"{bw[c] / bw['gloo']:.2f}x"
            print(f"{n:>5} {size >> 20:>5} {cell('local'):>8} {cell('sealed'):>8} {cell('clear'):>8} {cell('gloo'):>8} {over('local'):>11} {over('sealed'):>12} {over('clear'):>11}")
    parallel = sorted({r["contender"] for r in reduces if "-x" in r["contender"]})
    if parallel:
        print("parallel rings over TCP (-xK: K rings), GB/s (against one ring of the same kind; against gloo)")
        for n in sorted({r["ranks"] for r in reduces}):
            for size in sorted({r["bytes"] for r in reduces if r["contender"] in parallel}):
                bw = {r["contender"]: r["busbw_gbs"] for r in reduces if r["ranks"] == n and r["bytes"] == size}
                against = lambda c, other: f"{bw[c] / bw[other]:.2f}x" if other in bw else "-"
                cells = [f"{c} {bw[c]:.2f} ({against(c, c.split('-x')[0])}; {against(c, 'gloo')})" for c in parallel if c in bw]
                print(f"{n:>5} {size >> 20:>5}  " + "   ".join(cells))
job = next((r for r in rows if r["mode"] == "job"), None)
if job:
    print(f"2 trainers on {device}, Wide&Deep at 256: {fmt(job['examples_per_sec'])} in all, same parameters: {job['same_parameters']}")
exact = next((r for r in rows if r["mode"] == "exact"), None)
if exact:
    print(f"exactness, {device} against cpu, worst relative difference: step losses {exact['worst_loss']:.2e},"
          f" parameters {exact['worst']:.2e} (the table at the top names the parameter; gpu_check's same_training says"
          " why Adam's and FTRL's may differ more)")
wheel = next((r for r in rows if r["mode"] == "wheel" and "failures" in r), None)
if wheel:
    print("the CUDA wheel through Python: "
          + ("every check passed" if not wheel["failures"] else "FAILED: " + "; ".join(wheel["failures"])))
EOF
exit $failed
